"""The pipeline pages through Django's test client: who sees what, who may do what, the editor's form and
its draft endpoints. (The real-browser tests in tests/browser/ cover the live parts.)"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from django.test import Client

from access.models import AuditEvent, Role
from pipelines import editor, progress, selectors
from pipelines.models import (
    Alert,
    AlertSeverity,
    DesiredState,
    MetricSample,
    PartitionProgress,
    Pipeline,
    PipelineRun,
    PipelineState,
    PipelineTotals,
)
from pipelines.services import create_pipeline, revise_pipeline
from pipelines.spec import parse_spec
from streamforge_core.kafka import KafkaConnection, producer_config
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def pipeline(admin_user, team):
    return create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())


@pytest.fixture
def operator(team):
    return member(team, Role.OPERATOR, username="oti")


@pytest.fixture
def stranger():
    return member(TeamFactory(name="other-team"), Role.OPERATOR, username="eve")


def logged_in(user) -> Client:
    client = Client()
    # From the database: the factory's password is not saved on the instance it returns, and a session
    # whose hash does not match the stored password is dropped.
    client.force_login(type(user).objects.get(pk=user.pk))
    return client


# ------------------------------------------------------------------------------------------ access


@pytest.mark.parametrize(
    "path",
    ["/", "/pipelines/overview.json", "/pipelines/github/", "/pipelines/github/edit/", "/pipelines/new/"],
)
def test_an_anonymous_visitor_is_sent_to_log_in(client, pipeline, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_an_anonymous_post_of_an_action_changes_nothing(client, pipeline):
    response = client.post("/pipelines/github/start/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert Pipeline.objects.get(name="github").desired_state == DesiredState.STOPPED


@pytest.mark.parametrize("path", ["/pipelines/github/", "/pipelines/github/edit/"])
def test_another_teams_pipeline_is_a_404(stranger, pipeline, path):
    assert logged_in(stranger).get(path).status_code == 404


def test_another_teams_start_is_a_404_and_changes_nothing(stranger, pipeline):
    assert logged_in(stranger).post("/pipelines/github/start/").status_code == 404
    assert Pipeline.objects.get(name="github").desired_state == DesiredState.STOPPED


def test_the_overview_lists_only_the_users_teams_pipelines(viewer, stranger, admin_user, pipeline):
    other = create_pipeline(
        actor=admin_user,
        name="elsewhere",
        team=stranger.memberships.get().team,
        spec=github_spec(dlq="elsewhere.dlq"),  # a DLQ topic has one owner
    )
    body = logged_in(viewer).get("/").content.decode()
    assert 'data-pipeline="github"' in body
    assert f'data-pipeline="{other.name}"' not in body
    names = [p["name"] for p in logged_in(viewer).get("/pipelines/overview.json").json()["pipelines"]]
    assert names == ["github"]


def test_a_viewer_sees_no_mutation_controls(viewer, pipeline):
    client = logged_in(viewer)
    detail = client.get("/pipelines/github/").content.decode()
    for control in ('data-testid="action-start"', 'data-testid="action-stop"', 'data-testid="action-edit"'):
        assert control not in detail
    assert "confirm-dialog" not in detail
    assert 'data-testid="new-pipeline"' not in client.get("/").content.decode()


@pytest.mark.parametrize("action", ["start", "stop", "restart"])
def test_a_viewers_forged_action_is_refused_with_403(viewer, pipeline, action):
    client = Client(enforce_csrf_checks=True)
    client.force_login(type(viewer).objects.get(pk=viewer.pk))
    client.get("/pipelines/github/")  # sets the CSRF cookie, as the browser would have it
    token = client.cookies["csrftoken"].value
    response = client.post(f"/pipelines/github/{action}/", {"csrfmiddlewaretoken": token, "reason": "forged"})
    assert response.status_code == 403
    assert not AuditEvent.objects.filter(action=f"pipeline.{action}").exists()


def test_an_action_without_a_csrf_token_is_refused(operator, pipeline):
    client = Client(enforce_csrf_checks=True)
    client.force_login(type(operator).objects.get(pk=operator.pk))
    assert client.post("/pipelines/github/start/").status_code == 403
    assert Pipeline.objects.get(name="github").desired_state == DesiredState.STOPPED


def test_an_operator_sees_start_stop_restart_but_not_edit(operator, pipeline):
    detail = logged_in(operator).get("/pipelines/github/").content.decode()
    assert 'data-testid="action-start"' in detail
    assert 'data-testid="action-stop"' in detail
    assert 'data-testid="action-edit"' not in detail


def test_an_operators_start_records_the_desired_state_and_an_audit_event(operator, pipeline):
    response = logged_in(operator).post("/pipelines/github/start/", {"reason": "incident 42 fixed"})
    assert response.status_code == 302
    assert response["Location"] == "/pipelines/github/"
    assert Pipeline.objects.get(name="github").desired_state == DesiredState.RUNNING
    event = AuditEvent.objects.get(action="pipeline.start", target_id="github")
    assert (event.actor_name, event.reason) == ("oti", "incident 42 fixed")


def test_an_unknown_action_is_a_404(operator, pipeline):
    assert logged_in(operator).post("/pipelines/github/explode/").status_code == 404


@pytest.mark.parametrize("path", ["/pipelines/github/edit/", "/pipelines/new/"])
def test_the_editor_is_refused_to_an_operator(operator, pipeline, path):
    client = logged_in(operator)
    assert client.get(path).status_code == 403
    assert client.post(path, {"name": "x"}).status_code == 403


def test_the_header_shows_the_users_role_and_team(operator, pipeline):
    body = logged_in(operator).get("/").content.decode()
    assert "data-platform · operator" in body


# ------------------------------------------------------------------------------------------ pages


def test_the_pipeline_page_shows_the_revision_readably_and_its_history(admin_user, pipeline):
    spec = github_spec()
    spec["destinations"][0]["filter"] = "AND:/type,==,PushEvent:NOT:/public,==,false"
    revise_pipeline(actor=admin_user, pipeline=pipeline, spec=spec, comment="only public pushes")
    body = logged_in(admin_user).get("/pipelines/github/").content.decode()
    assert "Revision 2" in body
    assert "all of:" in body
    assert "not:" in body
    assert "/public,==,false" in body
    assert "only public pushes" in body
    assert 'class="diff-add"' in body
    assert "NOT:/public,==,false" in body


def test_a_runs_exit_reason_and_log_tail_are_shown(admin_user, pipeline):
    PipelineRun.objects.create(
        pipeline=pipeline,
        revision=pipeline.current_revision,
        run_id=uuid.uuid4(),
        attempt=2,
        state=PipelineState.HALTED,
        host="worker-1",
        exit_code=3,
        error_type="DeadLetterQueue",
        error_message="DLQ topic github.events.dlq is not writable",
        log_tail="INFO batch 7 committed\nERROR DeadLetterQueue: not writable",
    )
    body = logged_in(admin_user).get("/pipelines/github/").content.decode()
    assert "DeadLetterQueue" in body
    assert "is not writable" in body
    assert "ERROR DeadLetterQueue: not writable" in body


def test_the_overview_figures_come_from_the_stored_progress(admin_user, pipeline):
    run = PipelineRun.objects.create(
        pipeline=pipeline,
        revision=pipeline.current_revision,
        run_id=uuid.uuid4(),
        attempt=1,
        state=PipelineState.RUNNING,
        host="h",
    )
    now = int(time.time() * 1000)
    MetricSample.objects.create(
        pipeline=pipeline, run=run, batch_id=0, time_ms=now - 1000, duration_ms=10, consumed=600,
        produced=500, filtered=90, dead_lettered=10, dlq_records=10,
    )  # fmt: skip
    MetricSample.objects.create(
        pipeline=pipeline, run=run, batch_id=1, time_ms=now - 120_000, duration_ms=10, consumed=9999,
        produced=0, filtered=0, dead_lettered=0, dlq_records=0,
    )  # fmt: skip
    at = pipeline.created_at
    for partition, lag in ((0, 5), (1, 70)):
        PartitionProgress.objects.create(
            pipeline=pipeline, topic="github.events", partition=partition, end_offset=100,
            latest_offset=100 + lag, lag=lag, updated_at=at,
        )  # fmt: skip
    PipelineTotals.objects.create(pipeline=pipeline, dead_lettered=42, dlq_records=30)
    Alert.objects.create(
        pipeline=pipeline, rule="DLQBacklog", severity=AlertSeverity.WARNING, summary="42 dead letters",
        value=42, started_at=at, last_seen_at=at,
    )  # fmt: skip
    [row] = selectors.overview_rows(admin_user, now_ms=now)
    window = progress.RATE_WINDOW_SECONDS
    assert row.figures == {
        "consumed_per_second": 600 / window,  # the batch two minutes ago is outside the window
        "produced_per_second": 500 / window,
        "lag": 75,
        "worst_partition": {"topic": "github.events", "partition": 1, "lag": 70},
        "dead_lettered": 42,
        "dlq_records": 30,  # a malformed record fails both destinations and is one DLQ record
    }
    assert row.alerts == [{"rule": "DLQBacklog", "severity": "warning", "summary": "42 dead letters"}]
    body = logged_in(admin_user).get("/").content.decode()
    assert "github.events/1: 70" in body
    assert "DLQBacklog" in body


# ------------------------------------------------------------------------------------------ editor


def form_post(spec: dict, **extra: str) -> dict[str, str]:
    """The editor's inputs for ``spec`` as a browser would submit them (checkboxes only when checked)."""
    layout = editor.editor_layout(spec)
    data: dict[str, str] = {}
    for field in [f for s in layout.sections for f in s.fields] + [f for d in layout.destinations for f in d]:
        if field.widget == "checkbox":
            if field.value:
                data[field.name] = "1"
        else:
            data[field.name] = field.value
    data.update(extra)
    return data


def test_the_form_round_trips_every_spec_field():
    spec = parse_spec(
        {
            "source": {"topics": ["a", "b"], "starting_offsets": "latest", "consumer_group": "g", "max_record_bytes": 2048},
            "destinations": [
                {
                    "name": "one", "topic": "out", "filter": "/x,>,1", "transform": "EXTRACT:/y,z",
                    "key_transform": "/k", "headers": {"x-team": "data"},
                    "header_transforms": {"x-user": "FROM:/user", "x-old": "REMOVE"}, "timestamp": "CURRENT",
                },
                {"name": "two", "topic": "out2"},
            ],
            "delivery": {"mode": "at_most_once", "commit_strategy": {"kind": "time", "interval_ms": 500, "max_records": 77}},
            "retry": {"max_attempts": 3, "initial_delay_ms": 50, "max_delay_ms": 900, "multiplier": 1.5, "jitter": 0.1},
            "dlq": {"topic": "dead", "include_original_headers": False, "include_stack_trace": True, "max_dlq_retries": 9},
            "error_handling": {"missing_field_behavior": "null", "null_value_behavior": "error"},
        },
        pipeline_name="p",
    ).to_json()  # fmt: skip
    draft, errors = editor.spec_from_form(form_post(spec))
    assert errors == {}
    assert parse_spec(draft, pipeline_name="p").to_json() == spec


def test_an_admin_creates_a_pipeline_from_the_form(admin_user, team):
    data = form_post(github_spec(), name="from-form", team=team.name, description="made in the UI")
    response = logged_in(admin_user).post("/pipelines/new/", data)
    assert response.status_code == 302
    assert response["Location"] == "/pipelines/from-form/"
    created = Pipeline.objects.get(name="from-form")
    assert created.current_revision.spec == parse_spec(github_spec(), pipeline_name="from-form").to_json()
    assert AuditEvent.objects.filter(action="pipeline.create", target_id="from-form").exists()


def test_saving_an_edit_makes_the_next_revision(admin_user, pipeline):
    spec = github_spec()
    spec["destinations"][0]["topic"] = "github.pushes.v2"
    data = form_post(spec, description="", comment="new topic")
    response = logged_in(admin_user).post("/pipelines/github/edit/", data)
    assert response.status_code == 302
    pipeline.refresh_from_db()
    assert pipeline.current_revision.number == 2
    assert pipeline.current_revision.spec["destinations"][0]["topic"] == "github.pushes.v2"


def test_spec_errors_are_shown_beside_their_fields(admin_user, pipeline):
    spec = github_spec()
    spec["destinations"][1]["filter"] = "/type,=~~,PushEvent"
    data = form_post(spec, **{"retry.max_attempts": "many", "description": ""})
    response = logged_in(admin_user).post("/pipelines/github/edit/", data)
    assert response.status_code == 400
    layout = response.context["layout"]
    by_name = {f.name: f.errors for d in layout.destinations for f in d}
    by_name.update({f.name: f.errors for s in layout.sections for f in s.fields})
    assert by_name["destinations.1.filter"]
    assert by_name["destinations.1.filter"][0].startswith("DslParse at 6")
    assert by_name["retry.max_attempts"] == ["must be an integer"]
    assert Pipeline.objects.get(name="github").current_revision.number == 1


def test_the_json_editor_saves_every_field(admin_user, pipeline):
    spec = github_spec()
    spec["retry"] = {"max_attempts": 2}
    data = {"spec_mode": "json", "spec_json": json.dumps(spec), "description": "", "comment": "via JSON"}
    assert logged_in(admin_user).post("/pipelines/github/edit/", data).status_code == 302
    assert Pipeline.objects.get(name="github").current_revision.spec["retry"]["max_attempts"] == 2


def test_switching_to_json_carries_the_draft_over_without_saving(admin_user, pipeline):
    spec = github_spec()
    spec["destinations"][0]["topic"] = "drafted.topic"
    response = logged_in(admin_user).post("/pipelines/github/edit/", form_post(spec, switch_to="json"))
    assert response.status_code == 200
    assert response.context["mode"] == "json"
    assert json.loads(response.context["layout"].spec_json)["destinations"][0]["topic"] == "drafted.topic"
    assert Pipeline.objects.get(name="github").current_revision.number == 1


def test_the_dsl_validator_reports_the_error_position(viewer):
    client = logged_in(viewer)
    bad = client.post(
        "/api/dsl/validate/",
        {"kind": "filter", "expr": "/type,=~~,PushEvent"},
        content_type="application/json",
    ).json()
    assert (bad["ok"], bad["error_type"], bad["position"]) == (False, "DslParse", 6)
    good = client.post(
        "/api/dsl/validate/", {"kind": "transform", "expr": "EXTRACT:/a,b"}, content_type="application/json"
    ).json()
    assert good == {"kind": "transform", "ok": True, "normalized": "EXTRACT:/a,b"}


def test_the_draft_dry_run_uses_the_unsaved_form(viewer, pipeline):
    spec = github_spec()
    spec["destinations"][0]["filter"] = "/type,==,WatchEvent"  # differs from the saved revision
    messages = (
        '{"type": "WatchEvent", "actor": {"login": "octo"}}\n{"type": "PushEvent", "actor": {}}\nnot json'
    )
    data = form_post(spec, name="github", messages=messages)
    client = logged_in(viewer)
    # As the editor's script does: the form as a dry-run request, then the REST dry run of it.
    dry_run_request = client.post("/pipelines/draft/dry-run-request/", data)
    assert dry_run_request.status_code == 200, dry_run_request.json()
    response = client.post("/api/dsl/dry-run/", dry_run_request.json(), content_type="application/json")
    assert response.status_code == 200, response.json()
    outcomes = [[d["outcome"] for d in r["destinations"]] for r in response.json()["results"]]
    assert outcomes == [
        ["produced", "filtered"],
        ["filtered", "filtered"],
        ["dead_lettered", "dead_lettered"],
    ]
    assert response.json()["results"][0]["destinations"][0]["value"] == '{"login":"octo"}'


def test_the_draft_dry_run_returns_spec_errors_by_field(viewer):
    data = form_post(github_spec(), messages='{"a": 1}')
    data["destinations.0.transform"] = "EXTRACT:"
    response = logged_in(viewer).post("/pipelines/draft/dry-run-request/", data)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["destinations.0.transform"]


def test_sampling_a_source_topic_needs_the_admin_role(operator):
    response = logged_in(operator).post("/pipelines/draft/sample/", form_post(github_spec()))
    assert response.status_code == 403


@pytest.mark.kafka
def test_sampling_reads_the_newest_records_of_the_source_topic(admin_user, make_topic, kafka_bootstrap):
    from confluent_kafka import Producer

    topic = make_topic("sample", partitions=2)
    producer = Producer(producer_config(KafkaConnection(kafka_bootstrap), idempotent=False))
    for i in range(30):
        producer.produce(topic, value=json.dumps({"n": i}).encode(), key=f"k{i}".encode(), partition=i % 2)
    producer.produce(topic, value=b"\xff\xfe", partition=0)
    producer.flush(10)
    spec = github_spec(source=topic)
    response = logged_in(admin_user).post("/pipelines/draft/sample/", form_post(spec))
    assert response.status_code == 200, response.json()
    sampled = response.json()["messages"]
    assert len(sampled) == 10
    assert any(m.get("value_base64") == "//4=" for m in sampled), "a non-UTF-8 value comes as base64"
    numbers = sorted(json.loads(m["value"])["n"] for m in sampled if "value" in m)
    assert numbers
    assert min(numbers) >= 20, "only the newest records of each partition"
