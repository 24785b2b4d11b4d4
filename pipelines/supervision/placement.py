"""Placement under leases: which runner host runs a pipeline's next driver, and the claim that gives it the
lease (issue #29, design note ``docs/design/runner-hosts.md`` §3.3).

``place_and_claim`` runs in any process (a web's start request, the beat's reconcile, a runner): it picks a
host with room among the ``RunnerHost`` rows, locks that host's row (``SELECT ... FOR UPDATE``, so two
placers cannot both take its last slot), and takes the lease with one conditional UPDATE of the pipeline
row: ``state`` moves to STARTING, ``lease_host`` to the host, ``lease_epoch`` up by one and
``lease_expires_at`` to the database's ``now()`` + ``LEASE_TTL_SECONDS``. The UPDATE matches only while the
pipeline is startable and nobody holds a live lease on it (a lease is claimable once it expired more than
``LEASE_GRACE_SECONDS`` ago), so of any number of racing placers exactly one wins, with a fresh epoch; the
others update 0 rows. PostgreSQL takes the row lock for the UPDATE and re-checks the WHERE clause on the
newest row version once the lock is granted (PostgreSQL docs, "Transaction Isolation", READ COMMITTED:
"the second updater ... will re-evaluate its WHERE clause"), which is what makes the claim exclusive.

A pipeline that fits nowhere is PENDING with a reason naming every host considered and why it was passed
over. An installation with no ``RunnerHost`` row at all (one machine, a worker without a runner name) is
placed as before #29: on this process's ``runner_name()``, without a lease (design note §3.17).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models, transaction
from django.db.models import Count, ExpressionWrapper, F, Q
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone

from access import audit
from pipelines.models import (
    DesiredState,
    Pipeline,
    PipelineRun,
    PipelineState,
    RunnerHost,
    RunnerHostState,
)
from pipelines.supervision.processes import run_dir, runner_name
from pipelines.supervision.status import announce_status

log = logging.getLogger("pipelines.supervision")

#: States from which a pipeline may be claimed for a start (RESTARTING only once its backoff has passed).
STARTABLE_STATES = (PipelineState.STOPPED, PipelineState.RESTARTING, PipelineState.PENDING)


def startable_q(now: datetime) -> Q:
    """The pipelines that may be started at ``now``: STOPPED or PENDING, or RESTARTING whose
    ``next_restart_at`` is unset or past. (Desired state and revision are checked by the claim itself.)"""
    return Q(state__in=(PipelineState.STOPPED, PipelineState.PENDING)) | Q(
        Q(next_restart_at__isnull=True) | Q(next_restart_at__lte=now), state=PipelineState.RESTARTING
    )


def db_now_minus(seconds: float) -> ExpressionWrapper[CombinedExpression]:
    """The database's ``now()`` minus ``seconds``, as a datetime expression (lease and heartbeat ages)."""
    return ExpressionWrapper(Now() - timedelta(seconds=seconds), output_field=models.DateTimeField())


def db_now_plus(seconds: float) -> ExpressionWrapper[CombinedExpression]:
    """The database's ``now()`` plus ``seconds``, as a datetime expression (a lease's expiry)."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=models.DateTimeField())


def lease_claimable_q() -> Q:
    """Pipelines whose lease may be taken now: none held, or expired more than ``LEASE_GRACE_SECONDS`` ago
    on the database's clock (the grace covers clock skew between runners and the database, and the margin a
    driver keeps before expiry: design note §3.8)."""
    return (
        Q(lease_host__isnull=True)
        | Q(lease_expires_at__isnull=True)
        | Q(lease_expires_at__lt=db_now_minus(settings.LEASE_GRACE_SECONDS))
    )


@dataclass(frozen=True)
class HostLoad:
    """One runner host as placement sees it: ``used`` slots (pipelines holding an unexpired lease on it,
    the one being placed left out), ``starting`` (those of them STARTING), its ``state`` (``RunnerHostState``), and whether the pipeline fits
    (``why_not`` empty) or why it was passed over (``"runner-a 4/4 slots"``, ``"runner-b lost"`` ...)."""

    host: RunnerHost
    state: str
    used: int
    starting: int
    why_not: str

    @property
    def free(self) -> int:
        """Free driver slots (never negative)."""
        return max(0, self.host.slots - self.used)


def _labels_missing(host_labels: object, wanted: object) -> list[str]:
    have = {str(label) for label in host_labels} if isinstance(host_labels, list) else set()
    asked = [str(label) for label in wanted] if isinstance(wanted, list) else []
    return [label for label in asked if label not in have]


def placeable_silence_seconds() -> int:
    """How long a runner host may have been silent (seconds since its heartbeat) and still be given a pipeline:
    ``HOST_LOST_SECONDS``, but never more than ``LEASE_TTL_SECONDS + LEASE_GRACE_SECONDS - HOST_TICK_SECONDS``.

    Why the cap: a lease becomes claimable TTL + grace after its last renewal, and a host renews its leases in
    the tick that beats, so a host whose lease just became claimable has been silent at least that long. With
    a lost-host threshold above it (20 s against a 15 s lease), the takeover would give the pipeline back to
    the dead host it just expired on, and the pipeline would wait a second lease for nothing (the cluster
    acceptance run of session 23 lost 19 s so)."""
    cap = settings.LEASE_TTL_SECONDS + settings.LEASE_GRACE_SECONDS - settings.HOST_TICK_SECONDS
    return max(1, min(settings.HOST_LOST_SECONDS, cap))


def _judge_host(
    host: RunnerHost, state: str, used: int, starting: int, labels: object, *, silent: bool = False
) -> HostLoad:
    """Whether one more driver fits on ``host`` (in ``state``, a ``RunnerHostState`` value): up, heard from
    within ``placeable_silence_seconds()`` (``silent`` says it was not), not draining, every wanted label
    among the host's, a free slot and ``DRIVER_MEMORY_MB`` of free memory (each lease is charged that much)."""
    per_driver = settings.DRIVER_MEMORY_MB
    why = ""
    if state == RunnerHostState.LOST:
        why = f"{host.name} lost"
    elif silent:
        why = f"{host.name} silent for over {placeable_silence_seconds()}s"
    elif state == RunnerHostState.DRAINING or host.draining:
        why = f"{host.name} draining"
    elif missing := _labels_missing(host.labels, labels):
        why = f"{host.name} lacks label{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    elif used >= host.slots:
        why = f"{host.name} {used}/{host.slots} slots"
    elif (used + 1) * per_driver > host.memory_mb:
        why = f"{host.name} memory {used * per_driver}/{host.memory_mb} MB, a driver needs {per_driver} MB"
    return HostLoad(host=host, state=state, used=used, starting=starting, why_not=why)


def lock_hosts() -> None:
    """Lock every ``RunnerHost`` row (``SELECT ... FOR UPDATE`` in primary-key order) until the surrounding
    transaction ends: what serializes placers (call inside ``transaction.atomic``)."""
    list(RunnerHost.objects.select_for_update().order_by("pk").values_list("pk", flat=True))


def host_loads(pipeline: Pipeline) -> list[HostLoad]:
    """Every runner host judged for ``pipeline``, fitting ones first in placement order: most free slots,
    then fewest STARTING pipelines (spreads JVM start-ups, which dominate CPU), then name. Counts are of
    unexpired leases on the database's clock, the pipeline's own lease left out."""
    live = Q(leases__lease_expires_at__gt=Now()) & ~Q(leases__pk=pipeline.pk)
    hosts = RunnerHost.objects.with_state().annotate(
        used=Count("leases", filter=live, distinct=True),
        starting=Count("leases", filter=live & Q(leases__state=PipelineState.STARTING), distinct=True),
        silent=models.ExpressionWrapper(
            Q(last_heartbeat_at__lt=db_now_minus(placeable_silence_seconds())),
            output_field=models.BooleanField(),
        ),
    )
    loads = [
        _judge_host(
            host,
            host.state,  # type: ignore[attr-defined]
            host.used,  # type: ignore[attr-defined]
            host.starting,  # type: ignore[attr-defined]
            pipeline.placement_labels,
            silent=bool(host.silent),  # type: ignore[attr-defined]
        )
        for host in hosts
    ]
    return sorted(loads, key=lambda load: (bool(load.why_not), -load.free, load.starting, load.host.name))


def pending_reason(loads: list[HostLoad], labels: object) -> str:
    """The ``state_reason`` of a pipeline that fits nowhere: every host considered and why it was passed
    over, e.g. ``no runner host with a free slot: runner-a 1/1 slots; runner-b lost``."""
    wanted = (
        f" and labels [{', '.join(str(label) for label in labels)}]"
        if isinstance(labels, list) and labels
        else ""
    )
    if not loads:
        return f"no runner host with a free slot{wanted}: none is registered"
    passed = (load.why_not or f"{load.host.name} filled up meanwhile" for load in loads)
    return f"no runner host with a free slot{wanted}: " + "; ".join(passed)


def _make_pending(pipeline: Pipeline, reason: str, now: datetime) -> None:
    """Mark the still-startable pipeline PENDING with ``reason``; announced only when the reason changed."""
    changed = (
        Pipeline.objects.filter(startable_q(now), pk=pipeline.pk, desired_state=DesiredState.RUNNING)
        .exclude(state=PipelineState.PENDING, state_reason=reason)
        .update(state=PipelineState.PENDING, state_reason=reason, next_restart_at=None)
    )
    if changed:
        log.info("pipeline %s is pending: %s", pipeline.name, reason)
        pipeline.state, pipeline.state_reason = PipelineState.PENDING, reason
        announce_status(pipeline)


def _claim(pipeline: Pipeline, now: datetime, host: RunnerHost | None) -> bool:
    """The conditional UPDATE that makes a start happen at most once: STARTING, and with ``host`` the lease
    (epoch + 1, expiry on the database's clock). True if this caller won."""
    claimable = (
        Pipeline.objects.filter(
            startable_q(now), pk=pipeline.pk, state=pipeline.state, desired_state=DesiredState.RUNNING
        )
        .exclude(current_revision=None)
        .filter(lease_claimable_q())
    )
    fields: dict[str, object] = {"state": PipelineState.STARTING, "state_reason": "", "next_restart_at": None}
    if host is not None:
        fields |= {
            "lease_host": host,
            "lease_epoch": F("lease_epoch") + 1,
            "lease_expires_at": db_now_plus(settings.LEASE_TTL_SECONDS),
        }
    return claimable.update(**fields) == 1


def _create_run(pipeline: Pipeline, previous: str, host_name: str, epoch: int | None) -> PipelineRun:
    """The STARTING run of a claim just won (same transaction), audited ``pipeline.run.start``."""
    revision = pipeline.current_revision
    assert revision is not None  # the claim excludes pipelines without one
    last = pipeline.runs.order_by("-started_at", "-id").first()
    # An automatic restart continues the series, also when it waited as PENDING in between.
    continues = previous == PipelineState.RESTARTING or (
        previous == PipelineState.PENDING and last is not None and last.state == PipelineState.RESTARTING
    )
    attempt = last.attempt + 1 if continues and last is not None else 1
    run_id = uuid.uuid4()
    run = PipelineRun.objects.create(
        pipeline=pipeline,
        revision=revision,
        run_id=run_id,
        attempt=attempt,
        state=PipelineState.STARTING,
        host=host_name,
        epoch=epoch,
        # The log lives on the owner, under its state folder: known here only when this process is it.
        log_path=str(run_dir(pipeline.name, run_id) / "driver.log") if host_name == runner_name() else "",
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
            "host": host_name,
            "epoch": epoch,
        },
    )
    return run


def place_and_claim(pipeline_id: int, now: datetime | None = None) -> PipelineRun | None:
    """Choose a runner host for the pipeline's next driver and take its lease; the new run (STARTING, its
    ``host`` and ``epoch`` set, no pid yet: the owner launches it), or None.

    None when the pipeline is not meant to run, is not startable (already starting or running, waiting out
    a restart backoff, HALTED/FAILED), another placer won the claim, a live lease of another run still holds
    it, or it fits on no host (then it is PENDING, ``state_reason`` naming each host and why it was passed
    over). ``now`` (default: the clock) decides only whether a restart backoff has passed; lease expiry is
    judged on the database's clock. With no ``RunnerHost`` row at all the run goes to this process's
    ``runner_name()`` without a lease (epoch None), as before runner hosts existed.

    Raises ``Pipeline.DoesNotExist`` for an unknown id.
    """
    now = now or timezone.now()
    pipeline = Pipeline.objects.select_related("current_revision").get(pk=pipeline_id)
    if (
        pipeline.desired_state != DesiredState.RUNNING
        or pipeline.current_revision_id is None
        or not Pipeline.objects.filter(startable_q(now), pk=pipeline.pk).exists()
    ):
        return None
    if not RunnerHost.objects.exists():
        with transaction.atomic():
            if not _claim(pipeline, now, None):
                return None
            run = _create_run(pipeline, pipeline.state, runner_name(), None)
        pipeline.state = PipelineState.STARTING
        announce_status(pipeline, run)
        return run
    with transaction.atomic():
        # Placers queue on the host rows (all of them, in primary-key order, so never a deadlock): each one
        # counts the leases the previous ones committed, so a burst of starts (a lost host's pipelines
        # placed at once) spreads over the hosts instead of piling onto the one that looked emptiest to all,
        # and a last slot is never given twice. Placement is rare and short: heartbeats wait milliseconds.
        lock_hosts()
        loads = host_loads(pipeline)
        chosen = loads[0] if loads and not loads[0].why_not else None
        if chosen is not None:
            previous = pipeline.state
            if not _claim(pipeline, now, chosen.host):
                return None
            # Our UPDATE holds the pipeline row's lock until commit: the epoch read back is the one we set.
            epoch = Pipeline.objects.values_list("lease_epoch", flat=True).get(pk=pipeline.pk)
            run = _create_run(pipeline, previous, chosen.host.name, epoch)
    if chosen is not None:
        pipeline.state, pipeline.state_reason = PipelineState.STARTING, ""
        announce_status(pipeline, run)
        log.info("pipeline %s placed on %s under epoch %s", pipeline.name, chosen.host.name, epoch)
        return run
    _make_pending(pipeline, pending_reason(loads, pipeline.placement_labels), now)
    return None
