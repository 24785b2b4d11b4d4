"""The accounting identity, record by record: what a pipeline should have done with each source record
(from the pure-Python evaluator, what dry runs show) against what its outputs say it did.

Every source record gets exactly one outcome per destination: produced (found on the destination topic by
its lineage header ``x-streamforge-source``), filtered (found nowhere), or dead-lettered (found on the DLQ
with the right ``x-streamforge-error-type`` and its source coordinates). Outputs alone prove it, so the
same check serves the end-to-end tests and the fault-injection run (``python -m chaos``).

Imports nothing from Django: the spec is a validated ``PipelineSpec`` and the records come from Kafka.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from pipelines.dsl import ErrorHandling, Message, evaluate_destination
from pipelines.spark.writer import replay_scope
from pipelines.spec import DestinationConfig, PipelineSpec
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, consumer_config, record_size, retrying

#: A source record's coordinates: (topic, partition, offset).
Coordinates = tuple[str, int, int]


def end_offsets(bootstrap: str, topic: str, *, timeout: float = 10.0) -> dict[int, int]:
    """{partition: high watermark} of ``topic`` now (the offset the next record will get). Retried for up
    to a minute while the broker is restarting or moving leadership (see :func:`retrying`)."""

    def read() -> dict[int, int]:
        consumer = Consumer(consumer_config(KafkaConnection(bootstrap), group_id=f"ends-{uuid.uuid4()}"))
        try:
            metadata = consumer.list_topics(topic, timeout=timeout).topics[topic]
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
                for p in metadata.partitions
            }
        finally:
            consumer.close()

    return retrying(read)


def consume_all(
    bootstrap: str | KafkaConnection,
    topic: str,
    *,
    read_committed: bool = False,
    timeout: float = 30.0,
    ends: Mapping[int, int] | None = None,
    starts: Mapping[int, int] | None = None,
    group_prefix: str = "reader-",
) -> list[Record]:
    """Every record of ``topic`` from ``starts`` ({partition: first offset}; default the beginning) to
    ``ends`` ({partition: end offset, exclusive}; default: the end offsets as of the call). ``bootstrap`` is
    the servers of a plaintext cluster or a whole (secured) connection; ``group_prefix`` starts the throw-away
    consumer group's name (a principal may need a prefix its ACLs allow). Raises
    TimeoutError when they are not all read in ``timeout`` seconds (a silent short read would look like
    lost records)."""
    conn = bootstrap if isinstance(bootstrap, KafkaConnection) else KafkaConnection(bootstrap)
    consumer = Consumer(
        consumer_config(
            conn,
            group_id=f"{group_prefix}{uuid.uuid4()}",
            read_committed=read_committed,
            extra={"fetch.message.max.bytes": 20_000_000},
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        limits: dict[int, int] = {}
        for partition in metadata.partitions:
            if ends is not None:
                limits[partition] = ends.get(partition, 0)
            else:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                limits[partition] = high
        first = {p: (starts or {}).get(p, 0) for p in limits}
        consumer.assign([TopicPartition(topic, p, first[p]) for p in limits])
        records: list[Record] = []
        done = {p for p, high in limits.items() if high <= first[p]}
        deadline = time.monotonic() + timeout
        while len(done) < len(limits):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read {len(records)} records of {topic} in {timeout}s, not up to {limits}"
                )
            messages = consumer.consume(num_messages=5000, timeout=0.5)
            if not messages:
                # With read_committed, transaction markers make the last offsets unreadable: the position
                # tells when we are past them.
                for tp in consumer.position([TopicPartition(topic, p) for p in limits if p not in done]):
                    if tp.offset >= limits[int(tp.partition or 0)]:
                        done.add(int(tp.partition or 0))
                continue
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"reading {topic}: {message.error()}")
                partition, offset = int(message.partition() or 0), int(message.offset() or 0)
                if partition in done or offset >= limits[partition]:
                    done.add(partition)
                    continue
                records.append(Record.from_message(message))
                if offset >= limits[partition] - 1:
                    done.add(partition)
        return records
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------------ expected


@dataclass(frozen=True)
class Expected:
    """What one destination should do with one source record: ``kind`` is "produced", "filtered", "dlq" or
    "replay_skipped" (a replay for other destinations or another pipeline: nothing written);
    ``error_type`` names the DLQ error type for "dlq"; ``value`` the produced value's ``value_digest`` for
    "produced" (a digest, not the bytes: a long run keeps one per source record and destination)."""

    kind: str
    error_type: str = ""
    value: bytes | None = None


#: Evaluations shared between pipelines that read the same records with the same expressions:
#: {(source coordinates, destination fingerprint): (fate before the size rule, produced size in bytes)}
#: (``expected_fates``' ``memo``).
OutcomeMemo = dict[tuple[Coordinates, tuple[Any, ...]], tuple["Expected", int]]


def destination_fingerprint(dest: DestinationConfig, handling: ErrorHandling) -> tuple[Any, ...]:
    """What the evaluator's outcome for one destination depends on besides the record: its expressions and
    the error handling (not its name or topic, which differ between copies of a pipeline)."""
    return (
        dest.filter,
        dest.transform,
        dest.key_transform,
        tuple(sorted(dest.headers.items())),
        tuple(sorted(dest.header_transforms.items())),
        dest.timestamp,
        handling,
    )


def _evaluated(
    record: Record, message: Message, dest: Any, handling: ErrorHandling, now_ms: int
) -> tuple[Expected, int]:
    """The evaluator's fate of ``message`` at ``dest`` before the size rule, and the produced record's size
    in bytes (``record_size`` with the lineage header the writer adds; 0 when nothing is produced)."""
    outcome = evaluate_destination(dest, message, error_handling=handling, now_ms=now_ms)
    if outcome.kind == "filtered":
        return Expected("filtered"), 0
    if outcome.kind == "dead_lettered":
        return Expected("dlq", outcome.error_type or ""), 0
    lineage = (c.H_LINEAGE, f"{record.topic}/{record.partition}/{record.offset}".encode())
    size = record_size(outcome.value, outcome.key, [*outcome.headers, lineage])
    return Expected("produced", value=value_digest(outcome.value)), size


def expected_fates(
    spec: PipelineSpec,
    records: Iterable[Record],
    topic_limits: Mapping[str, int],
    *,
    now_ms: int = 0,
    replay_key: bytes = b"",
    memo: OutcomeMemo | None = None,
) -> dict[Coordinates, dict[str, Expected]]:
    """{source coordinates: {destination name: Expected}} for ``records`` of the pipeline's source topics.

    Runs the pure-Python evaluator (the same code as dry runs), then applies the writer's size rule: a
    produced record larger than its topic's ``max.message.bytes`` (``topic_limits``, bytes) is dead-lettered
    as RecordTooLarge. A replayed record is expected only at the destinations it is for (the writer's
    ``replay_scope``, under ``replay_key``: the installation's, without which no replay header counts),
    "replay_skipped" at the others. ``now_ms`` only matters for timestamp forms; the identity ignores timestamps.

    ``memo`` (one per batch of records, shared by every pipeline that reads them) keeps each evaluator outcome
    by record and ``destination_fingerprint``: the evaluation is most of this function's cost (about 300 µs a
    record for the demo's four destinations), and a chaos run's copies of a pipeline evaluate the same
    expressions on the same source records.
    """
    compiled = [
        (d.name, d.topic, d.compiled(), destination_fingerprint(d, spec.error_handling))
        for d in spec.destinations
    ]
    names = [name for name, _topic, _dest, _print in compiled]
    out: dict[Coordinates, dict[str, Expected]] = {}
    for record in records:
        scope = replay_scope(list(record.headers), names, spec.dlq.topic, value=record.value, key=replay_key)
        message = Message(
            value=record.value,
            key=record.key,
            headers=tuple(record.headers),
            timestamp_ms=record.timestamp_ms,
        )
        fates: dict[str, Expected] = {}
        coordinates = (record.topic, record.partition, record.offset)
        for name, topic, dest, fingerprint in compiled:
            if scope is not None and name not in scope:
                fates[name] = Expected("replay_skipped")
                continue
            known = memo.get((coordinates, fingerprint)) if memo is not None else None
            if known is None:
                known = _evaluated(record, message, dest, spec.error_handling, now_ms)
                if memo is not None:
                    memo[(coordinates, fingerprint)] = known
            expected, size = known
            too_large = expected.kind == "produced" and size > topic_limits.get(topic, 1_048_588)
            fates[name] = Expected("dlq", c.RECORD_TOO_LARGE) if too_large else expected
        out[(record.topic, record.partition, record.offset)] = fates
    return out


# ------------------------------------------------------------------------------------------------ observed


@dataclass(frozen=True)
class Seen:
    """One output found for (destination, source record): ``kind`` "produced" or "dlq"; ``error_type`` of a
    DLQ record; ``value`` the ``value_digest`` of a produced record; ``where`` the output's own
    "topic/partition/offset"."""

    kind: str
    error_type: str = ""
    value: bytes | None = None
    where: str = ""


@dataclass
class Observed:
    """Outputs indexed by (destination name, source coordinates); ``unattributed`` counts output records
    that name no source record (no lineage header, or DLQ headers missing)."""

    fates: dict[tuple[str, Coordinates], list[Seen]] = field(default_factory=dict)
    unattributed: int = 0


def observe(
    spec: PipelineSpec,
    destination_records: Mapping[str, Sequence[Record]],
    dlq_records: Sequence[Record],
    *,
    into: Observed | None = None,
) -> Observed:
    """Index what the pipeline wrote: ``destination_records`` by destination name (records read from its
    topic), ``dlq_records`` from the DLQ topic; added to ``into`` when given (outputs are append-only, so
    a caller may read them in slices). A DLQ record for destination ``*`` (the value did not decode)
    counts for every destination."""
    observed = into if into is not None else Observed()
    names = [d.name for d in spec.destinations]
    for name, records in destination_records.items():
        for record in records:
            lineage = record.header(c.H_LINEAGE)
            if lineage is None or lineage.count("/") < 2:
                observed.unattributed += 1
                continue
            topic, part_text, offset_text = lineage.rsplit("/", 2)
            key = (name, (topic, int(part_text), int(offset_text)))
            where = f"{record.topic}/{record.partition}/{record.offset}"
            observed.fates.setdefault(key, []).append(
                Seen("produced", value=value_digest(record.value), where=where)
            )
    for record in dlq_records:
        source_topic, source_partition, source_offset, dest = (
            record.header(h)
            for h in (c.H_SOURCE_TOPIC, c.H_SOURCE_PARTITION, c.H_SOURCE_OFFSET, c.H_DESTINATION)
        )
        if source_topic is None or source_partition is None or source_offset is None or dest is None:
            observed.unattributed += 1
            continue
        coordinates = (source_topic, int(source_partition), int(source_offset))
        seen = Seen(
            "dlq",
            error_type=record.header(c.H_ERROR_TYPE) or "",
            where=f"{record.topic}/{record.partition}/{record.offset}",
        )
        for name in names if dest == c.ALL_DESTINATIONS else [dest]:
            observed.fates.setdefault((name, coordinates), []).append(seen)
    return observed


# ------------------------------------------------------------------------------------------------ verdict


@dataclass
class Tally:
    """The identity for one destination over a set of source records (counts of records, not bytes).

    ``expected_*``: what the evaluator says; ``delivered``: records whose outcome was found as expected at
    least once; ``lost``: expected produced or dead-lettered, found nowhere; ``duplicates``: extra copies
    beyond the first (per record, summed); ``replay_written``: a replay written to a destination it was not
    for (a replay wrote that destination a second copy; counted in ``wrong`` too); ``rerouted``: expected produced, dead-lettered as RetryExhausted
    instead (a transient failure that outlived its retries: not lost, reported); ``wrong``: an outcome of
    the wrong kind or error type, or output for a record that should have been filtered; ``value_mismatch``:
    produced with a value other than the evaluator's.
    """

    expected_produced: int = 0
    expected_filtered: int = 0
    expected_dlq: int = 0
    expected_replay_skipped: int = 0
    replay_written: int = 0
    delivered: int = 0
    lost: int = 0
    duplicates: int = 0
    rerouted: int = 0
    wrong: int = 0
    value_mismatch: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        """Sum ``other`` into this tally (examples are kept up to 10)."""
        for name in (
            "expected_produced",
            "expected_filtered",
            "expected_dlq",
            "expected_replay_skipped",
            "replay_written",
            "delivered",
            "lost",
            "duplicates",
            "rerouted",
            "wrong",
            "value_mismatch",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.examples = (self.examples + other.examples)[:10]

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected_produced": self.expected_produced,
            "expected_filtered": self.expected_filtered,
            "expected_dlq": self.expected_dlq,
            "expected_replay_skipped": self.expected_replay_skipped,
            "replay_written": self.replay_written,
            "delivered": self.delivered,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "rerouted": self.rerouted,
            "wrong": self.wrong,
            "value_mismatch": self.value_mismatch,
            "examples": list(self.examples),
        }


def _number(text: str) -> int | float:
    number = float(text)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def value_digest(value: bytes | None) -> bytes:
    """A 16-byte digest of a record value, equal for two values that are equal as JSON (key order, spacing
    and ``1`` against ``1.0`` ignored: the evaluator and Spark's ``to_json`` spell them differently), and
    otherwise a digest of the bytes (a value that is not JSON equals only itself). ``None`` (a tombstone)
    digests as JSON ``null``. Computed once per record, so a check compares 16 bytes, not two parses."""
    raw = b"null" if value is None else value
    try:
        parsed = json.loads(raw, parse_float=_number)
    except ValueError:  # UnicodeDecodeError included
        return hashlib.blake2b(b"raw:" + raw, digest_size=16).digest()
    canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(canonical.encode(), digest_size=16).digest()


def tally(
    expected: Mapping[Coordinates, Mapping[str, Expected]],
    observed: Observed,
    *,
    compare_values: bool = True,
) -> dict[str, Tally]:
    """{destination name: Tally} over the source records in ``expected`` (outputs for other source
    records are ignored, so a check may cover a prefix of the source). Pure: unit-tested."""
    result: dict[str, Tally] = {}
    for coordinates, per_dest in expected.items():
        for name, want in per_dest.items():
            t = result.setdefault(name, Tally())
            seen = observed.fates.get((name, coordinates), [])
            where = f"{name} <- {coordinates[0]}/{coordinates[1]}/{coordinates[2]}"
            if want.kind == "replay_skipped":
                # A replay written where it was not for: that destination had the record already.
                t.expected_replay_skipped += 1
                if seen:
                    t.replay_written += 1
                    t.wrong += 1
                    t.examples.append(f"{where}: a replay not for it was written there ({seen[0].where})")
                else:
                    t.delivered += 1
                continue
            if want.kind == "filtered":
                t.expected_filtered += 1
                if seen:
                    t.wrong += 1
                    t.examples.append(f"{where}: expected filtered, found {seen[0].kind} at {seen[0].where}")
                else:
                    t.delivered += 1
                continue
            if want.kind == "produced":
                t.expected_produced += 1
                hits = [s for s in seen if s.kind == "produced"]
                others = [s for s in seen if s.kind != "produced"]
                if hits and compare_values and hits[0].value != want.value:
                    t.value_mismatch += 1
                    t.examples.append(f"{where}: produced value differs from the evaluator's")
                if not hits and others and all(s.error_type == c.RETRY_EXHAUSTED for s in others):
                    t.rerouted += 1
                    t.duplicates += len(others) - 1
                    continue
            else:
                t.expected_dlq += 1
                hits = [s for s in seen if s.kind == "dlq" and s.error_type == want.error_type]
                others = [s for s in seen if s not in hits]
            if want.kind == "produced":
                # An attempt that was produced and another that outlived its retries: an extra copy.
                t.duplicates += sum(1 for s in others if s.error_type == c.RETRY_EXHAUSTED) if hits else 0
                others = [s for s in others if s.error_type != c.RETRY_EXHAUSTED] if hits else others
            if hits:
                t.delivered += 1
                t.duplicates += len(hits) - 1
            if not seen:
                t.lost += 1
                t.examples.append(f"{where}: LOST (expected {want.kind} {want.error_type})".rstrip())
            elif others:
                t.wrong += 1
                t.examples.append(
                    f"{where}: expected {want.kind} {want.error_type}, found {others[0].kind} "
                    f"{others[0].error_type} at {others[0].where}"
                )
    return result


def by_error_type(observed: Observed) -> Counter[str]:
    """How many (destination, record) outcomes were dead-lettered, by error type (for reports)."""
    counts: Counter[str] = Counter()
    for seen in observed.fates.values():
        for s in seen:
            if s.kind == "dlq":
                counts[s.error_type] += 1
    return counts
