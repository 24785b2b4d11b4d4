"""Shared reads (``access.shared_reads``) behind the pipeline list and the overview: a result is computed
once for everyone who sees the same teams and kept for ``SHARED_READ_SECONDS``; nobody is served another
team set's result; whoever has just written reads afresh; a Redis outage only turns sharing off."""

from __future__ import annotations

import time

import pytest
from django.test import Client
from rest_framework.test import APIClient

from access.models import Membership, Role
from pipelines.services import create_pipeline
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def sharing(settings):
    """Results shared for longer than any test here takes, so nothing expires unless a test waits for it."""
    settings.SHARED_READ_SECONDS = 60


@pytest.fixture
def first(admin_user, team):
    return create_pipeline(actor=admin_user, name="first", team=team, spec=spec_of("first"))


def spec_of(name: str) -> dict:
    """A spec with a DLQ topic of the pipeline's own (each pipeline needs one)."""
    return github_spec(dlq=f"{name}.dlq")


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def listed(user) -> set[str]:
    response = api(user).get("/api/pipelines/")
    assert response.status_code == 200, response.content
    return {row["name"] for row in response.json()["results"]}


def on_overview(user) -> set[str]:
    """The pipelines on ``user``'s overview page and in its JSON (asserted to agree)."""
    client = session(user)
    page = client.get("/")
    assert page.status_code == 200
    rows = client.get("/pipelines/overview.json").json()["pipelines"]
    names = {row["name"] for row in rows}
    for name in ("first", "second", "pay"):
        assert (f'data-pipeline="{name}"' in page.content.decode()) == (name in names)
    return names


def test_a_second_reader_of_the_same_teams_is_served_the_first_readers_result(
    sharing, admin_user, team, first
):
    ann, bob = member(team, Role.VIEWER, username="ann"), member(team, Role.VIEWER, username="bob")
    assert listed(ann) == {"first"}
    assert on_overview(ann) == {"first"}
    # A change no request made (as a worker's would be): shown to others once the shared result expires.
    create_pipeline(actor=admin_user, name="second", team=team, spec=spec_of("second"))
    assert listed(bob) == {"first"}
    assert on_overview(bob) == {"first"}


def test_a_reader_who_sees_other_teams_is_never_served_that_result(sharing, admin_user, team, first):
    payments = TeamFactory(name="payments")
    create_pipeline(
        actor=member(payments, Role.ADMIN, username="pam"), name="pay", team=payments, spec=spec_of("pay")
    )
    ann = member(team, Role.VIEWER, username="ann")
    both = member(team, Role.VIEWER, username="cid")
    Membership.objects.create(user=both, team=payments, role=Role.VIEWER)
    dan = member(payments, Role.VIEWER, username="dan")
    assert listed(ann) == {"first"}
    assert on_overview(ann) == {"first"}
    assert listed(both) == {"first", "pay"}
    assert on_overview(both) == {"first", "pay"}
    assert listed(dan) == {"pay"}
    assert on_overview(dan) == {"pay"}
    # An admin sees every team: a result of their own.
    assert listed(admin_user) == {"first", "pay"}


def test_leaving_a_team_applies_to_the_next_read(sharing, team, first):
    payments = TeamFactory(name="payments")
    cid = member(payments, Role.VIEWER, username="cid")
    assert listed(cid) == set()
    Membership.objects.create(user=cid, team=team, role=Role.VIEWER)
    assert listed(cid) == {"first"}
    Membership.objects.filter(user=cid, team=team).delete()
    assert listed(cid) == set()
    assert on_overview(cid) == set()


def test_whoever_has_just_written_reads_afresh(sharing, admin_user, team, first):
    oti = member(team, Role.OPERATOR, username="oti")
    assert listed(oti) == {"first"}
    assert on_overview(oti) == {"first"}
    create_pipeline(actor=admin_user, name="second", team=team, spec=spec_of("second"))
    # Any unsafe request marks its user a writer, whatever it answers (remember_writes).
    api(oti).post("/api/pipelines/first/stop/", {"reason": "shared reads test"}, format="json")
    assert listed(oti) == {"first", "second"}
    assert on_overview(oti) == {"first", "second"}


def test_a_shared_result_is_recomputed_once_the_window_has_passed(settings, admin_user, team, first):
    settings.SHARED_READ_SECONDS = 1
    ann = member(team, Role.VIEWER, username="ann")
    assert listed(ann) == {"first"}
    create_pipeline(actor=admin_user, name="second", team=team, spec=spec_of("second"))
    time.sleep(1.2)
    assert listed(ann) == {"first", "second"}


def every_read_computes(admin_user, team) -> None:
    """A viewer's list and overview show a pipeline created right after their first read."""
    ann = member(team, Role.VIEWER, username="ann")
    assert listed(ann) == {"first"}
    assert on_overview(ann) == {"first"}
    create_pipeline(actor=admin_user, name="second", team=team, spec=spec_of("second"))
    assert listed(ann) == {"first", "second"}
    assert on_overview(ann) == {"first", "second"}


def test_with_sharing_off_every_read_computes(settings, admin_user, team, first):
    settings.SHARED_READ_SECONDS = 0
    every_read_computes(admin_user, team)


def test_while_the_cache_is_unreachable_the_list_and_the_overview_are_computed(
    settings, admin_user, team, first
):
    # Nothing listens on port 1: every cache call fails as it does while Redis is down.
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    settings.SHARED_READ_SECONDS = 60
    every_read_computes(admin_user, team)
