"""Draining a runner host (plan §3.11): an admin's ``drain_host`` / ``undrain_host`` (audited ``host.drain`` /
``host.undrain``), and ``drain_step``, which the global reconcile runs every tick to move a draining host's
pipelines off it one at a time.

One at a time, per draining host: while a pipeline that the drain stopped is still on its way (its drained run
is STOPPING, or the pipeline is not yet RUNNING again elsewhere: RESTARTING, PENDING, STARTING), nothing else
moves. Otherwise the host's oldest RUNNING run is claimed STOPPING with ``stop_cause="drain"`` (a conditional
UPDATE); its runner's agent sends the SIGTERM (the pull side of a routed stop; also pushed to the runner's
queue when ``pipelines.signal_stop`` exists), the driver finishes and commits its batch and exits 0, and
``exits`` turns that exit into an immediate, blameless restart that placement puts on another host (placement
never picks a draining host). The host row is locked (``SELECT ... FOR UPDATE``) for the step, so two beats
running it at once still move one pipeline.
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import current_app
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from access import audit
from access.permissions import is_admin
from pipelines.models import (
    ACTIVE_STATES,
    DesiredState,
    Pipeline,
    PipelineRun,
    PipelineState,
    RunnerHost,
    RunnerHostState,
)
from pipelines.supervision.processes import host_queue
from pipelines.supervision.status import announce_status

log = logging.getLogger("pipelines.supervision")

#: ``PipelineRun.stop_cause`` of a run the drain stopped.
DRAIN = "drain"

#: Pipeline states of a drained pipeline still on its way to another host.
_MOVING = (PipelineState.STOPPING, PipelineState.RESTARTING, PipelineState.PENDING, PipelineState.STARTING)


def _set_draining(*, actor: User, host: RunnerHost, draining: bool, reason: str) -> RunnerHost:
    if not is_admin(actor):
        raise PermissionDenied("draining runner hosts is for admins")
    with transaction.atomic():
        locked = RunnerHost.objects.select_for_update().get(pk=host.pk)
        before = {"draining": locked.draining}
        locked.draining = draining
        locked.drain_requested_by = actor if draining else None
        locked.drain_requested_at = timezone.now() if draining else None
        locked.save(update_fields=["draining", "drain_requested_by", "drain_requested_at"])
        audit.record(
            actor=actor,
            action="host.drain" if draining else "host.undrain",
            target_type="runner_host",
            target_id=locked.name,
            reason=reason,
            before=before,
            after={"draining": draining},
        )
    log.info("runner %s %s by %s", locked.name, "draining" if draining else "undrained", actor)
    return locked


def drain_host(*, actor: User, host: RunnerHost, reason: str = "") -> RunnerHost:
    """Mark ``host`` draining: placement stops choosing it and ``drain_step`` moves its pipelines off, one at
    a time, each with a clean stop (batch finished and committed) and a start elsewhere. Idempotent. Needs the
    admin role (PermissionDenied otherwise); audited ``host.drain`` with ``reason``. Returns the row."""
    return _set_draining(actor=actor, host=host, draining=True, reason=reason)


def undrain_host(*, actor: User, host: RunnerHost, reason: str = "") -> RunnerHost:
    """Clear ``host``'s drain: it takes new pipelines again (the ones already moved stay where they are).
    Needs the admin role (PermissionDenied otherwise); audited ``host.undrain``. Returns the row."""
    return _set_draining(actor=actor, host=host, draining=False, reason=reason)


def _in_flight(host: RunnerHost) -> bool:
    """Whether a pipeline this drain stopped is still on its way: its run STOPPING, or (since the drain was
    asked) the pipeline not yet RUNNING on another host."""
    drained = PipelineRun.objects.filter(host=host.name, stop_cause=DRAIN)
    if host.drain_requested_at is not None:
        drained = drained.filter(stop_requested_at__gte=host.drain_requested_at)
    if drained.filter(state=PipelineState.STOPPING).exists():
        return True
    moving = Pipeline.objects.filter(
        pk__in=drained.values("pipeline_id"), desired_state=DesiredState.RUNNING, state__in=_MOVING
    )
    return moving.exists()


def _oldest_running(host: RunnerHost) -> PipelineRun | None:
    return (
        PipelineRun.objects.filter(host=host.name, state=PipelineState.RUNNING)
        .select_related("pipeline")
        .order_by("started_at", "id")
        .first()
    )


def _route_stop(run: PipelineRun) -> None:
    """Push the SIGTERM to the owning runner's queue when the routed-stop task exists in this code base; the
    runner's agent pulls it at its next tick either way."""
    if "pipelines.signal_stop" in current_app.tasks:
        task = current_app.signature("pipelines.signal_stop", args=(str(run.run_id),))
        transaction.on_commit(lambda: task.apply_async(queue=host_queue(run.host)), robust=True)


def _step_host(host_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        host = RunnerHost.objects.select_for_update().filter(pk=host_id, draining=True).first()
        if host is None or _in_flight(host):
            return None
        run = _oldest_running(host)
        if run is None:
            return None
        claimed = PipelineRun.objects.filter(pk=run.pk, state=PipelineState.RUNNING).update(
            state=PipelineState.STOPPING, stop_requested_at=now, stop_cause=DRAIN
        )
        if claimed != 1:
            return None
        Pipeline.objects.filter(pk=run.pipeline_id, state__in=ACTIVE_STATES).update(
            state=PipelineState.STOPPING
        )
        audit.record(
            actor=None,
            action="pipeline.run.stop",
            target_type="pipeline",
            target_id=run.pipeline.name,
            reason=f"runner {host.name} is draining",
            details={"run_id": str(run.run_id), "pid": run.pid, "host": host.name, "cause": DRAIN},
        )
        _route_stop(run)
        run.state, run.stop_requested_at, run.stop_cause = PipelineState.STOPPING, now, DRAIN
        run.pipeline.state = PipelineState.STOPPING
        announce_status(run.pipeline, run)
    log.info("runner %s draining: moving pipeline %s (run %s)", host.name, run.pipeline.name, run.run_id)
    return run.pipeline.name


def drain_step(now: datetime | None = None) -> list[str]:
    """One drain tick (called by the global reconcile): for each draining host that is not lost, move its
    oldest RUNNING pipeline off unless the previous one is still on its way (module docstring). Returns the
    names of the pipelines it asked to move. ``now`` (default: the clock) is stored as the stop request time."""
    now = now or timezone.now()
    hosts = RunnerHost.objects.with_state().filter(state=RunnerHostState.DRAINING.value)  # type: ignore[misc]  # annotated
    return [name for host_id in hosts.values_list("pk", flat=True) if (name := _step_host(host_id, now))]
