"""Who is on it (issue #32, 4) on PostgreSQL: claims on failure groups and dead letters through the REST API and
the pages, shown on the group's new arrivals, released by hand or on resolution, audited; wrong role, another
team, bad input; and two operators claiming at once, where the database's one-open-claim rule decides."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from access.models import AuditEvent, Role
from dlq import services
from dlq.models import Claim, DeadLetter
from notifications.events import approval_event
from tests.dlq.conftest import api_for
from tests.factories import member

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def parked(pipeline, park, github_events) -> list[DeadLetter]:
    made: list[DeadLetter] = park(
        pipeline, [(f"k{i}".encode(), github_events[i], "RetryExhausted", "timed out") for i in range(3)]
    )
    return made


def test_a_group_claim_is_shown_on_its_dead_letters_new_arrivals_included_and_refused_to_a_second_person(
    people, pipeline, park, parked, github_events
):
    group = parked[0].group
    olga, ada = api_for(people["operator"]), api_for(people["admin"])
    made = olga.post(
        f"/api/dlq/groups/{group.pk}/claim/", {"note": "upstream bug, ticket OPS-12"}, format="json"
    )
    assert made.status_code == 200, made.json()
    assert (made.json()["by"], made.json()["on"], made.json()["note"]) == (
        "olga",
        "group",
        "upstream bug, ticket OPS-12",
    )
    later = park(
        pipeline, [(b"late", github_events[5], "RetryExhausted", "timed out")]
    )  # arrives after the claim
    rows = {
        r["id"]: r
        for r in api_for(people["viewer"]).get(f"/api/dlq/messages/?group={group.pk}").json()["results"]
    }
    assert {rows[d.pk]["claim"]["by"] for d in [*parked, *later]} == {"olga"}
    assert {rows[d.pk]["claim"]["on"] for d in parked} == {"group"}
    detail = api_for(people["viewer"]).get(f"/api/dlq/messages/{later[0].pk}/").json()
    assert detail["claim"]["by"] == "olga"
    assert (
        api_for(people["viewer"]).get(f"/api/dlq/groups/{group.pk}/").json()["claim"]["note"]
        == "upstream bug, ticket OPS-12"
    )

    refused = ada.post(f"/api/dlq/groups/{group.pk}/claim/", {}, format="json")
    assert refused.status_code == 409
    assert "investigating: olga since" in str(refused.json())
    again = olga.post(f"/api/dlq/groups/{group.pk}/claim/", {"note": "fix deployed at 14:00"}, format="json")
    assert again.json()["note"] == "fix deployed at 14:00"  # the claimer updates the note
    assert Claim.objects.filter(group=group, released_at__isnull=True).count() == 1
    actions = list(
        AuditEvent.objects.filter(target_type="failure_group", target_id=str(group.pk))
        .order_by("sequence")
        .values_list("action", flat=True)
    )
    assert actions == ["dlq.claim", "dlq.claim_note"]

    # a dead letter's own claim is shown instead of its group's
    own = ada.post(
        f"/api/dlq/messages/{parked[1].pk}/claim/", {"note": "this one is different"}, format="json"
    )
    assert own.status_code == 200
    assert api_for(people["viewer"]).get(f"/api/dlq/messages/{parked[1].pk}/").json()["claim"]["by"] == "ada"


def test_who_may_claim_and_release_and_what_bad_input_gets(people, parked):
    group, first = parked[0].group, parked[0]
    viewer, olga, foreign = (api_for(people[r]) for r in ("viewer", "operator", "foreign"))
    approver = api_for(people["approver"])
    assert viewer.post(f"/api/dlq/groups/{group.pk}/claim/", {}, format="json").status_code == 403
    assert foreign.post(f"/api/dlq/groups/{group.pk}/claim/", {}, format="json").status_code == 404
    assert foreign.post(f"/api/dlq/messages/{first.pk}/claim/", {}, format="json").status_code == 404
    long = olga.post(f"/api/dlq/messages/{first.pk}/claim/", {"note": "x" * 501}, format="json")
    assert long.status_code == 400
    assert "note" in long.json()
    nobody = olga.post(f"/api/dlq/groups/{group.pk}/release/", {}, format="json")
    assert nobody.status_code == 400
    assert "claim" in nobody.json()

    assert olga.post(f"/api/dlq/groups/{group.pk}/claim/", {}, format="json").status_code == 200
    assert (
        approver.post(f"/api/dlq/groups/{group.pk}/release/", {}, format="json").status_code == 403
    )  # not theirs
    assert (
        api_for(people["admin"])
        .post(f"/api/dlq/groups/{group.pk}/release/", {"reason": "olga is away"}, format="json")
        .status_code
        == 204
    )
    released = Claim.objects.get(group=group)
    assert (released.released_by.username, released.release_reason) == ("ada", "olga is away")

    services.skip(actor=people["operator"], dead_letter=first, reason="duplicate")
    closed = olga.post(f"/api/dlq/messages/{first.pk}/claim/", {}, format="json")
    assert closed.status_code == 400
    assert "status" in closed.json()


def test_claims_are_released_when_what_they_are_on_is_resolved(people, parked):
    group = parked[0].group
    services.claim(actor=people["operator"], group=group, note="looking")
    services.claim(actor=people["admin"], dead_letter=parked[0])
    assert services.release_resolved() == 0  # all still parked
    services.skip(actor=people["operator"], dead_letter=parked[0], reason="duplicate")
    assert services.release_resolved() == 1  # the dead letter's claim: it is no longer parked
    for row in parked[1:]:
        services.skip(actor=people["operator"], dead_letter=row, reason="duplicate")
    assert services.release_resolved() == 1  # the group's: none of it is parked now
    assert set(Claim.objects.values_list("release_reason", flat=True)) == {"resolved"}
    assert not services.claims_for(DeadLetter.objects.filter(pk__in=[d.pk for d in parked]))
    assert AuditEvent.objects.filter(action="dlq.claim_released", actor_name="system").count() == 2


def test_two_operators_claiming_at_once_leave_one_claim_and_the_other_is_told_who(
    people, parked, monkeypatch
):
    """Both read "nobody is on it" before either inserts (forced by a barrier in front of the insert): the
    database's one-open-claim constraint makes the second insert fail, which is reported as a conflict."""
    group = parked[0].group
    second = member(group.team, Role.OPERATOR, username="otto")
    barrier = threading.Barrier(2, timeout=10)
    create = Claim.objects.create

    def create_together(**fields):
        barrier.wait()
        return create(**fields)

    monkeypatch.setattr(Claim.objects, "create", create_together)
    outcomes: dict[str, str] = {}

    def claim_as(user) -> None:
        try:
            services.claim(actor=user, group=group)
            outcomes[user.username] = "claimed"
        except services.Conflict as exc:
            outcomes[user.username] = str(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim_as, args=(u,)) for u in (people["operator"], second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(v == "claimed" for v in outcomes.values()) == [False, True], outcomes
    [loser] = [v for v in outcomes.values() if v != "claimed"]
    assert loser.startswith("investigating: ")
    assert Claim.objects.filter(group=group, released_at__isnull=True).count() == 1


def test_the_pages_show_the_claim_and_offer_claim_and_release(people, parked):
    group = parked[0].group
    services.claim(actor=people["operator"], group=group, note="on it")
    page = Client()
    page.force_login(people["viewer"])
    listed = page.get(f"/dlq/?group={group.pk}").content.decode()
    assert listed.count('data-testid="row-claim"') == 3
    assert "investigating: olga (its group)" in listed
    message = page.get(f"/dlq/messages/{parked[0].pk}/").content.decode()
    assert "investigating: <strong>olga</strong> (its group)" in message
    assert 'data-testid="claim-button"' not in message  # a viewer cannot claim
    operator = Client()
    operator.force_login(people["operator"])
    groups = operator.get("/dlq/groups/").content.decode()
    assert 'data-testid="release-button"' in groups
    assert 'data-testid="claim-button"' in groups  # the claimer may edit the note
    other = Client()
    other.force_login(people["approver"])
    assert 'data-testid="release-button"' not in other.get("/dlq/groups/").content.decode()


def test_a_delete_request_notification_says_who_is_on_the_dead_letter(people, parked):
    services.claim(actor=people["operator"], dead_letter=parked[0], note="checking with the producer team")
    approval = services.request_delete(
        actor=people["operator"], dead_letter=parked[0], reason="PII in the key"
    )
    event = approval_event(approval)
    assert event.text.endswith("investigating: olga (checking with the producer team)")
    assert event.data["investigating"]["by"] == "olga"
