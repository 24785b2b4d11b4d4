"""DLQ console operations: inspect, fix the payload, replay, skip, delete with approval, bulk actions, runbooks.

Each mutation is one function with keyword-only arguments: it checks the caller's role in the dead
letter's team, changes state through a guarded transition (a conditional UPDATE, so a double click or two
workers cannot do a thing twice) and records one audit event per changed dead letter in the same
transaction. Views, API viewsets, tasks and management commands call these and nothing else.

Replay protocol (at most one replayed record per claim, and no outcome left unknown):
1. claim: PARKED -> REPLAYING and a PENDING ``Replay`` row, committed together;
2. produce with an idempotent producer (acks=all) and wait for the broker's acknowledgement;
3. record: REPLAYED + PRODUCED with the partition/offset, or back to PARKED + FAILED.
A crash between 1 and 3 leaves the replay PENDING; ``resolve_in_doubt`` settles it later by reading the
target topic for the replay id (after the producer's delivery timeout, when no retry can still land).
"""

from __future__ import annotations

import base64
import difflib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from access import audit
from access.models import Role, Team
from access.permissions import AnyUser, is_admin, require_role, role_in, visible_teams
from dlq import broadcast, headers
from dlq.filters import MessageFilter
from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    BulkKind,
    BulkState,
    DeadLetter,
    DlqTopic,
    FailureGroup,
    PayloadRevision,
    Replay,
    ReplayState,
    Runbook,
    RunbookAction,
    Status,
)
from pipelines.dsl import Message
from pipelines.models import Pipeline
from pipelines.services import dry_run
from pipelines.spec import SpecError, parse_spec
from streamforge_core import contract as c
from streamforge_core.kafka import Record

log = logging.getLogger(__name__)

MASK = "•••"
BULK_RUNNABLE = (BulkState.QUEUED, BulkState.RUNNING)


# ----------------------------------------------------------------------------------------------- errors


class InvalidRequest(ValueError):
    """Bad input for an operation (HTTP 400); ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class Conflict(Exception):
    """The dead letter, approval or bulk action is not in a state that allows this (HTTP 409)."""


class ReplayFailed(Exception):
    """The broker did not acknowledge the replayed record (HTTP 503); the dead letter is PARKED again."""


# ----------------------------------------------------------------------------------------------- reading


def visible_dead_letters(user: AnyUser) -> QuerySet[DeadLetter]:
    """Dead letters of the teams the user may see (all for admins)."""
    if is_admin(user):
        return DeadLetter.objects.all()
    return DeadLetter.objects.filter(team__in=visible_teams(user))


def decode_headers(stored: Sequence[Sequence[str | None]]) -> list[tuple[str, bytes | None]]:
    """``DeadLetter.headers`` (``[name, base64-or-null]`` pairs) back to Kafka's ``(name, bytes)`` pairs."""
    return [(str(name), None if b64 is None else base64.b64decode(b64)) for name, b64 in stored]


def current_payload(dead_letter: DeadLetter) -> tuple[bytes | None, PayloadRevision | None]:
    """The value a replay sends: the latest payload revision's, else the original."""
    latest = dead_letter.payload_revisions.order_by("-number").first()
    if latest is not None:
        return bytes(latest.value), latest
    return (bytes(dead_letter.value) if dead_letter.value is not None else None), None


def render_bytes(data: bytes | None, *, masked_paths: Sequence[str] = ()) -> dict[str, Any]:
    """How the console shows a key or value: ``{"encoding": "json"|"text"|"hex"|"null", "text": str,
    "size": bytes}``. JSON is pretty-printed (2-space indent) with ``masked_paths`` (``/a/b`` paths)
    replaced by a mask; valid UTF-8 that is not JSON is text; anything else is hex, 16 bytes a line."""
    if data is None:
        return {"encoding": "null", "text": "", "size": 0}
    size = len(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"encoding": "hex", "text": _hex(data), "size": size}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"encoding": "text", "text": text, "size": size}
    for path in masked_paths:
        parsed = _mask(parsed, [p for p in path.split("/") if p])
    return {"encoding": "json", "text": json.dumps(parsed, indent=2, ensure_ascii=False), "size": size}


def _hex(data: bytes) -> str:
    return "\n".join(f"{i:08x}  {data[i : i + 16].hex(' ')}" for i in range(0, min(len(data), 64 * 1024), 16))


def _mask(value: Any, parts: list[str]) -> Any:
    if not parts:
        return MASK
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict) and head in value:
        return {**value, head: _mask(value[head], rest)}
    if isinstance(value, list) and head.isdigit() and int(head) < len(value):
        copy = list(value)
        copy[int(head)] = _mask(copy[int(head)], rest)
        return copy
    return value


def masked_paths_for(user: AnyUser, team: Team) -> list[str]:
    """The JSON paths hidden from this user: ``STREAMFORGE_DLQ_MASKED_PATHS`` for viewers, none above."""
    role = role_in(user, team)
    if role is None or role == Role.VIEWER:
        return list(settings.DLQ_MASKED_PATHS)
    return []


def _render_headers(raw: Sequence[tuple[str, bytes | None]]) -> list[dict[str, Any]]:
    out = []
    for name, value in raw:
        if value is None:
            out.append({"name": name, "encoding": "null", "value": None})
            continue
        try:
            out.append({"name": name, "encoding": "text", "value": value.decode("utf-8")})
        except UnicodeDecodeError:
            out.append({"name": name, "encoding": "hex", "value": value.hex()})
    return out


def inspect(*, user: AnyUser, dead_letter: DeadLetter) -> dict[str, Any]:
    """Everything the message page shows: the record (headers, key, value rendered), source coordinates,
    the failure, the pipeline revision that failed it (its destination's expressions), payload revisions
    with diffs, replays and their outcomes, later failures of replays, and pending approvals.

    Values at ``STREAMFORGE_DLQ_MASKED_PATHS`` are masked for viewers (also inside diffs).
    Raises PermissionDenied when the user cannot see the dead letter's team.
    """
    require_role(user, dead_letter.team, Role.VIEWER)
    masked = masked_paths_for(user, dead_letter.team)
    raw_headers = decode_headers(dead_letter.headers)
    original = bytes(dead_letter.value) if dead_letter.value is not None else None
    revisions = []
    previous = original
    for rev in dead_letter.payload_revisions.select_related("author").order_by("number"):
        value = bytes(rev.value)
        revisions.append(
            {
                "number": rev.number,
                "author": rev.author.get_username(),
                "created_at": rev.created_at,
                "reason": rev.reason,
                "value": render_bytes(value, masked_paths=masked),
                "diff": payload_diff(previous, value, masked_paths=masked) if masked else rev.diff,
                "check": rev.dsl_check,
            }
        )
        previous = value
    failed_revision = None
    if dead_letter.pipeline is not None and dead_letter.revision is not None:
        rev_row = dead_letter.pipeline.revisions.filter(number=dead_letter.revision).first()
        if rev_row is not None:
            dest = next(
                (d for d in rev_row.spec.get("destinations", []) if d.get("name") == dead_letter.destination),
                None,
            )
            failed_revision = {"number": rev_row.number, "destination": dest}
    return {
        "id": dead_letter.pk,
        "status": dead_letter.status,
        "dlq": {
            "topic": dead_letter.dlq_topic,
            "partition": dead_letter.dlq_partition,
            "offset": dead_letter.dlq_offset,
            "timestamp": dead_letter.dlq_timestamp,
        },
        "source": {
            "topic": dead_letter.source_topic,
            "partition": dead_letter.source_partition,
            "offset": dead_letter.source_offset,
        },
        "pipeline": dead_letter.pipeline_name,
        "team": dead_letter.team.name,
        "convention": dead_letter.convention,
        "error_type": dead_letter.error_type,
        "error_message": dead_letter.error_message,
        "destination": dead_letter.destination,
        "revision": failed_revision,
        "attempts": dead_letter.attempts,
        "first_failed_at": dead_letter.first_failed_at,
        "last_failed_at": dead_letter.last_failed_at,
        "group": dead_letter.group_id,
        "headers": _render_headers(raw_headers),
        "key": render_bytes(bytes(dead_letter.key) if dead_letter.key is not None else None),
        "value": render_bytes(original, masked_paths=masked),
        "payload_revisions": revisions,
        "replays": [
            {
                "replay_id": str(r.replay_id),
                "state": r.state,
                "target_topic": r.target_topic,
                "requested_by": r.requested_by.get_username(),
                "requested_at": r.requested_at,
                "produced": None
                if r.produced_offset is None
                else {"partition": r.produced_partition, "offset": r.produced_offset},
                "error": r.error,
                "bulk": r.bulk_id,
            }
            for r in dead_letter.replays.select_related("requested_by").order_by("requested_at")
        ],
        "replay_of": dead_letter.replay_of_id,
        "later_failures": list(dead_letter.later_failures.values_list("pk", flat=True)),
        "approvals": [
            {"id": a.pk, "kind": a.kind, "state": a.state, "requested_by": a.requested_by.get_username()}
            for a in dead_letter.approvals.select_related("requested_by")
        ],
    }


# ----------------------------------------------------------------------------------------------- fix


def payload_diff(old: bytes | None, new: bytes, *, masked_paths: Sequence[str] = ()) -> str:
    """A unified diff of the two payloads as the console renders them (pretty JSON when they are JSON)."""
    before = render_bytes(old, masked_paths=masked_paths)["text"].splitlines(keepends=True)
    after = render_bytes(new, masked_paths=masked_paths)["text"].splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, "original", "fixed"))


def check_payload(*, dead_letter: DeadLetter, value: bytes) -> dict[str, Any]:
    """Would the pipeline's current revision now process this payload? Runs the record (new value,
    original key, headers and timestamp) through the pure-Python evaluator, the same semantics the Spark
    job has (property-tested). Returns ``{"would_pass": bool, "revision": n, "destinations": [...]}``,
    or ``{}`` when the dead letter has no pipeline (a foreign DLQ) or the pipeline no revision.
    ``would_pass`` is true when no destination would dead-letter it.
    """
    pipeline = dead_letter.pipeline
    if pipeline is None or pipeline.current_revision is None:
        return {}
    try:
        spec = parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)
    except SpecError:
        return {}
    raw_headers = headers.original_headers(decode_headers(dead_letter.headers))
    timestamp = int(dead_letter.dlq_timestamp.timestamp() * 1000) if dead_letter.dlq_timestamp else None
    message = Message(
        value=value,
        key=bytes(dead_letter.key) if dead_letter.key is not None else None,
        headers=tuple(raw_headers),
        timestamp_ms=timestamp,
    )
    results = dry_run(spec=spec, messages=[message])[0]
    return {
        "would_pass": all(r.outcome != "dead_lettered" for r in results),
        "revision": pipeline.current_revision.number,
        "destinations": [
            {
                "destination": r.destination,
                "topic": r.topic,
                "outcome": r.outcome,
                "error_type": r.error_type,
                "error_message": r.error_message,
            }
            for r in results
        ],
    }


def check_draft(*, actor: AnyUser, dead_letter: DeadLetter, value: bytes) -> dict[str, Any]:
    """What saving ``value`` as a fix would give, without storing anything: the DSL check
    (``check_payload``), the diff against the original payload, and whether it equals the current payload
    (a fix that changes nothing is refused). Needs the operator role, like the fix it previews.
    """
    require_role(actor, dead_letter.team, Role.OPERATOR)
    original = bytes(dead_letter.value) if dead_letter.value is not None else None
    current, _ = current_payload(dead_letter)
    return {
        "check": check_payload(dead_letter=dead_letter, value=value),
        "diff": payload_diff(original, value),
        "unchanged": current == value,
    }


def fix_payload(*, actor: User, dead_letter: DeadLetter, value: bytes, reason: str) -> PayloadRevision:
    """Store a new payload revision (the original and earlier fixes are kept) with its diff against the
    previous payload and the DSL check of the new one. Needs the operator role; the dead letter must be
    PARKED. Raises InvalidRequest (no reason, payload unchanged), Conflict, PermissionDenied.
    """
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "say why the payload is changed")
    with transaction.atomic():
        locked = (
            DeadLetter.objects.select_for_update()
            .select_related("pipeline__current_revision")
            .get(pk=dead_letter.pk)
        )
        if locked.status != Status.PARKED:
            raise Conflict(f"dead letter {locked.pk} is {locked.status}; only parked messages can be fixed")
        previous, latest = current_payload(locked)
        if previous == value:
            raise InvalidRequest("value", "the payload is unchanged")
        revision = PayloadRevision.objects.create(
            dead_letter=locked,
            number=(latest.number + 1) if latest else 1,
            value=value,
            diff=payload_diff(previous, value),
            reason=reason.strip(),
            author=actor,
            dsl_check=check_payload(dead_letter=locked, value=value),
        )
        audit.record(
            actor=actor,
            action="dlq.fix",
            target_type="dead_letter",
            target_id=locked.pk,
            reason=reason,
            before=base64.b64encode(previous or b"").decode(),
            after=base64.b64encode(value).decode(),
            details={"payload_revision": revision.number, "would_pass": revision.dsl_check.get("would_pass")},
        )
    return revision


# ----------------------------------------------------------------------------------------------- producing


@dataclass
class _Out:
    """One record to produce and, once the broker answered, where it landed or why not."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None = None
    offset: int | None = None
    error: str = ""
    done: bool = False


_producer_lock = threading.Lock()
_producer_state: dict[str, Any] = {}


def _producer() -> Producer:
    """One idempotent producer per process (re-created after a fork). acks=all and idempotence make the
    broker drop the duplicates its own retries would create; ``delivery.timeout.ms`` bounds how long a
    record may still land after ``produce``, which is what lets ``resolve_in_doubt`` decide."""
    with _producer_lock:
        if _producer_state.get("pid") != os.getpid():
            _producer_state["producer"] = Producer(
                {
                    "bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "delivery.timeout.ms": settings.DLQ_PRODUCE_TIMEOUT_SECONDS * 1000,
                    "client.id": f"streamforge-replay-{socket.gethostname()}-{os.getpid()}",
                }
            )
            _producer_state["pid"] = os.getpid()
        producer: Producer = _producer_state["producer"]
        return producer


def _produce(records: Sequence[_Out]) -> None:
    """Produce every record and wait until the broker answered each (or the delivery timeout passed)."""
    producer = _producer()

    def callback(out: _Out) -> Callable[[KafkaError | None, Any], None]:
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                out.error = str(err)
            else:
                out.partition, out.offset = msg.partition(), msg.offset()
            out.done = True

        return report

    for out in records:
        while True:
            try:
                producer.produce(
                    out.topic,
                    value=out.value,
                    key=out.key,
                    headers=list(out.headers),
                    on_delivery=callback(out),
                )
                break
            except BufferError:  # local queue full: serve callbacks, then try again
                producer.poll(0.1)
            except KafkaException as exc:
                out.error, out.done = str(exc), True
                break
    deadline = time.monotonic() + settings.DLQ_PRODUCE_TIMEOUT_SECONDS + 5
    while not all(o.done for o in records) and time.monotonic() < deadline:
        producer.poll(0.05)
    for out in records:
        if not out.done:
            out.error = out.error or "no acknowledgement from the broker before the delivery timeout"


def _replay_record(dead_letter: DeadLetter, replay: Replay, value: bytes | None, actor_name: str) -> _Out:
    sent_headers = headers.original_headers(decode_headers(dead_letter.headers))
    sent_headers += [
        (c.H_REPLAY_ID, str(replay.replay_id).encode()),
        (c.H_REPLAY_OF, dead_letter.coordinates.encode()),
        (c.H_REPLAYED_BY, actor_name.encode()),
    ]
    key = bytes(dead_letter.key) if dead_letter.key is not None else None
    return _Out(topic=replay.target_topic, key=key, value=value, headers=sent_headers)


# ----------------------------------------------------------------------------------------------- replay


def _allowed_targets(dead_letter: DeadLetter) -> set[str]:
    topics = {dead_letter.source_topic} - {""}
    pipeline = dead_letter.pipeline
    if pipeline is not None and pipeline.current_revision is not None:
        spec = pipeline.current_revision.spec
        topics |= set(spec.get("source", {}).get("topics", []))
        topics |= {d.get("topic") for d in spec.get("destinations", []) if d.get("topic")}
    return topics


def _target_topic(actor: User, dead_letter: DeadLetter, requested: str) -> str:
    target = requested.strip() or dead_letter.source_topic
    if not target:
        raise InvalidRequest(
            "target_topic", "the record does not say its source topic; choose a target topic"
        )
    if target == dead_letter.dlq_topic:
        raise InvalidRequest("target_topic", "replaying into the DLQ topic itself would only park it again")
    if not is_admin(actor) and target not in _allowed_targets(dead_letter):
        raise InvalidRequest(
            "target_topic",
            f"operators may replay to the pipeline's source or destination topics "
            f"({', '.join(sorted(_allowed_targets(dead_letter))) or 'none known'}); other topics need an admin",
        )
    return target


def _check_fixed_payload(latest: PayloadRevision | None, *, force: bool, reason: str) -> None:
    if latest is None or latest.dsl_check.get("would_pass", True):
        return
    if not force:
        failing = [d for d in latest.dsl_check.get("destinations", []) if d.get("outcome") == "dead_lettered"]
        where = ", ".join(f"{d['destination']} ({d['error_type']})" for d in failing)
        raise Conflict(
            f"the fixed payload would be dead-lettered again at {where}; fix it again or replay with force "
            "and a reason"
        )
    if not reason.strip():
        raise InvalidRequest("reason", "a forced replay of a payload that fails the check needs a reason")


def replay(
    *,
    actor: User,
    dead_letter: DeadLetter,
    target_topic: str = "",
    idempotency_key: str = "",
    force: bool = False,
    reason: str = "",
) -> Replay:
    """Send the dead letter's current payload, with its original key and headers plus the replay headers,
    to ``target_topic`` (default: its source topic), and mark it REPLAYED once the broker acknowledged.

    Exactly one replay per claim: of concurrent calls only one claims the PARKED message; the others get
    Conflict, or, when they carry the same ``idempotency_key``, the winner's Replay. A fixed payload
    whose DSL check fails is refused unless ``force`` (with a reason).
    Raises InvalidRequest, Conflict, PermissionDenied, ReplayFailed (the message is PARKED again).
    """
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if idempotency_key:
        existing = Replay.objects.filter(dead_letter=dead_letter, idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
    target = _target_topic(actor, dead_letter, target_topic)
    try:
        with transaction.atomic():
            claimed = DeadLetter.objects.filter(pk=dead_letter.pk, status=Status.PARKED).update(
                status=Status.REPLAYING, status_changed_at=timezone.now()
            )
            if claimed != 1:
                raise Conflict(_not_parked(dead_letter.pk))
            # Read after the claim: no fix can slip in between the check and the produce.
            value, latest = current_payload(dead_letter)
            _check_fixed_payload(latest, force=force, reason=reason)
            attempt = Replay.objects.create(
                dead_letter=dead_letter,
                payload_revision=latest,
                target_topic=target,
                requested_by=actor,
                idempotency_key=idempotency_key,
            )
    except Conflict:
        if idempotency_key:
            winner = Replay.objects.filter(dead_letter=dead_letter, idempotency_key=idempotency_key).first()
            if winner is not None:
                return winner
        raise
    out = _replay_record(dead_letter, attempt, value, actor.get_username())
    _produce([out])
    _finish_replays([(dead_letter, attempt, out)], actor=actor, reason=reason)
    attempt.refresh_from_db()
    if attempt.state == ReplayState.FAILED:
        raise ReplayFailed(f"the broker did not take the replayed record: {attempt.error}")
    return attempt


def _not_parked(pk: int) -> str:
    status = DeadLetter.objects.filter(pk=pk).values_list("status", flat=True).first()
    return f"dead letter {pk} is {status}, not parked: it was already replayed, skipped or is being replayed"


def _finish_replays(
    done: Sequence[tuple[DeadLetter, Replay, _Out]],
    *,
    actor: User | None,
    reason: str = "",
    notify: bool = True,
) -> tuple[int, int]:
    """Record the broker's answers in one transaction: REPLAYED/PRODUCED or PARKED/FAILED, one audit event
    per dead letter. ``notify``: tell the console about each message (bulk actions report per chunk
    instead). Returns (succeeded, failed)."""
    now = timezone.now()
    produced = [(d, a, o) for d, a, o in done if not o.error]
    failed = [(d, a, o) for d, a, o in done if o.error]
    for _d, attempt, out in produced:
        attempt.state, attempt.finished_at = ReplayState.PRODUCED, now
        attempt.produced_partition, attempt.produced_offset = out.partition, out.offset
    for _d, attempt, out in failed:
        attempt.state, attempt.error, attempt.finished_at = ReplayState.FAILED, out.error, now
    by_actor: dict[int, list[audit.Entry]] = {}
    actors: dict[int, User] = {}
    with transaction.atomic():
        # One parameterized statement per row in a single executemany: Django's bulk_update builds a CASE
        # expression per field and row, which cost more than the produce itself at bulk sizes.
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {Replay._meta.db_table} SET state = %s, error = %s, finished_at = %s, "  # noqa: S608  # table name is ours
                "produced_partition = %s, produced_offset = %s WHERE id = %s",
                [
                    (
                        a.state,
                        a.error,
                        connection.ops.adapt_datetimefield_value(a.finished_at),
                        a.produced_partition,
                        a.produced_offset,
                        a.pk,
                    )
                    for _d, a, _o in done
                ],
            )
        DeadLetter.objects.filter(pk__in=[d.pk for d, _a, _o in produced], status=Status.REPLAYING).update(
            status=Status.REPLAYED, status_changed_at=now
        )
        DeadLetter.objects.filter(pk__in=[d.pk for d, _a, _o in failed], status=Status.REPLAYING).update(
            status=Status.PARKED, status_changed_at=now
        )
        for dead_letter, attempt, out in done:
            who = actor or attempt.requested_by
            actors[who.pk] = who
            action = "dlq.replay_failed" if out.error else "dlq.replay"
            by_actor.setdefault(who.pk, []).append(
                audit.Entry(
                    action=action,
                    target_type="dead_letter",
                    target_id=dead_letter.pk,
                    reason=reason,
                    details={
                        "replay_id": str(attempt.replay_id),
                        "target_topic": out.topic,
                        "partition": out.partition,
                        "offset": out.offset,
                        "payload_revision": attempt.payload_revision.number
                        if attempt.payload_revision
                        else 0,
                        "bulk": attempt.bulk_id,
                        "error": out.error,
                    },
                )
            )
            if notify:
                status = Status.PARKED if out.error else Status.REPLAYED
                _notify(dead_letter, status, action, who.get_username())
        for pk, entries in by_actor.items():
            audit.record_many(actor=actors[pk], entries=entries)
    return len(produced), len(failed)


def _notify(dead_letter: DeadLetter, status: str, action: str, actor: str) -> None:
    team_id, pk = dead_letter.team_id, dead_letter.pk
    transaction.on_commit(
        lambda: broadcast.message_changed(
            team_id=team_id, dead_letter_id=pk, status=status, action=action, actor=actor
        )
    )


def resolve_in_doubt(
    *, older_than_seconds: float | None = None, bulk: BulkAction | None = None
) -> dict[str, int]:
    """Settle PENDING replays whose process died between produce and record: read each target topic from
    shortly before the oldest claim to its end, looking for the replay ids in ``x-streamforge-replay-id``.
    Found: PRODUCED/REPLAYED at that offset. Not found: FAILED/PARKED (nothing landed, safe to retry).

    Only replays older than ``older_than_seconds`` (default: the producer's delivery timeout plus a
    margin) are considered, so a produce still in flight is never judged. Returns counts
    ``{"produced": n, "failed": m}``.
    """
    age = older_than_seconds if older_than_seconds is not None else settings.DLQ_PRODUCE_TIMEOUT_SECONDS + 10
    cutoff = timezone.now() - timedelta(seconds=age)
    pending = Replay.objects.filter(state=ReplayState.PENDING, requested_at__lte=cutoff).select_related(
        "dead_letter", "requested_by", "payload_revision"
    )
    if bulk is not None:
        pending = pending.filter(bulk=bulk)
    by_topic: dict[str, list[Replay]] = {}
    for attempt in pending:
        by_topic.setdefault(attempt.target_topic, []).append(attempt)
    counts = {"produced": 0, "failed": 0}
    for topic, attempts in by_topic.items():
        since_ms = int(min(a.requested_at for a in attempts).timestamp() * 1000) - 5000
        landed = _find_replay_ids(topic, {str(a.replay_id) for a in attempts}, since_ms)
        done = []
        for attempt in attempts:
            where = landed.get(str(attempt.replay_id))
            out = _Out(topic=topic, key=None, value=None, headers=[], done=True)
            if where is None:
                out.error = "in doubt after a crash; not found on the target topic, so nothing was produced"
            else:
                out.partition, out.offset = where
            done.append((attempt.dead_letter, attempt, out))
        ok, failed = _finish_replays(done, actor=None, reason="settled after a crash")
        counts["produced"] += ok
        counts["failed"] += failed
    return counts


def _find_replay_ids(topic: str, wanted: set[str], since_ms: int) -> dict[str, tuple[int, int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS,
            "group.id": f"streamforge-resolve-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    found: dict[str, tuple[int, int]] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return found
        partitions = [TopicPartition(topic, p, since_ms) for p in metadata.partitions]
        starts = consumer.offsets_for_times(partitions, timeout=10)
        ends: dict[int, int] = {}
        assign = []
        for tp in starts:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if tp.offset < 0 or tp.offset >= high:  # nothing at or after the time
                continue
            ends[tp.partition] = high
            assign.append(TopicPartition(topic, tp.partition, tp.offset))
        if not assign:
            return found
        consumer.assign(assign)
        remaining = set(ends)
        deadline = time.monotonic() + 60
        while remaining and time.monotonic() < deadline and len(found) < len(wanted):
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                if msg.error() is not None:
                    continue
                record = Record.from_message(msg)
                for name, value in record.headers:
                    if name == c.H_REPLAY_ID and value is not None and value.decode() in wanted:
                        found[value.decode()] = (record.partition, record.offset)
                if record.offset + 1 >= ends.get(record.partition, 0):
                    remaining.discard(record.partition)
    finally:
        consumer.close()
    return found


# ----------------------------------------------------------------------------------------------- skip


def skip(*, actor: User, dead_letter: DeadLetter, reason: str) -> DeadLetter:
    """Close a parked dead letter without producing anything. Needs the operator role and a reason.
    Raises InvalidRequest (no reason), Conflict (not parked), PermissionDenied."""
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "a skip needs a reason (it is kept in the audit log)")
    with transaction.atomic():
        changed = DeadLetter.objects.filter(pk=dead_letter.pk, status=Status.PARKED).update(
            status=Status.SKIPPED, status_changed_at=timezone.now()
        )
        if changed != 1:
            raise Conflict(_not_parked(dead_letter.pk))
        audit.record(
            actor=actor, action="dlq.skip", target_type="dead_letter", target_id=dead_letter.pk, reason=reason
        )
        _notify(dead_letter, Status.SKIPPED, "dlq.skip", actor.get_username())
    dead_letter.refresh_from_db()
    return dead_letter


# ----------------------------------------------------------------------------------------------- delete


def request_delete(*, actor: User, dead_letter: DeadLetter, reason: str) -> ApprovalRequest:
    """Ask for a dead letter's payload to be erased; a different user with the approver role must approve.
    Needs the operator role and a reason. Raises InvalidRequest, Conflict (already deleted, being
    replayed, or a request is pending), PermissionDenied."""
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "a delete request needs a reason")
    with transaction.atomic():
        locked = DeadLetter.objects.select_for_update().get(pk=dead_letter.pk)
        if locked.status in (Status.DELETED, Status.REPLAYING):
            raise Conflict(f"dead letter {locked.pk} is {locked.status}")
        if locked.approvals.filter(kind=ApprovalKind.DELETE, state=ApprovalState.PENDING).exists():
            raise Conflict(f"a delete request for dead letter {locked.pk} is already waiting for approval")
        request = ApprovalRequest.objects.create(
            kind=ApprovalKind.DELETE,
            team=locked.team,
            dead_letter=locked,
            reason=reason.strip(),
            requested_by=actor,
        )
        audit.record(
            actor=actor,
            action="dlq.delete_requested",
            target_type="dead_letter",
            target_id=locked.pk,
            reason=reason,
            details={"approval": request.pk},
        )
    return request


def _decide(*, actor: User, approval: ApprovalRequest, approve: bool, reason: str) -> ApprovalRequest:
    require_role(actor, approval.team, Role.APPROVER)
    if approval.requested_by_id == actor.pk:
        raise PermissionDenied("a request needs a second person: you cannot decide your own request")
    now = timezone.now()
    with transaction.atomic():
        decided = ApprovalRequest.objects.filter(pk=approval.pk, state=ApprovalState.PENDING).update(
            state=ApprovalState.APPROVED if approve else ApprovalState.REJECTED,
            decided_by=actor,
            decided_at=now,
            decision_reason=reason.strip(),
        )
        if decided != 1:
            raise Conflict(f"request {approval.pk} was already decided")
        approval.refresh_from_db()
        audit.record(
            actor=actor,
            action="approval.approve" if approve else "approval.reject",
            target_type="approval",
            target_id=approval.pk,
            reason=reason,
            details={"kind": approval.kind, "dead_letter": approval.dead_letter_id, "bulk": approval.bulk_id},
        )
        if approval.kind == ApprovalKind.DELETE and approval.dead_letter is not None and approve:
            _erase(actor=actor, dead_letter=approval.dead_letter, approval=approval)
        elif approval.kind == ApprovalKind.BULK and approval.bulk is not None:
            _bulk_decided(actor=actor, bulk=approval.bulk, approved=approve)
    return approval


def approve(*, actor: User, approval: ApprovalRequest, reason: str = "") -> ApprovalRequest:
    """Approve a pending request and carry it out (erase the dead letter, or queue the bulk action).
    Needs the approver role in the request's team and must not be the requester.
    Raises PermissionDenied, Conflict (already decided)."""
    return _decide(actor=actor, approval=approval, approve=True, reason=reason)


def reject(*, actor: User, approval: ApprovalRequest, reason: str = "") -> ApprovalRequest:
    """Reject a pending request (a rejected bulk action never runs). Same rules as ``approve``."""
    return _decide(actor=actor, approval=approval, approve=False, reason=reason)


def _erase(*, actor: User, dead_letter: DeadLetter, approval: ApprovalRequest) -> None:
    locked = DeadLetter.objects.select_for_update().get(pk=dead_letter.pk)
    if locked.status == Status.REPLAYING:
        raise Conflict(f"dead letter {locked.pk} is being replayed; decide again when it is done")
    before = {
        "key": base64.b64encode(bytes(locked.key or b"")).decode(),
        "value": base64.b64encode(bytes(locked.value or b"")).decode(),
        "headers": locked.headers,
    }
    DeadLetter.objects.filter(pk=locked.pk).update(
        key=None, value=None, headers=[], key_text="", status=Status.DELETED, status_changed_at=timezone.now()
    )
    PayloadRevision.objects.filter(dead_letter=locked).update(value=b"", diff="")
    audit.record(
        actor=actor,
        action="dlq.delete",
        target_type="dead_letter",
        target_id=locked.pk,
        reason=approval.reason,
        before=before,
        details={"approval": approval.pk, "requested_by": approval.requested_by.get_username()},
    )
    _notify(locked, Status.DELETED, "dlq.delete", actor.get_username())


# ----------------------------------------------------------------------------------------------- bulk


def _bulk_queryset(actor: AnyUser, selection: MessageFilter) -> QuerySet[DeadLetter]:
    return selection.apply(visible_dead_letters(actor)).filter(status=Status.PARKED)


def preview_bulk(*, actor: User, selection: MessageFilter) -> dict[str, Any]:
    """The dry-run count of a bulk action: how many parked messages the filter selects, per team, and
    whether running it would need an approval."""
    qs = _bulk_queryset(actor, selection)
    per_team = dict(_counts_by_team(qs))
    total = sum(per_team.values())
    return {
        "count": total,
        "teams": per_team,
        "needs_approval": total > settings.DLQ_BULK_APPROVAL_THRESHOLD,
        "approval_threshold": settings.DLQ_BULK_APPROVAL_THRESHOLD,
    }


def _counts_by_team(qs: QuerySet[DeadLetter]) -> list[tuple[str, int]]:
    from django.db.models import Count

    grouped = qs.order_by().values("team__name").annotate(n=Count("id"))  # no ordering: it would split groups
    return [(row["team__name"], row["n"]) for row in grouped]


def create_bulk(
    *,
    actor: User,
    kind: str,
    selection: MessageFilter,
    reason: str,
    rate_limit: int = 100,
    target_topic: str = "",
) -> BulkAction:
    """Create a bulk replay or skip of every parked message the filter selects now (ids up to the current
    newest). It is queued at once, or waits for an approver when it selects more than
    ``STREAMFORGE_DLQ_BULK_APPROVAL_THRESHOLD`` messages. The selection must lie in one team, where the
    actor needs the operator role. ``rate_limit`` is messages per second (1..10000; 0: unlimited).
    Raises InvalidRequest, PermissionDenied.
    """
    if kind not in BulkKind.values:
        raise InvalidRequest("kind", f"must be one of {', '.join(BulkKind.values)}")
    if not reason.strip():
        raise InvalidRequest("reason", "a bulk action needs a reason")
    if rate_limit < 0 or rate_limit > 10_000:
        raise InvalidRequest("rate_limit", "messages per second, 0 (unlimited) to 10000")
    qs = _bulk_queryset(actor, selection)
    teams = list(qs.order_by().values_list("team", flat=True).distinct()[:2])
    if not teams:
        raise InvalidRequest("filters", "no parked message matches this filter")
    if len(teams) > 1:
        raise InvalidRequest(
            "filters", "the filter selects messages of several teams; narrow it to one pipeline"
        )
    team = Team.objects.get(pk=teams[0])
    require_role(actor, team, Role.OPERATOR)
    if target_topic and not is_admin(actor):
        raise InvalidRequest(
            "target_topic", "a bulk replay to another topic than each message's source needs an admin"
        )
    with transaction.atomic():
        max_id = qs.order_by("-id").values_list("id", flat=True).first() or 0
        total = qs.filter(id__lte=max_id).count()
        needs_approval = total > settings.DLQ_BULK_APPROVAL_THRESHOLD
        bulk = BulkAction.objects.create(
            kind=kind,
            team=team,
            filters=selection.to_json(),
            max_id=max_id,
            target_topic=target_topic.strip(),
            reason=reason.strip(),
            rate_limit=rate_limit,
            state=BulkState.AWAITING_APPROVAL if needs_approval else BulkState.QUEUED,
            total=total,
            created_by=actor,
        )
        audit.record(
            actor=actor,
            action="dlq.bulk_create",
            target_type="bulk",
            target_id=bulk.pk,
            reason=reason,
            details={"kind": kind, "filters": bulk.filters, "total": total, "rate_limit": rate_limit},
        )
        if needs_approval:
            ApprovalRequest.objects.create(
                kind=ApprovalKind.BULK,
                team=team,
                bulk=bulk,
                reason=f"bulk {kind} of {total} messages: {reason.strip()}",
                requested_by=actor,
            )
        else:
            _enqueue(bulk)
    return bulk


def _enqueue(bulk: BulkAction) -> None:
    from dlq import tasks

    pk = bulk.pk
    transaction.on_commit(lambda: tasks.run_bulk.delay(pk))


def _bulk_decided(*, actor: User, bulk: BulkAction, approved: bool) -> None:
    state = BulkState.QUEUED if approved else BulkState.REJECTED
    changed = BulkAction.objects.filter(pk=bulk.pk, state=BulkState.AWAITING_APPROVAL).update(state=state)
    if changed and approved:
        _enqueue(bulk)


def _bulk_transition(
    *, actor: User, bulk: BulkAction, allowed: Sequence[str], to: str, action: str, reason: str
) -> BulkAction:
    if bulk.team is None:
        raise PermissionDenied("this bulk action has no team")
    require_role(actor, bulk.team, Role.OPERATOR)
    with transaction.atomic():
        changed = BulkAction.objects.filter(pk=bulk.pk, state__in=allowed).update(state=to)
        if changed != 1:
            bulk.refresh_from_db()
            raise Conflict(f"bulk action {bulk.pk} is {bulk.state}; cannot {action.split('_')[-1]} it")
        audit.record(actor=actor, action=action, target_type="bulk", target_id=bulk.pk, reason=reason)
        if to == BulkState.QUEUED:
            _enqueue(bulk)
    bulk.refresh_from_db()
    _notify_bulk(bulk)
    return bulk


def pause_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Stop after the chunk in flight; ``resume_bulk`` continues where it stopped. Raises Conflict."""
    return _bulk_transition(
        actor=actor,
        bulk=bulk,
        allowed=BULK_RUNNABLE,
        to=BulkState.PAUSED,
        action="dlq.bulk_pause",
        reason=reason,
    )


def cancel_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Stop after the chunk in flight (or never start). Messages not yet reached stay parked. An operator
    who cancelled by mistake may still ``resume_bulk``; nothing already done is done again."""
    return _bulk_transition(
        actor=actor,
        bulk=bulk,
        allowed=(*BULK_RUNNABLE, BulkState.PAUSED, BulkState.AWAITING_APPROVAL),
        to=BulkState.CANCELLED,
        action="dlq.bulk_cancel",
        reason=reason,
    )


def resume_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Queue a paused or cancelled bulk action again; it continues after its cursor."""
    return _bulk_transition(
        actor=actor,
        bulk=bulk,
        allowed=(BulkState.PAUSED, BulkState.CANCELLED),
        to=BulkState.QUEUED,
        action="dlq.bulk_resume",
        reason=reason,
    )


def _notify_bulk(bulk: BulkAction) -> None:
    if bulk.team_id is None:
        return
    team_id, pk, state, progress = bulk.team_id, bulk.pk, bulk.state, bulk.progress()
    transaction.on_commit(
        lambda: broadcast.bulk_changed(team_id=team_id, bulk_id=pk, state=state, progress=progress)
    )


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def run_bulk(*, bulk_id: int, chunk_size: int | None = None) -> BulkAction:
    """Carry out a queued bulk action, or take over one whose worker stopped beating, chunk by chunk at its
    rate limit, until done, paused or cancelled. Safe to call twice: only one caller claims it.

    Each chunk claims its messages (PARKED -> REPLAYING / SKIPPED) before acting, so a message is
    replayed at most once whatever crashes; replays left in doubt by a crashed worker are settled from
    the target topic (``resolve_in_doubt``) before the takeover continues.
    """
    me = _worker_name()
    now = timezone.now()
    stale = now - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS)
    claimed = BulkAction.objects.filter(
        Q(state=BulkState.QUEUED) | Q(state=BulkState.RUNNING, heartbeat_at__lt=stale), pk=bulk_id
    ).update(
        state=BulkState.RUNNING,
        worker=me,
        heartbeat_at=now,
        runs=F("runs") + 1,
        started_at=Coalesce(F("started_at"), now),
    )
    bulk = BulkAction.objects.select_related("created_by", "team").get(pk=bulk_id)
    if claimed != 1:
        return bulk
    if bulk.kind == BulkKind.REPLAY:
        # A previous worker's in-flight produces ended at least DLQ_BULK_STALE_SECONDS ago (> delivery timeout).
        resolve_in_doubt(older_than_seconds=0, bulk=bulk)
    selection = MessageFilter.from_mapping(bulk.filters)
    rate = bulk.rate_limit
    size = chunk_size or (max(1, min(200, rate // 5)) if rate else 200)
    started, done_this_run = time.monotonic(), 0
    while True:
        current = BulkAction.objects.filter(pk=bulk.pk).values_list("state", "worker").get()
        if current != (BulkState.RUNNING, me):
            break
        ids = list(
            selection.apply(DeadLetter.objects.filter(team=bulk.team))
            .filter(status=Status.PARKED, id__gt=bulk.cursor, id__lte=bulk.max_id)
            .order_by("id")
            .values_list("id", flat=True)[:size]
        )
        if not ids:
            BulkAction.objects.filter(pk=bulk.pk, state=BulkState.RUNNING, worker=me).update(
                state=BulkState.COMPLETED, finished_at=timezone.now(), heartbeat_at=timezone.now()
            )
            with transaction.atomic():
                audit.record(
                    actor=None,
                    action="dlq.bulk_complete",
                    target_type="bulk",
                    target_id=bulk.pk,
                    details=bulk.progress(),
                )
            break
        if bulk.kind == BulkKind.REPLAY:
            handled, ok, failed = _bulk_replay_chunk(bulk, ids)
        else:
            handled, ok, failed = _bulk_skip_chunk(bulk, ids)
        BulkAction.objects.filter(pk=bulk.pk).update(
            cursor=max(ids),
            processed=F("processed") + handled,
            succeeded=F("succeeded") + ok,
            failed=F("failed") + failed,
            heartbeat_at=timezone.now(),
        )
        bulk.refresh_from_db()
        _notify_bulk_now(bulk)
        done_this_run += handled
        if rate:
            ahead = done_this_run / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    bulk.refresh_from_db()
    _notify_bulk_now(bulk)
    return bulk


def _notify_bulk_now(bulk: BulkAction) -> None:
    if bulk.team_id is not None:
        broadcast.bulk_changed(
            team_id=bulk.team_id, bulk_id=bulk.pk, state=bulk.state, progress=bulk.progress()
        )


def _claim(ids: Sequence[int], to: str) -> list[DeadLetter]:
    """Move the still-parked ones of ``ids`` to ``to``; returns those (locked rows on PostgreSQL; SQLite
    serialises writers, so the select and the update see the same rows)."""
    rows = list(
        DeadLetter.objects.select_for_update(skip_locked=True)
        .filter(pk__in=ids, status=Status.PARKED)
        .select_related("pipeline__current_revision")
    )
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows], status=Status.PARKED).update(
        status=to, status_changed_at=timezone.now()
    )
    return rows


def _latest_payloads(ids: Sequence[int]) -> dict[int, PayloadRevision]:
    """The newest payload revision of each of these dead letters that has one (one query)."""
    latest: dict[int, PayloadRevision] = {}
    for rev in PayloadRevision.objects.filter(dead_letter_id__in=ids).order_by("dead_letter_id", "number"):
        latest[rev.dead_letter_id] = rev
    return latest


def _bulk_replay_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    actor = bulk.created_by
    with transaction.atomic():
        rows = _claim(ids, Status.REPLAYING)
        latest = _latest_payloads([r.pk for r in rows])
        attempts = Replay.objects.bulk_create(
            [
                Replay(
                    dead_letter=row,
                    payload_revision=latest.get(row.pk),
                    bulk=bulk,
                    target_topic=bulk.target_topic or row.source_topic,
                    requested_by=actor,
                )
                for row in rows
            ]
        )
    outs = []
    done = []
    for row, attempt in zip(rows, attempts, strict=True):
        revision = latest.get(row.pk)
        value = (
            bytes(revision.value)
            if revision is not None
            else (bytes(row.value) if row.value is not None else None)
        )
        if not attempt.target_topic:
            out = _Out(
                topic="", key=None, value=None, headers=[], done=True, error="no source topic to replay to"
            )
        else:
            out = _replay_record(row, attempt, value, actor.get_username())
            outs.append(out)
        done.append((row, attempt, out))
    _produce(outs)
    ok, failed = _finish_replays(done, actor=actor, reason=f"bulk #{bulk.pk}: {bulk.reason}", notify=False)
    return len(rows), ok, failed


def _bulk_skip_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    with transaction.atomic():
        rows = _claim(ids, Status.SKIPPED)
        audit.record_many(
            actor=bulk.created_by,
            entries=[
                audit.Entry(
                    action="dlq.skip",
                    target_type="dead_letter",
                    target_id=row.pk,
                    reason=f"bulk #{bulk.pk}: {bulk.reason}",
                    details={"bulk": bulk.pk},
                )
                for row in rows
            ],
        )
    return len(rows), len(rows), 0


def stale_bulk_ids() -> list[int]:
    """RUNNING bulk actions whose worker stopped beating (crashed): the beat resumes them."""
    stale = timezone.now() - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS)
    return list(
        BulkAction.objects.filter(
            Q(heartbeat_at__lt=stale) | Q(heartbeat_at=None), state=BulkState.RUNNING
        ).values_list("pk", flat=True)
    )


# ----------------------------------------------------------------------------------------------- admin


def register_topic(
    *, actor: User, topic: str, team: Team, pipeline: Pipeline | None = None, description: str = ""
) -> DlqTopic:
    """Have the ingester read an extra DLQ topic (e.g. one written by Kafka Connect or Spring Kafka) for
    ``team``. Needs the admin role. Raises InvalidRequest for an empty or duplicate topic."""
    require_role(actor, team, Role.ADMIN)
    name = topic.strip()
    if not name:
        raise InvalidRequest("topic", "a topic name is required")
    with transaction.atomic():
        if DlqTopic.objects.filter(topic=name).exists():
            raise InvalidRequest("topic", f"{name} is already registered")
        row = DlqTopic.objects.create(
            topic=name, team=team, pipeline=pipeline, description=description, created_by=actor
        )
        audit.record(
            actor=actor,
            action="dlq.topic_register",
            target_type="dlq_topic",
            target_id=name,
            details={"team": team.name, "pipeline": pipeline.name if pipeline else None},
        )
    return row


def save_runbook(
    *,
    actor: User,
    team: Team,
    title: str,
    body: str,
    actions: Sequence[str],
    group: FailureGroup | None = None,
    error_type: str = "",
    runbook: Runbook | None = None,
) -> Runbook:
    """Create (or, with ``runbook``, update) a runbook attached to a failure group or an error type.
    Needs the admin role. Raises InvalidRequest for unknown actions or no attachment."""
    require_role(actor, team, Role.ADMIN)
    unknown = sorted(set(actions) - set(RunbookAction.values))
    if unknown:
        raise InvalidRequest("actions", f"unknown action {unknown[0]}; use {', '.join(RunbookAction.values)}")
    if group is None and not error_type.strip():
        raise InvalidRequest("group", "attach the runbook to a failure group or an error type")
    if group is not None and group.team_id != team.pk:
        raise InvalidRequest("group", "the failure group belongs to another team")
    if not title.strip():
        raise InvalidRequest("title", "a title is required")
    with transaction.atomic():
        before = None
        if runbook is None:
            runbook = Runbook(team=team, created_by=actor)
        else:
            before = {"title": runbook.title, "body": runbook.body, "actions": runbook.actions}
        runbook.title, runbook.body, runbook.actions = title.strip(), body, list(actions)
        runbook.group, runbook.error_type = group, error_type.strip()
        runbook.save()
        audit.record(
            actor=actor,
            action="runbook.update" if before else "runbook.create",
            target_type="runbook",
            target_id=runbook.pk,
            before=before,
            after={"title": runbook.title, "body": runbook.body, "actions": runbook.actions},
        )
    return runbook


def delete_runbook(*, actor: User, runbook: Runbook) -> None:
    """Remove a runbook. Needs the admin role."""
    require_role(actor, runbook.team, Role.ADMIN)
    with transaction.atomic():
        audit.record(
            actor=actor,
            action="runbook.delete",
            target_type="runbook",
            target_id=runbook.pk,
            before={"title": runbook.title, "body": runbook.body, "actions": runbook.actions},
        )
        runbook.delete()


def runbooks_for(group: FailureGroup) -> QuerySet[Runbook]:
    """Runbooks for a failure group: attached to it, or to its error type in its team."""
    return Runbook.objects.filter(
        Q(group=group) | Q(group=None, error_type=group.error_type, team=group.team_id)
    )
