"""The append-only, hash-chained audit log: ``record`` one event per mutation, ``verify_chain`` to prove no
event was edited or removed.

Each event's hash is SHA-256 over the canonical JSON (sorted keys, no spaces) of its fields and the previous
event's hash; the first event's predecessor is 64 zeros. Call ``record`` inside the mutation's own
transaction so the change and its audit event commit or roll back together.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.utils import timezone

from streamforge_web.models import AuditEvent

GENESIS = "0" * 64


def digest(value: Any) -> str:
    """SHA-256 hex of the canonical JSON of ``value`` (for before/after digests of a changed object)."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _event_hash(event: AuditEvent) -> str:
    body = {
        "sequence": event.sequence,
        "created_at": event.created_at.isoformat(),
        "actor_id": event.actor_id,
        "actor_name": event.actor_name,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "reason": event.reason,
        "before_digest": event.before_digest,
        "after_digest": event.after_digest,
        "details": event.details,
        "request_id": event.request_id,
        "prev_hash": event.prev_hash,
    }
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


def record(
    *,
    actor: User | AnonymousUser | None,
    action: str,
    target_type: str,
    target_id: str | int,
    reason: str = "",
    before: Any = None,
    after: Any = None,
    details: dict[str, Any] | None = None,
    request_id: str = "",
) -> AuditEvent:
    """Append one event. ``actor`` None means the system (a worker, the supervisor). ``before``/``after``
    are stored as digests only; ``details`` as given (keep it small and free of secrets).

    Retries a few times when another writer appended first (unique ``prev_hash``); raises IntegrityError
    if it keeps losing that race.
    """
    user = actor if actor is not None and actor.is_authenticated else None
    for _ in range(5):
        try:
            with transaction.atomic():
                tail = AuditEvent.objects.order_by("-sequence").only("sequence", "hash").first()
                event = AuditEvent(
                    sequence=(tail.sequence + 1) if tail else 1,
                    created_at=timezone.now(),
                    actor=user,
                    actor_name=user.get_username() if user is not None else "system",
                    action=action,
                    target_type=target_type,
                    target_id=str(target_id),
                    reason=reason,
                    before_digest=digest(before) if before is not None else "",
                    after_digest=digest(after) if after is not None else "",
                    details=details or {},
                    request_id=request_id,
                    prev_hash=tail.hash if tail else GENESIS,
                )
                event.hash = _event_hash(event)
                event.save()
                return event
        except IntegrityError:
            continue
    raise IntegrityError("could not append to the audit chain: other writers kept appending first")


@dataclass(frozen=True)
class ChainReport:
    """``ok`` when every event's hash matches its content and links to its predecessor; else the first
    broken event's sequence number and what is wrong with it."""

    ok: bool
    events: int
    broken_at: int | None = None
    problem: str = ""


def verify_chain(*, batch_size: int = 2000) -> ChainReport:
    """Walk the whole log in sequence order, recomputing every hash (O(n), streamed in batches)."""
    expected_prev = GENESIS
    expected_sequence = 1
    count = 0
    for event in AuditEvent.objects.order_by("sequence").iterator(chunk_size=batch_size):
        count += 1
        if event.sequence != expected_sequence:
            return ChainReport(False, count, expected_sequence, f"event #{expected_sequence} is missing")
        if event.prev_hash != expected_prev:
            return ChainReport(False, count, event.sequence, "does not link to the event before it")
        if _event_hash(event) != event.hash:
            return ChainReport(False, count, event.sequence, "content does not match its hash (edited)")
        expected_prev = event.hash
        expected_sequence += 1
    return ChainReport(True, count)
