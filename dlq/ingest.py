"""The DLQ ingester: consumes every pipeline's DLQ topic and every registered extra DLQ topic into
``DeadLetter`` rows, exactly one row per DLQ record.

Exactly once, across crashes: a batch's rows, failure-group counts and replay links are written in one
database transaction, and the Kafka offsets are committed only after it (synchronously). A crash between
the two re-reads the batch, and rows already stored are recognised by their (topic, partition, offset)
and skipped, so the counts are not incremented twice either. The unique constraint on the coordinates is
the last line of defence if two ingesters ever share a partition. The coordinates include Kafka's topic id:
a DLQ topic deleted and recreated starts again at offset 0, and its records are new, not re-reads.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F, Q
from django.utils import timezone

from access.bulk_insert import copy_rows
from dlq import broadcast, headers, signals
from dlq.grouping import group_key, normalize_message
from dlq.models import DeadLetter, DlqTopic, FailureGroup, GroupHourlyCount, Replay, ReplayState
from pipelines.clusters import cluster_name, connection_for, is_verified
from pipelines.models import KafkaCluster, Pipeline
from pipelines.spec import SpecError
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, admin_config, consumer_config

log = logging.getLogger(__name__)

DEFAULT_GROUP_ID = "streamforge-dlq-ingest"
_KEY_TEXT_CHARS = 200


@dataclass(frozen=True)
class Writer:
    """A pipeline whose current spec names a DLQ topic: its id, team id and name."""

    pipeline_id: int
    team_id: int
    name: str


@dataclass(frozen=True)
class Attribution:
    """Who one record belongs to (see ``TopicOwner.attribute``): team, pipeline (id and name), what the
    record's pipeline header claimed, and a warning when that claim was not followed."""

    team_id: int
    pipeline_id: int | None
    pipeline_name: str
    claimed_pipeline: str
    warning: str


@dataclass(frozen=True)
class TopicOwner:
    """Who a DLQ topic's records belong to: the team, and the pipeline when one is known.

    Ownership comes from the topic, never from a record: anyone who can write to a DLQ topic can write any
    header. ``writers`` are the pipelines whose current spec names the topic (two pipelines reading one
    source topic share its default DLQ topic); a record's ``x-streamforge-pipeline`` header may only choose
    among them, as each of them legitimately writes there.
    """

    team_id: int
    pipeline_id: int | None
    pipeline_name: str
    writers: tuple[Writer, ...] = ()

    def attribute(self, topic: str, claimed: str) -> Attribution:
        """The owner of a record read from ``topic`` whose pipeline header says ``claimed`` (may be empty).
        A claim naming one of the topic's writers picks that writer; any other claim is kept with a warning
        and grants nothing."""
        for writer in self.writers:
            if claimed and writer.name == claimed:
                return Attribution(writer.team_id, writer.pipeline_id, writer.name, claimed, "")
        own = Attribution(self.team_id, self.pipeline_id, self.pipeline_name, claimed, "")
        if not claimed or claimed == self.pipeline_name:
            return own
        owner = (
            f"pipeline {self.pipeline_name!r}" if self.pipeline_name else "its registered team (no pipeline)"
        )
        warning = (
            f"the record's {c.H_PIPELINE} header names pipeline {claimed!r}, but DLQ topic {topic!r} belongs "
            f"to {owner}; the header was not used for ownership or replay targets"
        )
        return dataclasses.replace(own, warning=warning)


def dlq_topics(cluster_id: int | None = None) -> dict[str, TopicOwner]:
    """Every DLQ topic to read on the cluster ``cluster_id`` (None: the default) and its owner: each of its
    pipelines' current ``dlq.topic`` (named by several pipelines: the oldest owns records whose header names
    none of them), plus the DlqTopic rows registered there (which win where both name a topic, as an admin
    registered them deliberately)."""
    writers: dict[str, list[Writer]] = defaultdict(list)
    pipelines = (
        Pipeline.objects.select_related("current_revision__pipeline")
        .filter(cluster_id=cluster_id)
        .exclude(current_revision=None)
        .order_by("pk")
    )
    for pipeline in pipelines:
        assert pipeline.current_revision is not None
        topic: str | None
        try:
            topic = pipeline.current_revision.parsed.dlq.topic
        except SpecError:
            # Validated when stored; should the rules have tightened since, its running job still writes
            # this DLQ topic, so it is still read.
            log.warning(
                "revision %s no longer validates; reading its stored DLQ topic", pipeline.current_revision
            )
            topic = (pipeline.current_revision.spec.get("dlq") or {}).get("topic")
        if topic:
            writers[str(topic)].append(Writer(pipeline.pk, pipeline.team_id, pipeline.name))
    owners: dict[str, TopicOwner] = {}
    for topic, named_by in writers.items():
        first = named_by[0]
        owners[topic] = TopicOwner(first.team_id, first.pipeline_id, first.name, tuple(named_by))
        if len({w.team_id for w in named_by}) > 1:
            log.warning(
                "DLQ topic %s is named by pipelines of several teams (%s); each record goes to the one its "
                "pipeline header names, else to %s",
                topic,
                ", ".join(w.name for w in named_by),
                first.name,
            )
    for extra in DlqTopic.objects.filter(cluster_id=cluster_id).select_related("pipeline"):
        owners[extra.topic] = TopicOwner(
            extra.team_id, extra.pipeline_id, extra.pipeline.name if extra.pipeline else ""
        )
    return owners


@dataclass
class BatchResult:
    """What one ``store_batch`` did: rows inserted, records already stored (re-read after a crash), and
    the ids of the new rows."""

    inserted: int = 0
    already_stored: int = 0
    new_ids: list[int] = field(default_factory=list)


def _encode_headers(raw: Sequence[tuple[str, bytes | None]]) -> list[list[str | None]]:
    return [[name, None if value is None else base64.b64encode(value).decode()] for name, value in raw]


def _fit(field_name: str, text: str) -> str:
    """Header text cut to the width of its ``DeadLetter`` column (``FailureGroup`` shares the widths). The
    headers come from any producer; PostgreSQL refuses a value longer than its column (SQLite kept it), and
    one over-long header must not stop the whole batch, and with it the ingester, at every restart."""
    column = DeadLetter._meta.get_field(field_name)
    assert isinstance(column, models.CharField), f"{field_name} is not a text column"
    return text[: column.max_length] if column.max_length else text


def _key_text(key: bytes | None) -> str:
    if not key:
        return ""
    return key[:_KEY_TEXT_CHARS].decode("utf-8", "replace")[:_KEY_TEXT_CHARS]


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _timestamp(record: Record) -> datetime | None:
    if record.timestamp_ms is None:
        return None
    return datetime.fromtimestamp(record.timestamp_ms / 1000, tz=UTC)


#: Records per poll at most. Each batch pays a fixed cost (the already-stored lookup, group and hourly
#: counts, the commit of its transaction and of its offsets, the console's live notice): at 500 that was
#: a third of ingest's time (profiled with bench.dlq_measure); a poll returns what is there, so a small
#: trickle is stored as soon as it arrives whatever the size.
DEFAULT_BATCH_SIZE = 2000

#: How many times ``store_batch`` stores a batch again after another ingester stored part of it first.
_STORE_ATTEMPTS = 3


def store_batch(
    messages: Sequence[Record], owners: dict[str, TopicOwner], cluster_id: int | None = None
) -> BatchResult:
    """Store one polled batch of DLQ records, read from the cluster ``cluster_id`` (None: the default), in
    one transaction (see the module docstring).

    Two ingesters can hold the same records for a moment (a consumer-group rebalance hands a partition to a
    new member while the old one is still storing its last batch). The unique constraints (one row per DLQ
    record, one failure group per key, one count per group and hour) let only one of them insert; the other
    gets IntegrityError, rolls its whole batch back and stores it again, now finding those records stored.
    Raises IntegrityError only when that keeps happening (``_STORE_ATTEMPTS`` times).

    ``owners`` maps each subscribed topic to its owner, which owns the topic's records
    (``TopicOwner.attribute``): a record's ``x-streamforge-pipeline`` header is kept as
    ``claimed_pipeline``, with an ``ownership_warning`` when it names another pipeline. Records of topics
    without an owner are skipped with a warning (the subscription has just changed).
    """
    for attempt in range(1, _STORE_ATTEMPTS + 1):
        try:
            return _store_batch_once(messages, owners, cluster_id)
        except IntegrityError:
            if attempt == _STORE_ATTEMPTS:
                raise
            log.info(
                "another ingester stored part of this batch first; storing the rest (attempt %d)", attempt
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _store_batch_once(
    messages: Sequence[Record], owners: dict[str, TopicOwner], cluster_id: int | None
) -> BatchResult:
    result = BatchResult()
    now = timezone.now()
    with transaction.atomic():
        stored = already_stored(messages)
        rows: list[DeadLetter] = []
        group_rows: dict[str, FailureGroup] = {}
        arrivals: Counter[tuple[str, datetime]] = Counter()
        replay_ids: dict[str, list[int]] = defaultdict(list)
        seen_now: set[tuple[str, str, int, int]] = set()
        for message in messages:
            topic, partition, offset = message.topic, message.partition, message.offset
            coordinates = (topic, message.topic_id, partition, offset)
            if coordinates in stored or coordinates in seen_now:
                result.already_stored += 1
                continue
            owner = owners.get(topic)
            if owner is None:
                log.warning("record %s/%s/%s of a topic with no owner was skipped", topic, partition, offset)
                continue
            seen_now.add(coordinates)
            raw_headers = message.headers
            failure = headers.parse(raw_headers)
            attributed = owner.attribute(topic, failure.pipeline)
            team_id, pipeline_id = attributed.team_id, attributed.pipeline_id
            pipeline_name = attributed.pipeline_name
            signature = normalize_message(failure.error_message)
            gkey = group_key(
                team_id=team_id,
                pipeline=pipeline_name,
                dlq_topic=topic,
                cluster_id=cluster_id,
                error_type=failure.error_type,
                signature=signature,
            )
            failed_at = failure.failed_at or _timestamp(message) or now
            group = group_rows.get(gkey) or _group(
                gkey, team_id, pipeline_id, pipeline_name, topic, failure, now
            )
            group_rows[gkey] = group
            group.count += 1
            group.first_seen = min(group.first_seen, failed_at)
            group.last_seen = max(group.last_seen, failed_at)
            arrivals[(gkey, _hour(failed_at))] += 1
            value = message.value
            key = message.key
            row = DeadLetter(
                team_id=team_id,
                pipeline_id=pipeline_id,
                pipeline_name=_fit("pipeline_name", pipeline_name),
                claimed_pipeline=_fit("claimed_pipeline", attributed.claimed_pipeline),
                ownership_warning=attributed.warning,
                cluster_id=cluster_id,
                dlq_topic=topic,
                dlq_topic_id=message.topic_id,
                dlq_partition=partition,
                dlq_offset=offset,
                dlq_timestamp=_timestamp(message),
                source_topic=_fit("source_topic", failure.source_topic),
                source_partition=failure.source_partition,
                source_offset=failure.source_offset,
                key=key,
                value=value,
                headers=_encode_headers(raw_headers),
                value_size=len(value or b""),
                key_text=_key_text(key),
                convention=failure.convention,
                error_type=_fit("error_type", failure.error_type),
                error_message=failure.error_message,
                destination=_fit("destination", failure.destination),
                revision=failure.revision,
                attempts=failure.attempts,
                first_failed_at=failed_at,
                last_failed_at=failed_at,
                # set below; given here so the model does not work out each foreign key's default per row
                group_id=None,  # type: ignore[misc]  # not null in the table: set below, before the insert
                replay_of_id=None,
            )
            row._group_key = gkey  # type: ignore[attr-defined]  # resolved to group_id below
            if failure.replay_id:
                replay_ids[failure.replay_id].append(len(rows))
            rows.append(row)
        if not rows:
            return result
        saved_groups = _save_groups(group_rows)
        for row in rows:
            row.group_id = saved_groups[row._group_key]  # type: ignore[attr-defined]
        _link_replays(rows, replay_ids)
        _insert(rows)
        _save_hourly(saved_groups, arrivals)
        result.inserted = len(rows)
        result.new_ids = [int(row.pk) for row in rows]
        summary = _arrival_summary(rows)
        transaction.on_commit(lambda: broadcast.dead_letters_arrived(summary))
    return result


def _insert(rows: list[DeadLetter]) -> None:
    """Insert ``rows`` and set their ids. On PostgreSQL with one COPY, the ids taken from the sequence
    first: a multi-row INSERT of a batch spends most of ingest's time building and escaping its SQL text
    (profiled: Django's per-value compilation and the client-side binding of ~1 KB payloads took more than
    the database; ``access.bulk_insert``). Elsewhere (SQLite) ``bulk_create``. A row another ingester
    stored first raises IntegrityError either way (``store_batch`` retries)."""
    if connection.vendor != "postgresql":
        DeadLetter.objects.bulk_create(rows, batch_size=500)
        return
    copy_rows(DeadLetter, rows, with_ids=True)


def _stored_rows(
    coordinates: Iterable[tuple[str, str, int, int]],
) -> list[tuple[int, str, str, int, int]]:
    """(id, topic, topic id, partition, offset) of the stored rows within the offset span of each partition
    of ``coordinates`` (one query, served by the unique index on the coordinates)."""
    spans: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for topic, topic_id, partition, offset in coordinates:
        spans[(topic, topic_id, partition)].append(offset)
    if not spans:
        return []
    condition = Q()
    for (topic, topic_id, partition), offsets in spans.items():
        condition |= Q(
            dlq_topic=topic,
            dlq_topic_id=topic_id,
            dlq_partition=partition,
            dlq_offset__gte=min(offsets),
            dlq_offset__lte=max(offsets),
        )
    return list(
        DeadLetter.objects.filter(condition).values_list(
            "pk", "dlq_topic", "dlq_topic_id", "dlq_partition", "dlq_offset"
        )
    )


def already_stored(messages: Sequence[Record]) -> set[tuple[str, str, int, int]]:
    """(topic, topic id, partition, offset) of those records that already have a row."""
    stored = _stored_rows((m.topic, m.topic_id, m.partition, m.offset) for m in messages)
    return {(topic, topic_id, partition, offset) for _pk, topic, topic_id, partition, offset in stored}


def _group(
    gkey: str,
    team_id: int,
    pipeline_id: int | None,
    pipeline_name: str,
    topic: str,
    failure: headers.Failure,
    now: datetime,
) -> FailureGroup:
    """An unsaved group carrying this batch's increments (count starts at 0, times at the first record)."""
    first = failure.failed_at or now
    return FailureGroup(
        key=gkey,
        team_id=team_id,
        pipeline_id=pipeline_id,
        pipeline_name=_fit("pipeline_name", pipeline_name),
        dlq_topic=topic,
        error_type=_fit("error_type", failure.error_type),
        signature=normalize_message(failure.error_message),
        sample_message=failure.error_message[:2000],
        count=0,
        first_seen=first,
        last_seen=first,
    )


def _save_groups(increments: dict[str, FailureGroup]) -> dict[str, int]:
    """Add this batch's counts to the stored groups (created if new); returns group key -> id."""
    ids: dict[str, int] = {}
    existing = {g.key: g for g in FailureGroup.objects.select_for_update().filter(key__in=list(increments))}
    for gkey, batch in increments.items():
        stored = existing.get(gkey)
        if stored is None:
            batch.save()
            ids[gkey] = batch.pk
            signals.send_on_commit(signals.failure_group_created, group_id=batch.pk)
            continue
        FailureGroup.objects.filter(pk=stored.pk).update(
            count=F("count") + batch.count,
            first_seen=min(stored.first_seen, batch.first_seen),
            last_seen=max(stored.last_seen, batch.last_seen),
        )
        ids[gkey] = stored.pk
    return ids


def _save_hourly(group_ids: dict[str, int], arrivals: Counter[tuple[str, datetime]]) -> None:
    for (gkey, hour), count in arrivals.items():
        updated = GroupHourlyCount.objects.filter(group_id=group_ids[gkey], hour=hour).update(
            count=F("count") + count
        )
        if not updated:
            GroupHourlyCount.objects.create(group_id=group_ids[gkey], hour=hour, count=count)


#: Replay states whose record may be on its target topic, so it can come back to the DLQ. PENDING too: the
#: record can pass through the pipeline and fail again before the console has recorded the broker's
#: acknowledgement (``replays.finish_replays`` then keeps FAILED_AGAIN).
_LANDED = (ReplayState.PENDING, ReplayState.PRODUCED, ReplayState.FAILED_AGAIN)


def _link_replays(rows: list[DeadLetter], replay_ids: dict[str, list[int]]) -> None:
    """Link the records that carry a console replay id (``rows[i]`` for each i in ``replay_ids[id]``) to
    the dead letter that was replayed, and mark that replay FAILED_AGAIN, when they are that replay failing
    again; else the header is ignored, with a note in ``ownership_warning``, and the record stays a fresh
    dead letter.

    The header is data anyone who writes to a topic can forge (a test message, any producer; replay ids are
    shown on the message page), so it only points at a candidate, which the console's own record of the
    replay must confirm: the replay's record may have landed (``_LANDED``), the replayed dead letter has the
    row's team, pipeline, cluster and DLQ topic, and the row's source is where the replay landed: its target
    topic, and, once the broker's acknowledgement is recorded, its partition and offset (the driver names
    the record it read). What is left to a forger is a record in the same team's DLQ topic naming a replay
    whose acknowledgement is not recorded yet (a moment, or a replay left in doubt by a crash).
    """
    if not replay_ids:
        return
    # Not a UUID: no replay of ours (and querying with it would fail the whole batch).
    ids = {text: _as_uuid(text) for text in replay_ids}
    fields = ("state", "target_topic", "produced_partition", "produced_offset", "dead_letter_id",
              "dead_letter__team_id", "dead_letter__pipeline_id", "dead_letter__cluster_id",
              "dead_letter__dlq_topic")  # fmt: skip
    candidates = Replay.objects.filter(replay_id__in=[i for i in ids.values() if i is not None])
    replays = {row[0]: row[1:] for row in candidates.values_list("replay_id", "pk", *fields)}
    confirmed: set[int] = set()
    for text, indexes in replay_ids.items():
        found = replays.get(ids[text]) if ids[text] is not None else None
        for index in indexes:
            row = rows[index]
            if found is not None and _replay_failed_again(row, found):
                row.replay_of_id = found[5]
                confirmed.add(found[0])
                continue
            note = (
                f"the record's {c.H_REPLAY_ID} header names {text[:64]!r}, which is not a replay of this DLQ "
                "topic's dead letters that landed where this record was read; it was not linked"
            )
            row.ownership_warning = f"{row.ownership_warning}\n{note}" if row.ownership_warning else note
    if confirmed:
        Replay.objects.filter(pk__in=confirmed).exclude(state=ReplayState.FAILED_AGAIN).update(
            state=ReplayState.FAILED_AGAIN
        )


def _as_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _replay_failed_again(row: DeadLetter, replay: tuple[Any, ...]) -> bool:
    """Whether ``row`` is the record of ``replay`` (``_link_replays``' values: pk, state, target topic,
    produced partition and offset, dead letter id, its team, pipeline, cluster and DLQ topic) failing again."""
    _pk, state, target, partition, offset, _dl, team_id, pipeline_id, cluster_id, dlq_topic = replay
    landed_at = (target,) if offset is None else (target, partition, offset)
    read_at = (row.source_topic, row.source_partition, row.source_offset)[: len(landed_at)]
    return (
        state in _LANDED
        and (team_id, pipeline_id, cluster_id, dlq_topic)
        == (row.team_id, row.pipeline_id, row.cluster_id, row.dlq_topic)
        and landed_at == read_at
    )


def _arrival_summary(rows: Iterable[DeadLetter]) -> list[broadcast.Arrival]:
    counts: Counter[tuple[int, str, str, int]] = Counter()
    for row in rows:
        counts[(row.team_id, row.pipeline_name, row.error_type, int(row.group_id))] += 1
    return [
        broadcast.Arrival(team_id=team, pipeline=name, error_type=etype, group=group, count=count)
        for (team, name, etype, group), count in counts.items()
    ]


def store_made_rows(rows: list[DeadLetter]) -> list[int]:
    """Store dead letters made elsewhere than from a DLQ topic (``dlq.services.imports``) as ingest stores its
    own: each row joins its failure group (``group_key`` of its team, pipeline, DLQ topic, cluster, error
    type and normalized message; created or counted), the hourly arrivals count it at its
    ``last_failed_at``, one insert, and the console hears of them after commit. Sets ``group_id`` and the
    ids; returns the ids. Call it inside a transaction; a row whose coordinates are stored already raises
    IntegrityError."""
    if not rows:
        return []
    now = timezone.now()
    group_rows: dict[str, FailureGroup] = {}
    arrivals: Counter[tuple[str, datetime]] = Counter()
    for row in rows:
        signature = normalize_message(row.error_message)
        gkey = group_key(
            team_id=row.team_id,
            pipeline=row.pipeline_name,
            dlq_topic=row.dlq_topic,
            cluster_id=row.cluster_id,
            error_type=row.error_type,
            signature=signature,
        )
        failure = headers.Failure(
            convention="unknown",
            error_type=row.error_type,
            error_message=row.error_message,
            failed_at=row.last_failed_at,
        )
        group = group_rows.get(gkey) or _group(
            gkey, row.team_id, row.pipeline_id, row.pipeline_name, row.dlq_topic, failure, now
        )
        group_rows[gkey] = group
        group.count += 1
        group.first_seen = min(group.first_seen, row.first_failed_at)
        group.last_seen = max(group.last_seen, row.last_failed_at)
        arrivals[(gkey, _hour(row.last_failed_at))] += 1
        row._group_key = gkey  # type: ignore[attr-defined]  # resolved to group_id below
    saved_groups = _save_groups(group_rows)
    for row in rows:
        row.group_id = saved_groups[row._group_key]  # type: ignore[attr-defined]
    _insert(rows)
    _save_hourly(saved_groups, arrivals)
    summary = _arrival_summary(rows)
    transaction.on_commit(lambda: broadcast.dead_letters_arrived(summary))
    return [int(row.pk) for row in rows]


class Ingester:
    """The long-running loop for one cluster (``cluster``; None: the installation's default): subscribe to its
    DLQ topics, poll batches, ``store_batch``, commit offsets. ``bootstrap_servers`` overrides the cluster
    with a plaintext one (tests, benchmarks).

    ``batch_size`` records per poll (at most), ``poll_timeout`` seconds per poll, the topic list refreshed
    every ``refresh_seconds``. ``stop`` (a threading.Event) ends the loop after the current batch.
    Offsets start at the earliest record for a new consumer group, so nothing already parked is missed.
    """

    def __init__(
        self,
        *,
        cluster: KafkaCluster | None = None,
        bootstrap_servers: str | None = None,
        group_id: str = DEFAULT_GROUP_ID,
        instance_id: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        poll_timeout: float = 1.0,
        refresh_seconds: float = 10.0,
        on_batch: Callable[[BatchResult], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.cluster_id = cluster.pk if cluster is not None else None
        self.cluster_name = cluster_name(cluster)
        self.kafka = KafkaConnection(bootstrap_servers) if bootstrap_servers else connection_for(cluster)
        self.group_id = group_id
        self.instance_id = instance_id if instance_id is not None else f"dlq-ingest-{socket.gethostname()}"
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.refresh_seconds = refresh_seconds
        self.on_batch = on_batch
        self.stop = stop or threading.Event()
        self.totals: Counter[str] = Counter()
        self._consumer: Consumer | None = None
        self._owners: dict[str, TopicOwner] = {}
        self._subscribed: set[str] = set()
        self._topic_ids: dict[str, str] = {}
        self._next_refresh = 0.0

    def _make_consumer(self) -> Consumer:
        # Offsets are committed after the database commit, never before (consumer_config never
        # auto-commits); read_committed: an aborted effectively-once batch is not a failure.
        return Consumer(
            consumer_config(
                self.kafka,
                group_id=self.group_id,
                read_committed=True,
                offset_reset="earliest",
                client_id=f"dlq-ingest-{self.cluster_name}-{os.getpid()}",
                extra={
                    # Static membership: an ingester restarted after a crash gets its partitions back at
                    # once instead of waiting for the dead member's session to time out and a rebalance.
                    **({"group.instance.id": self.instance_id} if self.instance_id else {}),
                    "session.timeout.ms": 15_000,
                },
            )
        )

    def _refresh(self, consumer: Consumer) -> None:
        self._owners = dlq_topics(self.cluster_id)
        existing = set(consumer.list_topics(timeout=10).topics)
        wanted = {t for t in self._owners if t in existing}
        if wanted != self._subscribed:
            if wanted:
                consumer.subscribe(sorted(wanted))
            else:
                consumer.unsubscribe()
            log.info(
                "dlq-ingest reads %d topic(s) of cluster %s: %s",
                len(wanted),
                self.cluster_name,
                ", ".join(sorted(wanted)) or "none",
            )
            self._subscribed = wanted
        self._topic_ids = self._describe(sorted(wanted))
        self._next_refresh = time.monotonic() + self.refresh_seconds

    def _describe(self, topics: list[str]) -> dict[str, str]:
        """Kafka's topic id of each topic (empty when the broker does not say)."""
        if not topics:
            return {}
        admin = AdminClient(admin_config(self.kafka))
        ids: dict[str, str] = {}
        for topic, future in admin.describe_topics(TopicCollection(topics)).items():
            try:
                ids[topic] = str(future.result(timeout=10).topic_id)
            except KafkaException as exc:  # deleted meanwhile: its records carry no id until the next refresh
                log.warning("could not describe %s: %s", topic, exc)
        return ids

    def _recheck_topic_ids(self, records: list[Record]) -> list[Record]:
        """Records that look already stored may come from a topic deleted and recreated since the last
        refresh (offsets start at 0 again): describe their topics anew and re-label them if the id changed."""
        known = already_stored(records)
        suspects = sorted({r.topic for r in records if (r.topic, r.topic_id, r.partition, r.offset) in known})
        if not suspects:
            return records
        fresh = self._describe(suspects)
        changed = {t for t in suspects if fresh.get(t) and fresh[t] != self._topic_ids.get(t)}
        if not changed:
            return records
        for topic in changed:
            log.warning(
                "DLQ topic %s was recreated (new topic id %s); its records are new", topic, fresh[topic]
            )
            self._topic_ids[topic] = fresh[topic]
        return [
            dataclasses.replace(r, topic_id=self._topic_ids[r.topic]) if r.topic in changed else r
            for r in records
        ]

    def run_once(self) -> BatchResult:
        """Poll one batch, store it and commit its offsets. Returns what was stored."""
        consumer = self._consumer or self._make_consumer()
        self._consumer = consumer
        if time.monotonic() >= self._next_refresh:
            self._refresh(consumer)
        if not self._subscribed:
            time.sleep(self.poll_timeout)
            return BatchResult()
        polled = consumer.consume(num_messages=self.batch_size, timeout=self.poll_timeout)
        records: list[Record] = []
        for message in polled:
            error = message.error()
            if error is None:
                records.append(Record.from_message(message, self._topic_ids.get(str(message.topic()), "")))
            elif error.code() != KafkaError._PARTITION_EOF:
                log.warning("dlq-ingest poll error: %s", error)
        if not records:
            return BatchResult()
        records = self._recheck_topic_ids(records)
        result = store_batch(records, self._owners, self.cluster_id)
        consumer.commit(offsets=_next_offsets(records), asynchronous=False)
        self.totals["inserted"] += result.inserted
        self.totals["already_stored"] += result.already_stored
        if self.on_batch is not None:
            self.on_batch(result)
        return result

    def assigned(self) -> bool:
        """Whether the consumer currently owns partitions (it has joined the group). Never raises: it is
        asked from another thread (the command's readiness loop), and a consumer closed by a failing run
        answers RuntimeError; that crashed the command's main thread after a broker restart (`make chaos`)
        and ingest stopped until the process was restarted."""
        consumer = self._consumer
        if consumer is None:
            return False
        try:
            return bool(consumer.assignment())
        except (RuntimeError, KafkaException):
            return False

    def run(self) -> None:
        """Loop until ``stop`` is set (SIGTERM/SIGINT set it when run from the management command)."""
        try:
            while not self.stop.is_set():
                self.run_once()
        finally:
            consumer, self._consumer = self._consumer, None  # forgotten before it is closed
            if consumer is not None:
                consumer.close()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT finish the current batch, then stop."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())


class ClusterIngesters:
    """One ``Ingester`` per Kafka cluster, each in a thread of its own: what ``manage.py dlq_ingest`` runs.

    The cluster list is read again every ``refresh_seconds``: a cluster added is read from then on, one
    deleted stops being read. Only clusters the product may connect to are read (``is_verified``: the
    default, and the named ones an admin's test approved on their current settings): a new cluster waits for
    its test, and a changed one is stopped until it is tested again (its ingester restarts with the new
    settings then). One cluster failing (unreachable, a password that cannot be read) is logged and retried
    every ``retry_seconds`` without holding up the others. ``options`` are passed to each ``Ingester``;
    ``stop`` ends them all after their current batch.
    """

    def __init__(self, *, refresh_seconds: float = 10.0, retry_seconds: float = 5.0, **options: Any) -> None:
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self.options = options
        self.stop = threading.Event()
        self.ingesters: dict[int | None, Ingester] = {}
        self._threads: dict[int | None, tuple[threading.Thread, threading.Event]] = {}
        self._approved: dict[int | None, str] = {}  # the verified fingerprint each thread started with
        self._waiting: set[int] = set()  # clusters already logged as waiting for their test
        self._retired: list[threading.Thread] = []  # threads of stopped ingesters, joined by close()

    def _serve(self, cluster: KafkaCluster | None, done: threading.Event) -> None:
        name = cluster_name(cluster)
        try:
            while not done.is_set():
                try:
                    ingester = Ingester(
                        cluster=cluster, stop=done, refresh_seconds=self.refresh_seconds, **self.options
                    )
                    self.ingesters[cluster.pk if cluster else None] = ingester
                    ingester.run()
                except Exception:
                    log.exception(
                        "dlq-ingest of cluster %s failed; retrying in %.0f s", name, self.retry_seconds
                    )
                    done.wait(self.retry_seconds)
        finally:
            connection.close()  # this thread's own database connection

    def _stop_thread(self, key: int | None) -> None:
        thread, done = self._threads.pop(key)
        done.set()
        self._retired = [*(t for t in self._retired if t.is_alive()), thread]
        self.ingesters.pop(key, None)
        self._approved.pop(key, None)

    def refresh(self) -> None:
        """Start an ingester for each cluster the product may connect to without one; stop those of clusters
        that are gone, no longer verified, or verified on other settings than their ingester started with."""
        wanted: dict[int | None, KafkaCluster | None] = {None: None}
        for row in KafkaCluster.objects.all():
            if is_verified(row):
                wanted[row.pk] = row
                self._waiting.discard(row.pk)
            elif row.pk not in self._waiting:
                self._waiting.add(row.pk)
                log.warning(
                    "dlq-ingest does not read Kafka cluster %s: no admin's connection test passed on its "
                    "current settings",
                    row.name,
                )
        for key in list(self._threads):
            current = wanted.get(key)
            approved = current.verified_fingerprint if current is not None else ""
            if key not in wanted or approved != self._approved.get(key):
                self._stop_thread(key)
        for key, cluster in wanted.items():
            if key not in self._threads:
                done = threading.Event()
                thread = threading.Thread(
                    target=self._serve, args=(cluster, done), name=f"dlq-ingest-{cluster_name(cluster)}"
                )
                self._threads[key] = (thread, done)
                self._approved[key] = "" if cluster is None else cluster.verified_fingerprint
                thread.start()

    def assigned(self) -> bool:
        """Whether any cluster's consumer owns partitions."""
        return any(ingester.assigned() for ingester in list(self.ingesters.values()))

    def totals(self) -> Counter[str]:
        """The sum of every ingester's totals (inserted, already stored)."""
        total: Counter[str] = Counter()
        for ingester in list(self.ingesters.values()):
            total.update(ingester.totals)
        return total

    def close(self, timeout: float = 30.0) -> None:
        """Stop every ingester and wait up to ``timeout`` seconds for each to close its consumer."""
        self.stop.set()
        for _thread, done in self._threads.values():
            done.set()
        for thread in [*(t for t, _ in self._threads.values()), *self._retired]:
            thread.join(timeout)

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the ingesters after their current batch."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())


def _next_offsets(records: Sequence[Record]) -> list[TopicPartition]:
    """The offset to commit per partition: one past the last record read (Kafka's commit convention)."""
    highest: dict[tuple[str, int], int] = {}
    for record in records:
        tp = (record.topic, record.partition)
        highest[tp] = max(highest.get(tp, -1), record.offset)
    return [TopicPartition(topic, partition, offset + 1) for (topic, partition), offset in highest.items()]
