"""Browsing the Kafka topics a pipeline owns: its source topics, destination topics and DLQ topic (its current
spec's), on the pipeline's cluster. Partitions with their watermarks, the topic's configs, the pipeline's
consumer group lag on it, and records page by page, newest first, masked for viewers as the DLQ message page
masks a dead letter (``dlq.services.masking_for``, ``dlq.presenters.payload_views``), made right per topic
(``topic_masking``): the masked paths describe source records, so a destination topic written by a
transform has its values withheld from viewers instead of "masked" by paths its records do not have.

What the DLQ console promised stays promised here: a record whose content an approved (four-eyes) delete
erased (``dlq.models.ErasedRecord``: the DLQ record, its source record, its replays) is shown to nobody, nor
is a destination record whose lineage names an erased source record; and who sent a test message is the
console's own record of it (``ProducedTestMessage``), never the record's ``x-streamforge-test`` header.

It lives in the ``dlq`` app, not in ``pipelines``, because what a viewer may see of a record (masking and
the pretty / raw / hex views) is the DLQ console's, and ``pipelines`` may not import ``dlq``; moving the
masking down would have moved half of ``dlq.services.rendering`` and ``dlq.presenters`` for one caller.

Search (``search``) reads a bounded range (at most ``max_scan`` records per partition from a start offset or
time) in steps of at most ``SEARCH_STEP_SECONDS``, each answering with its matches, what it scanned and a
cursor to go on, so progress is shown and no request holds a worker for long; it matches what the viewer may
see (masked text, masked DSL fields) and never an erased record. A live tail (``tail``) returns what was
written since a position. ``topic_groups`` lists the consumer groups that read an owned topic, with their
committed offset, the end offset and the lag per partition, and nothing of the other topics they read.

Reading never joins a consumer group: partitions are assigned with explicit offsets, nothing is committed
(``enable.auto.commit=false``, no offset store, a throwaway group id the broker never hears of as a
group), and every read is bounded by ``READ_TIMEOUT_SECONDS`` and ``READ_MAX_BYTES``.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource
from django.db.models import Q, QuerySet

from access.permissions import AnyUser
from dlq import presenters, services
from dlq.models import ProducedTestMessage
from dlq.services import erasure
from pipelines import dsl, formats
from pipelines.clusters import connection_for
from pipelines.lag import consumer_group_lag
from pipelines.models import Pipeline
from pipelines.selectors import visible_pipelines
from pipelines.spec import PipelineSpec, parse_spec
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, admin_config, consumer_config, reached_end

#: Records per page, by default and at most.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: A read gives up after this many seconds, with what it has.
READ_TIMEOUT_SECONDS = 10.0
#: A read fetches at most about this many bytes (values, keys and headers), then stops with what it has.
READ_MAX_BYTES = 16 * 1024 * 1024
#: How many bytes ``find_by_lineage`` scans at most (it keeps only the record it looks for).
LINEAGE_SCAN_MAX_BYTES = 1024 * 1024 * 1024
#: Topic configs shown on the page, in this order (others are in the API answer too).
SHOWN_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "min.insync.replicas",
    "compression.type",
    "message.timestamp.type",
)

Order = Literal["newest", "oldest"]

#: Why a viewer gets none of the value of a destination record a transform wrote.
RESHAPED = "a transform writes this topic's records: the source's masked paths cannot be found in them"
#: What every tab shows instead of the key and value of a record an approved delete erased.
ERASED = "erased by an approved delete"


class TopicNotFound(Exception):
    """The topic is not one the pipeline owns (or the pipeline is not visible): answered as 404."""


class BadPosition(ValueError):
    """A browse position that cannot be used; ``field`` names the request field (answered as 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# ------------------------------------------------------------------------------------------ ownership


def pipeline_for(user: AnyUser, name: str) -> Pipeline:
    """The pipeline called ``name`` if the user may see it (its team's members, admins), with its team,
    cluster and current revision. Raises TopicNotFound otherwise (another team's pipeline is a 404)."""
    found: QuerySet[Pipeline] = visible_pipelines(user).select_related("cluster").filter(name=name)
    pipeline = found.first()
    if pipeline is None or pipeline.current_revision is None:
        raise TopicNotFound(name)
    return pipeline


def spec_of(pipeline: Pipeline) -> PipelineSpec:
    """The pipeline's current spec. The pipeline must have a current revision (``pipeline_for`` checks)."""
    assert pipeline.current_revision is not None
    return parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)


def owned_topics(spec: PipelineSpec) -> dict[str, str]:
    """The topics a pipeline owns, each with its role: ``source``, ``destination <name>[, <name>...]`` or
    ``dlq``; sources first, then destinations in spec order, then the DLQ topic."""
    roles: dict[str, str] = dict.fromkeys(spec.source.topics, "source")
    for dest in spec.destinations:
        previous = roles.get(dest.topic)
        roles[dest.topic] = f"{previous}, {dest.name}" if previous else f"destination {dest.name}"
    roles[spec.dlq.topic] = "dlq"
    return roles


def require_owned(pipeline: Pipeline, topic: str) -> str:
    """The topic's role for ``pipeline`` (see ``owned_topics``); TopicNotFound when the pipeline's current
    spec does not name it, whether or not it exists on the cluster."""
    role = owned_topics(spec_of(pipeline)).get(topic)
    if role is None:
        raise TopicNotFound(topic)
    return role


# ------------------------------------------------------------------------------------------ overview


@dataclass(frozen=True)
class PartitionInfo:
    """One partition: its low and high watermarks (the first offset kept and the next offset to be written;
    ``high - low`` records at most, fewer on compacted or transactional topics)."""

    partition: int
    low: int
    high: int


@dataclass(frozen=True)
class GroupPartitionLag:
    """A consumer group's committed offset on one partition (None: nothing committed) and its lag."""

    group: str
    partition: int
    committed: int | None
    lag: int


@dataclass(frozen=True)
class TopicOverview:
    """A topic as the browser's header shows it: its role for the pipeline, partitions, configs (name ->
    value as the broker reports them), the pipeline's consumer group lag (source topics only) and ``error``
    (non-empty when the broker did not answer, or the topic does not exist yet)."""

    topic: str
    role: str
    cluster: str
    partitions: list[PartitionInfo] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)
    groups: list[GroupPartitionLag] = field(default_factory=list)
    error: str = ""

    @property
    def shown_configs(self) -> list[tuple[str, str]]:
        """The configs of ``SHOWN_CONFIGS`` the broker reported, in that order."""
        return [(name, self.configs[name]) for name in SHOWN_CONFIGS if name in self.configs]


def _connection(pipeline: Pipeline) -> KafkaConnection:
    return connection_for(pipeline.cluster)


def topic_overview(pipeline: Pipeline, topic: str, *, timeout: float = 5.0) -> TopicOverview:
    """Partitions with watermarks, configs and the pipeline's consumer group lag of an owned ``topic``.
    Raises TopicNotFound for a topic the pipeline does not own; a broker that does not answer within
    ``timeout`` seconds is reported in ``error``, not raised."""
    role = require_owned(pipeline, topic)
    spec = spec_of(pipeline)
    cluster = pipeline.cluster.name if pipeline.cluster is not None else "default"
    try:
        conn = _connection(pipeline)
        watermarks = _watermarks(conn, topic, timeout)
        if watermarks is None:
            return TopicOverview(topic, role, cluster, error="the topic does not exist on the cluster (yet)")
        admin = AdminClient(admin_config(conn))
        futures = admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, topic)], request_timeout=timeout
        )
        entries = next(iter(futures.values())).result(timeout=timeout)
        configs = {
            name: str(entry.value) for name, entry in sorted(entries.items()) if not entry.is_sensitive
        }
        groups: list[GroupPartitionLag] = []
        if topic in spec.source.topics:
            group = spec.source.consumer_group
            groups = [
                GroupPartitionLag(group, lag.partition, lag.committed, lag.lag)
                for lag in consumer_group_lag(group=group, topics=[topic], kafka=conn, timeout=timeout)
            ]
    except (KafkaException, ValueError) as exc:
        return TopicOverview(topic, role, cluster, error=f"the cluster did not answer: {exc}")
    partitions = [PartitionInfo(p, low, high) for p, (low, high) in sorted(watermarks.items())]
    return TopicOverview(topic, role, cluster, partitions, configs, groups)


def _browse_consumer(conn: KafkaConnection) -> Consumer:
    # Assign-only: the group id is never used to join, fetch or commit (no subscribe, no commit, no stored
    # offsets), so the broker lists no group for it.
    return Consumer(
        consumer_config(
            conn,
            group_id=f"streamforge-browse-{uuid.uuid4()}",
            client_id="streamforge-topic-browser",
            extra={"enable.auto.offset.store": False, "enable.partition.eof": True},
        )
    )


def _watermarks(conn: KafkaConnection, topic: str, timeout: float) -> dict[int, tuple[int, int]] | None:
    consumer = _browse_consumer(conn)
    try:
        return _read_watermarks(consumer, topic, timeout)
    finally:
        consumer.close()


def _read_watermarks(consumer: Consumer, topic: str, timeout: float) -> dict[int, tuple[int, int]] | None:
    metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return None
    return {
        p: tuple(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout))  # type: ignore[misc]
        for p in sorted(metadata.partitions)
    }


# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class LineageLink:
    """Where a record came from (its ``x-streamforge-source`` header: topic, partition, offset) and
    whether that topic is one of the pipeline's (then the page links to it)."""

    topic: str
    partition: int
    offset: int
    owned: bool


@dataclass(frozen=True)
class BrowsedRecord:
    """One record as its viewer may see it: coordinates, timestamp (epoch ms, None when the broker gave
    none), key and value views (``dlq.presenters.PayloadView``), headers (masked by name for viewers), the
    lineage of a destination record, ``test_by`` (who produced it as a test message through the console,
    from the console's own record; else empty) and ``erased`` (an approved delete erased its content: key
    and value say ``ERASED``, no headers, whoever asks)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: presenters.PayloadView
    value: presenters.PayloadView
    headers: list[services.RenderedHeader]
    lineage: LineageLink | None
    test_by: str
    erased: bool = False
    #: A registry-format value (``pipelines.formats.topic_format``): ``value`` shows its decoded record and
    #: this says with what (``"avro, schema 12"``) or why it is shown as bytes (``"not decoded: ..."``).
    value_schema: str = ""

    @property
    def time(self) -> datetime | None:
        """The timestamp as an aware UTC datetime (for the ``utc_time`` filter); None without one."""
        return None if self.timestamp_ms is None else datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)

    @property
    def key_preview(self) -> str:
        """The key on one line, at most ``PREVIEW_CHARS`` characters, as the viewer may see it."""
        return _preview(self.key)

    @property
    def value_preview(self) -> str:
        """The value on one line, at most ``PREVIEW_CHARS`` characters, as the viewer may see it."""
        return _preview(self.value)


#: A compact row shows at most this many characters of the key and of the value.
PREVIEW_CHARS = 160


def _preview(view: presenters.PayloadView) -> str:
    if view.encoding == "null":
        return ""
    text = " ".join(view.raw.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


@dataclass(frozen=True)
class RecordPage:
    """A page of records: ``records`` in the requested order, ``next_cursor`` for the following page (empty
    when there is none), and ``truncated`` when the read stopped on its time or byte budget."""

    records: list[BrowsedRecord]
    next_cursor: str
    truncated: bool


def parse_lineage(value: str | None) -> tuple[str, int, int] | None:
    """``topic/partition/offset`` (the lineage header) as a triple; None when absent or malformed."""
    if not value:
        return None
    topic, _, rest = value.rpartition("/")
    topic, _, partition = topic.rpartition("/")
    if not topic or not partition.isdigit() or not rest.lstrip("-").isdigit():
        return None
    return topic, int(partition), int(rest)


def _cursor_text(bounds: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(bounds.items()))


def parse_cursor(text: str) -> dict[int, int]:
    """A page cursor (``partition:offset`` pairs, comma-separated) as {partition: offset}; BadPosition
    (field ``cursor``) when malformed."""
    bounds: dict[int, int] = {}
    for part in filter(None, text.split(",")):
        p, sep, o = part.partition(":")
        if not sep or not p.isdigit() or not o.isdigit() or len(o) > 19 or len(p) > 9:
            raise BadPosition("cursor", "not a cursor of this browser")
        bounds[int(p)] = int(o)
    return bounds


def browse(
    pipeline: Pipeline,
    topic: str,
    *,
    user: AnyUser,
    partition: int | None = None,
    from_offset: int | None = None,
    from_time_ms: int | None = None,
    order: Order = "newest",
    cursor: str = "",
    limit: int = PAGE_SIZE,
    timeout: float = READ_TIMEOUT_SECONDS,
    max_bytes: int = READ_MAX_BYTES,
) -> RecordPage:
    """One page of an owned ``topic``'s records (``limit``, at most ``MAX_PAGE_SIZE``) as ``user`` may see
    them, of one ``partition`` or of all merged by timestamp.

    The range read starts at ``from_offset`` (on every partition read) or at the first offset whose
    timestamp is at or after ``from_time_ms`` (epoch ms; Kafka's offsets_for_times), else at the low
    watermark, and ends at the high watermark. ``newest`` (the default) pages from the end of the range back
    to its start; ``oldest`` from its start forward. ``cursor`` is a previous page's ``next_cursor``.

    Raises TopicNotFound for a topic the pipeline does not own or that does not exist, BadPosition for a
    partition the topic does not have or a bad cursor, KafkaException when the cluster does not answer.
    """
    require_owned(pipeline, topic)
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    spec = spec_of(pipeline)
    masking = topic_masking(services.masking_for(user, pipeline.team), spec, topic)
    owned = owned_topics(spec)
    bounds = parse_cursor(cursor)
    consumer = _browse_consumer(_connection(pipeline))
    try:
        watermarks, chosen = _partitions(consumer, topic, partition, timeout)
        starts = _starts(consumer, topic, chosen, watermarks, from_offset, from_time_ms, timeout)
        ranges: dict[int, tuple[int, int]] = {}
        for p in chosen:
            low, high = max(starts[p], watermarks[p][0]), watermarks[p][1]
            if order == "newest":
                high = min(high, bounds.get(p, high))
            else:
                low = max(low, bounds.get(p, low))
            if low < high:
                ranges[p] = (
                    (max(low, high - limit), high) if order == "newest" else (low, min(high, low + limit))
                )
        records, truncated = _read(consumer, topic, ranges, timeout=timeout, max_bytes=max_bytes)
    finally:
        consumer.close()
    newest = order == "newest"
    records.sort(key=lambda r: (r.timestamp_ms or 0, r.offset, r.partition), reverse=newest)
    shown = records[:limit]
    following: dict[int, int] = {}
    for p in chosen:
        mine = [r.offset for r in shown if r.partition == p]
        low = max(starts[p], watermarks[p][0])
        if newest:
            upper = min(mine) if mine else min(watermarks[p][1], bounds.get(p, watermarks[p][1]))
            if upper > low:
                following[p] = upper
        else:
            lower = max(mine) + 1 if mine else max(low, bounds.get(p, low))
            if lower < watermarks[p][1]:
                following[p] = lower
    # A partition that has nothing left is left out of the cursor; with none left, there is no next page.
    next_cursor = _cursor_text(following) if following and (shown or truncated) else ""
    return RecordPage(_present_all(pipeline, topic, shown, masking, owned), next_cursor, truncated)


def topic_masking(masking: services.Masking, spec: PipelineSpec, topic: str) -> services.Masking:
    """``masking`` (what a user may not see of the team's dead letters; its paths describe source records)
    made right for the records of ``topic``, one of ``spec``'s topics.

    Source and DLQ topics hold source records: unchanged. A destination topic holds what its destinations
    wrote: where none of them has a transform, the value is the source record and the paths apply; where
    one has, the values are withheld whole (``RESHAPED``), as no path of the source says where the
    transform put a masked value. A key computed by ``key_transform`` may be a masked value, so it is
    withheld; headers set by ``header_transforms`` (``FROM:/path``, ``COPY:`` of a masked header) are
    masked by name. When nothing is masked (operators; no paths, headers or keys configured) nothing is.
    """
    writers = [d for d in spec.destinations if d.topic == topic]
    if not masking.active or not writers:
        return masking
    reshaped = bool(masking.paths) and any(d.transform for d in writers)
    return dataclasses.replace(
        masking,
        values_withheld=RESHAPED if reshaped else masking.values_withheld,
        keys=masking.keys or (bool(masking.paths) and any(d.key_transform for d in writers)),
        headers=masking.headers | {name.lower() for d in writers for name in d.header_transforms},
    )


def _coordinates(record: Record) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset


def erased_records(pipeline: Pipeline, records: Iterable[Record]) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of those ``records`` (of ``pipeline``'s cluster) whose content an approved
    delete erased: listed as ``ErasedRecord`` themselves, or whose lineage header names a source record
    that is (the destination record was produced from the erased content). One query."""
    records = list(records)
    lineages = {_coordinates(r): parse_lineage(r.header(c.H_LINEAGE)) for r in records}
    wanted = [_coordinates(r) for r in records] + [ln for ln in lineages.values() if ln is not None]
    found = erasure.erased_coordinates(cluster_id=pipeline.cluster_id, coordinates=wanted)
    return {
        at for at, lineage in lineages.items() if at in found or (lineage is not None and lineage in found)
    }


def senders_of_test_messages(
    pipeline: Pipeline, topic: str, coordinates: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    """{(partition, offset): user name} of the records at ``coordinates`` of ``topic`` that the console
    produced as test messages (``ProducedTestMessage``, on the pipeline's cluster). A record's own
    ``x-streamforge-test`` header is never asked: any producer to the topic can write it. One query."""
    wanted = set(coordinates)
    spans: dict[int, list[int]] = {}
    for partition, offset in wanted:
        spans.setdefault(partition, []).append(offset)
    if not spans:
        return {}
    where = Q()
    for partition, offsets in spans.items():  # ranges the coordinates index serves; exact match below
        where |= Q(partition=partition, offset__gte=min(offsets), offset__lte=max(offsets))
    rows = ProducedTestMessage.objects.filter(where, topic=topic, cluster_id=pipeline.cluster_id).values_list(
        "partition", "offset", "produced_by__username"
    )
    return {(partition, offset): name for partition, offset, name in rows if (partition, offset) in wanted}


def _starts(
    consumer: Consumer,
    topic: str,
    chosen: list[int],
    watermarks: dict[int, tuple[int, int]],
    from_offset: int | None,
    from_time_ms: int | None,
    timeout: float,
) -> dict[int, int]:
    if from_offset is not None:
        return dict.fromkeys(chosen, from_offset)
    if from_time_ms is None:
        return {p: watermarks[p][0] for p in chosen}
    found = consumer.offsets_for_times(
        [TopicPartition(topic, p, from_time_ms) for p in chosen], timeout=timeout
    )
    # -1 (OFFSET_END): no record at or after the time, so nothing of that partition is in the range.
    return {
        tp.partition: watermarks[tp.partition][1] if tp.offset in (-1, OFFSET_END) else tp.offset
        for tp in found
    }


def _read(
    consumer: Consumer, topic: str, ranges: dict[int, tuple[int, int]], *, timeout: float, max_bytes: int
) -> tuple[list[Record], bool]:
    """The records of ``ranges`` ({partition: (first, end)}, end exclusive), read until every partition
    reached its end, or ``timeout`` seconds, or about ``max_bytes``; whether it stopped early."""
    if not ranges:
        return [], False
    consumer.assign([TopicPartition(topic, p, first) for p, (first, _end) in ranges.items()])
    remaining = set(ranges)
    records: list[Record] = []
    fetched = 0
    deadline = time.monotonic() + timeout
    while remaining and time.monotonic() < deadline and fetched < max_bytes:
        # consume() returns once it has all 500 messages or its whole timeout has passed, never sooner: a short
        # timeout lets the loop stop soon after the range's last record.
        for msg in consumer.consume(num_messages=500, timeout=0.05):
            if msg.error() is not None:
                at = msg.partition()
                if at in ranges and reached_end(msg, ranges[at][1]):
                    remaining.discard(at)
                continue
            record = Record.from_message(msg)
            end = ranges[record.partition][1]
            if record.offset >= end:
                remaining.discard(record.partition)
                continue
            records.append(record)
            fetched += len(record.value or b"") + len(record.key or b"")
            fetched += sum(len(n) + len(v or b"") for n, v in record.headers)
            if record.offset + 1 >= end:
                remaining.discard(record.partition)
    return records, bool(remaining)


def _partitions(
    consumer: Consumer, topic: str, partition: int | None, timeout: float
) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """``topic``'s watermarks ({partition: (low, high)}) and the partitions a read covers: ``partition``
    alone, or all of them in order. Raises TopicNotFound, or BadPosition on ``partition`` when the topic
    has no such partition."""
    watermarks = _read_watermarks(consumer, topic, timeout)
    if watermarks is None:
        raise TopicNotFound(topic)
    if partition is not None and partition not in watermarks:
        raise BadPosition("partition", f"the topic has partitions 0 to {len(watermarks) - 1}")
    return watermarks, [partition] if partition is not None else sorted(watermarks)


def _present_all(
    pipeline: Pipeline, topic: str, records: list[Record], masking: services.Masking, owned: dict[str, str]
) -> list[BrowsedRecord]:
    """``records`` of ``topic`` as the page shows them: masked, erased ones marked (an approved delete of the
    dead letter they are), and the sender of each test message named."""
    erased = erased_records(pipeline, records)
    senders = senders_of_test_messages(pipeline, topic, [(r.partition, r.offset) for r in records])
    decode = _value_decoder(pipeline, topic)
    return [
        _present(
            r,
            masking,
            owned,
            erased=_coordinates(r) in erased,
            test_by=senders.get((r.partition, r.offset), ""),
            decode=decode,
        )
        for r in records
    ]


#: Reads a record value for the page: (the bytes to show, what the schema line says).
ValueDecoder = Callable[[bytes | None], tuple[bytes | None, str]]


def _value_decoder(pipeline: Pipeline, topic: str) -> ValueDecoder | None:
    """How ``topic``'s values are shown: None for JSON (as they are); for a registry format, decoded with
    their writer schema when they decode, else as bytes with the reason (a registry that cannot answer
    included: the page still shows the records)."""
    try:
        decoder = formats.topic_decoder(spec_of(pipeline), pipeline.cluster, topic)
    except formats.RegistryUnreachable as exc:
        reason = f"not decoded: the schema registry cannot be used ({exc})"
        return lambda value: (value, reason)
    if decoder is None:
        return None

    def decode(value: bytes | None) -> tuple[bytes | None, str]:
        if value is None:
            return None, ""
        decoded = services.decode_with(decoder, value)
        if decoded.text is None or decoded.schema is None:
            return value, f"not decoded: {decoded.error}"
        schema = decoded.schema
        where = f", subject {schema.subject} version {schema.version}" if schema.subject else ""
        return decoded.text, f"{decoder.format}, schema {schema.schema_id}{where}"

    return decode


def _present(
    record: Record,
    masking: services.Masking,
    owned: dict[str, str],
    *,
    erased: bool,
    test_by: str,
    decode: ValueDecoder | None = None,
) -> BrowsedRecord:
    lineage = parse_lineage(record.header(c.H_LINEAGE))
    value, schema = (record.value, "") if decode is None or erased else decode(record.value)
    return BrowsedRecord(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        key=_erased_view(record.key)
        if erased
        else presenters.payload_views(record.key, masking=masking, key=True),
        value=_erased_view(record.value) if erased else presenters.payload_views(value, masking=masking),
        headers=[] if erased else masking.header_values(record.headers),
        lineage=LineageLink(*lineage, owned=lineage[0] in owned) if lineage else None,
        test_by=test_by,
        erased=erased,
        value_schema=schema,
    )


def _erased_view(data: bytes | None) -> presenters.PayloadView:
    if data is None:
        return presenters.payload_views(None)
    return presenters.PayloadView(
        "erased", len(data), "", ERASED, ERASED, masked=False, default_tab="raw", withheld=True
    )


def read_record(pipeline: Pipeline, topic: str, partition: int, offset: int) -> Record | None:
    """The raw record at ``topic``/``partition``/``offset`` of the pipeline's cluster, or None when it is
    not there (removed by retention or compaction, or not written yet). For the service layer only: what a
    user sees goes through ``browse``, and a caller checks ``erased_records`` before using the content.
    Raises TopicNotFound for a topic the pipeline does not own."""
    require_owned(pipeline, topic)
    consumer = _browse_consumer(_connection(pipeline))
    try:
        records, _ = _read(
            consumer, topic, {partition: (offset, offset + 1)}, timeout=5.0, max_bytes=READ_MAX_BYTES
        )
    finally:
        consumer.close()
    return next((r for r in records if r.offset == offset), None)


def find_by_lineage(
    pipeline: Pipeline, topic: str, lineage: str, *, since_ms: int, timeout: float = 5.0
) -> Record | None:
    """The first record of ``topic`` at or after ``since_ms`` (epoch ms) whose lineage header is
    ``lineage`` (``topic/partition/offset`` of its source record), or None. Reads at most to the topic's
    current end, ``timeout`` seconds and ``LINEAGE_SCAN_MAX_BYTES``, keeping only the match (a destination
    that takes every record, such as an archive of large events, holds far more than a page's
    ``READ_MAX_BYTES`` after ``since_ms``); raises KafkaException when the cluster does not answer."""
    wanted = lineage.encode()
    consumer = _browse_consumer(_connection(pipeline))
    try:
        watermarks = _read_watermarks(consumer, topic, timeout)
        if not watermarks:
            return None
        chosen = sorted(watermarks)
        starts = _starts(consumer, topic, chosen, watermarks, None, since_ms, timeout)
        ends = {p: watermarks[p][1] for p in chosen if starts[p] < watermarks[p][1]}
        if not ends:
            return None
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in ends])
        remaining = set(ends)
        scanned = 0
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline and scanned < LINEAGE_SCAN_MAX_BYTES:
            for msg in consumer.consume(num_messages=500, timeout=0.05):
                partition = msg.partition() or 0
                if msg.error() is not None:
                    if partition in ends and reached_end(msg, ends[partition]):
                        remaining.discard(partition)
                    continue
                offset = msg.offset() or 0
                if offset >= ends[partition]:
                    remaining.discard(partition)
                    continue
                found = msg.headers() or []
                if any(header[0] == c.H_LINEAGE and header[1] == wanted for header in found):
                    return Record.from_message(msg)
                scanned += len(msg.value() or b"") + len(msg.key() or b"")
                if offset + 1 >= ends[partition]:
                    remaining.discard(partition)
    finally:
        consumer.close()
    return None


# ------------------------------------------------------------------------------------------ search and tail

SearchMode = Literal["text", "dsl"]

#: Records a search reads per partition from its start, by default and at most (kafbat's and Redpanda
#: Console's searches are bounded the same way: a range, never the whole topic on one click).
SCAN_PER_PARTITION = 1_000
MAX_SCAN_PER_PARTITION = 100_000
#: One search step reads for at most this many seconds, then answers with where it stopped; the page (or an
#: API client) asks for the next step with ``next_cursor``, so no request holds a worker for long.
SEARCH_STEP_SECONDS = 2.0
#: A step stops once it has this many matches (the rest of its range is the next step's).
MAX_MATCHES_PER_STEP = 50
#: A tail step returns at most this many new records (the oldest first); the page keeps at most
#: ``TAIL_KEPT`` rows.
TAIL_LIMIT = 100
TAIL_KEPT = 200
#: The topic page lists the consumer groups of at most this many groups on the cluster.
MAX_GROUPS_LISTED = 500


class BadFilter(BadPosition):
    """A DSL filter expression that does not parse: ``position`` is the 0-based character offset of the
    problem (``pipelines.dsl.DslParseError``), answered as 400 on the ``q`` field."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__("q", f"at character {position}: {message}")
        self.position = position


@dataclass(frozen=True)
class ScanRange:
    """What a search covers of one partition: offsets ``first`` to ``end`` (exclusive), ``next`` the first
    offset not read yet (``next == end``: the partition's range is done)."""

    partition: int
    first: int
    next: int
    end: int

    @property
    def read(self) -> int:
        """Offsets read so far (records, or fewer on a compacted topic)."""
        return self.next - self.first

    @property
    def size(self) -> int:
        """Offsets in the whole range."""
        return self.end - self.first


@dataclass(frozen=True)
class SearchStep:
    """One step of a search: the ``records`` that matched in it (partition, then offset order), how many
    records it ``scanned`` and ``matched``, the ``ranges`` the whole search covers with how far it got,
    ``next_cursor`` to continue (empty: the range is done) and ``stopped`` (why the step ended before its
    range did: ``time``, ``bytes`` or ``matches``; empty when it did not)."""

    records: list[BrowsedRecord]
    scanned: int
    matched: int
    ranges: list[ScanRange]
    next_cursor: str
    stopped: str

    @property
    def done(self) -> bool:
        """The whole range has been searched."""
        return not self.next_cursor


@dataclass(frozen=True)
class TailStep:
    """New records of a live tail (oldest first, at most ``TAIL_LIMIT``) and ``position``, the cursor of the
    next offsets to read (give it back as ``after``)."""

    records: list[BrowsedRecord]
    position: str


def compile_search(mode: SearchMode, query: str) -> dsl.Filter | str:
    """The matcher of a search: the DSL filter (``mode`` ``dsl``; DSL.md, the pipelines' own parser and
    evaluator, so the same semantics) or the substring (``text``, matched case-insensitively). BadFilter
    (with the position) for an expression that does not parse; BadPosition (``q``) for an empty query."""
    if not query.strip():
        raise BadPosition("q", "give a text or a filter expression to search for")
    if mode == "text":
        return query.casefold()
    try:
        return dsl.parse_filter(query)
    except dsl.DslParseError as exc:
        raise BadFilter(exc.position, exc.message) from None


def _search_cursor(ranges: list[ScanRange]) -> str:
    return ",".join(f"{r.partition}:{r.first}:{r.next}:{r.end}" for r in ranges if r.next < r.end)


def parse_search_cursor(text: str) -> list[ScanRange]:
    """A search step's ``next_cursor`` (``partition:first:next:end``, comma-separated) as ranges;
    BadPosition (field ``cursor``) when malformed or inconsistent."""
    ranges: list[ScanRange] = []
    for part in filter(None, text.split(",")):
        numbers = part.split(":")
        if len(numbers) != 4 or not all(n.isdigit() and len(n) <= 19 for n in numbers):
            raise BadPosition("cursor", "not a search cursor of this browser")
        p, first, nxt, end = (int(n) for n in numbers)
        if not first <= nxt <= end or end - first > MAX_SCAN_PER_PARTITION:
            raise BadPosition("cursor", "not a search cursor of this browser")
        ranges.append(ScanRange(p, first, nxt, end))
    return ranges


def _visible_message(record: Record, masking: services.Masking) -> dsl.Message:
    """The record as the viewer may see it, for matching: masked values, a withheld key or value as none,
    masked headers as their mask. Unmasked users match the record's own bytes."""
    if not masking.active:
        return dsl.Message(record.value, record.key, tuple(record.headers), record.timestamp_ms)
    value = presenters.payload_views(record.value, masking=masking)
    key = presenters.payload_views(record.key, masking=masking, key=True)
    return dsl.Message(
        None if value.withheld or record.value is None else value.raw.encode(),
        None if key.withheld or record.key is None else key.raw.encode(),
        tuple(
            (h.name, None if h.value is None else h.value.encode())
            for h in masking.header_values(record.headers)
        ),
        record.timestamp_ms,
    )


def _matches(matcher: dsl.Filter | str, message: dsl.Message, now_ms: int) -> bool:
    if isinstance(matcher, str):
        for data in (message.key, message.value):
            if data is not None and matcher in data.decode("utf-8", "replace").casefold():
                return True
        return False
    try:
        value = dsl.decode_value(message.value)
    except dsl.EvaluationError:
        return False  # not JSON: no filter passes it (the pipeline would dead-letter it)
    try:
        return dsl.evaluate_filter(matcher, message, value, now_ms=now_ms)
    except dsl.EvaluationError:
        return False


def search(
    pipeline: Pipeline,
    topic: str,
    *,
    user: AnyUser,
    query: str,
    mode: SearchMode = "text",
    partition: int | None = None,
    from_offset: int | None = None,
    from_time_ms: int | None = None,
    max_scan: int = SCAN_PER_PARTITION,
    cursor: str = "",
    step_seconds: float = SEARCH_STEP_SECONDS,
    max_bytes: int = READ_MAX_BYTES,
) -> SearchStep:
    """One step of a search of an owned ``topic``'s keys and values, server-side, as ``user`` may see them.

    ``mode`` ``text``: a record matches when its key or value (UTF-8 text, masked for viewers as the browser
    shows it) contains ``query``, case-insensitively. ``dsl``: when the DSL filter ``query`` passes it
    (``pipelines.dsl.evaluate_filter`` on the decoded value, key, headers and timestamp; a value that is not
    JSON never matches). Records an approved delete erased never match.

    The range: on every partition (or ``partition``), at most ``max_scan`` records (at most
    ``MAX_SCAN_PER_PARTITION``) from ``from_offset``, or the first offset at or after ``from_time_ms``
    (epoch ms), else the low watermark, and never past the high watermark at the first step. A step reads
    for at most ``step_seconds`` and stops at ``MAX_MATCHES_PER_STEP`` matches; ``cursor`` (a previous
    step's ``next_cursor``) continues, and then the position arguments are ignored.

    Raises TopicNotFound (not owned, or not on the cluster), BadFilter (the expression's position),
    BadPosition (a partition the topic lacks, a bad cursor, an empty query, ``max_scan`` out of range),
    KafkaException when the cluster does not answer.
    """
    require_owned(pipeline, topic)
    matcher = compile_search(mode, query)
    if not 1 <= max_scan <= MAX_SCAN_PER_PARTITION:
        raise BadPosition("max_scan", f"from 1 to {MAX_SCAN_PER_PARTITION} records per partition")
    spec = spec_of(pipeline)
    masking = topic_masking(services.masking_for(user, pipeline.team), spec, topic)
    owned = owned_topics(spec)
    consumer = _browse_consumer(_connection(pipeline))
    try:
        if cursor:
            ranges = parse_search_cursor(cursor)
        else:
            watermarks, chosen = _partitions(consumer, topic, partition, READ_TIMEOUT_SECONDS)
            starts = _starts(
                consumer, topic, chosen, watermarks, from_offset, from_time_ms, READ_TIMEOUT_SECONDS
            )
            ranges = []
            for p in chosen:
                low, high = watermarks[p]
                first = min(max(starts[p], low), high)
                ranges.append(ScanRange(p, first, first, min(high, first + max_scan)))
        records, truncated = _read(
            consumer,
            topic,
            {r.partition: (r.next, r.end) for r in ranges if r.next < r.end},
            timeout=step_seconds,
            max_bytes=max_bytes,
        )
    finally:
        consumer.close()
    records.sort(key=lambda r: (r.partition, r.offset))
    erased = erased_records(pipeline, records)
    decode = _value_decoder(pipeline, topic)
    now_ms = int(time.time() * 1000)
    reached: dict[int, int] = {}
    found: list[Record] = []
    scanned = 0
    stopped = "time" if truncated else ""
    for record in records:
        if len(found) >= MAX_MATCHES_PER_STEP:
            stopped = "matches"
            break
        scanned += 1
        reached[record.partition] = record.offset + 1
        # A registry-format topic is searched on its decoded records, as the page shows them.
        seen = record if decode is None else dataclasses.replace(record, value=decode(record.value)[0])
        if _coordinates(record) not in erased and _matches(matcher, _visible_message(seen, masking), now_ms):
            found.append(record)
    moved = [
        dataclasses.replace(r, next=r.end)
        if not stopped
        else dataclasses.replace(r, next=max(r.next, min(reached.get(r.partition, r.next), r.end)))
        for r in ranges
    ]
    senders = senders_of_test_messages(pipeline, topic, [(r.partition, r.offset) for r in found])
    return SearchStep(
        [
            _present(
                r,
                masking,
                owned,
                erased=False,
                test_by=senders.get((r.partition, r.offset), ""),
                decode=decode,
            )
            for r in found
        ],
        scanned,
        len(found),
        moved,
        _search_cursor(moved),
        stopped,
    )


def tail(
    pipeline: Pipeline,
    topic: str,
    *,
    user: AnyUser,
    after: str = "",
    partition: int | None = None,
    limit: int = TAIL_LIMIT,
    timeout: float = 2.0,
) -> TailStep:
    """The records written to an owned ``topic`` since ``after`` (a previous step's ``position``; empty:
    from now, so the first step returns no records), oldest first, at most ``limit``, as ``user`` may see
    them (masked, erased content withheld, as ``browse``). A partition missing from ``after`` (added since)
    is read from its low watermark.

    Raises TopicNotFound, BadPosition (field ``after`` or ``partition``), KafkaException.
    """
    require_owned(pipeline, topic)
    limit = max(1, min(limit, TAIL_LIMIT))
    try:
        positions = parse_cursor(after)
    except BadPosition:
        raise BadPosition("after", "not a tail position of this browser") from None
    spec = spec_of(pipeline)
    masking = topic_masking(services.masking_for(user, pipeline.team), spec, topic)
    owned = owned_topics(spec)
    consumer = _browse_consumer(_connection(pipeline))
    try:
        watermarks, chosen = _partitions(consumer, topic, partition, timeout)
        if not after:
            return TailStep([], _cursor_text({p: watermarks[p][1] for p in chosen}))
        starts = {p: max(positions.get(p, watermarks[p][0]), watermarks[p][0]) for p in chosen}
        ranges = {p: (starts[p], watermarks[p][1]) for p in chosen if starts[p] < watermarks[p][1]}
        records, _ = _read(consumer, topic, ranges, timeout=timeout, max_bytes=READ_MAX_BYTES)
    finally:
        consumer.close()
    records.sort(key=lambda r: (r.timestamp_ms or 0, r.partition, r.offset))
    shown = records[:limit]
    following = dict(starts)
    for record in shown:
        following[record.partition] = max(following[record.partition], record.offset + 1)
    return TailStep(_present_all(pipeline, topic, shown, masking, owned), _cursor_text(following))


# ------------------------------------------------------------------------------------------ consumer groups


@dataclass(frozen=True)
class GroupOffsets:
    """A consumer group's position on one partition of a topic: ``committed`` (None: nothing committed
    there), the partition's ``end`` (high watermark) and ``lag`` (``end - committed``; ``end - low`` without
    a commit, as ``pipelines.lag`` counts it)."""

    partition: int
    committed: int | None
    end: int
    lag: int


@dataclass(frozen=True)
class TopicGroup:
    """A consumer group that reads a topic (it has committed offsets on it, or it is the pipeline's own
    group of a source topic): its ``state`` as the broker reports it, per-partition offsets and the total
    ``lag``. ``pipeline_group`` marks the pipeline's own."""

    group: str
    state: str
    partitions: list[GroupOffsets]
    pipeline_group: bool

    @property
    def lag(self) -> int:
        """Records behind on all partitions together."""
        return sum(p.lag for p in self.partitions)


def topic_groups(pipeline: Pipeline, topic: str, *, timeout: float = 5.0) -> list[TopicGroup]:
    """The consumer groups of the pipeline's cluster that read an owned ``topic``: every group with a
    committed offset on one of its partitions (Kafka's OffsetFetch), plus the pipeline's own consumer group
    on a source topic. Only this topic's partitions are reported, so a group that also reads another team's
    topics shows nothing of those. The pipeline's group first, then by name; at most ``MAX_GROUPS_LISTED``
    groups are asked. Raises TopicNotFound for a topic the pipeline does not own, KafkaException when the
    cluster does not answer within ``timeout`` seconds."""
    require_owned(pipeline, topic)
    spec = spec_of(pipeline)
    own = spec.source.consumer_group if topic in spec.source.topics else ""
    conn = _connection(pipeline)
    watermarks = _watermarks(conn, topic, timeout)
    if watermarks is None:
        return []
    found = [
        TopicGroup(g.group, g.state, g.topics[topic], g.group == own)
        for g in groups_reading(conn, {topic: watermarks}, always=[own] if own else [], timeout=timeout)
    ]
    found.sort(key=lambda g: (not g.pipeline_group, g.group))
    return found


@dataclass(frozen=True)
class GroupReading:
    """A consumer group's committed positions on some topics (``groups_reading``): its ``state`` as the
    broker reports it, ``members`` (None when not asked), and per topic its ``GroupOffsets``."""

    group: str
    state: str
    members: int | None
    topics: dict[str, list[GroupOffsets]]

    @property
    def lag(self) -> int:
        """Records behind on all partitions of all its topics together."""
        return sum(p.lag for offsets in self.topics.values() for p in offsets)


def groups_reading(
    conn: KafkaConnection,
    watermarks: dict[str, dict[int, tuple[int, int]]],
    *,
    always: Iterable[str] = (),
    timeout: float = 5.0,
    members: bool = False,
) -> list[GroupReading]:
    """The consumer groups of one cluster with a committed offset on a partition of ``watermarks``' topics
    (topic -> partition -> (low, high)), plus the ``always`` groups: one ListGroups, then one OffsetFetch per
    group (the client takes one group per request) over all those partitions, every request sent before
    any is awaited, and with ``members`` one DescribeGroups of the groups found; each bounded to
    ``timeout`` seconds. Only these topics are reported, and only the topics a group committed on (all of
    them for an ``always`` group). At most ``MAX_GROUPS_LISTED`` groups are asked (the console's own browse
    groups never); by name. Raises KafkaException when the cluster does not answer."""
    wanted = list(always)
    admin = AdminClient(admin_config(conn))
    listed = admin.list_consumer_groups(request_timeout=timeout).result(timeout=timeout)
    states = {g.group_id: getattr(g.state, "name", str(g.state)).lower() for g in listed.valid}
    names = sorted(name for name in states if not name.startswith("streamforge-browse-"))[:MAX_GROUPS_LISTED]
    names = [*[n for n in wanted if n not in names], *names]
    partitions = [TopicPartition(t, p) for t in sorted(watermarks) for p in sorted(watermarks[t])]
    if not partitions:
        return []
    pending = {
        name: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(name, partitions)], request_timeout=timeout
        )[name]
        for name in names
    }
    found: list[GroupReading] = []
    for name, future in pending.items():
        result = future.result(timeout)
        committed: dict[str, dict[int, int]] = {}
        for tp in result.topic_partitions:
            if tp.offset >= 0:
                committed.setdefault(tp.topic, {})[tp.partition] = tp.offset
        if not committed and name not in wanted:
            continue
        topics = {}
        for topic in sorted(watermarks if name in wanted else committed):
            marks, mine = watermarks[topic], committed.get(topic, {})
            topics[topic] = [
                GroupOffsets(
                    p,
                    mine.get(p),
                    marks[p][1],
                    marks[p][1] - mine[p] if p in mine else marks[p][1] - marks[p][0],
                )
                for p in sorted(marks)
            ]
        found.append(GroupReading(name, states.get(name, "not on the broker yet"), None, topics))
    if members and found:
        described = admin.describe_consumer_groups([g.group for g in found], request_timeout=timeout)
        sizes = {}
        for name, future in described.items():
            try:
                sizes[name] = len(future.result(timeout).members)
            except KafkaException:
                continue  # a group gone meanwhile: its size is not known
        found = [dataclasses.replace(g, members=sizes.get(g.group)) for g in found]
    return found
