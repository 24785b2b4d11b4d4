"""Closing a parked message: the replay state machine (one message, and the per-record bookkeeping the
bulk runner shares), settling replays left in doubt by a crash, and skip.

Replay protocol (at most one replayed record per claim, and no outcome left unknown):
1. claim: PARKED -> REPLAYING and a PENDING ``Replay`` row, committed together;
2. produce with an idempotent producer (acks=all) and wait for the broker's acknowledgement;
3. record: REPLAYED + PRODUCED with the partition/offset, or back to PARKED + FAILED.
A crash between 1 and 3 leaves the replay PENDING; ``resolve_in_doubt`` settles it later by reading the
target topic for the replay id (after the producer's delivery timeout, when no retry can still land).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Protocol, TypedDict

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from access import audit
from access.id_lists import among
from access.models import Role
from access.permissions import is_admin, require_role
from dlq import headers
from dlq.models import (
    BulkAction,
    DeadLetter,
    Replay,
    ReplayState,
    Status,
)
from dlq.services import holds, kafka_io, notify
from dlq.services.errors import Conflict, InvalidRequest, ReplayFailed, WouldFailAgain
from dlq.services.fixes import DestinationOutcome, check_payload, current_payload
from dlq.services.kafka_io import OutgoingRecord
from dlq.services.rendering import decode_headers
from pipelines.models import Pipeline
from pipelines.spec import SpecError
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import record_size, topic_name_problem


class ReplaySource(Protocol):
    """What a replayed record is built from: a ``DeadLetter``, or a bulk replay's ``ClaimedRecord``.
    ``headers`` in the stored ``[name, base64-or-null]`` form."""

    @property
    def pk(self) -> Any: ...
    @property
    def headers(self) -> Any: ...
    @property
    def key(self) -> Any: ...
    @property
    def coordinates(self) -> str: ...
    @property
    def cluster_id(self) -> Any: ...


class Attempt(Protocol):
    """A ``Replay`` row whose answer is being recorded: a ``Replay``, or a bulk replay's ``BulkAttempt``."""

    pk: Any
    replay_id: uuid.UUID
    target_topic: str
    destinations: str
    state: str
    error: str
    finished_at: datetime | None
    produced_partition: int | None
    produced_offset: int | None


#: A replay whose broker answer is known: what was replayed, its attempt, and the produced record.
Answered = tuple[ReplaySource, Attempt, OutgoingRecord]


class SettledReplays(TypedDict):
    """How many in-doubt replays ``resolve_in_doubt`` found on their target topic, and how many not."""

    produced: int
    failed: int


def replay_record(
    dead_letter: ReplaySource, replay: Attempt, value: bytes | None, actor_name: str
) -> OutgoingRecord:
    """The record a replay sends to ``replay.target_topic``: ``value``, the original key and headers (the
    DLQ's own headers removed), and the replay headers (replay id, the DLQ coordinates it replays, who
    replayed it, and, when ``replay.destinations`` is set, the destinations it is for: the driver writes
    it only there, DESIGN.md "Contracts"), and the console's signature over those and ``value``
    (``streamforge_core.replay_signing``), without which a driver treats the record as an ordinary one)."""
    sent_headers = headers.original_headers(decode_headers(dead_letter.headers))
    sent_headers += [
        (c.H_REPLAY_ID, str(replay.replay_id).encode()),
        (c.H_REPLAY_OF, dead_letter.coordinates.encode()),
        (c.H_REPLAYED_BY, actor_name.encode()),
    ]
    if replay.destinations:
        sent_headers.append((c.H_REPLAY_DESTINATIONS, replay.destinations.encode()))
    signature = replay_signing.sign(
        settings.REPLAY_KEY.encode(), dead_letter.coordinates, replay.destinations, value
    )
    sent_headers.append((c.H_REPLAY_SIGNATURE, signature.encode()))
    key = bytes(dead_letter.key) if dead_letter.key is not None else None
    return OutgoingRecord(
        topic=replay.target_topic,
        key=key,
        value=value,
        headers=sent_headers,
        cluster_id=dead_letter.cluster_id,  # replayed on the cluster it was read from
    )


def allowed_targets(dead_letter: DeadLetter) -> set[str]:
    """The topics an operator (not an admin) may replay the dead letter to: the source and destination
    topics of its owning pipeline's current spec (``PipelineTopics.targets``). Never the record's headers: its
    source-topic header is only a default, and is refused when the spec does not name it (a record's
    headers are written by whoever could write to the DLQ topic). A dead letter without a pipeline can be
    replayed by admins only.
    """
    return set(pipeline_topics(dead_letter.pipeline_id).targets)


@dataclass(frozen=True)
class PipelineTopics:
    """What a replay needs of the owning pipeline's current spec: its source topics and its destinations'
    names and topics (all empty when there is no pipeline, no revision, or a spec that no longer parses)."""

    sources: frozenset[str] = frozenset()
    destinations: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def targets(self) -> frozenset[str]:
        """Where an operator may replay to: the source and destination topics."""
        return self.sources | {t for t in self.destinations.values() if t}

    def scope(self, destination: str, target: str) -> str:
        """The ``x-streamforge-replay-destinations`` value for a dead letter of ``destination`` (one name,
        or several comma-separated, or ``*``) replayed to ``target``: its destination names when the
        record goes back through this pipeline (``target`` is one of its sources) and every name is still
        a destination of it; empty otherwise (the record is for every destination: a name the spec no
        longer has would make every destination skip it, and skipping everywhere loses it)."""
        if target not in self.sources:
            return ""
        names = [n.strip() for n in destination.split(",") if n.strip()]
        if not names or any(n not in self.destinations for n in names):
            return ""
        return ",".join(names)


def pipeline_topics(pipeline_id: int | None) -> PipelineTopics:
    """The ``PipelineTopics`` of pipeline ``pipeline_id``'s current spec."""
    if pipeline_id is None:
        return PipelineTopics()
    pipeline = Pipeline.objects.filter(pk=pipeline_id).select_related("current_revision").first()
    if pipeline is None or pipeline.current_revision is None:
        return PipelineTopics()
    try:
        spec = pipeline.current_revision.parsed
    except SpecError:
        return PipelineTopics()
    return PipelineTopics(
        sources=frozenset(spec.source.topics), destinations={d.name: d.topic for d in spec.destinations}
    )


def _target_topic(actor: User, dead_letter: DeadLetter, requested: str) -> str:
    target = requested.strip() or dead_letter.source_topic
    if not target:
        raise InvalidRequest(
            "target_topic", "the record does not say its source topic; choose a target topic"
        )
    # The source topic comes from the record's headers: data, so it is checked like a typed name.
    if (problem := topic_name_problem(target)) is not None:
        raise InvalidRequest("target_topic", problem)
    if target == dead_letter.dlq_topic:
        raise InvalidRequest("target_topic", "replaying into the DLQ topic itself would only park it again")
    allowed = set() if is_admin(actor) else allowed_targets(dead_letter)
    if not is_admin(actor) and target not in allowed:
        raise InvalidRequest(
            "target_topic",
            f"operators may replay to the owning pipeline's source or destination topics "
            f"({', '.join(sorted(allowed)) or 'none: the DLQ topic has no pipeline'}); other topics need an admin",
        )
    return target


def would_fail_again(
    dead_letter: DeadLetter, value: bytes | None, *, target: str = "", topics: PipelineTopics | None = None
) -> list[DestinationOutcome]:
    """The destinations a replay of ``value`` to ``target`` (default: the record's source topic) is for
    where the owning pipeline's current revision would dead-letter it again, with the error it would get
    (``fixes.check_payload``, the evaluator the Spark job agrees with). Empty when it would pass there, when
    the target is not a source of the pipeline (nothing evaluates it), or when there is nothing to check
    against (no pipeline, no revision, no value). First the target itself (``_refused_by_target``): a
    forbidden topic, or a replayed record above its ``max.message.bytes``, fails whatever the pipeline does.
    ``topics``: the pipeline's, when the caller already has
    them (``pipeline_topics``)."""
    target = target or dead_letter.source_topic
    topics = topics if topics is not None else pipeline_topics(dead_letter.pipeline_id)
    at_target = _refused_by_target(dead_letter, value, target)
    if at_target is not None:
        return [at_target]
    if value is None or target not in topics.sources:
        return []
    check = check_payload(dead_letter=dead_letter, value=value)
    if check is None:
        return []
    scope = topics.scope(dead_letter.destination, target)
    names = set(scope.split(",")) if scope else None
    return [d for d in check.dead_lettered() if names is None or d.destination in names]


def _refused_by_target(
    dead_letter: DeadLetter, value: bytes | None, target: str
) -> DestinationOutcome | None:
    """Why the broker would refuse the replayed record itself at ``target`` (named as its ``destination``
    and ``topic``), or None: the console may not write the topic (``TopicAuthorizationFailed``), the topic
    does not exist and the broker would not create it (``UnknownTopicOrPartition``: the produce would time
    out, nothing written; ``kafka_io.topic_limits``), or the
    record (``replay_record``'s, with the replay headers) is larger than the topic's ``max.message.bytes``
    (``RecordTooLarge``, Kafka topic config). Nothing is claimed when the broker does not say."""
    if not target:
        return None
    limit = kafka_io.topic_limits([target], dead_letter.cluster_id)[target]
    if limit.problem:
        return DestinationOutcome(target, target, "dead_lettered", limit.problem, limit.problem_text(target))
    if limit.max_message_bytes is None:
        return None
    probe = Replay(target_topic=target, destinations=dead_letter.destination)
    out = replay_record(dead_letter, probe, value, "x" * 150)  # a username is at most 150 characters
    size = record_size(out.value, out.key, out.headers)
    if size <= limit.max_message_bytes:
        return None
    return DestinationOutcome(
        target,
        target,
        "dead_lettered",
        c.RECORD_TOO_LARGE,
        f"the replayed record of about {size} bytes exceeds max.message.bytes={limit.max_message_bytes} "
        f"of topic {target}",
    )


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay of a dead letter now would do, for its confirmation: the ``target_topic`` (empty when
    the record names no source topic), the ``destinations`` it is for (empty: every destination the target
    feeds), and the parked ``siblings_left`` (dead-letter id, destination) of the same source record that it
    does not send (each is replayed on its own, or all together with ``replay_with_siblings``)."""

    target_topic: str
    destinations: tuple[str, ...]
    siblings_left: tuple[tuple[int, str], ...]


def replay_plan(dead_letter: DeadLetter, siblings: Sequence[Any]) -> ReplayPlan:
    """The ``ReplayPlan`` of a replay of ``dead_letter`` to its source topic; ``siblings`` are its
    ``inspection.Sibling`` rows (``id``, ``destination``, ``status``). Reads the owning pipeline's spec."""
    target = dead_letter.source_topic
    scope = pipeline_topics(dead_letter.pipeline_id).scope(dead_letter.destination, target) if target else ""
    return ReplayPlan(
        target_topic=target,
        destinations=tuple(n for n in scope.split(",") if n),
        siblings_left=tuple((s.id, s.destination) for s in siblings if s.status == Status.PARKED),
    )


def _refuse_a_failing_payload(failing: list[DestinationOutcome], *, force: bool, reason: str) -> None:
    if not failing:
        return
    if not force:
        where = ", ".join(f"{d.destination} ({d.error_type})" for d in failing)
        raise WouldFailAgain(
            f"the payload would be dead-lettered again at {where}; fix it first, or replay with force and "
            "a reason",
            [
                {"destination": d.destination, "error_type": d.error_type, "error_message": d.error_message}
                for d in failing
            ],
        )
    if not reason.strip():
        raise InvalidRequest("reason", "a forced replay of a payload that fails the check needs a reason")


def _refuse_under_pending_delete(pk: int) -> None:
    """Raise Conflict when a delete request about dead letter ``pk`` waits for an approver
    (``holds.held_by_pending_delete``, the rule a bulk action applies too): the approver decides on the
    message as it was requested, so it is neither replayed nor skipped meanwhile (the message page disables
    both with the same reason). Called inside the claim's transaction: the caller's claim is rolled back
    with it."""
    held = holds.held_by_pending_delete([pk])
    if pk in held:
        raise Conflict(held[pk])


def not_parked_message(pk: int) -> str:
    """The Conflict message for an action that needs dead letter ``pk`` PARKED, saying what it is now."""
    status = DeadLetter.objects.filter(pk=pk).values_list("status", flat=True).first()
    return f"dead letter {pk} is {status}, not parked: it was already replayed, skipped or is being replayed"


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
    Conflict, or, when they carry the same ``idempotency_key``, the winner's Replay. A payload (fixed or
    original) that the pipeline's current revision would dead-letter again at a destination this replay is
    for is refused with WouldFailAgain naming them (``would_fail_again``), unless ``force`` (with a reason).
    Raises InvalidRequest, Conflict (WouldFailAgain), PermissionDenied, ReplayFailed (the message is PARKED
    again).
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
                raise Conflict(not_parked_message(dead_letter.pk))
            _refuse_under_pending_delete(dead_letter.pk)
            # Read after the claim: no fix can slip in between the check and the produce.
            value, latest = current_payload(dead_letter)
            # Checked now, against the current revision: a fix checked against an older one, or an
            # original payload never fixed, may fail again where this replay goes.
            topics = pipeline_topics(dead_letter.pipeline_id)  # the spec parsed once for both uses
            failing = would_fail_again(dead_letter, value, target=target, topics=topics)
            _refuse_a_failing_payload(failing, force=force, reason=reason)
            attempt = Replay.objects.create(
                dead_letter=dead_letter,
                payload_revision=latest,
                target_topic=target,
                destinations=topics.scope(dead_letter.destination, target),
                requested_by=actor,
                idempotency_key=idempotency_key,
            )
    except Conflict:
        if idempotency_key:
            winner = Replay.objects.filter(dead_letter=dead_letter, idempotency_key=idempotency_key).first()
            if winner is not None:
                return winner
        raise
    out = replay_record(dead_letter, attempt, value, actor.get_username())
    kafka_io.produce([out])
    finish_replays([(dead_letter, attempt, out)], actor=actor, reason=reason)
    attempt.refresh_from_db()
    if attempt.state == ReplayState.FAILED:
        raise ReplayFailed(f"the broker did not take the replayed record: {attempt.error}")
    return attempt


def _record_answers(attempts: Sequence[Attempt]) -> None:
    """Store each attempt's state, error, finish time and landing place, leaving FAILED_AGAIN alone.
    PostgreSQL: one UPDATE joined to the attempts passed as six array parameters (``unnest``); elsewhere one
    parameterized statement per row in a single executemany. (Django's bulk_update builds a CASE per field
    and row, and a VALUES list of a placeholder per value cost more in parsing and binding than the produce
    itself at bulk sizes: profiled with bench.dlq_measure.)"""
    if not attempts:
        return
    table = Replay._meta.db_table
    keep = ReplayState.FAILED_AGAIN
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"UPDATE {table} AS r SET state = CASE WHEN r.state = %s THEN r.state ELSE v.state END, "  # noqa: S608  # table name is ours
                "error = v.error, finished_at = v.finished_at, produced_partition = v.partition, "
                "produced_offset = v.offset_ FROM unnest(%s::text[], %s::text[], %s::timestamptz[], "
                "%s::integer[], %s::bigint[], %s::bigint[]) AS v(state, error, finished_at, partition, offset_, id) "
                "WHERE r.id = v.id",
                [
                    keep,
                    [a.state for a in attempts],
                    [a.error for a in attempts],
                    [a.finished_at for a in attempts],
                    [a.produced_partition for a in attempts],
                    [a.produced_offset for a in attempts],
                    [a.pk for a in attempts],
                ],
            )
        else:
            cursor.executemany(
                f"UPDATE {table} SET state = CASE WHEN state = %s THEN state ELSE %s END, "  # noqa: S608  # table name is ours
                "error = %s, finished_at = %s, produced_partition = %s, produced_offset = %s WHERE id = %s",
                [
                    (
                        keep,
                        a.state,
                        a.error,
                        connection.ops.adapt_datetimefield_value(a.finished_at),
                        a.produced_partition,
                        a.produced_offset,
                        a.pk,
                    )
                    for a in attempts
                ],
            )


def record_answers(done: Sequence[Answered]) -> tuple[int, int]:
    """Step 3 of the protocol, the rows only, in the caller's transaction: each attempt PRODUCED at its
    partition and offset, or FAILED with the error (a FAILED_AGAIN stays: the replayed record can pass
    through the pipeline, fail again and be ingested, ``ingest._link_replays``, before this commits, and
    that outcome is the newer one); its dead letter REPLAYED, or PARKED again. Returns (succeeded, failed).
    """
    now = timezone.now()
    produced: list[int] = []
    failed: list[int] = []
    for source, attempt, out in done:
        attempt.finished_at = now
        if out.error:
            attempt.state, attempt.error = ReplayState.FAILED, out.error
            failed.append(source.pk)
        else:
            attempt.state = ReplayState.PRODUCED
            attempt.produced_partition, attempt.produced_offset = out.partition, out.offset
            produced.append(source.pk)
    _record_answers([a for _s, a, _o in done])
    if produced:
        DeadLetter.objects.filter(pk__in=among(produced), status=Status.REPLAYING).update(
            status=Status.REPLAYED, status_changed_at=now
        )
    if failed:
        DeadLetter.objects.filter(pk__in=among(failed), status=Status.REPLAYING).update(
            status=Status.PARKED, status_changed_at=now
        )
    return len(produced), len(failed)


def finish_replays(
    done: Sequence[tuple[DeadLetter, Replay, OutgoingRecord]],
    *,
    actor: User | None,
    reason: str = "",
) -> tuple[int, int]:
    """``record_answers`` in one transaction, with one audit event per dead letter (as ``actor``, or each
    replay's requester when None) and the console told about each. For replays one by one (a person's,
    or those settled after a crash); a bulk action records its answers with ``record_answers`` and audits
    itself once. Returns (succeeded, failed)."""
    by_actor: dict[int, list[audit.Entry]] = {}
    actors: dict[int, User] = {}
    with transaction.atomic():
        ok, failed = record_answers(done)
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
            status = Status.PARKED if out.error else Status.REPLAYED
            notify.message_changed_on_commit(
                dead_letter, status=status, action=action, actor=who.get_username()
            )
        for pk, entries in by_actor.items():
            audit.record_many(actor=actors[pk], entries=entries)
    return ok, failed


def _count_settled_in_bulks(done: Sequence[tuple[DeadLetter, Replay, OutgoingRecord]]) -> None:
    """Add the settled replays that had landed to their bulk actions' figures. The dead worker never
    counted its last chunk; those that had not landed are PARKED again, so the bulk selects and counts
    them when it goes on."""
    landed = Counter(a.bulk_id for _d, a, o in done if not o.error and a.bulk_id is not None)
    for bulk_id, n in landed.items():
        BulkAction.objects.filter(pk=bulk_id).update(
            processed=F("processed") + n, succeeded=F("succeeded") + n
        )


def resolve_in_doubt(
    *, older_than_seconds: float | None = None, bulk: BulkAction | None = None
) -> SettledReplays:
    """Settle PENDING replays whose process died between produce and record: read each target topic from
    shortly before the oldest claim to its end, looking for the replay ids in ``x-streamforge-replay-id``
    on records that also carry the replay-of coordinates and the value the console sent (a header alone
    is anyone's to write). Found: PRODUCED/REPLAYED at that offset. Not found: FAILED/PARKED (nothing
    landed, safe to retry).

    Only replays older than ``older_than_seconds`` (default: the producer's delivery timeout plus a
    margin) are considered, so a produce still in flight is never judged; ``bulk`` narrows them to one
    bulk action's. Returns the counts ``{"produced": n, "failed": m}``.
    """
    age = older_than_seconds if older_than_seconds is not None else settings.DLQ_PRODUCE_TIMEOUT_SECONDS + 10
    cutoff = timezone.now() - timedelta(seconds=age)
    pending = Replay.objects.filter(state=ReplayState.PENDING, requested_at__lte=cutoff).select_related(
        "dead_letter", "requested_by", "payload_revision"
    )
    if bulk is not None:
        pending = pending.filter(bulk=bulk)
    by_topic: dict[tuple[int | None, str], list[Replay]] = {}
    for attempt in pending:
        by_topic.setdefault((attempt.dead_letter.cluster_id, attempt.target_topic), []).append(attempt)
    counts = SettledReplays(produced=0, failed=0)
    for (cluster_id, topic), attempts in by_topic.items():
        since_ms = int(min(a.requested_at for a in attempts).timestamp() * 1000) - 5000
        sent = {str(a.replay_id): (a.dead_letter.coordinates, _sent_value(a)) for a in attempts}
        landed = kafka_io.find_replay_ids(topic, sent, since_ms, cluster_id)
        done = []
        for attempt in attempts:
            where = landed.get(str(attempt.replay_id))
            out = OutgoingRecord(topic=topic, key=None, value=None, headers=[], done=True)
            if where is None:
                out.error = "in doubt after a crash; not found on the target topic, so nothing was produced"
            else:
                out.partition, out.offset = where
            done.append((attempt.dead_letter, attempt, out))
        with transaction.atomic():
            ok, failed = finish_replays(done, actor=None, reason="settled after a crash")
            _count_settled_in_bulks(done)
        counts["produced"] += ok
        counts["failed"] += failed
    return counts


def _sent_value(attempt: Replay) -> bytes | None:
    """The value a replay sent: its payload revision's, else the dead letter's own (``current_payload`` at
    the time of the claim)."""
    if attempt.payload_revision is not None:
        return bytes(attempt.payload_revision.value)
    value = attempt.dead_letter.value
    return bytes(value) if value is not None else None


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
            raise Conflict(not_parked_message(dead_letter.pk))
        _refuse_under_pending_delete(dead_letter.pk)
        audit.record(
            actor=actor, action="dlq.skip", target_type="dead_letter", target_id=dead_letter.pk, reason=reason
        )
        notify.message_changed_on_commit(
            dead_letter, status=Status.SKIPPED, action="dlq.skip", actor=actor.get_username()
        )
    dead_letter.refresh_from_db()
    return dead_letter
