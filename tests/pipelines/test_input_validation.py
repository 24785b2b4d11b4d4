"""Input the pipelines API and editor must refuse at the door (issue #14): text UTF-8 cannot encode (in a
spec, a dry run's sample messages and their header names) and topic names Kafka would refuse. Through the
REST API, the editor's pages and the real database."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from pipelines.spec import SpecError, parse_spec
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db

#: A lone UTF-16 surrogate as JSON writes it: valid JSON, but no UTF-8 text.
LONE = "\\ud800"


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def pipeline(admin_user, team):
    return create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (f'{{"value": {{"type": "PushEvent"}}, "headers": {{"x-{LONE}": "v"}}}}', "messages.0.headers"),
        (f'{{"value": {{"type": "PushEvent"}}, "headers": {{"h": "v{LONE}"}}}}', "messages.0.headers.h"),
        (f'{{"value": "{LONE}"}}', "messages.0.value"),
        (f'{{"value": {{"type": "Push{LONE}"}}}}', "messages.0.value.type"),
    ],
)
def test_a_lone_surrogate_in_a_dry_run_message_or_header_name_is_a_400_naming_the_field(
    admin_user, pipeline, message, field
):
    response = api(admin_user).post(
        "/api/pipelines/github/dry-run/", data=f'{{"messages": [{message}]}}', content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]


def test_a_lone_surrogate_in_a_spec_is_a_400_naming_the_spec_field(admin_user):
    body = json.dumps({"name": "gh", "team": "data-platform", "spec": github_spec()})
    body = body.replace("/type,==,PushEvent", f"/type,==,Push{LONE}")
    response = api(admin_user).post("/api/pipelines/", data=body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["spec.destinations.0.filter"]
    assert not Pipeline.objects.filter(name="gh").exists()
    with pytest.raises(SpecError) as refused:  # the spec rule itself, whoever calls it (driver, editor)
        parse_spec({**github_spec(), "dlq": {"topic": "dlq\ud800"}}, pipeline_name="gh")
    assert list(refused.value.errors) == ["dlq.topic"]


def test_the_json_editor_refuses_a_lone_surrogate_beside_its_field(admin_user, pipeline):
    spec_json = json.dumps(github_spec()).replace("/type,==,PushEvent", f"/type,==,Push{LONE}")
    data = {"spec_mode": "json", "spec_json": spec_json, "description": "", "comment": ""}
    saved = logged_in(admin_user).post("/pipelines/github/edit/", data)
    assert saved.status_code == 400
    assert "surrogate" in saved.content.decode()
    # Switching views saves nothing and answers 200, with the error beside the JSON it stays on.
    switched = logged_in(admin_user).post("/pipelines/github/edit/", {**data, "switch_to": "form"})
    assert switched.status_code == 200
    assert switched.context["mode"] == "json"
    assert "surrogate" in switched.content.decode()
    assert Pipeline.objects.get(name="github").current_revision.number == 1


def test_the_editors_draft_dry_run_refuses_a_lone_surrogate_in_the_messages(admin_user, pipeline):
    data = {
        "spec_mode": "json",
        "spec_json": json.dumps(github_spec()),
        "messages": f'[{{"key": "k{LONE}"}}]',
    }
    response = logged_in(admin_user).post("/pipelines/draft/dry-run-request/", data)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["messages.0.key"]


@pytest.mark.parametrize(
    ("where", "topic"),
    [("dlq", "events.dlq\n"), ("dlq", ".."), ("source", "events\n"), ("destination", "out put")],
)
def test_every_topic_of_a_spec_follows_kafkas_topic_name_rule(admin_user, where, topic):
    spec = github_spec()
    if where == "dlq":
        spec["dlq"]["topic"], field = topic, "spec.dlq.topic"
    elif where == "source":
        spec["source"]["topics"], field = [topic], "spec.source.topics.0"
    else:
        spec["destinations"][0]["topic"], field = topic, "spec.destinations.0.topic"
    response = api(admin_user).post(
        "/api/pipelines/", {"name": "gh", "team": "data-platform", "spec": spec}, format="json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json()
