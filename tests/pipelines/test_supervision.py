"""Supervision: the backoff and crash-loop state machine, and the reconcile tick over real child processes
(a stand-in driver with the real driver's arguments, exit codes and heartbeat key, but no Spark)."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.utils import timezone

from access.models import AuditEvent, Role
from pipelines import supervision
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline, revise_pipeline
from pipelines.signals import revision_live
from pipelines.supervision import backoff_seconds, judge_exit, launcher, reconciler
from pipelines.topics import TopicPlan
from tests.factories import member
from tests.pipelines.conftest import github_spec

FAKE = Path(__file__).with_name("fake_driver.py")


# ------------------------------------------------------------------------------------------ pure policy


def test_backoff_doubles_per_failure_up_to_the_cap():
    assert [backoff_seconds(n, base=2, cap=20) for n in range(6)] == [0, 2, 4, 8, 16, 20]


def _judge(**overrides):
    args = {
        "exit_code": 1,
        "stop_requested": False,
        "consecutive_failures": 0,
        "failures_in_window": 0,
        "crash_loop_failures": 3,
        "backoff_base": 2,
        "backoff_cap": 300,
    } | overrides
    return judge_exit(**args)


def test_a_crash_is_restarted_after_a_backoff_that_grows_with_consecutive_failures():
    first, second = _judge(), _judge(consecutive_failures=1, failures_in_window=1)
    assert (first.run_state, first.restart_in_seconds, first.consecutive_failures) == ("restarting", 2, 1)
    assert (second.run_state, second.restart_in_seconds) == ("restarting", 4)


def test_the_nth_failure_in_the_window_makes_the_pipeline_failed_and_stops_restarts():
    verdict = _judge(consecutive_failures=2, failures_in_window=2)
    assert (verdict.pipeline_state, verdict.restart_in_seconds) == ("failed", None)


@pytest.mark.parametrize("code", [2, 3])
def test_config_and_dlq_exits_halt_and_are_never_restarted_even_when_a_stop_was_asked(code):
    for stop_requested in (False, True):
        verdict = _judge(exit_code=code, stop_requested=stop_requested)
        assert (verdict.pipeline_state, verdict.restart_in_seconds) == ("halted", None)


def test_a_requested_stop_ends_stopped_whatever_the_exit_code():
    assert _judge(exit_code=-9, stop_requested=True).pipeline_state == "stopped"


# ------------------------------------------------------------------------------------------ with processes


@pytest.fixture
def supervised(settings, tmp_path, monkeypatch, team):
    """A pipeline whose driver is the stand-in (``behaviour["name"]``); every child is killed afterwards."""
    settings.STATE_DIR = tmp_path
    settings.CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    settings.RESTART_BACKOFF_SECONDS = 0
    settings.CRASH_LOOP_FAILURES = 3
    behaviour = {"name": "crash"}
    real_command = supervision.driver_command
    monkeypatch.setattr(
        launcher,
        "driver_command",
        lambda run, spec_file, conn: [
            sys.executable,
            str(FAKE),
            behaviour["name"],
            *real_command(run, spec_file, conn)[3:],
        ],
    )
    monkeypatch.setattr("pipelines.topics.ensure_topics", lambda admin, spec: TopicPlan([], [], []))
    admin = member(team, Role.ADMIN, username="ada")
    operator = member(team, Role.OPERATOR, username="oti")
    pipeline = create_pipeline(actor=admin, name=f"p{os.getpid()}", team=team, spec=github_spec())
    yield pipeline, operator, behaviour
    for run in PipelineRun.objects.exclude(pid=None):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    supervision._children.clear()


def _tick_until(predicate, timeout=20.0, **kwargs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        supervision.reconcile(**kwargs)
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not reached")


def _state(pipeline):
    return Pipeline.objects.get(pk=pipeline.pk).state


pytestmark_redis = [pytest.mark.redis, pytest.mark.django_db]


@pytest.mark.redis
@pytest.mark.django_db
def test_a_crashing_driver_is_restarted_until_the_crash_loop_makes_it_failed(supervised):
    pipeline, operator, _ = supervised
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: _state(pipeline) == PipelineState.FAILED)
    for _ in range(5):
        supervision.reconcile()
        time.sleep(0.1)
    runs = list(PipelineRun.objects.filter(pipeline=pipeline).order_by("started_at"))
    assert [r.attempt for r in runs] == [1, 2, 3]
    assert [r.state for r in runs] == ["restarting", "restarting", "failed"]
    assert (runs[-1].exit_code, runs[-1].error_type) == (1, "Crash")
    assert "boom" in Pipeline.objects.get(pk=pipeline.pk).state_reason
    assert "STREAMFORGE_EXIT" in runs[-1].log_tail
    assert AuditEvent.objects.filter(action="pipeline.run.end", target_id=pipeline.name).count() == 3


@pytest.mark.redis
@pytest.mark.django_db
def test_a_restart_waits_for_its_backoff(supervised, settings):
    pipeline, operator, _ = supervised
    settings.RESTART_BACKOFF_SECONDS = 60
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: _state(pipeline) == PipelineState.RESTARTING)
    for _ in range(3):
        supervision.reconcile()
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 1
    supervision.reconcile(now=timezone.now() + timedelta(seconds=61))
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 2


@pytest.mark.redis
@pytest.mark.django_db
def test_a_dlq_halt_ends_halted_with_the_reason_and_is_not_restarted(supervised):
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "halt"
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: _state(pipeline) == PipelineState.HALTED)
    for _ in range(5):
        supervision.reconcile()
        time.sleep(0.1)
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 1
    assert "DeadLetterQueue" in Pipeline.objects.get(pk=pipeline.pk).state_reason


@pytest.mark.redis
@pytest.mark.django_db
def test_a_running_driver_is_promoted_by_its_heartbeat_and_stops_gracefully(supervised):
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "run"
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: _state(pipeline) == PipelineState.RUNNING)
    run = PipelineRun.objects.get(pipeline=pipeline)
    assert (run.state, run.spark_app_id) == ("running", "fake-app")
    supervision.request_stop(actor=operator, pipeline=pipeline)
    supervision.stop_pipeline(pipeline_id=pipeline.pk)  # what the worker does after commit
    _tick_until(lambda: _state(pipeline) == PipelineState.STOPPED)
    run.refresh_from_db()
    assert (run.state, run.exit_code, run.error_type) == ("stopped", 0, "Stopped")


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)  # the signal is sent once the promotion commits
def test_a_restart_that_applies_a_new_revision_announces_it_once_its_run_is_running(supervised):
    """``signals.revision_live`` (what fix forward starts from): sent when a run of another revision than the
    run before it reaches RUNNING; not for a first run, not for a restart of the same revision."""
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "run"
    heard: list[tuple[int, int | None]] = []

    def hear(**payload) -> None:
        heard.append((payload["revision"], payload["previous_revision"]))

    revision_live.connect(hear, weak=False, dispatch_uid="test-revision-live")
    try:
        for revise in (False, False, True):
            if revise:
                spec = copy.deepcopy(pipeline.current_revision.spec)
                spec["error_handling"] = {"missing_field_behavior": "null"}
                admin = User.objects.get(username="ada")
                revise_pipeline(actor=admin, pipeline=pipeline, spec=spec)
                pipeline.refresh_from_db()
            supervision.request_start(actor=operator, pipeline=pipeline)
            _tick_until(lambda: _state(pipeline) == PipelineState.RUNNING)
            supervision.request_stop(actor=operator, pipeline=pipeline)
            supervision.stop_pipeline(pipeline_id=pipeline.pk)
            _tick_until(lambda: _state(pipeline) == PipelineState.STOPPED)
    finally:
        revision_live.disconnect(dispatch_uid="test-revision-live")
    assert heard == [(2, 1)]


@pytest.mark.redis
@pytest.mark.django_db
def test_a_driver_still_starting_spark_stays_starting_until_its_query_has_started(supervised):
    """Its beats prove it alive from the first second, but the pipeline says RUNNING only once the beats say
    the streaming query started (the review saw "running" while Spark was still starting)."""
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "slow_start"
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(
        lambda: PipelineRun.objects.filter(pipeline=pipeline, last_heartbeat_at__isnull=False).exists()
    )
    started = time.monotonic()
    while time.monotonic() - started < 1.0:  # well inside the stand-in's 2 s of "starting"
        supervision.reconcile()
        assert _state(pipeline) == PipelineState.STARTING
        time.sleep(0.1)
    _tick_until(lambda: _state(pipeline) == PipelineState.RUNNING)
    assert PipelineRun.objects.get(pipeline=pipeline).state == PipelineState.RUNNING


@pytest.mark.redis
@pytest.mark.django_db
def test_a_driver_that_ignores_the_stop_is_killed_after_the_timeout(supervised, settings):
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "stubborn"
    settings.DRIVER_STOP_TIMEOUT_SECONDS = 1
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: _state(pipeline) == PipelineState.RUNNING)
    supervision.request_stop(actor=operator, pipeline=pipeline)
    supervision.stop_pipeline(pipeline_id=pipeline.pk)
    time.sleep(1.2)
    _tick_until(lambda: _state(pipeline) == PipelineState.STOPPED)
    run = PipelineRun.objects.get(pipeline=pipeline)
    assert run.error_type == "StopTimeout"
    with pytest.raises(ProcessLookupError):
        os.kill(run.pid, 0)


@pytest.mark.redis
@pytest.mark.django_db
def test_a_driver_killed_with_sigkill_is_restarted(supervised):
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "run"
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: _state(pipeline) == PipelineState.RUNNING)
    first = PipelineRun.objects.get(pipeline=pipeline)
    os.killpg(first.pid, signal.SIGKILL)
    _tick_until(lambda: PipelineRun.objects.filter(pipeline=pipeline).count() == 2)
    first.refresh_from_db()
    assert (first.state, first.error_type, first.exit_code) == ("restarting", "Killed", -9)
    assert PipelineRun.objects.filter(pipeline=pipeline).order_by("-started_at").first().attempt == 2


@pytest.mark.django_db(transaction=True)
def test_two_workers_starting_one_pipeline_at_once_launch_one_driver(team, monkeypatch):
    admin = member(team, Role.ADMIN, username="ada")
    pipeline = create_pipeline(actor=admin, name="racy", team=team, spec=github_spec())
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.RUNNING)
    launched = []
    monkeypatch.setattr(
        launcher, "_launch", lambda run, workdir, conn, registry=None: launched.append(run.run_id)
    )
    barrier = threading.Barrier(2)
    results = []

    def worker():
        barrier.wait()
        try:
            for _ in range(50):  # as the Celery task's autoretry does on a locked database
                try:
                    results.append(supervision.start_pipeline(pipeline_id=pipeline.pk))
                    return
                except OperationalError:
                    time.sleep(0.05)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2, "both workers got an answer"
    assert len(launched) == 1
    assert sum(r is not None for r in results) == 1
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 1


@pytest.mark.django_db
def test_a_worker_that_read_the_pipeline_before_another_claimed_it_cannot_claim_it(team):
    admin = member(team, Role.ADMIN, username="ada")
    pipeline = create_pipeline(actor=admin, name="racy", team=team, spec=github_spec())
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.RUNNING)
    first_read, second_read = Pipeline.objects.get(pk=pipeline.pk), Pipeline.objects.get(pk=pipeline.pk)
    now = timezone.now()
    assert supervision._claim_start(first_read, now) == PipelineState.STOPPED
    assert supervision._claim_start(second_read, now) is None


@pytest.mark.redis
@pytest.mark.django_db
def test_a_pipeline_marked_running_without_any_run_is_healed_and_started(team, monkeypatch):
    admin = member(team, Role.ADMIN, username="ada")
    pipeline = create_pipeline(actor=admin, name="orphan", team=team, spec=github_spec())
    Pipeline.objects.filter(pk=pipeline.pk).update(
        desired_state=DesiredState.RUNNING, state=PipelineState.RUNNING
    )
    monkeypatch.setattr(launcher, "_launch", lambda run, workdir, conn, registry=None: None)
    supervision.reconcile()
    assert PipelineRun.objects.get(pipeline=pipeline).state == PipelineState.STARTING
    assert _state(pipeline) == PipelineState.STARTING


@pytest.mark.redis
@pytest.mark.django_db
def test_a_driver_is_not_judged_silent_while_redis_could_not_hold_its_heartbeats(supervised, settings):
    """A Redis outage must not turn into a restart of every healthy driver: while Redis does not answer a
    missing heartbeat proves nothing, and after Redis restarted empty silence is counted from its return."""
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "silent"
    settings.DRIVER_START_TIMEOUT_SECONDS = 5
    supervision.request_start(actor=operator, pipeline=pipeline)
    supervision.reconcile()  # launches the driver, which never beats
    run = PipelineRun.objects.get(pipeline=pipeline)
    later = timezone.now() + timedelta(seconds=60)
    real_redis = reconciler._redis
    unreachable = {"now": True}
    reconciler._redis = lambda: None if unreachable["now"] else real_redis()
    try:
        supervision.reconcile(now=later)
        run.refresh_from_db()
        assert run.state == PipelineState.STARTING, "judged silent while Redis was away"

        unreachable["now"] = False
        client = real_redis()
        assert client is not None
        client.delete(supervision.HEARTBEAT_EPOCH_KEY)  # Redis came back empty
        supervision.reconcile(now=later)
        run.refresh_from_db()
        assert run.state == PipelineState.STARTING, "judged silent for a time Redis had forgotten"

        supervision.reconcile(now=later + timedelta(seconds=6))
        run.refresh_from_db()
        assert (run.state, run.error_type) == (PipelineState.RESTARTING, "Stale")
    finally:
        reconciler._redis = real_redis


@pytest.mark.redis
@pytest.mark.django_db
def test_a_reconcile_during_the_launch_does_not_judge_the_starting_run_dead(supervised, monkeypatch):
    """A start commits its run (STARTING, no pid yet), then ensures the topics and launches the process.
    A reconcile tick in between used to find no pid, judge the run "Lost" and restart it, while the first
    driver came up anyway: two drivers on one checkpoint, failing with CONCURRENT_STREAM_LOG_UPDATE in a
    restart loop (seen in `make chaos`). Guard: a STARTING run without a pid is not judged from here."""
    pipeline, _operator, behaviour = supervised
    behaviour["name"] = "run"
    reports = []

    def topics_then_a_reconcile(admin, spec):
        reports.append(supervision.reconcile())  # another worker's tick, mid-launch
        return TopicPlan([], [], [])

    monkeypatch.setattr("pipelines.topics.ensure_topics", topics_then_a_reconcile)
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.RUNNING)
    run = supervision.start_pipeline(pipeline_id=pipeline.pk)

    assert run is not None
    assert len(reports) == 1
    assert reports[0].ended == []
    run.refresh_from_db()
    assert (run.state, run.ended_at) == (PipelineState.STARTING, None)
    assert run.pid is not None
    _tick_until(lambda: _state(pipeline) == PipelineState.RUNNING)
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 1


@pytest.mark.redis
@pytest.mark.django_db
def test_a_driver_launched_onto_a_run_that_ended_meanwhile_is_stopped_at_once(supervised, monkeypatch):
    """Whatever ended the run during the launch (a stop, a judge), no driver may outlive it."""
    pipeline, _operator, behaviour = supervised
    behaviour["name"] = "run"
    real_popen = launcher.subprocess.Popen
    started = []

    def popen_after_the_run_ended(*args, **kwargs):
        PipelineRun.objects.filter(pipeline=pipeline).update(
            state=PipelineState.STOPPED, ended_at=timezone.now()
        )
        process = real_popen(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(launcher.subprocess, "Popen", popen_after_the_run_ended)
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.RUNNING)
    run = supervision.start_pipeline(pipeline_id=pipeline.pk)

    assert run is not None
    assert len(started) == 1
    assert started[0].wait(10) == -signal.SIGKILL
    run.refresh_from_db()
    assert run.pid is None
