"""The DSL playground and dry-run endpoints."""

import pytest
from rest_framework.test import APIClient

from access.models import Role
from pipelines.services import create_pipeline
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(viewer):
    client = APIClient()
    client.force_authenticate(viewer)
    return client


def test_the_api_refuses_anonymous_callers():
    response = APIClient().post("/api/dsl/evaluate/", {}, format="json")
    assert response.status_code in (401, 403)


def test_evaluating_a_transform_returns_its_result(api):
    response = api.post(
        "/api/dsl/evaluate/",
        {
            "kind": "transform",
            "expr": "EXTRACT:/actor/login,login",
            "message": {"value": {"actor": {"login": "octo"}}},
        },
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {"kind": "transform", "ok": True, "result": {"login": "octo"}}


def test_a_missing_path_returns_the_error_type_the_pipeline_would_dead_letter_with(api):
    response = api.post(
        "/api/dsl/evaluate/",
        {"kind": "transform", "expr": "/payload/pull_request", "message": {"value": {"payload": {}}}},
        format="json",
    )
    body = response.json()
    assert response.status_code == 200
    assert (body["ok"], body["error_type"]) == (False, "JsonPathNotFound")


def test_passthrough_error_handling_keeps_the_message_as_streamforge_does(api):
    response = api.post(
        "/api/dsl/evaluate/",
        {
            "kind": "transform",
            "expr": "/payload/pull_request",
            "message": {"value": {"payload": {}}},
            "error_handling": {"missing_field_behavior": "passthrough"},
        },
        format="json",
    )
    assert response.json()["result"] == {"payload": {}}


def test_a_filter_on_headers_and_key_is_evaluated(api):
    response = api.post(
        "/api/dsl/evaluate/",
        {
            "kind": "filter",
            "expr": "AND:KEY_PREFIX:repo-:HEADER:source,==,github",  # HEADER takes the rest: last
            "message": {"value": {}, "key": "repo-1", "headers": {"source": "github"}},
        },
        format="json",
    )
    assert response.json()["result"] is True


def test_an_expression_that_does_not_parse_is_a_400_with_its_position(api):
    response = api.post(
        "/api/dsl/evaluate/",
        {"kind": "filter", "expr": "/type,=~,PushEvent", "message": {"value": {}}},
        format="json",
    )
    body = response.json()
    assert response.status_code == 400
    assert body["error_type"] == "DslParse"
    assert body["position"] == 6
    assert body["expr"][0].startswith("DslParse at 6:")


def test_bad_request_fields_are_named(api):
    response = api.post("/api/dsl/evaluate/", {"kind": "reshape", "expr": "/a"}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"kind", "message"}


def test_invalid_utf8_from_base64_is_a_deserialization_error(api):
    response = api.post(
        "/api/dsl/evaluate/",
        {"kind": "filter", "expr": "EXISTS:/a", "message": {"value_base64": "/w=="}},
        format="json",
    )
    assert response.json()["error_type"] == "MessageDeserialization"


def test_dry_run_uses_the_current_revision_and_summarises_outcomes(
    api, admin_user, team, github_event_objects
):
    create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    sample = github_event_objects[:50]
    response = api.post(
        "/api/pipelines/github/dry-run/", {"messages": [{"value": e} for e in sample]}, format="json"
    )
    body = response.json()
    assert response.status_code == 200
    assert body["revision"] == 1
    pushes = sum(e["type"] == "PushEvent" for e in sample)
    prs = sum(e["type"] == "PullRequestEvent" for e in sample)
    assert body["summary"] == {
        "produced": pushes + prs,
        "filtered": 2 * len(sample) - pushes - prs,
        "dead_lettered": 0,
    }
    first_push = next(r for r in body["results"] if r["destinations"][0]["outcome"] == "produced")
    assert first_push["destinations"][0]["topic"] == "github.pushes"


def test_dry_run_of_a_draft_spec_reports_spec_errors_by_field(api, admin_user, team):
    create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    draft = github_spec()
    draft["destinations"][0]["filter"] = "OR:"
    response = api.post(
        "/api/pipelines/github/dry-run/", {"messages": [{"value": {}}], "spec": draft}, format="json"
    )
    assert response.status_code == 400
    assert "spec.destinations.0.filter" in response.json()


def test_another_teams_user_does_not_see_the_pipeline(admin_user, team):
    create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())
    outsider = member(TeamFactory(name="payments"), Role.OPERATOR)
    client = APIClient()
    client.force_authenticate(outsider)
    response = client.post("/api/pipelines/github/dry-run/", {"messages": [{"value": {}}]}, format="json")
    assert response.status_code == 404
