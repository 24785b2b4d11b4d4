"""The pipelines REST API: CRUD with revisions, roles and teams, start/stop/restart, runs and metrics
(the parts that need no driver; the end-to-end test drives a real one)."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def operator(team):
    return member(team, Role.OPERATOR, username="oti")


@pytest.fixture
def pipeline(admin_user, team):
    return create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())


def test_an_admin_creates_a_pipeline_with_revision_1(admin_user):
    response = client_for(admin_user).post(
        "/api/pipelines/", {"name": "gh", "team": "data-platform", "spec": github_spec()}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["revision"], body["state"], body["desired_state"]) == (
        "gh",
        1,
        "stopped",
        "stopped",
    )
    assert AuditEvent.objects.filter(action="pipeline.create", target_id="gh").exists()


def test_a_bad_spec_is_a_400_with_errors_by_dotted_field_path(admin_user):
    spec = github_spec()
    spec["destinations"][0]["filter"] = "/type,=~~,PushEvent"
    spec["delivery"] = {"mode": "sometimes"}
    response = client_for(admin_user).post(
        "/api/pipelines/", {"name": "gh", "team": "data-platform", "spec": spec}, format="json"
    )
    assert response.status_code == 400
    assert {"spec.destinations.0.filter", "spec.delivery.mode"} <= set(response.json())


def test_an_operator_may_not_create_pipelines(operator):
    response = client_for(operator).post(
        "/api/pipelines/", {"name": "gh", "team": "data-platform", "spec": github_spec()}, format="json"
    )
    assert response.status_code == 403


def test_an_update_makes_a_new_revision_and_an_unchanged_spec_does_not(admin_user, pipeline):
    api = client_for(admin_user)
    spec = github_spec()
    spec["destinations"][0]["filter"] = "/type,==,CreateEvent"
    response = api.patch("/api/pipelines/github/", {"spec": spec, "comment": "creates"}, format="json")
    assert (response.status_code, response.json()["revision"]) == (200, 2)
    again = api.patch("/api/pipelines/github/", {"spec": spec}, format="json")
    assert again.json()["revision"] == 2
    bad = api.patch("/api/pipelines/github/", {"spec": {"source": {}}}, format="json")
    assert bad.status_code == 400
    assert "spec.source.topics" in bad.json()


def test_a_viewer_reads_but_gets_403_on_start_and_stop(viewer, pipeline):
    api = client_for(viewer)
    assert api.get("/api/pipelines/").json()["results"][0]["name"] == "github"
    assert api.get("/api/pipelines/github/runs/").status_code == 200
    assert api.post("/api/pipelines/github/start/").status_code == 403
    assert api.post("/api/pipelines/github/stop/").status_code == 403
    assert Pipeline.objects.get(pk=pipeline.pk).desired_state == DesiredState.STOPPED


def test_another_teams_operator_gets_404_on_everything(pipeline):
    stranger = member(TeamFactory(name="other-team"), Role.OPERATOR, username="eve")
    api = client_for(stranger)
    assert api.get("/api/pipelines/").json()["results"] == []
    for method, path in [
        ("get", "/api/pipelines/github/"),
        ("post", "/api/pipelines/github/start/"),
        ("post", "/api/pipelines/github/stop/"),
        ("get", "/api/pipelines/github/metrics/"),
        ("post", "/api/pipelines/github/dry-run/"),
    ]:
        assert getattr(api, method)(path, {}, format="json").status_code == 404, path


def test_an_operator_start_records_the_desired_state_and_an_audit_event(operator, pipeline):
    response = client_for(operator).post("/api/pipelines/github/start/", {"reason": "go"}, format="json")
    assert response.status_code == 202
    assert response.json()["desired_state"] == "running"
    event = AuditEvent.objects.get(action="pipeline.start", target_id="github")
    assert (event.actor_name, event.reason) == ("oti", "go")


def test_a_failed_pipeline_starts_a_fresh_series_when_an_operator_starts_it(operator, pipeline):
    Pipeline.objects.filter(pk=pipeline.pk).update(state=PipelineState.FAILED, consecutive_failures=5)
    client_for(operator).post("/api/pipelines/github/start/")
    pipeline.refresh_from_db()
    assert (pipeline.state, pipeline.consecutive_failures) == ("stopped", 0)


def test_a_pipeline_is_deleted_only_when_stopped_and_only_by_an_admin(admin_user, operator, pipeline):
    assert client_for(operator).delete("/api/pipelines/github/").status_code == 403
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.RUNNING)
    assert client_for(admin_user).delete("/api/pipelines/github/").status_code == 409
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.STOPPED)
    PipelineRun.objects.create(
        pipeline=pipeline,
        revision=pipeline.current_revision,
        run_id="00000000-0000-0000-0000-000000000001",
        attempt=1,
        state=PipelineState.STOPPED,
        host="h",
    )
    assert client_for(admin_user).delete("/api/pipelines/github/").status_code == 204
    assert not Pipeline.objects.filter(name="github").exists()
    assert AuditEvent.objects.filter(action="pipeline.delete", target_id="github").exists()


def test_runs_are_paginated_newest_first(viewer, pipeline):
    for attempt in (1, 2, 3):
        PipelineRun.objects.create(
            pipeline=pipeline,
            revision=pipeline.current_revision,
            run_id=f"00000000-0000-0000-0000-00000000000{attempt}",
            attempt=attempt,
            state=PipelineState.RESTARTING,
            host="h",
        )
    body = client_for(viewer).get("/api/pipelines/github/runs/").json()
    assert body["count"] == 3
    assert [r["attempt"] for r in body["results"]] == [3, 2, 1]


def test_the_dry_run_still_answers_at_its_path(viewer, pipeline):
    response = client_for(viewer).post(
        "/api/pipelines/github/dry-run/",
        {"messages": [{"value": {"type": "PushEvent", "actor": {"login": "octo"}}}]},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["summary"]["produced"] == 1


def test_the_openapi_schema_generates(viewer):
    response = client_for(viewer).get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/pipelines/{name}/metrics/" in response.content


def test_a_low_latency_spec_with_a_python_only_form_is_a_400_naming_the_field(admin_user):
    spec = github_spec()
    spec["delivery"] = {"mode": "effectively_once", "commit_strategy": {"kind": "low_latency"}}
    spec["destinations"][1]["key_transform"] = "HASH:MURMUR64,/repo/name"
    response = client_for(admin_user).post(
        "/api/pipelines/", {"name": "gh", "team": "data-platform", "spec": spec}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert {"spec.delivery.commit_strategy.kind", "spec.destinations.1.key_transform"} <= set(body)
    assert "at 0: HASH:MURMUR64,/repo/name needs a Python UDF" in str(
        body["spec.destinations.1.key_transform"]
    )


@pytest.mark.parametrize("interval", [4_999, "five seconds", -1])
def test_a_low_latency_batch_duration_below_sparks_minimum_or_not_a_number_is_a_400_naming_the_field(
    admin_user, interval
):
    spec = github_spec()
    spec["delivery"] = {"commit_strategy": {"kind": "low_latency", "interval_ms": interval}}
    response = client_for(admin_user).post(
        "/api/pipelines/", {"name": "gh", "team": "data-platform", "spec": spec}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()) == ["spec.delivery.commit_strategy.interval_ms"]


def test_placement_labels_are_set_by_a_team_admin_audited_and_validated(admin_user, operator, pipeline):
    api = client_for(admin_user)
    response = api.patch(
        "/api/pipelines/github/",
        {"placement_labels": ["ssd", "zone=a"], "comment": "needs ssd"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["placement_labels"] == ["ssd", "zone=a"]
    assert Pipeline.objects.get(name="github").placement_labels == ["ssd", "zone=a"]
    event = AuditEvent.objects.get(action="pipeline.placement")
    assert event.reason == "needs ssd"
    assert event.details == {"placement_labels_before": [], "placement_labels": ["ssd", "zone=a"]}

    assert (
        client_for(operator)
        .patch("/api/pipelines/github/", {"placement_labels": []}, format="json")
        .status_code
        == 403
    )
    stranger = member(TeamFactory(name="other-team"), Role.OPERATOR, username="eve")  # admins see every team
    assert (
        client_for(stranger)
        .patch("/api/pipelines/github/", {"placement_labels": []}, format="json")
        .status_code
        == 404
    )
    for bad in (["has space"], "ssd", [""], ["a=b=c"], ["x"] * 17, [{"k": "v"}]):
        refused = api.patch("/api/pipelines/github/", {"placement_labels": bad}, format="json")
        assert refused.status_code == 400, bad
        assert "placement_labels" in refused.json(), refused.json()
    # a refused spec changes no labels either
    refused = api.patch(
        "/api/pipelines/github/", {"spec": {"source": {}}, "placement_labels": ["gpu"]}, format="json"
    )
    assert refused.status_code == 400
    assert Pipeline.objects.get(name="github").placement_labels == ["ssd", "zone=a"]
    assert AuditEvent.objects.filter(action="pipeline.placement").count() == 1
