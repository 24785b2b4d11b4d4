"""The reconcile tick that keeps actual state following desired state: it marks runner hosts lost, ends
the runs whose lease expired (their host is gone: ``HostLost``), records heartbeats, ends runs whose driver
died (its pid is gone, or it exited), went silent (no heartbeat for ``DRIVER_HEARTBEAT_STALE_SECONDS``; none
within ``DRIVER_START_TIMEOUT_SECONDS`` of its launch) or overstayed a stop, stops drivers no longer wanted
and places the pipelines that should run (design note ``docs/design/runner-hosts.md`` §3.5).

Any beat may run it, several at once: every step is a conditional UPDATE, so nothing is done twice. A run
on another host that holds a lease is judged by its lease alone (the owner renews it while its driver
lives), never by its heartbeat's silence or its pid.
"""

from __future__ import annotations

import json
import logging
import signal
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import redis
from django.conf import settings
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from access import audit
from pipelines import signals
from pipelines.models import ACTIVE_STATES, DesiredState, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.supervision.drain import drain_step
from pipelines.supervision.exits import _end_run
from pipelines.supervision.launcher import start_pipeline, stop_pipeline
from pipelines.supervision.placement import db_now_minus, startable_q
from pipelines.supervision.processes import (
    _alive,
    _children,
    _exit_code_of_child,
    _kill_group,
    read_log_tail,
    runner_name,
)
from pipelines.supervision.spark_apps import kill_application
from pipelines.supervision.status import announce_status
from streamforge_core import contract as c
from streamforge_core import redis_client

log = logging.getLogger("pipelines.supervision")


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


@dataclass
class ReconcileReport:
    """What one reconcile tick did, by pipeline name."""

    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    lost_hosts: list[str] = field(default_factory=list)


def _redis() -> redis.Redis | None:
    try:
        client = redis_client.connect(settings.REDIS_URL)
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
    # A beat proves the driver alive; RUNNING waits for its streaming query (phase past "starting": preflight,
    # the JVM and the Spark session take tens of seconds). A beat without a phase is promoted as before.
    if run.state == PipelineState.STARTING and beat.get("phase", "running") != "starting":
        promoted = PipelineRun.objects.filter(pk=run.pk, state=PipelineState.STARTING).update(
            state=PipelineState.RUNNING
        )
        if promoted == 1:
            Pipeline.objects.filter(pk=run.pipeline_id, state=PipelineState.STARTING).update(
                state=PipelineState.RUNNING
            )
            run.state = PipelineState.RUNNING
            run.pipeline.state = PipelineState.RUNNING
            announce_status(run.pipeline, run)
            _announce_new_revision(run)


def _announce_new_revision(run: PipelineRun) -> None:
    """``signals.revision_live`` when ``run`` (just RUNNING) runs another revision than the run before it."""
    number = run.revision.number
    previous = (
        PipelineRun.objects.filter(pipeline_id=run.pipeline_id, started_at__lte=run.started_at)
        .exclude(pk=run.pk)
        .order_by("-started_at", "-id")
        .values_list("revision__number", flat=True)
        .first()
    )
    if previous is not None and previous != number:
        signals.send_on_commit(
            signals.revision_live, pipeline_id=run.pipeline_id, revision=number, previous_revision=previous
        )


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
    if alive is None and run.epoch is not None and run.host != runner_name():
        # Another host's run under a lease: its owner judges the process; here only the lease counts
        # (``_end_expired_leases``), not a heartbeat's silence nor a stop that takes long.
        (report.stopping if run.state == PipelineState.STOPPING else report.running).append(name)
        return
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
            if run.pid is not None and run.host == runner_name():
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
        if run.pid is not None and run.host == runner_name():
            _kill_group(run.pid)
        what = "heartbeat" if run.last_heartbeat_at is not None else "first heartbeat"
        if _end_run(
            run, exit_code=None, error_type="Stale", message=f"no {what} for {round(silent_for)}s: killed"
        ):
            report.ended.append(name)
        return
    report.running.append(name)


def _mark_lost_hosts(report: ReconcileReport) -> None:
    """Mark runner hosts silent for ``HOST_LOST_SECONDS`` (the database's clock) lost: ``lost_at`` set by a
    conditional UPDATE, so each loss is audited ``host.lost`` once whichever beat sees it first."""
    silent = RunnerHost.objects.filter(
        lost_at=None, last_heartbeat_at__lt=db_now_minus(settings.HOST_LOST_SECONDS)
    ).values_list("pk", "name", "last_heartbeat_at")
    for pk, name, last_heartbeat_at in list(silent):
        if RunnerHost.objects.filter(pk=pk, lost_at=None).update(lost_at=Now()) != 1:
            continue
        audit.record(
            actor=None,
            action="host.lost",
            target_type="runner_host",
            target_id=name,
            reason=f"no heartbeat for {settings.HOST_LOST_SECONDS}s",
            details={"last_heartbeat_at": last_heartbeat_at.isoformat()},
        )
        log.warning("runner host %s is lost (last heartbeat %s)", name, last_heartbeat_at)
        report.lost_hosts.append(name)


def _end_expired_leases(report: ReconcileReport) -> None:
    """End the open runs whose lease (still theirs: ``run.epoch == pipeline.lease_epoch``) expired more than
    ``LEASE_GRACE_SECONDS`` ago on the database's clock: nobody renews it, so the host is gone or cut off,
    and its driver has fenced itself (it stops committing ``DRIVER_FENCE_MARGIN_SECONDS`` before expiry).
    The end is ``HostLost``: blameless, restarted at once elsewhere; the lease is released with it."""
    expired = PipelineRun.objects.filter(
        state__in=ACTIVE_STATES,
        epoch__isnull=False,
        pipeline__lease_epoch=F("epoch"),
        pipeline__lease_expires_at__lt=db_now_minus(settings.LEASE_GRACE_SECONDS),
    ).select_related("pipeline", "pipeline__lease_host")
    for run in list(expired):
        expired_at = run.pipeline.lease_expires_at
        message = (
            f"the lease of {run.host} (epoch {run.epoch}) expired at {expired_at and expired_at.isoformat()}"
        )
        if _end_run(run, exit_code=None, error_type="HostLost", message=message):
            report.ended.append(run.pipeline.name)
            # Its executors hold cluster cores while the lost driver's connection looks alive (frozen).
            kill_application(run.spark_app_id)


def reconcile(*, now: datetime | None = None) -> ReconcileReport:
    """One supervision tick (the beat runs it every ``RECONCILE_SECONDS``): mark silent runner hosts lost,
    end runs whose lease expired, record heartbeats, end runs whose driver died, went silent or overstayed a
    stop, stop drivers no longer wanted, and place the pipelines that should run and have no driver (once
    their restart backoff has passed; PENDING ones again each tick)."""
    report = ReconcileReport()
    _mark_lost_hosts(report)
    _end_expired_leases(report)
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
    # -- drain (host agent helper): move one pipeline at a time off each draining runner host
    report.stopping.extend(drain_step(now))
    due = (
        Pipeline.objects.filter(desired_state=DesiredState.RUNNING)
        .filter(startable_q(now))
        .exclude(runs__state__in=ACTIVE_STATES)
        .exclude(current_revision=None)
    )
    for pipeline in list(due):
        if start_pipeline(pipeline_id=pipeline.pk, now=now) is not None:
            report.started.append(pipeline.name)
    return report
