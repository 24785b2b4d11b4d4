"""Supervision of pipeline drivers: start, stop, restart, and the reconcile tick that keeps actual state
following desired state.

Two halves:

* ``request_start`` / ``request_stop`` / ``request_restart`` are what people do (API, UI): they check the
  role, record the desired state and an audit event, and hand the work to a Celery worker after commit.
* ``start_pipeline`` / ``stop_pipeline`` / ``reconcile`` run on a worker. ``start_pipeline`` launches
  ``python -m pipelines.spark.driver`` as a child in its own process session (so a worker restart does not
  take the driver with it and a kill can reach the whole group: driver, JVM, Python workers).

Claims: ``Pipeline.state`` moves to STARTING only by a conditional UPDATE from the state that was read, so
two workers or two beats racing to start one pipeline launch one driver; the loser sees 0 rows updated.
Ending a run is claimed the same way on ``PipelineRun.state``, so a crash is counted (and audited) once.

Failures: a driver that dies (its pid is gone, or it exited with 1) or goes silent (no heartbeat for
``DRIVER_HEARTBEAT_STALE_SECONDS``; none within ``DRIVER_START_TIMEOUT_SECONDS`` of its launch) is restarted
after ``backoff_seconds`` (exponential, capped); ``CRASH_LOOP_FAILURES`` failures within
``CRASH_LOOP_MINUTES`` make the pipeline FAILED with the last error. Exit codes 2 (Config/DslParse) and
3 (DeadLetterQueue) make it HALTED: restarting cannot help, so only an operator's start runs it again.

Liveness is judged from the pid only on the host that launched the driver; elsewhere the heartbeat (which
carries host and pid) is the evidence.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import psutil
import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access import audit
from access.models import Role
from access.permissions import require_role
from pipelines import broadcast, progress
from pipelines.models import ACTIVE_STATES, DesiredState, Pipeline, PipelineRun, PipelineState
from streamforge_core import contract as c

log = logging.getLogger(__name__)

#: Drivers launched by this process, by pid: polled by ``reconcile`` so an exited child is reaped (not left
#: a zombie that still "has" a pid) and its exit code is known even without an exit report.
_children: dict[int, subprocess.Popen[bytes]] = {}

LOG_TAIL_LINES = 60
LOG_TAIL_BYTES = 64 * 1024


class NotStartable(Exception):
    """The pipeline cannot be started as it is (it has no revision yet)."""


# ------------------------------------------------------------------------------------------ pure policy


def backoff_seconds(failures: int, *, base: float, cap: float) -> float:
    """Delay before automatic restart number ``failures`` (1 for the first): ``base * 2**(failures-1)``,
    at most ``cap`` seconds. 0 failures means no delay."""
    if failures <= 0:
        return 0.0
    return float(min(cap, base * 2 ** min(failures - 1, 30)))


@dataclass(frozen=True)
class Verdict:
    """What to do after a run ended without being asked to: its end state, the pipeline's next state, the
    failure count to keep and when to restart (None: not automatically)."""

    run_state: PipelineState
    pipeline_state: PipelineState
    consecutive_failures: int
    restart_in_seconds: float | None


def judge_exit(
    *,
    exit_code: int | None,
    stop_requested: bool,
    consecutive_failures: int,
    failures_in_window: int,
    crash_loop_failures: int,
    backoff_base: float,
    backoff_cap: float,
) -> Verdict:
    """The state machine of an ended run (pure, unit-tested).

    ``exit_code`` None means the process vanished without a code (killed on another host, lost);
    ``failures_in_window`` counts earlier failures of the current series within the crash-loop window.
    A requested stop ends STOPPED; exit 2/3 end HALTED whatever was asked; any other end of an unrequested
    run is a failure: RESTARTING with backoff, or FAILED once it is failure number ``crash_loop_failures``
    in the window.
    """
    if exit_code in (c.EXIT_CONFIG, c.EXIT_DLQ):
        return Verdict(PipelineState.HALTED, PipelineState.HALTED, consecutive_failures, None)
    if stop_requested:
        return Verdict(PipelineState.STOPPED, PipelineState.STOPPED, 0, None)
    failures = consecutive_failures + 1
    if failures_in_window + 1 >= crash_loop_failures:
        return Verdict(PipelineState.FAILED, PipelineState.FAILED, failures, None)
    delay = backoff_seconds(failures, base=backoff_base, cap=backoff_cap)
    return Verdict(PipelineState.RESTARTING, PipelineState.RESTARTING, failures, delay)


# ------------------------------------------------------------------------------------------ requests


def _after_commit_enqueue(task_name: str, pipeline_id: int) -> None:
    from pipelines import tasks  # tasks import this module

    task = getattr(tasks, task_name)
    # robust: a broker hiccup must not fail a request whose change is committed; the reconcile tick acts on
    # the desired state anyway.
    transaction.on_commit(lambda: task.delay(pipeline_id), robust=True)


def _status(pipeline: Pipeline, run: PipelineRun | None = None) -> None:
    update: broadcast.StatusUpdate = {
        "type": "pipeline.status",
        "pipeline": pipeline.name,
        "state": pipeline.state,
        "desired_state": pipeline.desired_state,
        "reason": pipeline.state_reason,
        "run_id": str(run.run_id) if run else None,
        "attempt": run.attempt if run else None,
    }
    transaction.on_commit(lambda: broadcast.status(update))


def _request_running(*, actor: User, pipeline: Pipeline, action: str, reason: str, task: str) -> Pipeline:
    """Shared by start and restart: lock the pipeline, want it running with a fresh failure series (a
    FAILED or HALTED pipeline goes back to STOPPED), audit ``action``, enqueue ``task`` after commit."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
    if locked.current_revision_id is None:
        raise NotStartable(f"pipeline {locked.name} has no revision to run")
    before = {"desired_state": locked.desired_state, "state": locked.state}
    locked.desired_state = DesiredState.RUNNING
    locked.consecutive_failures = 0
    locked.next_restart_at = None
    if locked.state in (PipelineState.FAILED, PipelineState.HALTED):
        locked.state = PipelineState.STOPPED
    locked.save(
        update_fields=["desired_state", "consecutive_failures", "next_restart_at", "state", "updated_at"]
    )
    audit.record(
        actor=actor,
        action=action,
        target_type="pipeline",
        target_id=locked.name,
        reason=reason,
        before=before,
        after={"desired_state": locked.desired_state, "state": locked.state},
        details={"revision": locked.current_revision_id},
    )
    _after_commit_enqueue(task, locked.pk)
    _status(locked)
    return locked


@transaction.atomic
def request_start(*, actor: User, pipeline: Pipeline, reason: str = "") -> Pipeline:
    """Ask for the pipeline to run its current revision; a worker launches the driver after commit.

    Needs the operator role in the pipeline's team (PermissionDenied otherwise); NotStartable when the
    pipeline has no revision. A FAILED or HALTED pipeline is reset to STOPPED with a fresh failure series:
    an operator's start is the one way back from those states.
    """
    return _request_running(
        actor=actor, pipeline=pipeline, action="pipeline.start", reason=reason, task="start_pipeline_task"
    )


@transaction.atomic
def request_stop(*, actor: User, pipeline: Pipeline, reason: str = "") -> Pipeline:
    """Ask for the pipeline to stop: the running micro-batch finishes, then the driver exits (a worker
    signals it after commit; the reconcile tick forces it after ``DRIVER_STOP_TIMEOUT_SECONDS``).
    Needs the operator role. A pending automatic restart is cancelled."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
    before = {"desired_state": locked.desired_state, "state": locked.state}
    locked.desired_state = DesiredState.STOPPED
    locked.next_restart_at = None
    if locked.state == PipelineState.RESTARTING:
        locked.state = PipelineState.STOPPED
    locked.save(update_fields=["desired_state", "next_restart_at", "state", "updated_at"])
    audit.record(
        actor=actor,
        action="pipeline.stop",
        target_type="pipeline",
        target_id=locked.name,
        reason=reason,
        before=before,
        after={"desired_state": locked.desired_state, "state": locked.state},
    )
    _after_commit_enqueue("stop_pipeline_task", locked.pk)
    _status(locked)
    return locked


@transaction.atomic
def request_restart(*, actor: User, pipeline: Pipeline, reason: str = "") -> Pipeline:
    """Ask for a clean restart: the running driver stops gracefully and the current revision starts
    again (the way to roll out a new revision). Needs the operator role; NotStartable without a revision."""
    return _request_running(
        actor=actor, pipeline=pipeline, action="pipeline.restart", reason=reason, task="restart_pipeline_task"
    )


# ------------------------------------------------------------------------------------------ worker side


def _hostname() -> str:
    return socket.gethostname()


def _state_dir() -> Path:
    return Path(settings.STATE_DIR)


def checkpoint_dir(pipeline_name: str) -> Path:
    """Where a pipeline's Spark checkpoint lives: kept across runs and revisions, so a restart resumes."""
    return _state_dir() / "checkpoints" / pipeline_name


def _run_dir(pipeline_name: str, run_id: uuid.UUID) -> Path:
    return _state_dir() / "runs" / pipeline_name / str(run_id)


def driver_command(run: PipelineRun, spec_file: Path) -> list[str]:
    """The driver's command line for ``run`` (master and jars from settings)."""
    return [
        sys.executable, "-m", "pipelines.spark.driver",
        "--spec-file", str(spec_file),
        "--pipeline", run.pipeline.name,
        "--revision", str(run.revision.number),
        "--run-id", str(run.run_id),
        "--bootstrap", settings.KAFKA_BOOTSTRAP_SERVERS,
        "--redis-url", settings.REDIS_URL,
        "--checkpoint-dir", str(checkpoint_dir(run.pipeline.name)),
        "--master", settings.SPARK_MASTER,
        "--jars", ",".join(settings.SPARK_JARS),
    ]  # fmt: skip


def _claim_start(pipeline: Pipeline, now: datetime) -> PipelineState | None:
    """Move the pipeline to STARTING if it is startable now; the state it came from, or None if another
    worker claimed it first or it is not startable (the conditional UPDATE is the lock)."""
    startable = Q(state=PipelineState.STOPPED) | Q(
        Q(next_restart_at__isnull=True) | Q(next_restart_at__lte=now), state=PipelineState.RESTARTING
    )
    previous = pipeline.state
    claimed = (
        Pipeline.objects.filter(startable, pk=pipeline.pk, state=previous, desired_state=DesiredState.RUNNING)
        .exclude(current_revision=None)
        .update(state=PipelineState.STARTING, state_reason="", next_restart_at=None)
    )
    return PipelineState(previous) if claimed == 1 else None


def start_pipeline(*, pipeline_id: int, now: datetime | None = None) -> PipelineRun | None:
    """Launch a driver for the pipeline's current revision, if it should run and nobody else is starting it.

    Returns the new run (state STARTING, pid set), or None when the pipeline is not meant to run, already has
    a driver, is waiting out a restart backoff, or another worker won the claim. Topics are ensured first;
    a failure to ensure them or to launch the process ends the run as a failure (restarted with backoff).
    ``now`` (default: the clock) decides whether a restart backoff has passed.
    """
    pipeline = Pipeline.objects.select_related("current_revision", "team").get(pk=pipeline_id)
    # The claim and the run row commit together: nobody ever sees a STARTING pipeline without its run.
    with transaction.atomic():
        previous = _claim_start(pipeline, now or timezone.now())
        if previous is None:
            return None
        revision = pipeline.current_revision
        assert revision is not None  # the claim excludes pipelines without one
        last = pipeline.runs.order_by("-started_at", "-id").first()
        attempt = last.attempt + 1 if previous == PipelineState.RESTARTING and last is not None else 1
        run_id = uuid.uuid4()
        workdir = _run_dir(pipeline.name, run_id)
        run = PipelineRun.objects.create(
            pipeline=pipeline,
            revision=revision,
            run_id=run_id,
            attempt=attempt,
            state=PipelineState.STARTING,
            host=_hostname(),
            log_path=str(workdir / "driver.log"),
        )
        audit.record(
            actor=None,
            action="pipeline.run.start",
            target_type="pipeline",
            target_id=pipeline.name,
            details={
                "run_id": str(run_id),
                "attempt": attempt,
                "revision": revision.number,
                "host": run.host,
            },
        )
    pipeline.state = PipelineState.STARTING
    _status(pipeline, run)
    try:
        _launch(run, workdir)
    except Exception as exc:
        log.exception("could not launch the driver of %s", pipeline.name)
        _end_run(run, exit_code=c.EXIT_CRASHED, error_type="Launch", message=f"could not launch: {exc}")
        return run
    return run


def _launch(run: PipelineRun, workdir: Path) -> None:
    from confluent_kafka.admin import AdminClient

    from pipelines.spec import parse_spec
    from pipelines.topics import ensure_topics

    spec = parse_spec(run.revision.spec, pipeline_name=run.pipeline.name)
    plan = ensure_topics(AdminClient({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS}), spec)
    for problem in plan.problems:
        log.warning("pipeline %s: %s", run.pipeline.name, problem)
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(run.revision.spec))
    checkpoint_dir(run.pipeline.name).parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with Path(run.log_path).open("ab") as log_file:
        process = subprocess.Popen(
            driver_command(run, spec_file),
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: outlives worker restarts, killable as one group
        )
    _children[process.pid] = process
    try:
        created = psutil.Process(process.pid).create_time()
    except psutil.Error:
        created = None
    PipelineRun.objects.filter(pk=run.pk).update(pid=process.pid, process_started_at=created)
    run.pid, run.process_started_at = process.pid, created


def stop_pipeline(*, pipeline_id: int) -> PipelineRun | None:
    """Ask the pipeline's active driver to stop gracefully: SIGTERM to the driver process only (it lets the
    running micro-batch finish and stops its own query and JVM; signalling the group would kill the JVM
    under it). ``reconcile`` records the end, or kills the group after ``DRIVER_STOP_TIMEOUT_SECONDS``.

    Returns the run now STOPPING, or None when no driver was starting or running. A driver on another host
    is only marked STOPPING here (see the module docstring).
    """
    run = (
        PipelineRun.objects.filter(pipeline_id=pipeline_id, state__in=ACTIVE_STATES)
        .select_related("pipeline")
        .first()
    )
    if run is None:
        Pipeline.objects.filter(
            pk=pipeline_id, desired_state=DesiredState.STOPPED, state=PipelineState.RESTARTING
        ).update(state=PipelineState.STOPPED, next_restart_at=None)
        return None
    if run.state != PipelineState.STOPPING:
        now = timezone.now()
        claimed = PipelineRun.objects.filter(
            pk=run.pk, state__in=(PipelineState.STARTING, PipelineState.RUNNING)
        ).update(state=PipelineState.STOPPING, stop_requested_at=now)
        if claimed != 1:
            return None
        Pipeline.objects.filter(pk=pipeline_id, state__in=ACTIVE_STATES).update(state=PipelineState.STOPPING)
        run.state, run.stop_requested_at = PipelineState.STOPPING, now
        audit.record(
            actor=None,
            action="pipeline.run.stop",
            target_type="pipeline",
            target_id=run.pipeline.name,
            details={"run_id": str(run.run_id), "pid": run.pid},
        )
        run.pipeline.state = PipelineState.STOPPING
        _status(run.pipeline, run)
    if run.pid is not None and run.host == _hostname() and _alive(run) is not False:
        _signal_process(run.pid, signal.SIGTERM)
    return run


def restart_pipeline(*, pipeline_id: int) -> PipelineRun | None:
    """Stop the active driver gracefully; once it has exited, ``reconcile`` (desired state RUNNING) starts
    the current revision again. With no active driver, start now. Returns the affected run."""
    stopping = stop_pipeline(pipeline_id=pipeline_id)
    if stopping is not None:
        return stopping
    return start_pipeline(pipeline_id=pipeline_id)


# ------------------------------------------------------------------------------------------ processes


def _signal_process(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _kill_group(pid: int) -> None:
    """SIGKILL the driver's whole session group (JVM and Python workers included); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    child = _children.pop(pid, None)
    if child is not None:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            _children[pid] = child


def _alive(run: PipelineRun) -> bool | None:
    """Whether the run's driver process exists: None when it cannot be told from here (another host)."""
    if run.host != _hostname():
        return None
    if run.pid is None:
        return False
    child = _children.get(run.pid)
    if child is not None:
        return child.poll() is None
    try:
        process = psutil.Process(run.pid)
        if run.process_started_at is not None and abs(process.create_time() - run.process_started_at) > 1:
            return False  # the pid was reused by another process
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _exit_code_of_child(pid: int | None) -> int | None:
    if pid is None:
        return None
    child = _children.get(pid)
    return child.poll() if child is not None else None


def _exit_report(run: PipelineRun, client: redis.Redis | None) -> dict[str, Any] | None:
    """The driver's own account of how it ended: the Redis exit key, else the log's last exit line."""
    if client is not None:
        try:
            raw = cast("bytes | None", client.get(c.exit_key(run.pipeline.name, str(run.run_id))))
            if raw:
                return dict(json.loads(raw))
        except redis.RedisError as exc:
            log.warning("could not read the exit report of %s: %s", run.run_id, exc)
    for line in reversed(read_log_tail(run.log_path).splitlines()):
        if line.startswith(c.EXIT_REASON_MARKER):
            try:
                return dict(json.loads(line[len(c.EXIT_REASON_MARKER) :]))
            except ValueError:
                return None
    return None


def read_log_tail(path: str) -> str:
    """The last ``LOG_TAIL_LINES`` lines (at most ``LOG_TAIL_BYTES``) of a driver log; "" when the file
    is missing or unreadable here (the log lives on the host that launched the driver)."""
    if not path:
        return ""
    try:
        with Path(path).open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:])


def _failures_in_window(run: PipelineRun, now: datetime) -> int:
    """Failed runs of the current series (since the last attempt 1) that ended within the crash-loop window."""
    series_start = (
        PipelineRun.objects.filter(pipeline_id=run.pipeline_id, attempt=1, started_at__lte=run.started_at)
        .order_by("-started_at")
        .values_list("started_at", flat=True)
        .first()
    ) or run.started_at
    window_start = max(series_start, now - timedelta(minutes=settings.CRASH_LOOP_MINUTES))
    return (
        PipelineRun.objects.filter(
            pipeline_id=run.pipeline_id,
            state__in=(PipelineState.RESTARTING, PipelineState.FAILED),
            ended_at__gte=window_start,
        )
        .exclude(pk=run.pk)
        .count()
    )


def _end_run(
    run: PipelineRun,
    *,
    exit_code: int | None,
    error_type: str,
    message: str,
) -> PipelineRun | None:
    """Record how ``run`` ended and decide what follows (restart with backoff, FAILED, HALTED, STOPPED).

    Claimed by a conditional UPDATE on the run's state, so two reconcilers record one end. Returns the run,
    or None if someone else recorded its end first.
    """
    now = timezone.now()
    pipeline = Pipeline.objects.get(pk=run.pipeline_id)
    stop_requested = run.state == PipelineState.STOPPING or pipeline.desired_state == DesiredState.STOPPED
    verdict = judge_exit(
        exit_code=exit_code,
        stop_requested=stop_requested,
        consecutive_failures=pipeline.consecutive_failures,
        failures_in_window=_failures_in_window(run, now),
        crash_loop_failures=settings.CRASH_LOOP_FAILURES,
        backoff_base=settings.RESTART_BACKOFF_SECONDS,
        backoff_cap=settings.RESTART_BACKOFF_MAX_SECONDS,
    )
    reason = "" if verdict.run_state == PipelineState.STOPPED else f"{error_type}: {message}"
    with transaction.atomic():
        claimed = PipelineRun.objects.filter(pk=run.pk, state=run.state).update(
            state=verdict.run_state,
            ended_at=now,
            exit_code=exit_code,
            error_type=error_type,
            error_message=message[:4000],
            log_tail=read_log_tail(run.log_path),
        )
        if claimed != 1:
            return None
        restart_at = (
            now + timedelta(seconds=verdict.restart_in_seconds)
            if verdict.restart_in_seconds is not None
            else None
        )
        pipeline_state = verdict.pipeline_state
        if pipeline_state == PipelineState.RESTARTING and pipeline.desired_state != DesiredState.RUNNING:
            pipeline_state, restart_at = PipelineState.STOPPED, None
        Pipeline.objects.filter(pk=pipeline.pk).update(
            state=pipeline_state,
            state_reason=reason,
            consecutive_failures=verdict.consecutive_failures,
            next_restart_at=restart_at,
        )
        audit.record(
            actor=None,
            action="pipeline.run.end",
            target_type="pipeline",
            target_id=pipeline.name,
            reason=reason,
            details={
                "run_id": str(run.run_id),
                "state": str(verdict.run_state),
                "exit_code": exit_code,
                "error_type": error_type,
                "restart_in_seconds": verdict.restart_in_seconds,
            },
        )
        if verdict.run_state != PipelineState.STOPPED:
            progress.count_failed_commit(pipeline_id=pipeline.pk)  # the batch in flight was not committed
        pipeline.state, pipeline.state_reason = pipeline_state, reason
        run.state = verdict.run_state
        _status(pipeline, run)
    if run.pid is not None and run.host == _hostname():
        _kill_group(run.pid)  # leftovers (a JVM or Python worker outliving the driver) go with it
    log.info("pipeline %s run %s ended: %s (%s)", pipeline.name, run.run_id, verdict.run_state, reason)
    return run


# ------------------------------------------------------------------------------------------ reconcile


@dataclass
class ReconcileReport:
    """What one reconcile tick did, by pipeline name."""

    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)


def _redis() -> redis.Redis | None:
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
        client.ping()
        return client
    except redis.RedisError as exc:
        log.warning("reconcile without heartbeats, Redis is unreachable: %s", exc)
        return None


def _read_heartbeat(run: PipelineRun, client: redis.Redis | None) -> dict[str, Any] | None:
    if client is None:
        return None
    try:
        raw = cast("bytes | None", client.get(c.heartbeat_key(run.pipeline.name)))
    except redis.RedisError:
        return None
    if not raw:
        return None
    beat = dict(json.loads(raw))
    return beat if beat.get("run_id") == str(run.run_id) else None


def _note_heartbeat(run: PipelineRun, beat: dict[str, Any]) -> None:
    at = datetime.fromtimestamp(beat["time_ms"] / 1000, tz=timezone.get_current_timezone())
    fields: dict[str, Any] = {"last_heartbeat_at": at, "spark_app_id": beat.get("app_id") or run.spark_app_id}
    PipelineRun.objects.filter(pk=run.pk).update(**fields)
    run.last_heartbeat_at = at
    if run.state == PipelineState.STARTING:
        promoted = PipelineRun.objects.filter(pk=run.pk, state=PipelineState.STARTING).update(
            state=PipelineState.RUNNING
        )
        if promoted == 1:
            Pipeline.objects.filter(pk=run.pipeline_id, state=PipelineState.STARTING).update(
                state=PipelineState.RUNNING
            )
            run.state = PipelineState.RUNNING
            run.pipeline.state = PipelineState.RUNNING
            _status(run.pipeline, run)


#: Redis key holding when supervision first saw this Redis (epoch seconds). Set only if absent, so a Redis
#: that restarted empty (its heartbeats gone with it) gets a fresh value: see ``_heartbeats_readable_since``.
HEARTBEAT_EPOCH_KEY = "streamforge:supervision:heartbeats-since"


def _heartbeats_readable_since(client: redis.Redis | None, now: datetime) -> datetime | None:
    """Since when heartbeats could be read from Redis: the moment a reconcile first saw this Redis, or None
    when Redis does not answer. A driver cannot be judged silent for a time in which its heartbeats could
    not be written (Redis down) or were lost (Redis restarted empty)."""
    if client is None:
        return None
    try:
        client.set(HEARTBEAT_EPOCH_KEY, str(now.timestamp()), nx=True)
        raw = cast("bytes | None", client.get(HEARTBEAT_EPOCH_KEY))
    except redis.RedisError:
        return None
    if raw is None:
        return None
    return datetime.fromtimestamp(float(raw), tz=now.tzinfo)


def _check_run(
    run: PipelineRun,
    client: redis.Redis | None,
    now: datetime,
    report: ReconcileReport,
    heartbeats_since: datetime | None = None,
) -> None:
    name = run.pipeline.name
    alive = _alive(run)
    beat = _read_heartbeat(run, client) if alive is not False else None
    if beat is not None:
        _note_heartbeat(run, beat)
    if alive is False:
        exit_report = _exit_report(run, client)
        code = _exit_code_of_child(run.pid)
        exit_code: int | None
        if exit_report is not None:
            exit_code = int(exit_report.get("exit_code", code if code is not None else c.EXIT_CRASHED))
            error_type, message = str(exit_report.get("error_type", "")), str(exit_report.get("message", ""))
        elif code is not None and code < 0:
            exit_code, error_type = code, "Killed"
            message = f"the driver was killed by signal {-code} ({signal.Signals(-code).name})"
        else:
            exit_code, error_type = code, "Lost"
            message = "the driver process ended without an exit report"
        if _end_run(run, exit_code=exit_code, error_type=error_type, message=message):
            report.ended.append(name)
        return
    if run.state == PipelineState.STOPPING:
        requested = run.stop_requested_at or now
        if (now - requested).total_seconds() > settings.DRIVER_STOP_TIMEOUT_SECONDS:
            if run.pid is not None and run.host == _hostname():
                _kill_group(run.pid)
            seconds = settings.DRIVER_STOP_TIMEOUT_SECONDS
            if _end_run(
                run,
                exit_code=-signal.SIGKILL,
                error_type="StopTimeout",
                message=f"killed: the driver did not stop within {seconds}s of being asked",
            ):
                report.ended.append(name)
        else:
            report.stopping.append(name)
        return
    if heartbeats_since is None:
        # Redis does not answer: a missing heartbeat proves nothing (the pid check above still ends dead
        # drivers). Killing here would turn a Redis outage into a restart of every healthy pipeline.
        report.running.append(name)
        return
    silent_for = (now - max(run.last_heartbeat_at or run.started_at, heartbeats_since)).total_seconds()
    limit = (
        settings.DRIVER_HEARTBEAT_STALE_SECONDS
        if run.last_heartbeat_at is not None
        else settings.DRIVER_START_TIMEOUT_SECONDS
    )
    if silent_for > limit:
        if run.pid is not None and run.host == _hostname():
            _kill_group(run.pid)
        what = "heartbeat" if run.last_heartbeat_at is not None else "first heartbeat"
        if _end_run(
            run, exit_code=None, error_type="Stale", message=f"no {what} for {round(silent_for)}s: killed"
        ):
            report.ended.append(name)
        return
    report.running.append(name)


def reconcile(*, now: datetime | None = None) -> ReconcileReport:
    """One supervision tick (the beat runs it every ``RECONCILE_SECONDS``): record heartbeats, end runs
    whose driver died, went silent or overstayed a stop, stop drivers no longer wanted, and start the
    pipelines that should run and have no driver (once their restart backoff has passed)."""
    report = ReconcileReport()
    for pid, child in list(_children.items()):
        if (
            child.poll() is not None
            and not PipelineRun.objects.filter(pid=pid, state__in=ACTIVE_STATES).exists()
        ):
            _children.pop(pid, None)
    client = _redis()
    now = now or timezone.now()
    heartbeats_since = _heartbeats_readable_since(client, now)
    for run in PipelineRun.objects.filter(state__in=ACTIVE_STATES).select_related("pipeline"):
        _check_run(run, client, now, report, heartbeats_since)
    unwanted = PipelineRun.objects.filter(
        state__in=(PipelineState.STARTING, PipelineState.RUNNING),
        pipeline__desired_state=DesiredState.STOPPED,
    ).values_list("pipeline_id", flat=True)
    for pipeline_id in list(unwanted):
        if stop_pipeline(pipeline_id=pipeline_id) is not None:
            report.stopping.append(str(pipeline_id))
    Pipeline.objects.filter(desired_state=DesiredState.STOPPED, state=PipelineState.RESTARTING).update(
        state=PipelineState.STOPPED, next_restart_at=None
    )
    # A state that claims a driver while no run is active (a run row removed by hand, a lost update): heal it
    # so the pipeline can be started again instead of waiting forever.
    orphaned = Pipeline.objects.filter(state__in=ACTIVE_STATES).exclude(runs__state__in=ACTIVE_STATES)
    orphaned.filter(desired_state=DesiredState.RUNNING).update(
        state=PipelineState.RESTARTING, next_restart_at=None, state_reason="no active run found"
    )
    orphaned.filter(desired_state=DesiredState.STOPPED).update(state=PipelineState.STOPPED)
    due = (
        Pipeline.objects.filter(desired_state=DesiredState.RUNNING)
        .filter(
            Q(state=PipelineState.STOPPED)
            | Q(Q(next_restart_at__isnull=True) | Q(next_restart_at__lte=now), state=PipelineState.RESTARTING)
        )
        .exclude(runs__state__in=ACTIVE_STATES)
        .exclude(current_revision=None)
    )
    for pipeline in list(due):
        if start_pipeline(pipeline_id=pipeline.pk, now=now) is not None:
            report.started.append(pipeline.name)
    return report
