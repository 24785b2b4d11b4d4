"""Celery tasks of the DLQ console: bulk actions and the housekeeping the beat runs. Thin: each calls
``dlq.services``, which enqueues ``dlq.run_bulk`` by name (``services.bulk.RUN_BULK_TASK``) and never
imports this module. A bulk task whose worker dies is redelivered (acks_late) and, failing that, resumed by
``resume_stale_bulks`` once its heartbeat is stale; the claim in ``services.run_bulk`` makes both safe."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from dlq import counts, services
from dlq.models import OffsetSkipState
from dlq.services import redrive
from dlq.services.bulk import RUN_BULK_TASK
from dlq.services.fix_forward import RUN_FIX_FORWARD_TASK
from dlq.services.offset_skips import APPLY_TASK as APPLY_OFFSET_SKIP_TASK
from dlq.services.offset_skips import WAIT_SECONDS as OFFSET_SKIP_WAIT_SECONDS
from dlq.services.offset_skips import apply_skip as apply_offset_skip_step
from dlq.services.redrive import TICK_TASK


@shared_task(name=RUN_BULK_TASK, acks_late=True)
def run_bulk(bulk_id: int) -> dict[str, Any]:
    """Run (or take over) one bulk action until it completes, is paused or cancelled."""
    bulk = services.run_bulk(bulk_id=bulk_id)
    return {"id": bulk.pk, "state": bulk.state, **bulk.progress()}


@shared_task(name=RUN_FIX_FORWARD_TASK)
def run_fix_forward(scan_id: int) -> dict[str, Any]:
    """Run one fix-forward scan: which parked dead letters the pipeline's live revision now passes."""
    scan = services.run_fix_forward_scan(scan_id=scan_id)
    return {"id": scan.pk, "state": scan.state, "checked": scan.checked, "candidates": scan.candidates}


@shared_task(name=APPLY_OFFSET_SKIP_TASK, acks_late=True)
def apply_offset_skip(skip_id: int) -> dict[str, Any]:
    """One step of an approved offset skip; while its pipeline is still stopping, the next step is queued
    ``WAIT_SECONDS`` later (a re-delivered step is safe: ``apply_skip`` claims and records progress)."""
    skip = apply_offset_skip_step(skip_id=skip_id)
    if skip.state == OffsetSkipState.APPLYING:
        apply_offset_skip.apply_async(args=(skip_id,), countdown=OFFSET_SKIP_WAIT_SECONDS)
    return {"id": skip.pk, "state": skip.state, "copied": skip.copied}


@shared_task(name="dlq.resume_stale_bulks")
def resume_stale_bulks() -> list[int]:
    """Queue again every RUNNING bulk action whose worker stopped beating."""
    ids = services.stale_bulk_ids()
    for bulk_id in ids:
        run_bulk.delay(bulk_id)
    return ids


@shared_task(name="dlq.resolve_in_doubt")
def resolve_in_doubt() -> services.SettledReplays:
    """Settle single replays left PENDING by a crashed web or worker process."""
    return services.resolve_in_doubt()


@shared_task(name="dlq.apply_retention")
def apply_retention() -> dict[str, Any]:
    """Purge closed dead letters past their retention (hourly)."""
    run = services.apply_retention()
    return {"run": run.pk, "purged": run.purged, "total": run.total}


@shared_task(name="dlq.release_resolved_claims")
def release_resolved_claims() -> int:
    """Release the claims on dead letters no longer parked and on groups with none parked."""
    return services.release_resolved()


@shared_task(name="dlq.compact_counts")
def compact_counts() -> int:
    """Fold the status-count deltas the triggers wrote into one row per key (every minute)."""
    return counts.compact()


@shared_task(name=TICK_TASK)
def redrive_tick() -> dict[str, list[int]]:
    """Start the redrive policies' due runs and pause those whose replays fail again too often."""
    done = redrive.tick()
    return {"started": list(done.started), "paused": list(done.paused)}
