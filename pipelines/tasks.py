"""Celery tasks of the pipelines app: thin wrappers over ``supervision``, ``progress`` and ``alerts``.

Tasks take ids, never model instances. Start/stop/restart are safe to run twice (the services claim with
conditional updates), so they are retried on broker and database hiccups; the beat tasks are not retried:
the next tick does the same work.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import OperationalError

from pipelines import alerts, progress, supervision

_RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError, ConnectionError),
    "retry_backoff": True,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(name="pipelines.start", **_RETRY)
def start_pipeline_task(pipeline_id: int) -> str | None:
    """Launch the pipeline's driver unless it is running or being started; the new run id, or None."""
    run = supervision.start_pipeline(pipeline_id=pipeline_id)
    return str(run.run_id) if run else None


@shared_task(name="pipelines.stop", **_RETRY)
def stop_pipeline_task(pipeline_id: int) -> str | None:
    """Ask the pipeline's driver to stop gracefully; the stopping run id, or None if none was active."""
    run = supervision.stop_pipeline(pipeline_id=pipeline_id)
    return str(run.run_id) if run else None


@shared_task(name="pipelines.restart", **_RETRY)
def restart_pipeline_task(pipeline_id: int) -> str | None:
    """Stop the driver gracefully so reconcile starts the current revision again (or start it now)."""
    run = supervision.restart_pipeline(pipeline_id=pipeline_id)
    return str(run.run_id) if run else None


@shared_task(name="pipelines.launch_run", **_RETRY)
def launch_run_task(run_id: str) -> bool:
    """On the owner runner (sent to its queue, ``host_queue``): launch a claimed run's driver. False when
    refused (not this runner's run, no longer STARTING, already launched, or its epoch superseded)."""
    return supervision.launch_claimed_run(run_id) is not None


@shared_task(name="pipelines.signal_stop", **_RETRY)
def signal_stop_task(run_id: str) -> bool:
    """On the owner runner (sent to its queue): SIGTERM a STOPPING run's driver; False when nothing was
    signalled (not this runner's run, gone, or already signalled)."""
    return supervision.signal_stop(run_id)


@shared_task(name="pipelines.reconcile", ignore_result=True)
def reconcile_task() -> dict[str, list[str]]:
    """One supervision tick (beat, every ``RECONCILE_SECONDS``)."""
    report = supervision.reconcile()
    return {"started": report.started, "ended": report.ended, "stopping": report.stopping}


@shared_task(name="pipelines.ingest_progress", ignore_result=True)
def ingest_progress_task() -> int:
    """Store the drivers' new progress events as metric samples; the number of events read."""
    return progress.ingest().events


@shared_task(name="pipelines.evaluate_alerts", ignore_result=True)
def evaluate_alerts_task() -> int:
    """Evaluate the alert rules for every pipeline; the number of alerts firing."""
    return len(alerts.evaluate())
