"""Skip past a poison record without losing it (issue #32, item 3): move a pipeline's position on its source
topic forward (past an offset on one partition, or to a time on one or every partition), copying every
skipped record to the pipeline's DLQ topic first, as a ``Skipped`` dead letter that can be replayed later.

The life of a request (``OffsetSkip``, states in ``OffsetSkipState``):

1. ``plan_skip`` (the dry run, also run by ``request_skip``): per partition the current position (the
   newest committed batch of the pipeline's Spark checkpoint: what the driver resumes from), the target
   (``past_offset + 1``, or Kafka's ``offsets_for_times`` for ``to_time``: the first record at or after it;
   the high watermark when there is none) and how many records move. Forward moves are copied and skipped.
   A target behind the current position (``to_time`` only) re-reads records: duplicates, never a loss, so it
   is allowed without a copy; ``past_offset`` never rewinds (a partition already past it is left alone).
2. ``request_skip``: operator role in the pipeline's team, a reason, input that makes sense (400 naming the
   field: partition out of range, offset at or past the high watermark, no checkpoint...), no other open
   request for the pipeline (409; a partial unique index decides between two at once). Creates the request
   and an ``ApprovalRequest`` of kind ``offsets``; audited ``pipeline.offsets.skip_requested`` with the
   ranges.
3. ``approvals.approve`` by a different person with the approver role calls ``approval_decided``: APPROVED,
   and the apply is queued on a worker (``dlq.apply_offset_skip``); a rejection ends it (REJECTED).
4. ``apply_skip`` (the worker; a step function the task calls again every ``WAIT_SECONDS`` while the
   pipeline stops):
   - a pipeline wanted running is stopped through the usual stop path (``request_stop`` as the approver:
     the running micro-batch finishes, the driver commits it and exits); nothing else happens until no run is
     active;
   - positions are read again from the checkpoint (they moved while the pipeline ran) and the records
     [current, target) of each partition are read from the source topic and produced to the DLQ topic with
     the original key, value and headers plus the ``x-streamforge-*`` headers the driver writes (error type
     ``Skipped``, destination ``*``, source topic/partition/offset), ``x-streamforge-skip`` (the request id)
     and ``x-streamforge-source-timestamp`` (the record's own timestamp in epoch ms: the copy is stamped by
     the broker, so the DLQ topic's retention cannot remove an old record's copy before it is ingested).
     Chunks of ``COPY_CHUNK`` records are produced by the console's idempotent producer (acks=all) and each
     chunk's acknowledgement is awaited before ``progress`` records it: a worker that dies re-copies at most
     one chunk (duplicates in the DLQ, never a loss);
   - then, under the pipeline's row lock (a start waits for it) and only if no run became active, the
     checkpoint gets a new committed batch with the moved offsets (``pipelines.spark.checkpoint.move``) and
     the consumer group's offsets are altered to match (it must have no members: the group only feeds lag
     tools, so a refusal is recorded in ``error`` and does not fail the skip);
   - DONE, audited ``pipeline.offsets.skipped`` with the copied ranges; a pipeline that was wanted running is
     started again (``request_start`` as the approver).
   Any failure before the move leaves the positions as they were (FAILED with ``error``; a pipeline that was
   running is started again); copies already made stay in the DLQ.

Limits: the checkpoint must be a local folder (or ``file:`` URI) in Spark 4's v1 format with one Kafka source;
``low_latency`` (real-time mode) pipelines are refused.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from celery import current_app
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from access import audit
from access.models import Role
from access.permissions import require_role
from dlq import signals
from dlq.models import (
    OFFSET_SKIP_OPEN_STATES,
    ApprovalKind,
    ApprovalRequest,
    OffsetSkip,
    OffsetSkipState,
)
from dlq.services import kafka_io
from dlq.services.errors import Conflict, InvalidRequest
from pipelines.clusters import connection_for
from pipelines.models import ACTIVE_STATES, DesiredState, Pipeline, PipelineRun
from pipelines.spark import checkpoint
from pipelines.spec import PipelineSpec, parse_spec
from pipelines.supervision import checkpoint_dir, request_start, request_stop
from pipelines.supervision.launcher import local_checkpoint_path
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, admin_config, consumer_config, reached_end

log = logging.getLogger("dlq.offset_skips")

#: The Celery task that applies an approved skip (``dlq.tasks.apply_offset_skip``), sent by name.
APPLY_TASK = "dlq.apply_offset_skip"
#: Records produced to the DLQ per acknowledged chunk (and per ``progress`` save).
COPY_CHUNK = 500
#: Seconds between two apply steps while the pipeline is stopping.
WAIT_SECONDS = 2.0
#: Seconds the apply waits for a running pipeline to stop before it gives up (FAILED, nothing moved); the
#: reconcile tick kills a driver that outlasts ``DRIVER_STOP_TIMEOUT_SECONDS`` well before.
STOP_WAIT_LIMIT_SECONDS = 600.0
#: Seconds a Kafka metadata, watermark or offsets-for-times lookup may take.
KAFKA_TIMEOUT = 10.0

Direction = Literal["forward", "backward", "none"]


@dataclass(frozen=True)
class PartitionMove:
    """One partition's move: ``current`` (the checkpoint's next offset), ``target`` (the next offset after the
    move), ``low``/``high`` its watermarks. ``records``: how many records are skipped (copied first);
    ``rereads``: how many are read again (a move backwards)."""

    topic: str
    partition: int
    current: int
    target: int
    low: int
    high: int

    @property
    def direction(self) -> Direction:
        """``forward`` (records skipped), ``backward`` (records re-read) or ``none``."""
        if self.target > self.current:
            return "forward"
        return "backward" if self.target < self.current else "none"

    @property
    def records(self) -> int:
        """Records skipped: those in [max(current, low), target) (older ones are gone from the topic)."""
        return max(0, self.target - max(self.current, self.low))

    @property
    def rereads(self) -> int:
        """Records read again after a move backwards."""
        return max(0, self.current - self.target)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape stored in ``OffsetSkip.plan`` and returned by the API."""
        return {**asdict(self), "direction": self.direction, "records": self.records, "rereads": self.rereads}


# ------------------------------------------------------------------------------------------------ the plan


def _spec(pipeline: Pipeline) -> PipelineSpec:
    if pipeline.current_revision is None:
        raise InvalidRequest("pipeline", "the pipeline has no revision")
    return parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)


def checkpoint_path(pipeline: Pipeline) -> Path:
    """The local folder of the pipeline's checkpoint. InvalidRequest("pipeline") when the checkpoint root is
    not a local file system (``hdfs://``, ``s3a://``: not moved here)."""
    location = checkpoint_dir(pipeline.name)
    path = local_checkpoint_path(location)
    if path is None:
        raise InvalidRequest("pipeline", f"the checkpoint {location} is not on a local file system")
    return path


def committed_offsets(pipeline: Pipeline) -> checkpoint.Offsets:
    """The pipeline's checkpoint position: the next offset per (topic, partition) of its newest committed
    batch. InvalidRequest("pipeline") when it has none (never ran a batch) or cannot be read."""
    try:
        return checkpoint.committed_position(checkpoint_path(pipeline)).offsets
    except checkpoint.CheckpointError as exc:
        raise InvalidRequest("pipeline", f"no usable checkpoint: {exc}") from None


def _lookup_consumer(conn: KafkaConnection, *, read_committed: bool) -> Consumer:
    # Assign-only: the group id is never joined or committed.
    return Consumer(
        consumer_config(
            conn,
            group_id=f"streamforge-offset-skip-{uuid.uuid4()}",
            client_id="streamforge-offset-skip",
            read_committed=read_committed,
            extra={"enable.auto.offset.store": False, "enable.partition.eof": True},
        )
    )


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=KAFKA_TIMEOUT)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise InvalidRequest("topic", f"topic {topic} does not exist on the cluster")
    return sorted(found.partitions)


def plan_skip(
    *,
    pipeline: Pipeline,
    topic: str = "",
    partition: int | None = None,
    past_offset: int | None = None,
    to_time: datetime | None = None,
) -> list[PartitionMove]:
    """The dry run: one ``PartitionMove`` per partition concerned, in topic and partition order. Either
    ``past_offset`` (with ``partition``; ``topic`` may be left empty for a pipeline with one source topic)
    or ``to_time`` (an aware datetime; ``partition`` and ``topic`` optional: every partition of every source
    topic). Reads the checkpoint and the source topic's watermarks (and ``offsets_for_times``).

    Raises InvalidRequest naming the field: ``offset`` (neither or both of offset and time, negative, at or
    past the high watermark), ``partition`` (missing for an offset, out of range), ``topic`` (not a source
    topic, or needed because there are several), ``pipeline`` (no revision, ``low_latency``, no usable
    checkpoint or no position in it for the partition). KafkaException when the cluster does not answer."""
    spec = _spec(pipeline)
    if spec.delivery.commit_strategy.kind == "low_latency":
        raise InvalidRequest(
            "pipeline", "a low_latency (Spark real-time mode) pipeline's offsets are not moved here"
        )
    if (past_offset is None) == (to_time is None):
        raise InvalidRequest("offset", "give either an offset to skip past or a time (to_time), not both")
    if past_offset is not None and partition is None:
        raise InvalidRequest("partition", "skipping past an offset needs the partition")
    if past_offset is not None and past_offset < 0:
        raise InvalidRequest("offset", "an offset is 0 or more")
    if partition is not None and partition < 0:
        raise InvalidRequest("partition", "a partition is 0 or more")
    if topic and topic not in spec.source.topics:
        raise InvalidRequest("topic", f"{topic} is not a source topic of {pipeline.name}")
    if not topic and partition is not None and len(spec.source.topics) > 1:
        raise InvalidRequest("topic", f"{pipeline.name} reads {len(spec.source.topics)} topics: name one")
    topics = [topic] if topic else list(spec.source.topics)
    current = committed_offsets(pipeline)
    consumer = _lookup_consumer(connection_for(pipeline.cluster), read_committed=False)
    try:
        wanted: list[tuple[str, int]] = []
        for name in topics:
            partitions = _partitions(consumer, name)
            if partition is not None and partition not in partitions:
                raise InvalidRequest(
                    "partition", f"topic {name} has {len(partitions)} partitions (0 to {len(partitions) - 1})"
                )
            wanted += [(name, p) for p in partitions if partition is None or p == partition]
        marks = {
            tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=KAFKA_TIMEOUT, cached=False)
            for tp in wanted
        }
        targets: dict[tuple[str, int], int] = {}
        if to_time is not None:
            millis = int(to_time.timestamp() * 1000)
            found = consumer.offsets_for_times(
                [TopicPartition(t, p, millis) for t, p in wanted], timeout=KAFKA_TIMEOUT
            )
            for answer in found:
                # -1: no record at or after the time; the move goes to the end.
                high = marks[(answer.topic, answer.partition)][1]
                targets[(answer.topic, answer.partition)] = high if answer.offset < 0 else answer.offset
    finally:
        consumer.close()
    moves = []
    for tp in wanted:
        low, high = marks[tp]
        if tp not in current:
            raise InvalidRequest(
                "pipeline", f"the checkpoint has no position for {tp[0]} partition {tp[1]} yet"
            )
        if past_offset is not None:
            if past_offset >= high:
                raise InvalidRequest(
                    "offset",
                    f"offset {past_offset} is at or beyond the high watermark {high} of {tp[0]} partition "
                    f"{tp[1]} (its last record is {high - 1})",
                )
            # Never a rewind: a partition already past the offset stays where it is.
            target = max(past_offset + 1, current[tp])
        else:
            target = targets[tp]
        moves.append(PartitionMove(tp[0], tp[1], current[tp], target, low, high))
    return moves


def _ranges(moves: Sequence[PartitionMove]) -> list[dict[str, Any]]:
    return [m.as_dict() for m in moves]


# ------------------------------------------------------------------------------------------ the request


def open_skip(pipeline: Pipeline) -> OffsetSkip | None:
    """The pipeline's request that is requested, approved or applying, if any."""
    return OffsetSkip.objects.filter(pipeline=pipeline, state__in=OFFSET_SKIP_OPEN_STATES).first()


def request_skip(
    *,
    actor: User,
    pipeline: Pipeline,
    reason: str,
    topic: str = "",
    partition: int | None = None,
    past_offset: int | None = None,
    to_time: datetime | None = None,
) -> OffsetSkip:
    """Ask for the move ``plan_skip`` describes; a different person with the approver role must approve.
    Needs the operator role in the pipeline's team (PermissionDenied), a reason and a move that skips or
    re-reads at least one record (InvalidRequest), no other open request for the pipeline (Conflict).
    One audit event (``pipeline.offsets.skip_requested``) with the ranges; the approvers are notified."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "an offset skip needs a reason")
    if open_skip(pipeline) is not None:
        raise Conflict(f"an offset skip of {pipeline.name} is already requested or being applied")
    moves = plan_skip(
        pipeline=pipeline, topic=topic, partition=partition, past_offset=past_offset, to_time=to_time
    )
    if all(m.direction == "none" for m in moves):
        raise InvalidRequest("offset", "nothing to move: the pipeline is already there")
    try:
        with transaction.atomic():
            skip = OffsetSkip.objects.create(
                pipeline=pipeline,
                team=pipeline.team,
                topic=topic,
                partition=partition,
                past_offset=past_offset,
                to_time=to_time,
                reason=reason.strip(),
                plan=_ranges(moves),
                requested_by=actor,
            )
            approval = ApprovalRequest.objects.create(
                kind=ApprovalKind.OFFSETS,
                team=pipeline.team,
                offset_skip=skip,
                reason=skip.reason,
                requested_by=actor,
            )
            audit.record(
                actor=actor,
                action="pipeline.offsets.skip_requested",
                target_type="pipeline",
                target_id=pipeline.name,
                reason=skip.reason,
                details={"offset_skip": skip.pk, "approval": approval.pk, "ranges": _audit_ranges(skip.plan)},
            )
            signals.send_on_commit(signals.approval_requested, approval_id=approval.pk)
    except IntegrityError:  # the partial unique index: another request won the race
        raise Conflict(f"an offset skip of {pipeline.name} is already requested or being applied") from None
    return skip


def _audit_ranges(plan: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("topic", "partition", "current", "target", "records", "rereads", "copied")
    return [{k: row[k] for k in keys if k in row} for row in plan]


def enqueue_apply(skip: OffsetSkip, *, countdown: float = 0) -> None:
    """Send the apply step of ``skip`` to a Celery worker (``APPLY_TASK``) once the transaction commits.
    Tests replace this to run the steps themselves."""
    pk = skip.pk
    transaction.on_commit(lambda: current_app.send_task(APPLY_TASK, args=(pk,), countdown=countdown))


def approval_decided(*, actor: User, approval: ApprovalRequest, approved: bool) -> None:
    """The decision on an offset skip's approval, inside ``approvals._decide``'s transaction (which checked
    the approver role and the four eyes, and audited it): APPROVED and queued, or REJECTED. Conflict when
    the request is no longer REQUESTED (rolls the decision back)."""
    if approval.offset_skip_id is None:
        raise Conflict(f"request {approval.pk} has no offset skip")
    now = timezone.now()
    moved = OffsetSkip.objects.filter(pk=approval.offset_skip_id, state=OffsetSkipState.REQUESTED).update(
        state=OffsetSkipState.APPROVED if approved else OffsetSkipState.REJECTED,
        decided_by=actor,
        decided_at=now,
        **({} if approved else {"finished_at": now}),
    )
    if moved != 1:
        raise Conflict(f"offset skip {approval.offset_skip_id} is no longer waiting for approval")
    if approved:
        enqueue_apply(OffsetSkip.objects.get(pk=approval.offset_skip_id))


# ------------------------------------------------------------------------------------------------ the apply


def _active_run(pipeline_id: int) -> bool:
    return PipelineRun.objects.filter(pipeline_id=pipeline_id, state__in=ACTIVE_STATES).exists()


def apply_skip(*, skip_id: int) -> OffsetSkip:
    """One step of applying an approved skip (the worker calls it again while the pipeline stops; see the
    module docstring). Returns the skip: APPLYING while waiting for the pipeline to stop (the caller
    steps again in ``WAIT_SECONDS``), DONE or FAILED when finished; a skip in any other state is returned
    unchanged. Two steps at once (a task delivered again while the first still runs) may both copy a
    partition's records (duplicates in the DLQ, never a loss); the move is made once, under the pipeline's
    and the skip's row locks, and only the step that made it starts the pipeline again."""
    now = timezone.now()
    OffsetSkip.objects.filter(pk=skip_id, state=OffsetSkipState.APPROVED).update(
        state=OffsetSkipState.APPLYING, started_at=now
    )
    skip = OffsetSkip.objects.select_related("pipeline", "decided_by", "pipeline__cluster").get(pk=skip_id)
    if skip.state != OffsetSkipState.APPLYING:
        return skip
    pipeline, actor = skip.pipeline, skip.decided_by
    assert actor is not None  # set with APPROVED
    try:
        if pipeline.desired_state == DesiredState.RUNNING:
            with transaction.atomic():
                # Recorded before stopping, so a step after a crash knows to start it again.
                OffsetSkip.objects.filter(pk=skip.pk).update(was_running=True)
                request_stop(actor=actor, pipeline=pipeline, reason=f"offset skip #{skip.pk}")
            skip.was_running = True
            return skip
        if _active_run(pipeline.pk):
            waited = (now - (skip.started_at or now)).total_seconds()
            if waited > STOP_WAIT_LIMIT_SECONDS:
                raise RuntimeError(f"the pipeline did not stop within {STOP_WAIT_LIMIT_SECONDS:.0f} s")
            return skip  # still stopping
        moves = plan_skip(
            pipeline=pipeline,
            topic=skip.topic,
            partition=skip.partition,
            past_offset=skip.past_offset,
            to_time=skip.to_time,
        )
        result = _copy(skip, moves)
        with transaction.atomic():
            # A start claims the pipeline row; holding it keeps a driver off the checkpoint while it moves.
            locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
            # A second step at once (a redelivered task) waits here, then finds the skip done: one move.
            if (
                not OffsetSkip.objects.select_for_update()
                .filter(pk=skip.pk, state=OffsetSkipState.APPLYING)
                .exists()
            ):
                skip.refresh_from_db()
                return skip
            if locked.desired_state == DesiredState.RUNNING or _active_run(pipeline.pk):
                raise Conflict("the pipeline was started during the skip; the copies stay in the DLQ")
            moved = {(m.topic, m.partition): m.target for m in moves if m.direction != "none"}
            batch = checkpoint.move(checkpoint_path(pipeline), moved) if moved else None
            warning = _move_group(pipeline, moved)
            finished = timezone.now()
            OffsetSkip.objects.filter(pk=skip.pk).update(
                state=OffsetSkipState.DONE,
                result=result,
                moved_at=finished,
                finished_at=finished,
                error=warning,
            )
            audit.record(
                actor=actor,
                action="pipeline.offsets.skipped",
                target_type="pipeline",
                target_id=pipeline.name,
                reason=skip.reason,
                details={
                    "offset_skip": skip.pk,
                    "checkpoint_batch": batch,
                    "copied": sum(r["copied_records"] for r in result),
                    "ranges": _audit_ranges(result),
                    **({"group": warning} if warning else {}),
                },
            )
    except Exception as exc:
        log.exception("offset skip %s of %s failed", skip.pk, pipeline.name)
        _fail(skip, actor, exc)
    skip.refresh_from_db()
    if skip.was_running and skip.state in (OffsetSkipState.DONE, OffsetSkipState.FAILED):
        request_start(actor=actor, pipeline=pipeline, reason=f"after offset skip #{skip.pk}")
    return skip


def _fail(skip: OffsetSkip, actor: User, exc: Exception) -> None:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    OffsetSkip.objects.filter(pk=skip.pk, state=OffsetSkipState.APPLYING).update(
        state=OffsetSkipState.FAILED, error=message[:2000], finished_at=timezone.now()
    )
    audit.record(
        actor=actor,
        action="pipeline.offsets.skip_failed",
        target_type="pipeline",
        target_id=skip.pipeline.name,
        reason=skip.reason,
        details={"offset_skip": skip.pk, "error": message[:500], "copied": skip.copied},
    )


def _copy_headers(
    skip: OffsetSkip, record: Record, spec: PipelineSpec, revision: int
) -> list[tuple[str, bytes | None]]:
    headers = list(record.headers)
    headers += [
        (c.H_ERROR, f"skipped by offset skip #{skip.pk}: {skip.reason}".encode()),
        (c.H_ERROR_TYPE, c.SKIPPED.encode()),
        (c.H_SOURCE_TOPIC, record.topic.encode()),
        (c.H_SOURCE_PARTITION, str(record.partition).encode()),
        (c.H_SOURCE_OFFSET, str(record.offset).encode()),
        (c.H_TIMESTAMP, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()),
        (c.H_PIPELINE, skip.pipeline.name.encode()),
        (c.H_DESTINATION, c.ALL_DESTINATIONS.encode()),
        (c.H_REVISION, str(revision).encode()),
        (c.H_ATTEMPTS, b"0"),
        (c.H_SKIP, str(skip.pk).encode()),
    ]
    if record.timestamp_ms is not None:
        headers.append((c.H_SOURCE_RECORD_TIMESTAMP, str(record.timestamp_ms).encode()))
    return headers


def _copy(skip: OffsetSkip, moves: Sequence[PartitionMove]) -> list[dict[str, Any]]:
    """Copy [max(current, low, progress), target) of every forward move to the DLQ topic, chunk by
    acknowledged chunk, saving ``progress`` and ``copied`` after each. Returns the result rows. Raises
    RuntimeError when the broker refused a copy or a record cannot be read."""
    pipeline = skip.pipeline
    spec = _spec(pipeline)
    revision = pipeline.current_revision.number if pipeline.current_revision is not None else 0
    conn = connection_for(pipeline.cluster)
    cluster_id = pipeline.cluster_id
    progress: dict[str, int] = dict(skip.progress)
    result = []
    consumer = _lookup_consumer(conn, read_committed=spec.delivery.mode == "effectively_once")
    try:
        for move in moves:
            key = f"{move.topic}/{move.partition}"
            first = max(move.current, move.low)  # stable across re-runs: the checkpoint moves only at the end
            start = max(first, progress.get(key, first))
            if move.direction == "forward" and start < move.target:
                consumer.assign([TopicPartition(move.topic, move.partition, start)])
                chunk: list[kafka_io.OutgoingRecord] = []
                next_offset = start
                while next_offset < move.target:
                    message = consumer.poll(KAFKA_TIMEOUT)
                    if message is None:
                        raise RuntimeError(
                            f"no record from {key} at offset {next_offset} within {KAFKA_TIMEOUT} s"
                        )
                    error = message.error()
                    if error is not None:
                        if reached_end(message, move.target):
                            break  # the log ends at or before the target: every record below it was read
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue  # an end seen below the target: keep reading, never step over records
                        raise KafkaException(error)
                    record = Record.from_message(message)
                    if record.offset >= move.target:
                        break
                    chunk.append(
                        kafka_io.OutgoingRecord(
                            topic=spec.dlq.topic,
                            key=record.key,
                            value=record.value,
                            headers=_copy_headers(skip, record, spec, revision),
                            cluster_id=cluster_id,
                        )
                    )
                    next_offset = record.offset + 1
                    if len(chunk) >= COPY_CHUNK:
                        _flush(skip, chunk, progress, key, next_offset)
                        chunk = []
                _flush(skip, chunk, progress, key, move.target)
                consumer.unassign()
            result.append({**move.as_dict(), "copied": [first, max(first, progress.get(key, first))],
                           "copied_records": max(0, progress.get(key, first) - first)})  # fmt: skip
    finally:
        consumer.close()
    return result


def _flush(
    skip: OffsetSkip, chunk: list[kafka_io.OutgoingRecord], progress: dict[str, int], key: str, upto: int
) -> None:
    """Produce ``chunk`` and wait for every acknowledgement, then record that ``key`` is copied up to
    ``upto`` (exclusive). RuntimeError naming the first refusal; nothing is recorded then."""
    kafka_io.produce(chunk)
    failed = [out for out in chunk if out.error]
    if failed:
        raise RuntimeError(f"the DLQ topic refused {len(failed)} of {len(chunk)} copies: {failed[0].error}")
    progress[key] = upto
    skip.copied += len(chunk)
    OffsetSkip.objects.filter(pk=skip.pk).update(progress=progress, copied=skip.copied)


def _move_group(pipeline: Pipeline, moved: checkpoint.Offsets) -> str:
    """Alter the pipeline's consumer group to the moved offsets (``AdminClient.alter_consumer_group_offsets``;
    Kafka accepts it only while the group has no active members). Returns "" or why it was not moved: the
    checkpoint is what the driver resumes from, the group only feeds lag tools, and the driver commits it
    again after its next batch."""
    if not moved:
        return ""
    spec = _spec(pipeline)
    admin = AdminClient(admin_config(connection_for(pipeline.cluster)))
    request = ConsumerGroupTopicPartitions(
        spec.source.consumer_group, [TopicPartition(t, p, o) for (t, p), o in sorted(moved.items())]
    )
    try:
        for future in admin.alter_consumer_group_offsets([request], request_timeout=KAFKA_TIMEOUT).values():
            future.result(timeout=KAFKA_TIMEOUT)
    except KafkaException as exc:
        return f"the consumer group {spec.source.consumer_group} was not moved: {exc}"
    return ""


# -------------------------------------------------------------------------------------------------- reading


def skips_for(pipeline: Pipeline, *, limit: int = 20) -> list[OffsetSkip]:
    """The pipeline's newest offset skip requests (any state), newest first."""
    return list(
        OffsetSkip.objects.filter(pipeline=pipeline).select_related("requested_by", "decided_by")[:limit]
    )


@dataclass(frozen=True)
class PartitionPosition:
    """A source partition as the offsets page shows it: watermarks and the checkpoint's position (None: no
    committed batch covers it yet); ``behind`` = high - position."""

    topic: str
    partition: int
    low: int
    high: int
    position: int | None

    @property
    def behind(self) -> int | None:
        """Records between the checkpoint's position and the end of the partition."""
        return None if self.position is None else max(0, self.high - self.position)


def positions(pipeline: Pipeline) -> tuple[list[PartitionPosition], str]:
    """Every partition of the pipeline's source topics with its watermarks and checkpoint position, and why
    the checkpoint could not be read ("" when it could). KafkaException when the cluster does not answer."""
    spec = _spec(pipeline)
    try:
        current: checkpoint.Offsets = committed_offsets(pipeline)
        problem = ""
    except InvalidRequest as exc:
        current, problem = {}, exc.message
    consumer = _lookup_consumer(connection_for(pipeline.cluster), read_committed=False)
    rows = []
    try:
        for topic in spec.source.topics:
            try:
                partitions = _partitions(consumer, topic)
            except InvalidRequest:
                continue
            for partition in partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=KAFKA_TIMEOUT, cached=False
                )
                rows.append(PartitionPosition(topic, partition, low, high, current.get((topic, partition))))
    finally:
        consumer.close()
    return rows, problem
