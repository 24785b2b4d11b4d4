"""Celery tasks of notifications, thin over ``delivery`` and ``dispatch``. A failed delivery is retried by
Celery with the countdown ``delivery.attempt`` computed (exponential, with jitter) and stored on the row,
so the UI shows when the next try is; ``attempt`` ignores a notification already settled, so a redelivered
task (acks_late) does nothing twice."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from notifications import delivery, dispatch


@shared_task(name=dispatch.DELIVER_TASK, bind=True, acks_late=True, max_retries=None)
def deliver(self: Task[Any, Any], notification_id: int) -> dict[str, Any]:
    """Try to deliver one notification; schedules the next try on failure until it is SENT or FAILED."""
    result = delivery.attempt(notification_id)
    if result.retry_in is not None:
        raise self.retry(countdown=result.retry_in)
    return {"id": notification_id, "ok": bool(result.row and result.row.ok)}


@shared_task(name=dispatch.FLUSH_TASK, acks_late=True)
def flush_digest(channel_id: int, event_type: str) -> int | None:
    """Send a digest window's folded events once it has closed."""
    digest = dispatch.flush_digest(channel_id=channel_id, event_type=event_type)
    return digest.pk if digest else None


@shared_task(name="notifications.flush_due_digests")
def flush_due_digests() -> list[int]:
    """Safety net run by the beat: flush every closed window a lost flush task left behind."""
    return dispatch.flush_due_digests()
