"""How a driver run ends and what follows: the pure state machine (``judge_exit``, ``backoff_seconds``) and
``_end_run``, which records an ended run once and moves the pipeline to RESTARTING (with backoff), FAILED
(a crash loop), HALTED (exit 2 or 3: restarting cannot help) or STOPPED.

Ending a run is claimed by a conditional UPDATE on ``PipelineRun.state``, so a crash is counted (and
audited) once, and releases the pipeline's lease when the run still holds it.

Some ends are nobody's fault and restart at once without counting as a failure (``BLAMELESS``): the
driver's host was lost (``HostLost``: its lease expired), the driver stopped itself because its lease was
gone (exit 4, ``Fenced``), or a drain stopped it cleanly to move it to another host.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access import audit
from pipelines import progress, signals
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState
from pipelines.supervision.processes import _kill_group, forget_signalled, read_log_tail, runner_name
from pipelines.supervision.status import announce_status
from streamforge_core import contract as c

log = logging.getLogger("pipelines.supervision")

#: Error types of ends that are not the pipeline's fault: restarted at once, never counted as a failure.
BLAMELESS_ERROR_TYPES = ("HostLost", "Fenced")
#: ``PipelineRun.stop_cause`` of a drain's stop: a clean exit restarts it at once on another host.
DRAIN = "drain"


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
    blameless: bool = False,
) -> Verdict:
    """The state machine of an ended run (pure, unit-tested).

    ``exit_code`` None means the process vanished without a code (killed on another host, lost);
    ``failures_in_window`` counts earlier failures of the current series within the crash-loop window.
    A requested stop ends STOPPED; exit 2/3 end HALTED whatever was asked; a ``blameless`` end (host lost,
    fenced: exit 4, a drain's clean stop) of an unrequested run restarts at once, the failure count
    unchanged; any other end of an unrequested run is a failure: RESTARTING with backoff, or FAILED once it
    is failure number ``crash_loop_failures`` in the window.
    """
    if exit_code in (c.EXIT_CONFIG, c.EXIT_DLQ):
        return Verdict(PipelineState.HALTED, PipelineState.HALTED, consecutive_failures, None)
    if stop_requested:
        return Verdict(PipelineState.STOPPED, PipelineState.STOPPED, 0, None)
    if blameless or exit_code == c.EXIT_FENCED:
        return Verdict(PipelineState.RESTARTING, PipelineState.RESTARTING, consecutive_failures, 0.0)
    failures = consecutive_failures + 1
    if failures_in_window + 1 >= crash_loop_failures:
        return Verdict(PipelineState.FAILED, PipelineState.FAILED, failures, None)
    delay = backoff_seconds(failures, base=backoff_base, cap=backoff_cap)
    return Verdict(PipelineState.RESTARTING, PipelineState.RESTARTING, failures, delay)


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
        .exclude(error_type__in=BLAMELESS_ERROR_TYPES)
        .exclude(exit_code=c.EXIT_FENCED)
        .exclude(stop_cause=DRAIN, exit_code=c.EXIT_STOPPED)
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

    Claimed by a conditional UPDATE on the run's state, so two reconcilers record one end; the pipeline's
    lease is released in the same transaction when this run still holds it (``lease_epoch == run.epoch``).
    A drain's stop (``stop_cause == "drain"``) that exits 0, a lost host (``HostLost``) and a fenced driver
    (exit 4 or ``Fenced``) restart at once and count as no failure. Returns the run, or None if someone else
    recorded its end first.
    """
    now = timezone.now()
    pipeline = Pipeline.objects.get(pk=run.pipeline_id)
    drained = run.stop_cause == DRAIN and pipeline.desired_state == DesiredState.RUNNING
    stop_requested = (
        run.state == PipelineState.STOPPING and not drained
    ) or pipeline.desired_state == DesiredState.STOPPED
    blameless = error_type in BLAMELESS_ERROR_TYPES or (drained and exit_code == c.EXIT_STOPPED)
    verdict = judge_exit(
        exit_code=exit_code,
        stop_requested=stop_requested,
        consecutive_failures=pipeline.consecutive_failures,
        failures_in_window=_failures_in_window(run, now),
        crash_loop_failures=settings.CRASH_LOOP_FAILURES,
        backoff_base=settings.RESTART_BACKOFF_SECONDS,
        backoff_cap=settings.RESTART_BACKOFF_MAX_SECONDS,
        blameless=blameless,
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
        restart_at = (  # None: at once (or not automatically)
            now + timedelta(seconds=verdict.restart_in_seconds) if verdict.restart_in_seconds else None
        )
        pipeline_state = verdict.pipeline_state
        if pipeline_state == PipelineState.RESTARTING and pipeline.desired_state != DesiredState.RUNNING:
            pipeline_state, restart_at = PipelineState.STOPPED, None
        # A run whose epoch was superseded no longer speaks for the pipeline: a newer run under a newer
        # lease does. (Runs from before leases, epoch None, always do.)
        speaks_for = Pipeline.objects.filter(pk=pipeline.pk)
        if run.epoch is not None:
            speaks_for = speaks_for.exclude(lease_epoch__gt=run.epoch)
        speaks_for.update(
            state=pipeline_state,
            state_reason=reason,
            consecutive_failures=verdict.consecutive_failures,
            next_restart_at=restart_at,
        )
        if run.epoch is not None:  # the lease goes with the run holding it, never with a superseded one
            Pipeline.objects.filter(pk=pipeline.pk, lease_epoch=run.epoch).update(
                lease_host=None, lease_expires_at=None
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
                "host": run.host,
                "epoch": run.epoch,
            },
        )
        if verdict.run_state != PipelineState.STOPPED and not (drained and exit_code == c.EXIT_STOPPED):
            progress.count_failed_commit(pipeline_id=pipeline.pk)  # the batch in flight was not committed
        pipeline.state, pipeline.state_reason = pipeline_state, reason
        run.state = verdict.run_state
        announce_status(pipeline, run)
        if pipeline_state in (PipelineState.HALTED, PipelineState.FAILED):
            signals.send_on_commit(
                signals.pipeline_stopped_for_good,
                pipeline_id=pipeline.pk,
                run_id=str(run.run_id),
                state=str(pipeline_state),
                reason=reason,
            )
    forget_signalled(run.run_id)
    if run.pid is not None and run.host == runner_name():
        _kill_group(run.pid)  # leftovers (a JVM or Python worker outliving the driver) go with it
    log.info("pipeline %s run %s ended: %s (%s)", pipeline.name, run.run_id, verdict.run_state, reason)
    return run
