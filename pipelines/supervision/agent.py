"""The host agent of a runner: what keeps this runner's pipelines alive, and nothing else's (plan §3.4).

A runner is a Celery worker started with ``STREAMFORGE_RUNNER_NAME`` (``settings.RUNNER_NAME``). A bootstep in
``streamforge_web.celery`` runs ``run_agent`` in a daemon thread of the worker's main process; it calls
``host_tick`` every ``HOST_TICK_SECONDS``. One tick:

1. **Heartbeat**: the first tick upserts this runner's ``RunnerHost`` row (``register_host``: queue, capacity,
   labels and advertised address from settings, ``started_at``); every tick moves ``last_heartbeat_at`` to the
   database's ``now()``. A host that the reconcile had marked lost (``lost_at``) is back: logged and audited
   ``host.back``, once (conditional UPDATE).
2. **Its open runs** (``PipelineRun.host`` is this runner, state STARTING/RUNNING/STOPPING):
   * the reconcile's own judgement of a run (``reconciler._check_run``): a dead pid ends the run from its exit
     report; silence and an overstayed stop end it as they always did;
   * a live driver (or a STARTING run not launched yet, for at most ``DRIVER_START_TIMEOUT_SECONDS``) has its
     lease renewed by a conditional UPDATE that only matches while this runner still holds it under the run's
     epoch and it has not expired; the new expiry is read back and written to the driver's lease file
     (``pipelines.spark.fence``), which the driver checks before each write and each commit;
   * 0 rows renewed (the lease expired or another runner took the pipeline over under a higher epoch): the
     lease file is rewritten ``lost``, the driver's whole process group is SIGKILLed (a graceful stop would
     let it commit its batch) and the run ends ``Fenced``;
   * a STOPPING run this process has not signalled yet gets its SIGTERM (the pull side of a routed stop);
   * a STARTING run with no pid older than ``LAUNCH_FALLBACK_SECONDS`` (its ``pipelines.launch_run`` message
     was lost: a broker outage after the claim committed, a runner restarted before consuming it) is launched
     by the agent itself, in a thread of its own so the tick is never held by a slow launch;
     ``launcher.launch_claimed_run`` is idempotent (pid still unset, in-process guard), so a late message is
     a no-op.
3. **Strays**: a driver process of this runner (its environment says ``STREAMFORGE_RUNNER_NAME=<me>``) whose
   run is not among this runner's open runs under the pipeline's current epoch is SIGKILLed with its group:
   what a runner thawed after a freeze, or restarted after its pipelines moved, does first.

Only PostgreSQL keeps a pipeline alive here: Redis is read (heartbeats, exit reports) when it answers, the
broker not at all, so a Redis outage renews every lease. All lease arithmetic is on the database's clock
(``Now()``); ``now`` only feeds the reconcile's existing judgements (silence, stop timeout, start timeout).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import psutil
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, models, transaction
from django.db.models import ExpressionWrapper
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone

from access import audit
from pipelines.models import ACTIVE_STATES, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.spark.fence import HELD, LOST, Lease, read_lease, write_lease
from pipelines.supervision import launcher, reconciler
from pipelines.supervision.exits import _end_run
from pipelines.supervision.processes import (
    _alive,
    _children,
    _kill_group,
    _signal_process,
    host_queue,
    lease_path,
    mark_signalled,
)
from streamforge_core import contract as c

log = logging.getLogger("pipelines.supervision")

#: The environment variable that tags a driver process with the runner that launched it
#: (``launcher.driver_environment`` passes it through); the stray scan and devstack's ``crash-host`` read it.
RUNNER_ENV = "STREAMFORGE_RUNNER_NAME"

#: Runner names whose ``RunnerHost`` row this process has upserted (the first tick registers).
_registered: set[str] = set()

#: How old (seconds, by ``PipelineRun.started_at``) a claimed run with no driver must be before the agent
#: launches it itself: long enough for a queued ``pipelines.launch_run`` to arrive on a busy runner.
LAUNCH_FALLBACK_SECONDS = 15.0


@dataclass
class TickReport:
    """What one ``host_tick`` did: pipeline names whose lease was renewed or lost (fenced), runs ended by the
    reconcile's judgement, STOPPING runs signalled, and pids of stray drivers killed."""

    renewed: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    signalled: list[str] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)


def _me() -> str:
    name = settings.RUNNER_NAME
    if not name:
        raise ImproperlyConfigured("the host agent runs only on a runner: set STREAMFORGE_RUNNER_NAME")
    return str(name)


def _ttl_from_now() -> ExpressionWrapper[CombinedExpression]:
    """``now() + LEASE_TTL_SECONDS`` on the database's clock."""
    return ExpressionWrapper(
        Now() + timedelta(seconds=settings.LEASE_TTL_SECONDS), output_field=models.DateTimeField()
    )


def _ms(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1000) if moment is not None else 0


def register_host() -> RunnerHost:
    """Upsert this runner's ``RunnerHost`` row (``settings.RUNNER_NAME``): its queue (``host_queue``),
    ``RUNNER_SLOTS``, ``RUNNER_MEMORY_MB``, ``RUNNER_LABELS``, ``RUNNER_ADVERTISE_HOST``, ``started_at`` and
    ``last_heartbeat_at`` at the database's ``now()``, ``lost_at`` cleared. ``draining`` keeps its value (an
    admin's drain outlives a restart). Audits ``host.register`` (details: capacity, labels) and, when the row
    said lost, ``host.back``. Returns the row as stored. Raises ImproperlyConfigured without a runner name."""
    name = _me()
    fields = {
        "queue": host_queue(name),
        "slots": settings.RUNNER_SLOTS,
        "memory_mb": settings.RUNNER_MEMORY_MB,
        "labels": list(settings.RUNNER_LABELS),
        "advertise_host": settings.RUNNER_ADVERTISE_HOST,
    }
    with transaction.atomic():
        existing = RunnerHost.objects.select_for_update().filter(name=name).first()
        if existing is None:
            RunnerHost.objects.create(name=name, started_at=Now(), last_heartbeat_at=Now(), **fields)
        else:
            RunnerHost.objects.filter(pk=existing.pk).update(
                started_at=Now(), last_heartbeat_at=Now(), lost_at=None, **fields
            )
        audit.record(
            actor=None,
            action="host.register",
            target_type="runner_host",
            target_id=name,
            details={"slots": fields["slots"], "memory_mb": fields["memory_mb"], "labels": fields["labels"]},
        )
        if existing is not None and existing.lost_at is not None:
            _audit_back(name, existing.lost_at)
    _registered.add(name)
    log.info("runner %s registered (queue %s)", name, fields["queue"])
    return RunnerHost.objects.get(name=name)


def _audit_back(name: str, lost_at: datetime) -> None:
    log.warning("runner %s is back after being lost at %s", name, lost_at.isoformat())
    audit.record(
        actor=None,
        action="host.back",
        target_type="runner_host",
        target_id=name,
        details={"lost_at": lost_at.isoformat()},
    )


def _heartbeat(name: str) -> RunnerHost:
    """Move ``last_heartbeat_at`` to ``now()``; clear ``lost_at`` once (audited ``host.back``). Registers the
    row first when this process has not, or when it disappeared (an admin deleted it)."""
    if name not in _registered:
        return register_host()
    with transaction.atomic():
        previous = RunnerHost.objects.filter(name=name).values_list("lost_at", flat=True).first()
        if not RunnerHost.objects.filter(name=name).update(last_heartbeat_at=Now()):
            _registered.discard(name)
            return register_host()
        if previous is not None and RunnerHost.objects.filter(name=name, lost_at=previous).update(
            lost_at=None
        ):
            _audit_back(name, previous)
    return RunnerHost.objects.get(name=name)


def _renew(run: PipelineRun, host: RunnerHost) -> datetime | None:
    """Extend the pipeline's lease to ``now() + LEASE_TTL_SECONDS`` if this runner still holds it under the
    run's epoch and it has not expired (the conditional UPDATE is the whole check); the new expiry, or None
    when 0 rows matched. The read-back is in the UPDATE's transaction: the row stays locked until commit."""
    assert run.epoch is not None  # runs without an epoch hold no lease (the caller skips them)
    with transaction.atomic():
        renewed = Pipeline.objects.filter(
            pk=run.pipeline_id, lease_host=host, lease_epoch=run.epoch, lease_expires_at__gte=Now()
        ).update(lease_expires_at=_ttl_from_now())
        if renewed != 1:
            return None
        return Pipeline.objects.filter(pk=run.pipeline_id).values_list("lease_expires_at", flat=True).get()


def _write(run: PipelineRun, host: RunnerHost, expires_at: datetime | None, state: str) -> None:
    path = lease_path(run.pipeline.name, run.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert run.epoch is not None  # runs without an epoch hold no lease (callers skip them)
    write_lease(
        path,
        Lease(
            pipeline=run.pipeline.name,
            run_id=str(run.run_id),
            epoch=run.epoch,
            host=host.name,
            expires_at_ms=_ms(expires_at),
            state=state,
        ),
    )


def _fence(run: PipelineRun, host: RunnerHost, report: TickReport) -> None:
    """The lease is gone: say so in the lease file, SIGKILL the driver's group, end the run ``Fenced``."""
    epoch, expires_at = (
        Pipeline.objects.filter(pk=run.pipeline_id).values_list("lease_epoch", "lease_expires_at").get()
    )
    with contextlib.suppress(OSError):
        _write(run, host, expires_at, LOST)
    if run.pid is not None:
        _kill_group(run.pid)
    why = (
        f"superseded by epoch {epoch}"
        if epoch != run.epoch
        else f"expired at {expires_at.isoformat() if expires_at else 'an unknown time'}"
    )
    message = f"runner {host.name} could not renew the lease of epoch {run.epoch} ({why}): driver killed"
    log.warning("pipeline %s run %s: %s", run.pipeline.name, run.run_id, message)
    _end_run(run, exit_code=c.EXIT_FENCED, error_type="Fenced", message=message)
    report.fenced.append(run.pipeline.name)


def _tend(
    run: PipelineRun,
    host: RunnerHost,
    client: object,
    now: datetime,
    heartbeats_since: datetime | None,
    report: TickReport,
) -> None:
    """Step 2 of the tick for one of this runner's open runs (see the module docstring)."""
    judged = reconciler.ReconcileReport()
    reconciler._check_run(run, client, now, judged, heartbeats_since)  # type: ignore[arg-type]
    report.ended.extend(judged.ended)
    current = PipelineRun.objects.filter(pk=run.pk).values_list("state", "pid").first()
    if current is None or current[0] not in ACTIVE_STATES:
        return
    run.state, run.pid = PipelineState(current[0]), current[1]
    if run.epoch is None:
        return  # a run from before leases: no lease to renew (the reconcile judges it as before)
    alive = _alive(run)
    unlaunched = run.state == PipelineState.STARTING and run.pid is None
    if unlaunched and (now - run.started_at).total_seconds() > settings.DRIVER_START_TIMEOUT_SECONDS:
        return  # a launch that never happened: let its lease lapse
    if alive is not True and not unlaunched:
        return
    expires_at = _renew(run, host)
    if expires_at is None:
        _fence(run, host, report)
        return
    try:
        _write(run, host, expires_at, HELD)
    except OSError as exc:  # the driver fences itself at the old expiry: never worse than no renewal
        log.warning("could not write the lease file of %s: %s", run.run_id, exc)
    report.renewed.append(run.pipeline.name)
    if unlaunched and (now - run.started_at).total_seconds() > LAUNCH_FALLBACK_SECONDS:
        _launch_in_background(run)
        report.launched.append(run.pipeline.name)
    # mark_signalled is a test-and-set shared with the routed ``signal_stop``: one SIGTERM per run.
    if run.state == PipelineState.STOPPING and run.pid is not None and mark_signalled(run.run_id):
        _signal_process(run.pid, signal.SIGTERM)
        report.signalled.append(run.pipeline.name)


def _launch_in_background(run: PipelineRun) -> threading.Thread:
    """Launch ``run``'s driver in a daemon thread (its own database connection, closed at the end); a launch
    already under way in this process, or a run launched or ended meanwhile, makes it a no-op."""

    def launch() -> None:
        try:
            launcher.launch_claimed_run(run.run_id)
        except Exception:
            log.exception("the agent could not launch run %s of %s", run.run_id, run.pipeline.name)
        finally:
            close_old_connections()

    thread = threading.Thread(target=launch, name=f"agent-launch-{run.run_id}", daemon=True)
    thread.start()
    return thread


def _option(cmdline: list[str], name: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return cmdline[cmdline.index(name) + 1]
    return None


def _local_drivers(name: str) -> list[tuple[int, list[str]]]:
    """Driver processes of runner ``name`` on this machine, as (pid, command line): children this process
    launched, and any process whose environment says ``STREAMFORGE_RUNNER_NAME=<name>`` and whose command line
    is a driver's (``pipelines.spark.driver``'s ``--run-id`` and ``--pipeline`` arguments, which the test
    stand-in shares)."""
    found: dict[int, list[str]] = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "--run-id" not in cmdline or "--pipeline" not in cmdline:
            continue
        if proc.pid not in _children:
            try:
                if proc.environ().get(RUNNER_ENV) != name or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
            except psutil.Error:
                continue
        found[proc.pid] = list(cmdline)
    return list(found.items())


def _kill_strays(host: RunnerHost, report: TickReport) -> None:
    """Step 3: SIGKILL the group of each local driver whose run is not an open run of this runner under the
    pipeline's current epoch; one whose run is open but was superseded meanwhile is fenced (``_fence``: its
    run ends ``Fenced``). The processes are listed *before* the runs are read, so a driver launched in between
    (its run committed before its process started) is never taken for a stray."""
    drivers = _local_drivers(host.name)
    if not drivers:
        return
    open_runs = {
        str(run.run_id): run
        for run in PipelineRun.objects.filter(host=host.name, state__in=ACTIVE_STATES).select_related(
            "pipeline"
        )
    }
    for pid, cmdline in drivers:
        run_id, pipeline = _option(cmdline, "--run-id"), _option(cmdline, "--pipeline")
        run = open_runs.get(run_id or "")
        if run is not None and (run.epoch is None or run.epoch == run.pipeline.lease_epoch):
            continue
        if run is not None and run.pid == pid:
            _fence(run, host, report)
            continue
        if run_id and pipeline:
            path = lease_path(pipeline, run_id)
            held = read_lease(path)
            if held is not None:
                with contextlib.suppress(OSError):
                    write_lease(path, replace(held, state=LOST))
        log.warning("runner %s: killing stray driver pid %s (run %s of %s)", host.name, pid, run_id, pipeline)
        _kill_stray(pid)
        report.killed.append(pid)


def _kill_stray(pid: int) -> None:
    try:
        leader = os.getpgid(pid) == pid
    except ProcessLookupError:
        return
    if leader:
        _kill_group(pid)  # the driver leads its own session: JVM and Python workers go with it
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def host_tick(now: datetime | None = None) -> TickReport:
    """One tick of this runner's host agent (module docstring): heartbeat, renew or fence the leases of its
    open runs, signal its unsignalled STOPPING runs, kill its stray drivers. ``now`` (default: the clock)
    feeds the reconcile's silence and timeout judgements only; leases use the database's clock.

    Raises ImproperlyConfigured when ``settings.RUNNER_NAME`` is not set; database errors propagate (the
    agent's loop logs them and tries again at the next tick)."""
    name = _me()
    report = TickReport()
    host = _heartbeat(name)
    now = now or timezone.now()
    client = reconciler._redis()
    heartbeats_since = reconciler._heartbeats_readable_since(client, now)
    runs = PipelineRun.objects.filter(host=name, state__in=ACTIVE_STATES).select_related("pipeline")
    for run in list(runs):
        _tend(run, host, client, now, heartbeats_since, report)
    _kill_strays(host, report)
    return report


def run_agent(stop: threading.Event) -> None:
    """The agent's loop (the worker bootstep's thread): ``host_tick`` every ``HOST_TICK_SECONDS`` until
    ``stop`` is set, with the thread's stale database connections closed around each tick (a database restart
    costs one failed tick, logged)."""
    while not stop.is_set():
        close_old_connections()
        try:
            host_tick()
        except Exception:
            log.exception("host agent tick failed; trying again in %ss", settings.HOST_TICK_SECONDS)
        finally:
            close_old_connections()
        stop.wait(settings.HOST_TICK_SECONDS)
