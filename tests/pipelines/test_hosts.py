"""Runner hosts as people see and drain them: ``/api/hosts/`` (fields, team visibility, permissions, audit,
bad input), the Hosts page, and ``drain_step`` moving a draining host's pipelines one at a time (PostgreSQL:
the step's host lock is what keeps two concurrent reconciles from moving two at once)."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.services import create_pipeline
from pipelines.supervision import drain
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec


def _host(name: str, *, age_s: float = 1.0, slots: int = 4, draining: bool = False) -> RunnerHost:
    now = timezone.now()
    return RunnerHost.objects.create(
        name=name,
        queue=f"celery.runner.{name}",
        slots=slots,
        memory_mb=4096,
        labels=["ssd"],
        advertise_host="127.0.0.1",
        started_at=now - timedelta(minutes=5),
        last_heartbeat_at=now - timedelta(seconds=age_s),
        draining=draining,
        drain_requested_at=now - timedelta(minutes=1) if draining else None,
    )


def _pipeline(team, name: str) -> Pipeline:
    admin = member(team, Role.ADMIN, username=f"ada-{uuid.uuid4().hex[:6]}")
    return create_pipeline(actor=admin, name=name, team=team, spec=github_spec(dlq=f"{name}.dlq"))


def _run_on(
    pipeline: Pipeline, host: str, *, state: str = PipelineState.RUNNING, epoch: int = 1
) -> PipelineRun:
    assert pipeline.current_revision is not None
    Pipeline.objects.filter(pk=pipeline.pk).update(
        state=state, desired_state=DesiredState.RUNNING, lease_epoch=epoch
    )
    return PipelineRun.objects.create(
        pipeline=pipeline,
        revision=pipeline.current_revision,
        run_id=uuid.uuid4(),
        attempt=1,
        state=state,
        host=host,
        epoch=epoch,
    )


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# ------------------------------------------------------------------------------------------ the API


@pytest.mark.django_db
def test_a_viewer_reads_every_host_with_its_capacity_and_only_their_teams_pipelines(team, viewer, settings):
    settings.DRIVER_MEMORY_MB, settings.HOST_LOST_SECONDS = 700, 20
    _host("runner-a")
    _host("runner-b", age_s=60)
    _host("runner-c", draining=True)
    ours = _pipeline(team, "ours")
    theirs = _pipeline(TeamFactory(name="others"), "theirs")
    run = _run_on(ours, "runner-a", epoch=7)
    _run_on(theirs, "runner-a")
    response = _api(viewer).get("/api/hosts/")
    assert response.status_code == 200
    hosts = {h["name"]: h for h in response.json()}
    assert {name: h["state"] for name, h in hosts.items()} == {
        "runner-a": "up",
        "runner-b": "lost",
        "runner-c": "draining",
    }
    a = hosts["runner-a"]
    assert a["slots"] == {"total": 4, "used": 2, "free": 2}  # both runs count
    assert a["memory_mb"] == {"total": 4096, "used": 1400, "free": 2696}
    assert a["pipelines"] == [{"name": "ours", "state": "running", "epoch": 7, "run_id": str(run.run_id)}]
    assert (a["labels"], a["draining"], a["queue"]) == (["ssd"], False, "celery.runner.runner-a")
    assert 0 <= a["heartbeat_age_s"] < 10
    assert hosts["runner-b"]["heartbeat_age_s"] >= 60
    assert a["started_at"]
    one = _api(viewer).get("/api/hosts/runner-a/")
    assert (one.status_code, one.json()["name"]) == (200, "runner-a")
    assert _api(viewer).get("/api/hosts/nowhere/").status_code == 404
    assert APIClient().get("/api/hosts/").status_code in (401, 403)


@pytest.mark.django_db
def test_only_an_admin_drains_and_undrains_a_host_each_audited_with_the_reason(team, admin_user):
    _host("runner-a")
    operator = member(team, Role.OPERATOR, username="oti")
    refused = _api(operator).post("/api/hosts/runner-a/drain/", {"reason": "kernel update"}, format="json")
    assert refused.status_code == 403
    assert not RunnerHost.objects.get(name="runner-a").draining

    admin = _api(admin_user)
    answer = admin.post("/api/hosts/runner-a/drain/", {"reason": "kernel update"}, format="json")
    assert answer.status_code == 202
    assert (answer.json()["draining"], answer.json()["state"]) == (True, "draining")
    host = RunnerHost.objects.get(name="runner-a")
    assert (host.draining, host.drain_requested_by, host.drain_requested_at is not None) == (
        True,
        admin_user,
        True,
    )
    event = AuditEvent.objects.get(action="host.drain")
    assert (event.target_type, event.target_id, event.reason, event.actor) == (
        "runner_host",
        "runner-a",
        "kernel update",
        admin_user,
    )
    assert admin.post("/api/hosts/runner-a/undrain/", {}, format="json").status_code == 202
    assert not RunnerHost.objects.get(name="runner-a").draining
    assert AuditEvent.objects.filter(action="host.undrain", target_id="runner-a").count() == 1
    assert admin.post("/api/hosts/nowhere/drain/", {}, format="json").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("body", [{"reason": ["a", "list"]}, {"reason": "x" * 1001}, {"reason": {"a": 1}}])
def test_a_bad_drain_body_is_a_400_naming_the_reason_field(admin_user, body):
    _host("runner-a")
    answer = _api(admin_user).post("/api/hosts/runner-a/drain/", body, format="json")
    assert answer.status_code == 400
    assert "reason" in answer.json()
    assert not RunnerHost.objects.get(name="runner-a").draining


# ------------------------------------------------------------------------------------------ the page


@pytest.mark.django_db
def test_the_hosts_page_shows_hosts_to_everyone_and_drain_buttons_to_admins_only(team, viewer, admin_user):
    _host("runner-a")
    _run_on(_pipeline(team, "ours"), "runner-a")
    browser = Client()
    browser.force_login(viewer)
    page = browser.get("/hosts/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-host="runner-a"' in html
    assert "ours" in html
    assert 'data-testid="nav-hosts"' in html
    assert "host-drain-runner-a" not in html
    assert browser.post("/hosts/runner-a/drain/", {"confirm": "yes"}).status_code == 403

    browser.force_login(admin_user)
    assert "host-drain-runner-a" in browser.get("/hosts/").content.decode()
    browser.post("/hosts/runner-a/drain/", {"reason": "no confirmation"})
    assert not RunnerHost.objects.get(name="runner-a").draining
    answer = browser.post("/hosts/runner-a/drain/", {"confirm": "yes", "reason": "disk swap"})
    assert answer.status_code == 302
    assert RunnerHost.objects.get(name="runner-a").draining
    assert "host-undrain-runner-a" in browser.get("/hosts/").content.decode()
    browser.post("/hosts/runner-a/undrain/", {"confirm": "yes"})
    assert not RunnerHost.objects.get(name="runner-a").draining
    assert browser.post("/hosts/nowhere/drain/", {"confirm": "yes"}).status_code == 404


@pytest.mark.django_db
def test_the_hosts_pages_live_rows_are_the_tables_rows_alone_under_the_same_visibility(team, viewer):
    _host("runner-a")
    _run_on(_pipeline(team, "ours"), "runner-a")
    _run_on(_pipeline(TeamFactory(), "theirs"), "runner-a")
    browser = Client()
    browser.force_login(viewer)
    rows = browser.get("/hosts/?rows=1")
    assert rows.status_code == 200
    html = rows.content.decode()
    assert "<html" not in html
    assert "<tr" in html
    assert 'data-host="runner-a"' in html
    assert "ours" in html
    assert "theirs" not in html
    page = browser.get("/hosts/").content.decode()
    assert 'data-rows-url="/hosts/?rows=1"' in page
    assert "js/hosts.js" in page
    assert Client().get("/hosts/?rows=1").status_code == 302  # signed out: to the login page


# ------------------------------------------------------------------------------------------ the drain step


def _stopping(host: str) -> list[str]:
    return sorted(
        PipelineRun.objects.filter(host=host, state=PipelineState.STOPPING).values_list(
            "pipeline__name", flat=True
        )
    )


@pytest.mark.django_db
def test_a_drain_moves_one_pipeline_at_a_time_and_the_next_only_once_the_previous_runs_elsewhere(team):
    _host("runner-a", draining=True)
    _host("runner-b")
    first, second = _pipeline(team, "first"), _pipeline(team, "second")
    old_first = _run_on(first, "runner-a")
    old_second = _run_on(second, "runner-a")
    PipelineRun.objects.filter(pk=old_second.pk).update(started_at=timezone.now())  # first is the oldest

    assert drain.drain_step() == ["first"]
    assert drain.drain_step() == []  # first is still stopping: nothing else moves
    assert _stopping("runner-a") == ["first"]
    old_first.refresh_from_db()
    assert (old_first.stop_cause, old_first.stop_requested_at is not None) == ("drain", True)

    # its driver stopped cleanly: the run ended, the pipeline waits for its start elsewhere
    PipelineRun.objects.filter(pk=old_first.pk).update(state=PipelineState.STOPPED, ended_at=timezone.now())
    Pipeline.objects.filter(pk=first.pk).update(state=PipelineState.RESTARTING)
    assert drain.drain_step() == []
    _run_on(first, "runner-b", state=PipelineState.STARTING, epoch=2)
    assert drain.drain_step() == []  # starting on runner-b, not running yet
    PipelineRun.objects.filter(pipeline=first, host="runner-b").update(state=PipelineState.RUNNING)
    Pipeline.objects.filter(pk=first.pk).update(state=PipelineState.RUNNING)

    assert drain.drain_step() == ["second"]
    assert _stopping("runner-a") == ["second"]
    assert AuditEvent.objects.filter(action="pipeline.run.stop", details__cause="drain").count() == 2


@pytest.mark.django_db
def test_an_undrained_or_lost_host_is_not_drained(team, settings):
    settings.HOST_LOST_SECONDS = 20
    _host("runner-a", draining=True, age_s=60)  # lost: its leases expire, nothing to stop gracefully
    _host("runner-b")
    _run_on(_pipeline(team, "first"), "runner-a")
    _run_on(_pipeline(team, "second"), "runner-b")
    assert drain.drain_step() == []
    assert _stopping("runner-a") == _stopping("runner-b") == []


@pytest.mark.django_db(transaction=True)
def test_two_reconciles_draining_at_once_still_move_a_single_pipeline(team, monkeypatch):
    """Each step picks the host's oldest RUNNING run after checking that nothing is in flight; the window
    between the two is widened here. Without the host row lock the second step, having checked before the
    first committed, would move a second pipeline (checked by removing ``select_for_update`` from
    ``drain._step_host``: p0 and p1 STOPPING)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    _host("runner-a", draining=True)
    pipelines = [_pipeline(team, f"p{i}") for i in range(3)]
    for i, pipeline in enumerate(pipelines):
        run = _run_on(pipeline, "runner-a")
        PipelineRun.objects.filter(pk=run.pk).update(started_at=timezone.now() + timedelta(seconds=i))
    real = drain._oldest_running
    calls: list[int] = []

    def slow_oldest(host: RunnerHost) -> PipelineRun | None:
        calls.append(1)
        if len(calls) == 1:  # the first picker holds its choice a while before claiming it
            picked: PipelineRun | None = real(host)
            time.sleep(0.5)
            return picked
        time.sleep(1.0)  # the second picks after the first committed its claim
        second: PipelineRun | None = real(host)
        return second

    monkeypatch.setattr(drain, "_oldest_running", slow_oldest)
    barrier = threading.Barrier(2)
    moved: list[list[str]] = []

    def step() -> None:
        barrier.wait()
        try:
            moved.append(drain.drain_step())
        finally:
            connection.close()

    threads = [threading.Thread(target=step) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(name for names in moved for name in names) == ["p0"]
    assert _stopping("runner-a") == ["p0"]
