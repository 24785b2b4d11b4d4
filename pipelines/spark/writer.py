"""Producing a micro-batch: runs inside Spark's Python workers through ``DataFrame.mapInArrow``.

Spark computes every record's outcome per destination with built-in Column expressions (``pipelines.dsl.spark``);
this module only moves the results to Kafka with confluent-kafka, one producer per Python worker, and reports
per Spark partition what happened. Why not Spark's own Kafka sink: it cannot set record timestamps, cannot
tell which single record was too large (it fails the whole batch), cannot retry one record with backoff, and
cannot write transactionally. Here each record gets its own delivery report:

* a produced record is acknowledged by the broker (``acks=all``, idempotent producer) before the task ends;
* a record too large for its topic (client-side size check against the topic's ``max.message.bytes``, or the
  broker's MESSAGE_TOO_LARGE) is dead-lettered as ``RecordTooLarge``, never retried;
* a retriable failure is retried with the pipeline's retry policy (exponential backoff with jitter), then
  dead-lettered as ``RetryExhausted``;
* a DLQ write that still fails after ``max_dlq_retries`` raises PipelineHalt(DeadLetterQueue): the task
  fails, so the batch fails, so Spark commits nothing for it;
* a destination topic that does not exist or may not be written is a ``Config`` halt;
* every value is decoded once more here with the evaluator's own strict decoder
  (``deserialization_error``): the plan parses with Spark's laxer parser (``lenient_parse_stages``) and a
  value only Spark accepts is dead-lettered as ``MessageDeserialization`` for every destination, with the
  evaluator's reason, whatever the plan computed for it.

A replayed record that names its destinations (``x-streamforge-replay-destinations``, set by the console when
it replays a dead letter of one destination) is produced or dead-lettered only for those; every other
destination counts it as ``replay_skipped``, so a fan-out pipeline never writes a record twice because of a
replay (DESIGN.md "Contracts"); a replay of another pipeline's dead letter (read from a shared source topic)
is replay-skipped by every destination (``replay_restrictions``). Those headers count only under the
console's signature (``x-streamforge-replay-signature``, ``streamforge_core.replay_signing``): any producer
to the source topic can write them, so a record whose signature does not verify is an ordinary record, for
every destination (security review #28, finding 4). Per destination: records = produced +
filtered + dead_lettered + replay_skipped.

In ``effectively_once`` mode each Spark partition (one Kafka source partition's offset range) is written in
one Kafka transaction whose transactional id is derived from the pipeline and the source partition, and the
range's end offset is committed to the pipeline's consumer group inside the same transaction
(``send_offsets_to_transaction``). A replayed batch whose range is already committed is skipped, so
``read_committed`` readers see each record once (the Kafka EOS consume-transform-produce pattern, KIP-98).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pipelines.dsl.errors import EvaluationError
from pipelines.dsl.evaluate import decode_value
from pipelines.spec import RetryPolicy
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.codec_errors import SchemaValidation
from streamforge_core.kafka import (
    KafkaConnection,
    consumer_config,
    is_transient,
    producer_config,
    record_size,
    transactional_producer_config,
)
from streamforge_core.record_formats import worker_encoder
from streamforge_core.schema_registry import RegistryConnection

#: What each Spark partition reports back to the driver.
SUMMARY_SCHEMA = "topic string, partition int, min_offset long, max_offset long, records long, skipped boolean, counts string"
_SUMMARY_ARROW = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("records", pa.int64()),
        ("skipped", pa.bool_()),
        ("counts", pa.string()),
    ]
)

# MSG_SIZE_TOO_LARGE is both librdkafka's client-side refusal and the broker's MESSAGE_TOO_LARGE (code 10).
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}
_CONFIG_ERRORS = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_EXCEPTION,
}


@dataclass(frozen=True)
class DestinationInfo:
    """What the writer needs of one destination: where it writes, its expressions (for DLQ headers) and the
    topic's ``max.message.bytes``."""

    name: str
    topic: str
    filter: str | None
    transform: str | None
    max_message_bytes: int
    #: ``json`` or a registry format: values are then encoded with ``subject``'s latest schema here.
    format: str = "json"
    subject: str | None = None
    #: Write the source record's original value (a registry-format source, no transform): bytes unchanged.
    passthrough: bool = False


@dataclass(frozen=True)
class WriterConfig:
    """Everything a Python worker needs to write one micro-batch; pickled to the executors by Spark."""

    pipeline: str
    revision: int
    kafka: KafkaConnection
    mode: str
    consumer_group: str
    destinations: tuple[DestinationInfo, ...]
    dlq_topic: str
    dlq_max_message_bytes: int
    include_original_headers: bool
    include_stack_trace: bool
    max_dlq_retries: int
    retry: RetryPolicy
    producer_config: dict[str, Any] = field(default_factory=dict)
    batch_id: int = -1
    query_id: str = ""
    #: The installation's replay key (``streamforge_core.replay_signing``); empty: no replay header counts.
    replay_key: bytes = field(default=b"", repr=False)
    #: Decode every value with the evaluator's decoder (the plan used Spark's lenient parse); False only for
    #: a plan whose ``deser_error`` is already exact (``parse_stages(exact=True)``).
    check_deserialization: bool = True
    #: The schema registry, for destinations with a registry format (None: the pipeline uses none).
    registry: RegistryConnection | None = None


def deserialization_error(value: bytes | None, plan_error: str | None) -> str | None:
    """Why a record value is not one JSON document as the evaluator decodes it (``evaluate.decode_value``:
    strict UTF-8 and strict JSON, DSL.md "Errors"), or None when it is. ``plan_error`` is what the Spark
    plan's lenient parse said (``lenient_parse_stages``: set only when Spark could not parse it at all); a
    value the evaluator accepts but Spark did not keeps the plan's reason, since the plan computed nothing
    for it. Costs about 5 µs for a 1 KB value."""
    try:
        decode_value(value)
    except EvaluationError as exc:
        return exc.message
    return plan_error


class _Pending:
    """A record waiting for its delivery report."""

    __slots__ = ("attempts", "dest", "headers", "key", "row", "timestamp", "topic", "value")

    def __init__(
        self,
        row: int,
        dest: int,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]],
        timestamp: int | None,
    ) -> None:
        self.row, self.dest, self.topic = row, dest, topic
        self.value, self.key, self.headers, self.timestamp = value, key, headers, timestamp
        self.attempts = 1


# One producer (and consumer, for effectively_once) per Python worker process, reused across batches: Spark
# reuses Python workers (spark.python.worker.reuse), and a producer costs a broker handshake to build.
_PRODUCERS: dict[tuple[KafkaConnection, str, str], Producer] = {}
#: How long a task keeps retrying ``init_transactions`` on retriable errors, in seconds (above the 60 s
#: transaction timeout, after which the coordinator has aborted any transaction a dead holder left open).
INIT_TRANSACTIONS_SECONDS = 90.0
_CONSUMERS: dict[tuple[KafkaConnection, str], Consumer] = {}


def _producer_tuning(config: WriterConfig) -> dict[str, Any]:
    limits = [d.max_message_bytes for d in config.destinations] + [config.dlq_max_message_bytes]
    return {
        "linger.ms": 5,
        # Batches stay within the smallest topic limit; a single record may be as large as the largest.
        "batch.size": max(16_384, min(limits) - 4096),
        "message.max.bytes": max(limits) + 4096,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "message.timeout.ms": 30_000,
        "topic.metadata.propagation.max.ms": 5_000,
        # Successful deliveries need no Python callback: only failures are reported (they are rare).
        "delivery.report.only.error": True,
        **config.producer_config,
    }


def _client_id(config: WriterConfig) -> str:
    return f"streamforge-{config.pipeline}-{socket.gethostname()}-{os.getpid()}"


def _producer(config: WriterConfig) -> Producer:
    """The worker's shared idempotent producer (at_least_once / at_most_once)."""
    settings = producer_config(config.kafka, client_id=_client_id(config), extra=_producer_tuning(config))
    key = (config.kafka, str(settings["batch.size"]), str(settings["message.max.bytes"]))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = Producer(settings)
    return producer


def _transactional_producer(config: WriterConfig, transactional_id: str) -> Producer:
    """A producer for exactly one task. Python workers are reused across tasks and partitions, so a cached
    transactional producer would be fenced by the worker that last opened the same id; a fresh one fences
    every earlier holder in ``init_transactions`` instead, which is the point of a stable transactional id."""
    producer = Producer(
        transactional_producer_config(
            config.kafka,
            transactional_id=transactional_id,
            transaction_timeout_ms=60_000,
            client_id=_client_id(config),
            extra=_producer_tuning(config),
        )
    )
    # The previous holder of the id (a killed or halted run) may have left a transaction the coordinator is
    # still aborting: init_transactions then fails with a retriable error (CONCURRENT_TRANSACTIONS) and may
    # be called again. Failing the task instead would crash the whole query over a few seconds of wait.
    deadline = time.monotonic() + INIT_TRANSACTIONS_SECONDS
    delay = 0.2
    while True:
        try:
            producer.init_transactions(30)
            return producer
        except KafkaException as exc:
            error = exc.args[0]
            if (
                not (isinstance(error, KafkaError) and error.retriable())
                or time.monotonic() + delay > deadline
            ):
                raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _consumer(config: WriterConfig) -> Consumer:
    key = (config.kafka, config.consumer_group)
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        consumer = Consumer(
            consumer_config(config.kafka, group_id=config.consumer_group, read_committed=True)
        )
        _CONSUMERS[key] = consumer
    return consumer


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class BatchWriter:
    """Writes the rows of one Spark partition and counts what happened to each (see the module docstring).

    Columns expected in each Arrow batch: ``topic, partition, offset, key, value, headers, deser_error`` and,
    per destination i, ``o{i}`` (outcome), ``v{i}``, ``k{i}``, ``h{i}``, ``t{i}`` (produced value, key,
    headers, timestamp ms), ``e{i}``, ``m{i}`` (error type and message).
    """

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.counts: Counter[str] = Counter()
        self.failed: list[tuple[_Pending, KafkaError]] = []
        self.dlq_failed: list[tuple[_Pending, KafkaError]] = []
        self.topic = ""
        self.partition = -1
        self.min_offset = -1
        self.max_offset = -1
        self.records = 0
        self.producer: Producer | None = None
        self.transactional = config.mode == "effectively_once"
        self.random = random.Random()  # noqa: S311 - backoff jitter, not cryptography
        # The partition's Arrow batches, kept while it is written: a dead-lettered row needs its original key,
        # value and headers, which are turned into Python objects only for those rows (row id = (batch, row)).
        self._batches: list[pa.RecordBatch] = []

    # -- producing ------------------------------------------------------------------------------------------

    def _produce(self, pending: _Pending, *, dlq: bool) -> None:
        assert self.producer is not None
        failures = self.dlq_failed if dlq else self.failed

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append((pending, err))

        while True:
            try:
                self.producer.produce(
                    pending.topic,
                    value=pending.value,
                    key=pending.key,
                    headers=pending.headers,  # type: ignore[arg-type]  # the stubs miss None values
                    timestamp=pending.timestamp or 0,
                    on_delivery=report,
                )
                return
            except BufferError:
                self.producer.poll(0.05)  # local queue full: serve delivery reports, then try again
            except KafkaException as exc:
                failures.append((pending, exc.args[0]))
                return

    def _dlq_record(
        self,
        row: int,
        dest_name: str,
        dest_index: int | None,
        error_type: str,
        message: str,
        attempts: int,
        trace: str = "",
    ) -> _Pending:
        batch = self._batches[row >> 32]
        j = row & 0xFFFFFFFF
        topic, partition, offset = (
            batch.column(name)[j].as_py() for name in ("topic", "partition", "offset")
        )
        key, value = batch.column("key")[j].as_py(), batch.column("value")[j].as_py()
        config = self.config
        headers: list[tuple[str, bytes | None]] = []
        if config.include_original_headers:
            headers = [(h["key"], h["value"]) for h in batch.column("headers")[j].as_py() or []]
        dest = config.destinations[dest_index] if dest_index is not None else None
        headers += [
            (c.H_ERROR, message.encode()),
            (c.H_ERROR_TYPE, error_type.encode()),
            (c.H_SOURCE_TOPIC, topic.encode()),
            (c.H_SOURCE_PARTITION, str(partition).encode()),
            (c.H_SOURCE_OFFSET, str(offset).encode()),
            (c.H_TIMESTAMP, _now_iso().encode()),
            (c.H_PIPELINE, config.pipeline.encode()),
            (c.H_DESTINATION, dest_name.encode()),
            (c.H_FILTER, ((dest.filter or "") if dest else "").encode()),
            (c.H_TRANSFORM, ((dest.transform or "") if dest else "").encode()),
            (c.H_REVISION, str(config.revision).encode()),
            (c.H_ATTEMPTS, str(attempts).encode()),
        ]
        if config.include_stack_trace and trace:
            headers.append((c.H_STACK_TRACE, trace.encode()))
        return _Pending(
            row, -1 if dest_index is None else dest_index, config.dlq_topic, value, key, headers, None
        )

    def _dead_letter(self, pending: _Pending, error_type: str) -> None:
        self.counts[f"dlq_type:{error_type}"] += 1
        self.counts["dlq_records"] += 1
        self._produce(pending, dlq=True)

    # -- one partition --------------------------------------------------------------------------------------

    def write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Consume the partition's Arrow batches, produce everything, wait for every acknowledgement, and
        yield one summary row. Raises PipelineHalt for DeadLetterQueue and Config conditions."""
        first = True
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if first:
                first = False
                self.topic = batch.column("topic")[0].as_py()
                self.partition = batch.column("partition")[0].as_py()
                self.min_offset = batch.column("offset")[0].as_py()
                self._open()
                if self.transactional and self._already_committed():
                    # This offset range was written and committed by an earlier attempt of the same batch.
                    self.records += batch.num_rows + sum(b.num_rows for b in batches)
                    yield self._summary(skipped=True)
                    return
                if self.transactional:
                    assert self.producer is not None
                    self.producer.begin_transaction()
            self._write_rows(batch)
        if first:
            return  # an empty partition: nothing to report
        self._finish()
        yield self._summary(skipped=False)

    def _already_committed(self) -> bool:
        committed = _consumer(self.config).committed([TopicPartition(self.topic, self.partition)], timeout=30)
        return bool(committed) and committed[0].offset > self.min_offset

    def _open(self) -> None:
        """The producer of this partition's batch. Transactional: a producer of the partition's stable id,
        initialised before the committed offsets are read (``write``): ``init_transactions`` aborts whatever
        transaction an earlier holder of the id left open and fences that holder, whose commit then fails
        (KIP-98; the fence-then-fetch order of KIP-447). Read the other way round, a zombie (a driver frozen on
        a partitioned host, thawed after the takeover) could commit the same range between the read and
        the fence, and both copies would be committed (found by ``make chaos``, host_partition)."""
        if self.transactional:
            transactional_id = f"streamforge-{self.config.pipeline}-{self.topic}-{self.partition}"
            self.producer = _transactional_producer(self.config, transactional_id)
        else:
            self.producer = _producer(self.config)

    def _write_rows(self, batch: pa.RecordBatch) -> None:
        """Produce one Arrow batch. Only rows that produce or dead-letter something reach Python objects;
        filtered rows are counted with Arrow compute and never leave Arrow."""
        config = self.config
        base = len(self._batches) << 32
        self._batches.append(batch)
        offsets = batch.column("offset")
        self.records += batch.num_rows
        self.max_offset = max(self.max_offset, offsets[batch.num_rows - 1].as_py())
        topic, partition = self.topic, self.partition
        undecodable = self._undecodable(batch)
        names = [dest.name for dest in config.destinations]
        restricted = replay_restrictions(
            batch.column("headers"), batch.column("value"), names, config.dlq_topic, config.replay_key
        )
        for j, message in undecodable.items():  # counted per destination below, dead-lettered once here
            # A replay for some destinations that fails to decode fails for those only.
            only = restricted.get(j)
            dest_name = ",".join(n for n in names if n in only) if only is not None else c.ALL_DESTINATIONS
            if dest_name:
                self._dead_letter(
                    self._dlq_record(base | j, dest_name, None, c.MESSAGE_DESERIALIZATION, message, 1),
                    c.MESSAGE_DESERIALIZATION,
                )
        produce = self._produce_fast
        for i, dest in enumerate(config.destinations):
            outcome = batch.column(f"o{i}")
            produced = pc.indices_nonzero(pc.equal(outcome, "produced"))
            dead = pc.indices_nonzero(pc.equal(outcome, "dead_lettered")).to_pylist()
            skipped = {j for j, only in restricted.items() if dest.name not in only}
            if skipped or undecodable:  # replays for other destinations: neither produced nor dead-lettered
                produced = pa.array(
                    [j for j in produced.to_pylist() if j not in skipped and j not in undecodable],
                    pa.uint64(),
                )
            # An undecodable value fails every destination, whatever the lenient plan made of it; it was
            # dead-lettered once for all of them above.
            dead = [j for j in dead if j not in skipped and j not in undecodable]
            produced, encoded, invalid = self._encoded(dest, batch.column(f"v{i}"), produced)
            dead_count = len(dead) + len(invalid) + sum(1 for j in undecodable if j not in skipped)
            self.counts[f"dest:{dest.name}:produced"] += len(produced)
            self.counts[f"dest:{dest.name}:dead_lettered"] += dead_count
            self.counts[f"dest:{dest.name}:replay_skipped"] += len(skipped)
            self.counts[f"dest:{dest.name}:filtered"] += (
                batch.num_rows - len(produced) - dead_count - len(skipped)
            )
            for j in dead:
                error_type = batch.column(f"e{i}")[j].as_py()
                message = batch.column(f"m{i}")[j].as_py() or error_type
                self._dead_letter(
                    self._dlq_record(base | j, dest.name, i, error_type, message, 1), error_type
                )
            for j, message in invalid.items():
                self._dead_letter(
                    self._dlq_record(base | j, dest.name, i, c.SCHEMA_VALIDATION, message, 1),
                    c.SCHEMA_VALIDATION,
                )
            if len(produced) == 0:
                continue
            rows = produced.to_pylist()
            if encoded is not None:
                values = encoded
            elif dest.passthrough:
                values = batch.column("value").take(produced).to_pylist()
            else:
                values = batch.column(f"v{i}").take(produced).to_pylist()
            keys = batch.column(f"k{i}").take(produced).to_pylist()
            stamps = batch.column(f"t{i}").take(produced).to_pylist()
            header_col = batch.column(f"h{i}").take(produced)
            headers = (
                header_col.to_pylist() if header_col.null_count < len(header_col) else [None] * len(rows)
            )
            source_offsets = offsets.take(produced).to_pylist()
            limit = dest.max_message_bytes
            prefix = f"{topic}/{partition}/"
            for n, j in enumerate(rows):
                value, key = values[n], keys[n]
                hdrs = [(h["key"], h["value"]) for h in headers[n]] if headers[n] else []
                hdrs.append((c.H_LINEAGE, (prefix + str(source_offsets[n])).encode()))
                if record_size(value, key, hdrs) > limit:
                    self._too_large(base | j, i, len(value or b""))
                    continue
                produce(dest.topic, value, key, hdrs, stamps[n], base | j, i)
                if n % 1000 == 999:
                    self.producer.poll(0)  # type: ignore[union-attr]
        if self.producer is not None:
            self.producer.poll(0)

    def _encoded(
        self, dest: DestinationInfo, values: pa.Array, produced: pa.Array
    ) -> tuple[pa.Array, list[bytes] | None, dict[int, str]]:
        """For a destination with a registry format: ``(rows still produced, their encoded values, row ->
        reason for each row whose value does not fit the subject's schema)``; ``(produced, None, {})`` for
        the others. Raises ``contract.PipelineHalt(Config)`` when the registry cannot serve or the subject
        is missing (``record_formats.RecordEncoder``)."""
        if dest.format == "json" or dest.passthrough or len(produced) == 0:
            return produced, None, {}
        assert self.config.registry is not None
        assert dest.subject is not None
        encoder = worker_encoder(self.config.registry)
        kept: list[int] = []
        encoded: list[bytes] = []
        invalid: dict[int, str] = {}
        for j, text in zip(produced.to_pylist(), values.take(produced).to_pylist(), strict=True):
            try:
                encoded.append(encoder.encode(dest.subject, dest.format, text))
            except SchemaValidation as exc:
                invalid[j] = f"does not fit subject {dest.subject}: {exc}"
                continue
            kept.append(j)
        return pa.array(kept, pa.uint64()), encoded, invalid

    def _undecodable(self, batch: pa.RecordBatch) -> dict[int, str]:
        """Row -> reason, for the rows whose value is not one JSON document (``deserialization_error``);
        only the plan's own ``deser_error`` when ``check_deserialization`` is off."""
        plan_errors = batch.column("deser_error")
        if not self.config.check_deserialization:
            if plan_errors.null_count == batch.num_rows:
                return {}
            rows = pc.indices_nonzero(pc.is_valid(plan_errors)).to_pylist()
            return {j: plan_errors[j].as_py() for j in rows}
        found = {}
        for j, (value, plan_error) in enumerate(
            zip(batch.column("value").to_pylist(), plan_errors.to_pylist(), strict=True)
        ):
            message = deserialization_error(value, plan_error)
            if message is not None:
                found[j] = message
        return found

    def _too_large(self, row: int, dest_index: int, size: int) -> None:
        dest = self.config.destinations[dest_index]
        self.counts[f"dest:{dest.name}:produced"] -= 1
        self.counts[f"dest:{dest.name}:dead_lettered"] += 1
        self._dead_letter(
            self._dlq_record(
                row,
                dest.name,
                dest_index,
                c.RECORD_TOO_LARGE,
                f"record of {size} bytes exceeds max.message.bytes={dest.max_message_bytes} of topic {dest.topic}",
                1,
            ),
            c.RECORD_TOO_LARGE,
        )

    def _produce_fast(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]],
        timestamp: int | None,
        row: int,
        dest: int,
    ) -> None:
        """The hot path: no per-record Python callback. The producer reports only failed deliveries
        (``delivery.report.only.error``) to ``_on_error``, which rebuilds the pending record from the
        message itself; ``row``/``dest`` travel in the callback's closure only for those failures."""
        assert self.producer is not None
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp or 0,  # type: ignore[arg-type]
                                      on_delivery=self._failure_reporter(row, dest, topic, headers, timestamp))  # fmt: skip
                return
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as exc:
                pending = _Pending(row, dest, topic, value, key, headers, timestamp)
                self.failed.append((pending, exc.args[0]))
                return

    def _failure_reporter(
        self,
        row: int,
        dest: int,
        topic: str,
        headers: list[tuple[str, bytes | None]],
        timestamp: int | None,
    ) -> Callable[[Any, Any], None]:
        # The headers travel in the closure: a delivery report's message has none (confluent-kafka gives
        # ``headers() is None`` there), and a retry rebuilt from it lost every header, the lineage one
        # included (found by `make chaos`, broker restart, at_least_once).
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                pending = _Pending(row, dest, topic, msg.value(), msg.key(), headers, timestamp)
                self.failed.append((pending, err))

        return report

    def _flush(self) -> None:
        assert self.producer is not None
        while self.producer.flush(1.0) > 0:
            pass

    def _finish(self) -> None:
        """Wait for every acknowledgement; retry, reroute or halt on failures; commit the transaction."""
        self._flush()
        if self.transactional and (self.failed or self.dlq_failed):
            errors = [err for _, err in (self.failed + self.dlq_failed)]
            assert self.producer is not None
            self.producer.abort_transaction(30)
            self._raise_for(errors, dlq=bool(self.dlq_failed))
            raise RuntimeError(f"transaction aborted: {errors[0]}")  # retriable: the batch is replayed
        self._handle_destination_failures()
        self._handle_dlq_failures()
        if self.transactional:
            assert self.producer is not None
            offsets = [TopicPartition(self.topic, self.partition, self.max_offset + 1)]
            self.producer.send_offsets_to_transaction(
                offsets, _consumer(self.config).consumer_group_metadata(), 30
            )
            self.producer.commit_transaction(60)

    def _raise_for(self, errors: list[KafkaError], *, dlq: bool) -> None:
        if dlq:
            raise c.PipelineHalt(
                c.DEAD_LETTER_QUEUE, f"cannot write to DLQ topic {self.config.dlq_topic}: {errors[0].str()}"
            )
        config_errors = [e for e in errors if e.code() in _CONFIG_ERRORS]
        if config_errors:
            raise c.PipelineHalt(c.CONFIG, f"a destination topic cannot be written: {config_errors[0].str()}")

    def _handle_destination_failures(self) -> None:
        attempt = 1
        while self.failed:
            failures, self.failed = self.failed, []
            self._raise_for([err for _, err in failures], dlq=False)
            retry: list[_Pending] = []
            for pending, err in failures:
                dest = self.config.destinations[pending.dest]
                if err.code() in _TOO_LARGE:
                    self._reroute(
                        pending, dest, c.RECORD_TOO_LARGE, f"{dest.topic} refused the record: {err.str()}"
                    )
                elif attempt >= self.config.retry.max_attempts or not is_transient(err):
                    self._reroute(
                        pending, dest, c.RETRY_EXHAUSTED, f"after {pending.attempts} attempts: {err.str()}"
                    )
                else:
                    retry.append(pending)
            if retry:
                time.sleep(self.config.retry.delay_ms(attempt, self.random.random()) / 1000.0)
                attempt += 1
                for pending in retry:
                    pending.attempts += 1
                    self.counts["retries"] += 1
                    self._produce(pending, dlq=False)
            self._flush()

    def _reroute(self, pending: _Pending, dest: DestinationInfo, error_type: str, message: str) -> None:
        self.counts[f"dest:{dest.name}:produced"] -= 1
        self.counts[f"dest:{dest.name}:dead_lettered"] += 1
        self._dead_letter(
            self._dlq_record(pending.row, dest.name, pending.dest, error_type, message, pending.attempts),
            error_type,
        )
        self._flush()

    def _handle_dlq_failures(self) -> None:
        attempt = 1
        while self.dlq_failed:
            failures, self.dlq_failed = self.dlq_failed, []
            if attempt > self.config.max_dlq_retries:
                self._raise_for([err for _, err in failures], dlq=True)
            time.sleep(self.config.retry.delay_ms(attempt, self.random.random()) / 1000.0)
            attempt += 1
            for pending, _err in failures:
                self.counts["dlq_retries"] += 1
                self._produce(pending, dlq=True)
            self._flush()

    def _summary(self, *, skipped: bool) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(
            [
                {
                    "topic": self.topic,
                    "partition": self.partition,
                    "min_offset": self.min_offset,
                    "max_offset": self.max_offset,
                    "records": self.records,
                    "skipped": skipped,
                    "counts": json.dumps(dict(self.counts)),
                }
            ],
            schema=_SUMMARY_ARROW,
        )


def replay_restrictions(
    headers: pa.Array, record_values: pa.Array, destinations: list[str], dlq_topic: str, key: bytes
) -> dict[int, frozenset[str]]:
    """The rows of a batch that are replays not for every destination of this pipeline: {row index: the
    destinations it is for}. ``headers`` is the Kafka source's headers column (list<struct<key: string,
    value: binary>>), ``record_values`` its value column (binary), ``key`` the replay key; found with Arrow compute
    over the flattened headers, so a batch without replays costs a comparison per header and no Python per
    row.

    * Only a row whose ``x-streamforge-replay-signature`` verifies under ``key`` for its replay headers and
      its value (``replay_signing.verify``) is a replay; the headers of any other row are ignored.

    * A replay of another pipeline's dead letter (``x-streamforge-replay-of`` names a DLQ topic other than
      ``dlq_topic``; DLQ topics have one owner) is for none of them: every consumer of a source topic but
      the one that failed the record already had it.
    * ``x-streamforge-replay-destinations`` names the destinations it is for. Names that are not among
      ``destinations`` (since renamed or removed) are dropped; when none is left the record is for every
      destination, since skipping it everywhere would lose it.

    When a header occurs twice the last one counts (the replay that sent this record appended it)."""
    if len(headers) == 0 or headers.null_count == len(headers):
        return {}
    flat = pc.list_flatten(headers)
    if len(flat) == 0:
        return {}
    keys = pc.struct_field(flat, "key")
    wanted = pc.is_in(keys, pa.array([c.H_REPLAY_OF, c.H_REPLAY_DESTINATIONS, c.H_REPLAY_SIGNATURE]))
    hits = pc.indices_nonzero(pc.fill_null(wanted, False))
    if len(hits) == 0:
        return {}
    rows = pc.list_parent_indices(headers).take(hits).to_pylist()
    names = keys.take(hits).to_pylist()
    values = pc.struct_field(flat, "value").take(hits).to_pylist()
    per_row: dict[int, list[tuple[str, bytes | None]]] = {}
    for row, name, value in zip(rows, names, values, strict=True):
        per_row.setdefault(row, []).append((name, value))
    found: dict[int, frozenset[str]] = {}
    for row, pairs in per_row.items():
        scope = replay_scope(pairs, destinations, dlq_topic, value=record_values[row].as_py(), key=key)
        if scope is not None:
            found[row] = scope
    return found


def replay_scope(
    headers: list[tuple[str, bytes | None]],
    destinations: list[str],
    dlq_topic: str,
    *,
    value: bytes | None,
    key: bytes,
) -> frozenset[str] | None:
    """The destinations of this pipeline a record with these headers and this ``value`` is for: None for
    every one (not a replay, a replay for all of them, or replay headers without the console's valid
    signature under ``key``), else the names (empty: none). The rules are ``replay_restrictions``'s;
    ``chaos.accounting`` applies them to its expectations."""
    replay_of = named = signature = None
    for name, header_value in headers:
        if name == c.H_REPLAY_OF:
            replay_of = (header_value or b"").decode("utf-8", "replace")
        elif name == c.H_REPLAY_DESTINATIONS:
            named = (header_value or b"").decode("utf-8", "replace")
        elif name == c.H_REPLAY_SIGNATURE:
            signature = (header_value or b"").decode("ascii", "replace")
    if replay_of is None and named is None:
        return None
    if not replay_signing.verify(key, replay_of or "", named or "", value, signature):
        return None  # not the console's: an ordinary record (a forgery costs a duplicate, never a loss)
    if replay_of is not None and replay_of.rsplit("/", 2)[0] != dlq_topic:
        return frozenset()
    if named is None:
        return None
    only = frozenset(n.strip() for n in named.split(",")) & set(destinations)
    return only or None


def make_warm_up(config: WriterConfig) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function ``mapInArrow`` runs per partition of the driver's warm-up rows: what a first micro-batch
    would start in a Python worker (this module's imports, the shared producer and its broker connections,
    the strict decoder) without producing anything; yields no rows."""

    def warm_up(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if config.mode != "effectively_once":  # transactional producers are made per task anyway
            _producer(config).list_topics(timeout=10)
        for batch in batches:
            for value in batch.column("value").to_pylist():
                deserialization_error(value, None)
        return iter(())

    return warm_up


def make_partition_writer(
    config: WriterConfig,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function ``mapInArrow`` runs per Spark partition (schema SUMMARY_SCHEMA)."""

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return BatchWriter(config).write(iter(batches))

    return write_partition
