"""From an event to notifications: which channels hear it, de-duplication, and the digest rate limit.

Per channel and event type, the first event is sent at once and opens a window of
``settings.NOTIFY_DIGEST_SECONDS``; events of that type arriving while it is open are *folded* (kept as
``FOLDED`` notification rows, counted in the ``DigestWindow``) and sent as one digest when it closes
(``flush_digest``, queued for the window's end, with the beat's ``flush_due_digests`` as a safety net). The
window row is locked (``select_for_update``) while it is read and changed, so any number of workers and
ingesters fold into one window and send one digest. The unique (channel, event key) of ``Notification``
makes a repeated event a no-op.

One exception: a channel that keeps incidents (PagerDuty) gets every event of an incident pair
(``incidents.PAIRED``: an alert firing and its resolution) on its own, never folded, and without touching
the window: a resolution folded into a digest could not close its incident, which would then stay open for
good. Alerts are few (three rules per pipeline, evaluated by the beat), so this cannot become a storm.

Deliveries are queued by task name after commit (``enqueue_delivery``), so this module and the tasks never
import each other; tests replace ``enqueue_delivery`` and ``enqueue_flush`` to run them in process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from notifications import incidents
from notifications.models import (
    Channel,
    ChannelKind,
    DigestWindow,
    EventType,
    Notification,
    NotificationState,
)

log = logging.getLogger(__name__)

DELIVER_TASK = "notifications.deliver"
FLUSH_TASK = "notifications.flush_digest"
#: Events a digest lists by name (the rest are counted).
DIGEST_EXAMPLES = 5
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Event:
    """One thing that happened to a team: ``type`` an ``EventType`` value; ``key`` names the occurrence
    (the same key is never sent twice to a channel); ``title`` one line; ``text`` a few lines; ``data``
    small JSON facts for webhooks (no secrets, no payloads)."""

    type: str
    key: str
    team_id: int
    title: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)


def enqueue_delivery(notification_id: int) -> None:
    """Queue the first delivery attempt of a notification once the current transaction commits."""
    transaction.on_commit(lambda: current_app.send_task(DELIVER_TASK, args=(notification_id,)))


def enqueue_flush(channel_id: int, event_type: str, countdown: float) -> None:
    """Queue the flush of a digest window for when it closes, once the current transaction commits."""
    transaction.on_commit(
        lambda: current_app.send_task(FLUSH_TASK, args=(channel_id, event_type), countdown=countdown)
    )


def subscribers(event: Event) -> list[Channel]:
    """The enabled channels of the event's team subscribed to its type (filtered here, not in SQL: JSON
    containment differs between PostgreSQL and SQLite, and a team has a handful of channels)."""
    channels = Channel.objects.filter(team_id=event.team_id, enabled=True)
    return [channel for channel in channels if event.type in channel.events]


def publish(event: Event, *, now: datetime | None = None) -> list[Notification]:
    """Turn ``event`` into a notification for each subscribed channel: sent at once, folded into the open
    digest window, or nothing when the channel already has this event key. Returns the notifications
    created (sent or folded). Queues their delivery (and a window's flush) after commit."""
    created = []
    for channel in subscribers(event):
        notification = _publish_to(channel, event, now=now or timezone.now())
        if notification is not None:
            created.append(notification)
    return created


def never_folded(channel: Channel, event_type: str) -> bool:
    """Whether ``event_type`` is always sent on its own to ``channel``: an incident pair's event for a
    PagerDuty channel (see the module's docstring)."""
    return channel.kind == ChannelKind.PAGERDUTY and event_type in incidents.PAIRED


def _publish_to(channel: Channel, event: Event, *, now: datetime) -> Notification | None:
    if never_folded(channel, event.type):
        return _publish_alone(channel, event)
    with transaction.atomic():
        window = _locked_window(channel, event.type)
        folding = now < window.closes_at
        try:
            with transaction.atomic():  # a savepoint: a duplicate leaves the window's lock in place
                notification = Notification.objects.create(
                    channel=channel,
                    event_type=event.type,
                    event_key=event.key[:255],
                    title=event.title[:500],
                    text=event.text,
                    data=event.data,
                    state=NotificationState.FOLDED if folding else NotificationState.PENDING,
                )
        except IntegrityError:
            log.info("event %s already notified to channel %s", event.key, channel.pk)
            return None
        if folding:
            window.folded += 1
            if len(window.examples) < DIGEST_EXAMPLES:
                window.examples = [*window.examples, {"key": event.key, "title": event.title}]
            window.save(update_fields=["folded", "examples"])
            return notification
        # The window has closed: what it still holds goes out first, then this event opens the next one.
        _flush_locked(window)
        digest = timedelta(seconds=settings.NOTIFY_DIGEST_SECONDS)
        window.opened_at, window.closes_at = now, now + digest
        window.save(update_fields=["opened_at", "closes_at"])
        enqueue_delivery(notification.pk)
        enqueue_flush(channel.pk, event.type, digest.total_seconds() + 1)
        return notification


def _publish_alone(channel: Channel, event: Event) -> Notification | None:
    """A PENDING notification of ``event`` for ``channel``, its delivery queued; None for a duplicate."""
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                channel=channel,
                event_type=event.type,
                event_key=event.key[:255],
                title=event.title[:500],
                text=event.text,
                data=event.data,
            )
            enqueue_delivery(notification.pk)
    except IntegrityError:
        log.info("event %s already notified to channel %s", event.key, channel.pk)
        return None
    return notification


def _locked_window(channel: Channel, event_type: str) -> DigestWindow:
    """The channel's window for ``event_type``, locked until the transaction ends (made closed if new)."""
    DigestWindow.objects.get_or_create(
        channel=channel, event_type=event_type, defaults={"opened_at": _EPOCH, "closes_at": _EPOCH}
    )
    return DigestWindow.objects.select_for_update().get(channel=channel, event_type=event_type)


def _flush_locked(window: DigestWindow) -> Notification | None:
    """Send what a (locked) window folded as one digest notification, and empty it. None if it folded
    nothing."""
    if not window.folded:
        return None
    label = EventType(window.event_type).label if window.event_type in EventType.values else window.event_type
    lines = [f"- {example['title']}" for example in window.examples]
    more = window.folded - len(window.examples)
    if more > 0:
        lines.append(f"- and {more} more")
    digest = Notification.objects.create(
        channel_id=window.channel_id,
        event_type=window.event_type,
        event_key=f"digest:{window.event_type}:{window.opened_at.isoformat()}",
        title=f"{window.folded} more: {label}",
        text="\n".join(lines),
        data={"count": window.folded, "examples": window.examples, "since": window.opened_at.isoformat()},
        is_digest=True,
        event_count=window.folded,
    )
    window.folded, window.examples = 0, []
    window.save(update_fields=["folded", "examples"])
    enqueue_delivery(digest.pk)
    return digest


def flush_digest(*, channel_id: int, event_type: str, now: datetime | None = None) -> Notification | None:
    """Send the window's digest if it has closed and folded anything; None otherwise (still open, empty,
    or another worker sent it first)."""
    now = now or timezone.now()
    with transaction.atomic():
        window = (
            DigestWindow.objects.select_for_update()
            .filter(channel_id=channel_id, event_type=event_type, closes_at__lte=now)
            .first()
        )
        return _flush_locked(window) if window is not None else None


def flush_due_digests(*, now: datetime | None = None) -> list[int]:
    """Flush every closed window that still holds folded events; returns the digest notification ids."""
    now = now or timezone.now()
    due = DigestWindow.objects.filter(closes_at__lte=now, folded__gt=0).values_list(
        "channel_id", "event_type"
    )
    sent = []
    for channel_id, event_type in list(due):
        digest = flush_digest(channel_id=channel_id, event_type=event_type, now=now)
        if digest is not None:
            sent.append(digest.pk)
    return sent
