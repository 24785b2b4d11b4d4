"""The append-only, hash-chained audit log: ``record`` one event per mutation, ``verify_chain`` to prove no
event was edited or removed.

Each event's hash is SHA-256 over the canonical JSON (sorted keys, no spaces) of its fields and the previous
event's hash; the first event's predecessor is 64 zeros. Call ``record`` inside the mutation's own
transaction so the change and its audit event commit or roll back together.

A chain alone cannot show that its newest events were cut off (the rest still links up). So after each
commit the newest sequence number and hash are also written to Redis, outside the database (the anchor);
``verify_chain`` then reports a log that ends before its anchor, or whose anchored event changed.

Who may read one object's trail is declared by the app that owns the object: each app registers its
``target_type`` names with ``register_target`` in its ``AppConfig.ready()``, and ``target_visible`` answers
from that registry, so this module never imports the apps above it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import Model
from django.utils import timezone

from access.models import AuditEvent
from access.permissions import AnyUser, visible_teams
from streamforge_core import redis_client

GENESIS = "0" * 64
_ANCHOR_PREFIX = "streamforge:audit:anchor:"
log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Entry:
    """One event to append (see ``record`` for the fields)."""

    action: str
    target_type: str
    target_id: str | int
    reason: str = ""
    before: Any = None
    after: Any = None
    details: dict[str, Any] | None = None
    request_id: str = ""


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
    entry = Entry(action, target_type, target_id, reason, before, after, details, request_id)
    return record_many(actor=actor, entries=[entry])[0]


def record_many(*, actor: User | AnonymousUser | None, entries: list[Entry]) -> list[AuditEvent]:
    """Append several events by one actor, chained in order, with one read of the tail and one insert:
    what a bulk action uses to keep one event per changed object at thousands of objects a second.
    Same guarantees and errors as ``record``."""
    if not entries:
        return []
    user = actor if actor is not None and actor.is_authenticated else None
    name = user.get_username() if user is not None else "system"
    for _ in range(5):
        try:
            with transaction.atomic():
                tail = AuditEvent.objects.order_by("-sequence").only("sequence", "hash").first()
                sequence, prev_hash = (tail.sequence, tail.hash) if tail else (0, GENESIS)
                now = timezone.now()
                events = []
                for entry in entries:
                    sequence += 1
                    event = AuditEvent(
                        sequence=sequence,
                        created_at=now,
                        actor=user,
                        actor_name=name,
                        action=entry.action,
                        target_type=entry.target_type,
                        target_id=str(entry.target_id),
                        reason=entry.reason,
                        before_digest=digest(entry.before) if entry.before is not None else "",
                        after_digest=digest(entry.after) if entry.after is not None else "",
                        details=entry.details or {},
                        request_id=entry.request_id,
                        prev_hash=prev_hash,
                    )
                    event.hash = prev_hash = _event_hash(event)
                    events.append(event)
                AuditEvent.objects.bulk_create(events)
                genesis = events[0].hash if events[0].sequence == 1 else _genesis_hash()
                last = events[-1]
                transaction.on_commit(lambda: _anchor(genesis, last.sequence, last.hash))  # noqa: B023  # returns next
                return events
        except IntegrityError:
            continue
    raise IntegrityError("could not append to the audit chain: other writers kept appending first")


def _genesis_hash() -> str:
    return AuditEvent.objects.filter(sequence=1).values_list("hash", flat=True).first() or GENESIS


def _redis() -> redis.Redis:
    """One client (and connection pool) per process and Redis URL: making a client costs ~2 ms, which a
    bulk action appending thousands of events would pay per event."""
    return redis_client.shared(settings.REDIS_URL, timeout=2)


def _anchor(genesis: str, sequence: int, event_hash: str) -> None:
    """Remember the newest event outside the database. The key names the chain by its first event, so
    separate databases (or a test's fresh one) never share an anchor."""
    key = _ANCHOR_PREFIX + genesis
    try:
        with _redis().pipeline() as pipe:
            pipe.zadd(key, {f"{sequence}:{event_hash}": sequence})
            pipe.zremrangebyrank(key, 0, -6)  # the newest five are plenty
            pipe.execute()
    except redis.RedisError as exc:  # the database stays the record; verify says the anchor is behind
        log.warning("could not anchor audit event #%s: %s", sequence, exc)


def _anchored(genesis: str) -> tuple[int, str] | None:
    """The newest anchored (sequence, hash), None when nothing was anchored; raises RedisError."""
    newest: list[bytes] = _redis().zrevrange(_ANCHOR_PREFIX + genesis, 0, 0)  # type: ignore[assignment]
    if not newest:
        return None
    sequence, _, event_hash = newest[0].decode().partition(":")
    return int(sequence), event_hash


@dataclass(frozen=True)
class ChainReport:
    """``ok`` when every event's hash matches its content and links to its predecessor, and the log reaches
    its Redis anchor; else the first broken event's sequence number and what is wrong with it.
    ``anchor`` is ``checked``, ``none`` (nothing anchored yet) or ``unavailable`` (Redis down)."""

    ok: bool
    events: int
    broken_at: int | None = None
    problem: str = ""
    anchor: str = "checked"


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
    if count == 0:
        return ChainReport(True, 0, anchor="none")
    try:
        anchored = _anchored(_genesis_hash())
    except redis.RedisError:
        return ChainReport(True, count, anchor="unavailable")
    if anchored is None:
        return ChainReport(True, count, anchor="none")
    sequence, anchored_hash = anchored
    if sequence > count:
        return ChainReport(
            False,
            count,
            count + 1,
            f"events #{count + 1} to #{sequence} were removed (the anchor saw #{sequence})",
        )
    stored = AuditEvent.objects.filter(sequence=sequence).values_list("hash", flat=True).first()
    if stored != anchored_hash:
        return ChainReport(False, count, sequence, "differs from the anchored hash (the log was rewritten)")
    return ChainReport(True, count)


# ------------------------------------------------------------------------------------------ audit targets

#: Whether ``user`` may read the audit trail of the object whose ``target_id`` (as recorded) is given.
TargetVisibility = Callable[[AnyUser, str], bool]

_target_visibility: dict[str, TargetVisibility] = {}


def register_target(target_type: str, *, visible: TargetVisibility) -> None:
    """Declare that events name objects by ``target_type`` (``"dead_letter"``, ``"pipeline"`` ...) and who
    may read the trail of one of them. Called by the owning app in its ``AppConfig.ready()``; registering a
    type again replaces its rule (``ready()`` may run more than once in a process)."""
    _target_visibility[target_type] = visible


def target_visible(user: AnyUser, target_type: str, target_id: str) -> bool:
    """Whether a non-admin may read the trail of this object (it belongs to one of their teams). False for
    a target type no app registered."""
    visible = _target_visibility.get(target_type)
    return visible is not None and visible(user, target_id)


def owned_by_visible_team(model: type[Model], *, field: str = "pk") -> TargetVisibility:
    """The usual rule: the ``model`` row whose ``field`` equals the target id belongs to one of the user's
    visible teams (the model has a ``team`` foreign key). For ``field="pk"`` an id that is not all digits is
    never visible (and costs no query)."""

    def visible(user: AnyUser, target_id: str) -> bool:
        if field == "pk" and not target_id.isdigit():
            return False
        teams = visible_teams(user)
        return bool(model._default_manager.filter(**{field: target_id, "team__in": teams}).exists())

    return visible
