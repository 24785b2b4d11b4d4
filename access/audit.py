"""The append-only, hash-chained audit log: ``record`` one event per mutation, ``verify_chain`` to prove no
event was edited or removed.

Each event's hash is HMAC-SHA256, under ``settings.AUDIT_KEY``, of the canonical JSON (sorted keys, no spaces)
of its fields and the previous event's hash; the first event's predecessor is 64 zeros. The key never enters
the database, so someone who can write the database cannot re-hash an event they edited. Events written
before the key existed keep their plain SHA-256 (``scheme`` sha256): they verify as legacy, and are protected
by the keyed events after them (whose HMAC covers the link to them). A legacy event after a keyed one is a
rewrite. Call ``record`` inside the mutation's own transaction so the change and its event commit together.

A chain alone cannot show that its newest events were cut off, nor that all of it was re-hashed by someone who
has the key. So after each commit every event's sequence number and hash are also appended to a Kafka topic and
the newest to Redis (``access.anchor``); ``verify_chain`` reads them back and names the first event that is
missing or differs. When an anchor cannot be read, or has not seen the newest events yet, the answer is
"unverified", never ok.

Who may read one object's trail is declared by the app that owns the object: each app registers its
``target_type`` names with ``register_target`` in its ``AppConfig.ready()``, and ``target_visible`` answers
from that registry, so this module never imports the apps above it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from access import anchor, bulk_insert
from access.models import AuditEvent, HashScheme
from access.permissions import AnyUser, visible_teams

GENESIS = "0" * 64

#: The PostgreSQL advisory lock (``pg_advisory_xact_lock``) appends to the chain queue on: a constant
#: 64-bit key of our own ("sfaudit" in ASCII), held until the appending transaction ends.
_APPEND_LOCK = 0x7366617564697400


def _queue_for_the_tail() -> None:
    """Wait, inside the current transaction, until no other transaction is appending to the chain.

    On PostgreSQL two appends would otherwise both read the same tail (READ COMMITTED) and one would fail on
    the unique sequence at commit time; under a burst of writers (twenty operators clicking at once) the
    retries ran out and a mutation failed. The transaction-level advisory lock makes them queue instead.
    SQLite needs nothing: its writers already hold the database lock (IMMEDIATE transactions)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_APPEND_LOCK])


def digest(value: Any) -> str:
    """SHA-256 hex of the canonical JSON of ``value`` (for before/after digests of a changed object)."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _key() -> bytes:
    return str(settings.AUDIT_KEY).encode()


@lru_cache(maxsize=8)
def key_id(key: bytes) -> str:
    """A fingerprint of the audit key (16 hex digits), stored with each event and naming the chain in its
    anchors; it does not reveal the key."""
    return hmac.new(key, b"streamforge audit key id", hashlib.sha256).hexdigest()[:16]


def _event_hash(event: AuditEvent, key: bytes) -> str:
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
    if event.scheme == HashScheme.LEGACY:  # exactly what was hashed before the key existed
        return hashlib.sha256(_canonical(body).encode()).hexdigest()
    body.update(scheme=event.scheme, key_id=event.key_id)
    return hmac.new(key, _canonical(body).encode(), hashlib.sha256).hexdigest()


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
    key = _key()
    kid = key_id(key)
    for _ in range(5):
        try:
            with transaction.atomic():
                _queue_for_the_tail()
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
                        scheme=HashScheme.HMAC,
                        key_id=kid,
                    )
                    event.hash = prev_hash = _event_hash(event, key)
                    events.append(event)
                bulk_insert.insert(AuditEvent, events)
                points = [(event.sequence, event.hash) for event in events]
                transaction.on_commit(lambda: anchor.publish(kid, points))  # noqa: B023  # returns next
                return events
        except IntegrityError:
            continue
    raise IntegrityError("could not append to the audit chain: other writers kept appending first")


@dataclass(frozen=True)
class ChainReport:
    """The verdict on the audit log. ``status``:

    - ``ok``: every event's hash matches its content under the audit key and links to its predecessor, and
      both anchors were read and agree with the log up to its newest event;
    - ``broken``: ``broken_at`` is the first event (by sequence number) that was edited, removed or re-hashed,
      and ``problem`` says how;
    - ``unverified``: nothing found wrong, but an anchor could not be read or has not seen the newest events,
      so a rewrite or a cut-off end could go unnoticed; ``problem`` says why.

    ``ok`` is ``status == "ok"``. ``legacy_events`` counts the events hashed before the audit key existed
    (unkeyed SHA-256). ``anchor`` is ``checked``, ``none`` (nothing anchored and nothing to anchor),
    ``behind`` or ``unavailable``; ``anchored`` is the newest sequence number the Kafka anchor holds.
    """

    ok: bool
    events: int
    broken_at: int | None = None
    problem: str = ""
    anchor: str = "checked"
    status: Literal["ok", "broken", "unverified"] = "ok"
    legacy_events: int = 0
    anchored: int | None = None


def _broken(events: int, at: int, problem: str, legacy: int, anchored: int | None) -> ChainReport:
    return ChainReport(False, events, at, problem, "checked", "broken", legacy, anchored)


def verify_chain(*, batch_size: int = 2000) -> ChainReport:
    """Walk the whole log in sequence order, recomputing every hash (O(n), streamed in batches), and compare it
    with both anchors (the Kafka one read from its start: O(anchored events) time and memory)."""
    key = _key()
    kid = key_id(key)
    unavailable: list[str] = []
    try:
        kafka: dict[int, str] = anchor.read_kafka(kid)
    except anchor.AnchorUnavailable as exc:
        kafka, unavailable = {}, [str(exc)]
    try:
        redis_point = anchor.read_redis(kid)
    except anchor.AnchorUnavailable as exc:
        redis_point = None
        unavailable.append(str(exc))
    anchored = max(kafka, default=None)

    expected_prev = GENESIS
    count = legacy = 0
    keyed_seen = False
    for event in AuditEvent.objects.order_by("sequence").iterator(chunk_size=batch_size):
        count += 1
        if event.sequence != count:
            return _broken(count, count, f"event #{count} is missing", legacy, anchored)
        if event.prev_hash != expected_prev:
            return _broken(count, count, "does not link to the event before it", legacy, anchored)
        if event.scheme == HashScheme.LEGACY:
            if keyed_seen:
                problem = "hashed without the audit key after keyed events (re-hashed: the log was rewritten)"
                return _broken(count, count, problem, legacy, anchored)
            legacy += 1
        elif event.scheme != HashScheme.HMAC:
            return _broken(count, count, f"unknown hash scheme {event.scheme!r}", legacy, anchored)
        elif event.key_id != kid:
            problem = f"hashed with another audit key (key id {event.key_id}; the current key's is {kid})"
            return _broken(count, count, problem, legacy, anchored)
        else:
            keyed_seen = True
        if _event_hash(event, key) != event.hash:
            return _broken(count, count, "content does not match its hash (edited)", legacy, anchored)
        if count in kafka and kafka[count] != event.hash:
            problem = "differs from its Kafka anchor (the log was rewritten)"
            return _broken(count, count, problem, legacy, anchored)
        if redis_point is not None and redis_point[0] == count and redis_point[1] != event.hash:
            problem = "differs from its Redis anchor (the log was rewritten)"
            return _broken(count, count, problem, legacy, anchored)
        expected_prev = event.hash

    for name, newest in (("Kafka", anchored), ("Redis", redis_point[0] if redis_point else None)):
        if newest is not None and newest > count:
            problem = f"events #{count + 1} to #{newest} were removed (the {name} anchor saw #{newest})"
            return _broken(count, count + 1, problem, legacy, anchored)
    if unavailable:
        return ChainReport(
            False, count, None, "; ".join(unavailable), "unavailable", "unverified", legacy, anchored
        )
    if count > (anchored or 0):
        first = (anchored or 0) + 1
        problem = (
            f"the Kafka anchor has not seen events #{first} to #{count} (it was unreachable when they were "
            "written); they verify once a later event is anchored"
        )
        return ChainReport(False, count, None, problem, "behind", "unverified", legacy, anchored)
    return ChainReport(
        True, count, anchor="checked" if count else "none", legacy_events=legacy, anchored=anchored
    )


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
