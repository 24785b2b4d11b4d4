"""The pipeline driver: one Spark Structured Streaming query for one pipeline revision.

Run as ``python -m pipelines.spark.driver --spec-file spec.json --pipeline NAME --revision N ...`` (see
``--help``). It imports nothing from Django: the control plane hands it the revision's spec as JSON, so it
runs the same way under ``spark-submit`` on a cluster.

Per micro-batch (``foreachBatch``): the batch's rows get their outcome for every destination from Spark
built-in expressions (the DSL compiled by ``pipelines.dsl.spark``), then ``mapInArrow`` hands them to
``pipelines.spark.writer`` which produces destination and DLQ records in the same pass and waits for every
acknowledgement. Only then does ``foreachBatch`` return, and only then does Spark commit the batch to its
checkpoint: at-least-once. Afterwards the driver commits the processed offsets to the pipeline's Kafka
consumer group (so any lag tool sees them) and publishes a progress event to Redis.

With the ``low_latency`` commit strategy the query runs in Spark's real-time mode instead: no ``foreachBatch``
(Python operators are not allowed there), the routing compiled into the plan (``pipelines.spark.routing``)
and written by Spark's Kafka sink, one long-running task per source partition. At the end of each real-time
batch (``interval_ms``, 5 s by default) a ``StreamingQueryListener`` commits the batch's end offsets to the
consumer group and publishes the same progress event, counted by ``observe`` metrics.

Fencing (``--lease-file``, ``--epoch``; ``pipelines.spark.fence``): the driver commits only while the lease
file its runner keeps names this run and epoch and has not expired (less ``--fence-margin`` seconds). It checks
before starting the query, at the start of every batch (before writing), after the batch's writes and before any
commit (``foreachBatch`` raises, so Spark does not write ``commits/<batch>``), and before a real-time batch's
group commit; a watchdog thread checks every second and stops a driver that lost its lease between batches.
Without ``--lease-file`` fencing is off (the benchmark, a driver started by hand).

Exit codes (``streamforge_core.contract``): 0 stopped on request, 1 crashed (restartable), 2 Config/DslParse,
3 DeadLetterQueue, 4 Fenced (its lease expired or was taken over). The last stderr line is
``STREAMFORGE_EXIT {json}`` with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import redis
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from pipelines.dsl.spark import SourceColumns, StagedPlan, compile_stages
from pipelines.spark.decoding import decode_source, decoded_columns
from pipelines.spark.fence import Fence
from pipelines.spark.routing import route
from pipelines.spark.session import build_session, cluster_conf
from pipelines.spark.writer import (
    SUMMARY_SCHEMA,
    DestinationInfo,
    WriterConfig,
    make_partition_writer,
    make_warm_up,
)
from pipelines.spec import PipelineSpec, SpecError, parse_spec
from streamforge_core import contract as c
from streamforge_core import kafka_probe, redis_client, replay_signing
from streamforge_core.kafka import (
    KafkaConnection,
    admin_config,
    connection_from_environment,
    consumer_config,
    spark_kafka_options,
)
from streamforge_core.process_priority import lower_priority
from streamforge_core.schema_registry import RegistryConnection, registry_from_environment

log = logging.getLogger("streamforge.driver")

#: The rows Spark's Kafka source gives (``includeHeaders``), in its column order.
_KAFKA_SOURCE_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)

#: The name of the ``observe`` metrics (``pipelines.spark.routing.metric_columns``) in a real-time progress.
REALTIME_METRICS = "streamforge"

#: The error type of a driver that stopped because it lost its lease (exit ``EXIT_FENCED``).
FENCED = c.Fenced.__name__
#: How often the fence watchdog re-reads the lease file, in seconds.
FENCE_WATCH_SECONDS = 1.0
#: How long a fenced micro-batch driver may take to stop its query before it leaves with ``os._exit``, seconds.
FENCED_STOP_SECONDS = 10.0
#: Seconds after its query started at which a driver that has had no batch yet (a source with nothing to
#: read: Spark runs no micro-batch without new data) takes its host's niceness anyway.
SETTLE_IDLE_SECONDS = 30.0


@dataclass(frozen=True)
class DriverOptions:
    """How to run: which pipeline/revision, where Kafka, Redis and the checkpoint are, which Spark master."""

    pipeline: str
    revision: int
    run_id: str
    kafka: KafkaConnection
    redis_url: str
    checkpoint_dir: str
    master: str
    jars: tuple[str, ...]
    heartbeat_seconds: float = 5.0
    stop_timeout_seconds: float = 60.0
    #: The run's lease epoch (``PipelineRun.epoch``); None when the control plane gave none.
    epoch: int | None = None
    #: The lease file its runner keeps (``pipelines.supervision.processes.lease_path``); None: fencing off.
    lease_file: str | None = None
    #: Seconds before the lease's expiry at which the driver stops committing (``DRIVER_FENCE_MARGIN_SECONDS``).
    fence_margin_seconds: float = 3.0
    #: On a standalone cluster: the address executors reach this driver at, and the cores it may take.
    driver_host: str | None = None
    cores_max: int | None = None
    #: The cluster's schema registry (``SCHEMA_REGISTRY_*`` from the runner), for registry formats; None: none.
    registry: RegistryConnection | None = None
    #: Run the warm-up (``Driver._warm_up``) before the query starts. Off for a takeover, where the time to the
    #: first committed batch on the new host counts and that batch starts the Python workers anyway.
    warm_up: bool = True
    #: The nice value (0-19) the driver, its JVM and its Python workers take once its first batch is done, or
    #: ``SETTLE_IDLE_SECONDS`` after its query started without one (``Driver._settle_priority``); 0: none.
    niceness: int = 0


class ConfigError(Exception):
    """The pipeline cannot run as configured (missing topic, bad spec): error type Config."""


def preflight(kafka: KafkaConnection, spec: PipelineSpec, registry: RegistryConnection | None = None) -> None:
    """Before the query starts: may this principal reach the cluster, read the sources and write every
    destination and the DLQ? Does a pipeline with registry formats have a registry? A wrong password or certificate, a failed TLS handshake or a missing ACL
    raises ConfigError naming the cause (the pipeline halts with reason Config: restarting cannot fix
    credentials); a cluster that does not answer is left to the query's own retries."""
    uses = [f"the source's format is {spec.source.format}"] if spec.source.uses_registry else []
    uses += [f"destination {d.name}'s format is {d.format}" for d in spec.destinations if d.format != "json"]
    if uses and registry is None:
        raise ConfigError(f"{'; '.join(uses)}, and its Kafka cluster has no schema registry")
    report = kafka_probe.probe(kafka, read=spec.source.topics, write=spec.output_topics(), timeout=15)
    problems = report.config_problems()
    if problems:
        raise ConfigError(f"Kafka ({kafka.describe()}): " + "; ".join(p.message for p in problems))
    log.info(
        "Kafka %s: cluster %s, %d broker(s), access checked",
        kafka.describe(),
        report.cluster_id,
        report.brokers,
    )


def source_partitions(admin: AdminClient, topics: tuple[str, ...] | list[str]) -> int:
    """How many partitions the source topics have together (missing topics count none: ``topic_limits``
    already refused them)."""
    metadata = admin.list_topics(timeout=15)
    return sum(len(metadata.topics[t].partitions) for t in topics if t in metadata.topics)


def check_realtime_slots(partitions: int, slots: int) -> None:
    """Spark's real-time mode runs one long-running task per source partition, all at once. With fewer task
    slots than partitions (``local[2]`` and four partitions), the tasks that do not fit never read: their
    partitions are silently left behind, batch after batch (Spark 4.2, measured), with no error. So refuse
    to start instead: ConfigError naming both numbers. ``slots``: ``SparkContext.defaultParallelism`` (the
    cores of ``local[N]``, or of every executor on a cluster)."""
    if partitions > slots:
        raise ConfigError(
            f"low_latency (Spark real-time mode) needs a task slot per source partition: the source topics "
            f"have {partitions} partitions, Spark has {slots} slots; give Spark more cores (SPARK_MASTER "
            f"local[{partitions}] or larger executors) or use a batch or time commit strategy"
        )


#: How long a topic the driver needs may take to appear in the broker's metadata, in seconds. The launcher
#: creates the destination and DLQ topics just before it starts the driver, and a created topic reaches
#: every broker's metadata asynchronously (Kafka's ``Admin.createTopics`` javadoc: it "may take several
#: seconds after CreateTopicsResult returns success for all the brokers to become aware").
TOPIC_PROPAGATION_SECONDS = 15.0


def topic_limits(
    admin: AdminClient, topics: list[str], *, wait_seconds: float = TOPIC_PROPAGATION_SECONDS
) -> dict[str, int]:
    """``max.message.bytes`` of each topic, in bytes. A topic missing from the metadata is looked for again
    every half second for up to ``wait_seconds``; then ConfigError names every topic still missing."""
    deadline = time.monotonic() + wait_seconds
    while True:
        metadata = admin.list_topics(timeout=15)
        missing = [t for t in topics if t not in metadata.topics]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if missing:
        raise ConfigError(f"topic(s) missing on {len(metadata.brokers)} broker(s): {', '.join(missing)}")
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    limits: dict[str, int] = {}
    for resource, future in futures.items():
        entries = future.result(timeout=15)
        limits[resource.name] = int(entries["max.message.bytes"].value)
    return limits


def writer_config(
    spec: PipelineSpec,
    *,
    pipeline: str,
    revision: int,
    kafka: KafkaConnection,
    limits: dict[str, int],
    registry: RegistryConnection | None = None,
    replay_key: bytes = b"",
) -> WriterConfig:
    """What the writer of ``spec``'s micro-batches needs (``pipelines.spark.writer.WriterConfig``).

    ``limits``: ``max.message.bytes`` per destination and DLQ topic (``topic_limits``); KeyError when one is
    missing. ``replay_key``: the installation's replay signing key (empty: no replay header counts).
    """
    return WriterConfig(
        pipeline=pipeline,
        revision=revision,
        kafka=kafka,
        mode=spec.delivery.mode,
        consumer_group=spec.source.consumer_group,
        destinations=tuple(
            DestinationInfo(
                d.name,
                d.topic,
                d.filter,
                d.transform,
                limits[d.topic],
                format=d.format,
                subject=d.subject,
                passthrough=spec.source.uses_registry and d.transform is None,
            )
            for d in spec.destinations
        ),
        dlq_topic=spec.dlq.topic,
        dlq_max_message_bytes=limits[spec.dlq.topic],
        include_original_headers=spec.dlq.include_original_headers,
        include_stack_trace=spec.dlq.include_stack_trace,
        max_dlq_retries=spec.dlq.max_dlq_retries,
        retry=spec.retry,
        replay_key=replay_key,
        # The plan's deser_error is exact for a registry source (the decoder's reason), and its values are not
        # JSON text for the evaluator's decoder to check again.
        check_deserialization=not spec.source.uses_registry,
        registry=registry,
    )


@dataclass(frozen=True)
class EnrichPlan:
    """``enrich``'s plan built once (``compile_enrich``) and applied to any frame with the Kafka source's
    columns: a driver applies it to its warm-up rows and then to its stream, paying the Columns' thousands of
    py4j calls once (measured: 0.4 s of a start on a quiet host, 0.9 s on a cold JVM; bench/FINDINGS.md)."""

    stages: StagedPlan
    selected: tuple[Column, ...]
    #: A registry-format source: the registry and the format its values are decoded from (else None).
    registry: RegistryConnection | None = None
    source_format: str = "json"

    def apply(self, source: DataFrame) -> DataFrame:
        """``source`` (Kafka source schema) with the writer's columns; see ``enrich``."""
        if self.registry is not None:
            source, _value, _error = decode_source(source, self.registry, self.source_format)
        return self.stages.apply(source).select(*self.selected)


def compile_enrich(
    spec: PipelineSpec,
    *,
    exact_deserialization: bool = False,
    registry: RegistryConnection | None = None,
) -> EnrichPlan:
    """``enrich``'s plan for ``spec`` without a frame (same arguments and errors as ``enrich``)."""
    columns = SourceColumns.kafka()
    decode_error: Column | None = None
    if spec.source.uses_registry:
        if registry is None:
            raise ConfigError(
                f"the source's format is {spec.source.format}, and no schema registry is configured"
            )
        decoded_value, decode_error = decoded_columns()
        columns = replace(columns, value=decoded_value)
    stages = compile_stages(
        [(dest.compiled(), spec.error_handling) for dest in spec.destinations],
        source=columns,
        now_ms=F.unix_millis(F.current_timestamp()),
        exact_deserialization=exact_deserialization,
        decode_error=decode_error,
    )
    selected: list[Column] = [
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("key"),
        F.col("value"),
        F.col("headers"),
        F.col("__de").alias("deser_error"),
    ]
    for i, final in enumerate(stages.finals):
        selected += [
            final.outcome.alias(f"o{i}"),
            final.value.alias(f"v{i}"),
            final.key.alias(f"k{i}"),
            final.headers.alias(f"h{i}"),
            final.timestamp_ms.alias(f"t{i}"),
            final.error_type.alias(f"e{i}"),
            final.error_message.alias(f"m{i}"),
        ]
    return EnrichPlan(
        stages=stages,
        selected=tuple(selected),
        registry=registry if spec.source.uses_registry else None,
        source_format=spec.source.format,
    )


def enrich(
    source: DataFrame,
    spec: PipelineSpec,
    *,
    exact_deserialization: bool = False,
    registry: RegistryConnection | None = None,
) -> DataFrame:
    """The source rows plus, for each destination i, its compiled outcome columns o/v/k/h/t/e/m{i} and the
    record-level ``deser_error`` (see ``pipelines.spark.writer.BatchWriter``). Pure Spark expressions, except
    for a registry-format source (``source.format`` not ``json``): its values are decoded first by
    ``pipelines.spark.decoding.decode_source`` (an Arrow UDF, with ``registry``, required then), and the DSL
    reads the decoded JSON text while ``value`` stays the original bytes.

    By default the value is parsed leniently (``pipelines.dsl.spark.lenient_parse_stages``) and the writer
    refuses what the evaluator refuses (``WriterConfig.check_deserialization``); ``exact_deserialization``
    makes the plan's own ``deser_error`` exact, for rows no writer checks.

    Built in projections so the plan stays linear in the size of the spec and fully code-generated: the value
    is parsed once into ``__v`` (every DSL expression refers to that column instead of embedding the parse),
    then each destination's filter and transform, then what follows the transform (see
    ``pipelines.dsl.spark.destination_stages``), then the writer's columns. Spark's CollapseProject rule
    does not merge a projection into the next when that would copy a non-trivial expression into several
    places, so each stage is evaluated once per row.
    """
    return compile_enrich(spec, exact_deserialization=exact_deserialization, registry=registry).apply(source)


class Driver:
    """One running query plus its side channels (progress events, heartbeat, consumer-group commits)."""

    def __init__(self, spec: PipelineSpec, options: DriverOptions) -> None:
        self.spec = spec
        self.options = options
        self.redis = redis_client.connect(options.redis_url)
        self.admin = AdminClient(admin_config(options.kafka))
        self.group = Consumer(consumer_config(options.kafka, group_id=spec.source.consumer_group))
        self.stop_requested = threading.Event()
        self.last_batch: dict[str, Any] = {}
        self.started_ms = int(time.time() * 1000)
        self.session: SparkSession | None = None
        self.writer_config: WriterConfig | None = None
        #: Set once ``writeStream.start()`` returned: until then the driver is "starting" (preflight, the JVM,
        #: the Spark session, the query's first planning), and supervision keeps the pipeline STARTING.
        self.query_started = threading.Event()
        #: Set by each real-time progress (low_latency): a graceful stop waits for the end of a batch.
        self.realtime_batch_ended = threading.Event()
        self.query_name = f"streamforge-{options.pipeline}"
        self.fence = Fence(options.lease_file, options.run_id, options.epoch, options.fence_margin_seconds)
        #: Set once a fence check failed (``_mark_fenced``): the driver has reported exit 4 and stops (the
        #: watchdog, ``_on_fenced``), whatever else then ends the query.
        self.fenced = threading.Event()
        self._fenced_lock = threading.Lock()
        self._stopping_fenced = False
        self.query: Any = None
        self._settled = False
        self._settle_lock = threading.Lock()
        self._query_started_at: float | None = None

    # -- side channels ------------------------------------------------------------------------------------

    def _publish(self, event: dict[str, Any]) -> None:
        try:
            self.redis.xadd(
                c.PROGRESS_STREAM,
                {"event": json.dumps(event)},
                maxlen=c.PROGRESS_STREAM_MAXLEN,
                approximate=True,
            )
        except redis.RedisError as exc:
            # Progress is for people; the data path never waits on it (the next batch reports cumulative offsets).
            log.warning("could not publish progress: %s", exc)

    def phase(self) -> str:
        """What the driver is doing, as its heartbeat reports it: ``starting`` until the streaming query has
        started, then ``waiting-for-first-batch`` until a micro-batch completed, then ``running``."""
        if not self.query_started.is_set():
            return "starting"
        return "running" if self.last_batch else "waiting-for-first-batch"

    def _beat(self) -> None:
        """Write one heartbeat (Redis key ``c.heartbeat_key``, 30 s expiry, with the run's lease epoch); a Redis
        error is logged only. None while the fence is not valid: the key is per pipeline, and a driver that
        lost its lease must not overwrite the beats of the run that took over."""
        if self.fenced.is_set() or not self.fence.valid()[0]:
            return
        beat = {
            "pipeline": self.options.pipeline,
            "revision": self.options.revision,
            "run_id": self.options.run_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "app_id": self.session.sparkContext.applicationId if self.session else "",
            "time_ms": int(time.time() * 1000),
            "last_batch_id": self.last_batch.get("batch_id"),
            "phase": self.phase(),
            "epoch": self.options.epoch,
        }
        try:
            self.redis.set(c.heartbeat_key(self.options.pipeline), json.dumps(beat), ex=30)
        except redis.RedisError as exc:
            log.warning("could not write heartbeat: %s", exc)

    def _heartbeat(self) -> None:
        """Beat at once, then every ``heartbeat_seconds``: a driver still starting Spark is alive too."""
        while True:
            self._beat()
            started = self._query_started_at
            if started is not None and time.monotonic() - started >= SETTLE_IDLE_SECONDS:
                self._settle_priority()
            if self.stop_requested.wait(self.options.heartbeat_seconds):
                return

    # -- fencing --------------------------------------------------------------------------------------------

    def _watch_fence(self) -> None:
        """The watchdog thread (only with a lease file): every ``FENCE_WATCH_SECONDS`` it re-reads the lease,
        and once it is not valid, or a check elsewhere found the driver fenced, ``_on_fenced``. It catches a
        driver that lost its lease between batches, and real-time mode, where no Python runs inside a batch."""
        while True:
            if self.fenced.is_set():
                self._on_fenced("a fence check failed")  # reported by that check: this only stops
                return
            ok, why = self.fence.valid()
            if not ok:
                self._on_fenced(f"watchdog: {why}")
                return
            self.fenced.wait(FENCE_WATCH_SECONDS)

    def _check_fence(self, where: str) -> None:
        """Raises ``Fenced`` (after reporting exit 4 once, ``_mark_fenced``) unless the lease is still valid."""
        ok, why = self.fence.valid()
        if not ok:
            self._mark_fenced(f"{where}: {why}")
            raise c.Fenced(f"{where}: {why}")

    def _mark_fenced(self, why: str) -> None:
        """Record that the driver is fenced (``self.fenced``, for good: a lease renewed later does not undo
        it) and, the first time only, report exit 4 (error type Fenced, ``why``) at once, since what follows
        may not return."""
        with self._fenced_lock:
            first = not self.fenced.is_set()
            self.fenced.set()
        if first:
            log.error("fenced, stopping without committing: %s", why)
            _report_exit(self.options, c.EXIT_FENCED, FENCED, f"{c.FENCED_MARKER} {why}")

    def _on_fenced(self, why: str) -> None:
        """Stop a driver that no longer holds its lease, once (later calls do nothing), after reporting it
        (``_mark_fenced``):
        - micro-batch: ``query.stop()`` abandons the running batch (its commit is refused by the check after
          the writes anyway); if the process is not gone ``FENCED_STOP_SECONDS`` later, ``_leave_fenced``;
        - real-time (low_latency): Spark's own Kafka sink writes and commits in the JVM with no Python check
          inside a batch, so ``_leave_fenced`` at once (SIGKILL of the JVM and every other process below the
          driver, then exit 4).
        Not called from inside ``foreachBatch``: stopping the query from its own batch would wait for itself."""
        self._mark_fenced(why)
        with self._fenced_lock:
            if self._stopping_fenced:
                return
            self._stopping_fenced = True
        if self.spec.delivery.commit_strategy.kind == "low_latency" or self.query is None:
            _leave_fenced()  # nothing to stop gracefully yet, or nothing Python can hold back
            return
        timer = threading.Timer(FENCED_STOP_SECONDS, _leave_fenced)
        timer.daemon = True
        timer.start()
        try:
            self.query.stop()
        except Exception as exc:  # the query may have failed already (a batch's check raised)
            log.warning("stopping the fenced query: %s", exc)

    def _latest_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        latest: dict[tuple[str, int], int] = {}
        for topic, partition in partitions:
            try:
                _low, high = self.group.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
                latest[(topic, partition)] = int(high)
            except Exception as exc:
                log.warning("watermark lookup failed for %s/%s: %s", topic, partition, exc)
        return latest

    # -- the batch ----------------------------------------------------------------------------------------

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """foreachBatch body: write everything, then (non-transactional modes) commit offsets to the
        consumer group and publish progress. Raising here fails the batch: nothing is committed."""
        # Outside the at_most_once skip below: a fenced driver writes nothing of this batch.
        self._check_fence(f"batch {batch_id}: before writing")
        started = time.monotonic()
        assert self.writer_config is not None
        config = replace(self.writer_config, batch_id=batch_id)
        lost = 0
        try:
            summaries = batch.mapInArrow(make_partition_writer(config), SUMMARY_SCHEMA).collect()
        except Exception as exc:
            if self.spec.delivery.mode != "at_most_once" or c.halt_marker(c.DEAD_LETTER_QUEUE) in str(exc):
                raise
            # at_most_once: a failed batch is skipped, and the loss is counted and shown, never hidden.
            lost = batch.count()
            log.error(
                "at_most_once: batch %s failed and was skipped, %s records lost: %s", batch_id, lost, exc
            )
            summaries = []
        counts: Counter[str] = Counter()
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        consumed = skipped = 0
        for row in summaries:
            consumed += row.records
            if row.skipped:
                skipped += row.records
            else:
                counts.update(json.loads(row.counts))
            key = (row.topic, row.partition)
            low, high = ranges.get(key, (row.min_offset, row.max_offset))
            ranges[key] = (min(low, row.min_offset), max(high, row.max_offset))
        # Raising here fails foreachBatch: Spark writes no commits/<batch_id> (MicroBatchExecution commits a
        # batch only after the sink's addBatch returned), and the consumer group is not committed either.
        self._check_fence(f"batch {batch_id}: before committing")
        commit_failed = False
        if self.spec.delivery.mode != "effectively_once" and ranges:
            commit_failed = not self._commit_group(ranges)
        latest = self._latest_offsets(list(ranges))
        event = self._progress_event(batch_id, started, consumed, skipped, lost, counts, ranges, latest)
        event["group_commit_failed"] = commit_failed
        self.last_batch = event
        self._settle_priority()
        self._publish(event)
        # Returning is what lets Spark write commits/<batch_id>: check once more, so the time between the last
        # check and that write is Spark's alone (the group commit and the progress event above take
        # milliseconds, more on a loaded host). A driver fenced here has committed the group, which only feeds
        # lag tools; the checkpoint, the source of truth, does not get the batch and its owner re-reads it.
        self._check_fence(f"batch {batch_id}: before returning to Spark")

    def _commit_group(self, ranges: dict[tuple[str, int], tuple[int, int]]) -> bool:
        """Commit each range's end to the consumer group; False when the commit failed (reported, not fatal:
        the checkpoint is the source of truth, the group only feeds lag tools)."""
        offsets = [TopicPartition(t, p, high + 1) for (t, p), (_low, high) in ranges.items()]
        try:
            self.group.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:
            log.warning("consumer-group commit failed: %s", exc)
            return False
        return True

    def _progress_event(
        self,
        batch_id: int,
        started: float,
        consumed: int,
        skipped: int,
        lost: int,
        counts: Counter[str],
        ranges: dict[tuple[str, int], tuple[int, int]],
        latest: dict[tuple[str, int], int],
    ) -> dict[str, Any]:
        destinations = {
            d.name: {
                outcome: counts.get(f"dest:{d.name}:{outcome}", 0)
                for outcome in ("produced", "filtered", "dead_lettered", "replay_skipped")
            }
            for d in self.spec.destinations
        }
        offsets: dict[str, dict[str, dict[str, int | None]]] = {}
        for (topic, partition), (low, high) in sorted(ranges.items()):
            offsets.setdefault(topic, {})[str(partition)] = {
                "start": low,
                "end": high + 1,
                "latest": latest.get((topic, partition)),
            }
        return {
            "type": "progress",
            "pipeline": self.options.pipeline,
            "revision": self.options.revision,
            "run_id": self.options.run_id,
            "batch_id": batch_id,
            "time_ms": int(time.time() * 1000),
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
            "mode": self.spec.delivery.mode,
            "consumed": consumed,
            "already_committed": skipped,
            "lost": lost,
            "destinations": destinations,
            "dead_lettered": {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("dlq_type:")},
            "dlq_records": counts.get("dlq_records", 0),
            "retries": counts.get("retries", 0),
            "dlq_retries": counts.get("dlq_retries", 0),
            "offsets": offsets,
        }

    # -- real-time mode (low_latency) ----------------------------------------------------------------------

    def _start_realtime(self, enriched: DataFrame) -> Any:
        """Start the real-time query: the routed records (``pipelines.spark.routing.route``) to Spark's Kafka
        sink, update mode, ``trigger(realTime=<the strategy's batch duration>)``, the run's checkpoint; progress
        through ``RealtimeProgressListener``. Spark checks the plan against real-time mode's allow-list when
        the query starts and fails it (an exception here or on ``awaitTermination``) when something is not
        allowed."""
        assert self.session is not None
        assert self.writer_config is not None
        self.session.streams.addListener(RealtimeProgressListener(self))
        routed = route(enriched, self.writer_config, metrics_name=REALTIME_METRICS)
        config = self.writer_config
        outputs = [d.max_message_bytes for d in config.destinations] + [config.dlq_max_message_bytes]
        batch_ms = self.spec.delivery.commit_strategy.realtime_batch_ms()
        return (
            routed.writeStream.queryName(self.query_name)
            .format("kafka")
            .options(**spark_kafka_options(self.options.kafka))
            # A record may be as large as the largest topic limit (the plan dead-letters larger ones first).
            .option("kafka.max.request.size", str(max(outputs) + 4096))
            # A batch of several records must fit the smallest topic limit: the broker refuses a larger one
            # (MESSAGE_TOO_LARGE), and the Java producer splits it into batches of batch.size again, retrying
            # forever when that is still too large (seen with a 4 KB topic limit). A record alone in a batch
            # may exceed batch.size; the plan's RecordTooLarge check keeps it within its topic's limit.
            .option("kafka.batch.size", str(max(512, min(16_384, min(outputs) - 512))))
            # Kafka 4.0's default (KIP-1030); the 3.9 client Spark ships waits 0 ms, so records read one by one
            # left one by one: 5 ms per send cost the JVM ~8% and the broker ~60% less CPU per record (real-time
            # backlog of 400k records, bench.profile --realtime) for at most 5 ms more latency.
            .option("kafka.linger.ms", "5")
            .option("kafka.acks", "all")
            .option("kafka.enable.idempotence", "true")
            .option("checkpointLocation", self.options.checkpoint_dir)
            .outputMode("update")
            # PySpark 4.2's typing overloads of trigger() do not list realTime yet; the method takes it.
            .trigger(realTime=f"{batch_ms} milliseconds")  # type: ignore[call-overload]
            .start()
        )

    def realtime_progress(self, progress: Any) -> None:
        """End of one real-time batch (``StreamingQueryProgress``): its records are in Kafka and the batch is
        in the checkpoint. Commit the sources' end offsets to the consumer group and publish the progress
        event, counted from the batch's ``observedMetrics`` (the same fields as a micro-batch's)."""
        started = time.monotonic() - float(progress.batchDuration) / 1000.0
        metrics = progress.observedMetrics.get(REALTIME_METRICS)
        totals: dict[str, int] = metrics.asDict() if metrics is not None else {}
        consumed = int(totals.pop("consumed", 0))
        if consumed != progress.numInputRows:
            log.warning(
                "batch %s: %s rows counted, %s read", progress.batchId, consumed, progress.numInputRows
            )
        counts: Counter[str] = Counter({k: int(v) for k, v in totals.items() if v})
        ranges = source_ranges(progress.sources)
        self._check_fence(f"real-time batch {progress.batchId}: before committing the consumer group")
        commit_failed = bool(ranges) and not self._commit_group(ranges)
        latest = self._latest_offsets(list(ranges))
        event = self._progress_event(progress.batchId, started, consumed, 0, 0, counts, ranges, latest)
        event["group_commit_failed"] = commit_failed
        self.last_batch = event
        self._settle_priority()
        self._publish(event)
        self.realtime_batch_ended.set()

    def _settle_priority(self) -> None:
        """After the first finished batch (or ``SETTLE_IDLE_SECONDS`` after the query started without one; once
        either way): lower this driver, its JVM and its Python workers to ``options.niceness``
        (``streamforge_core.process_priority.lower_priority``, process groups and session).

        A takeover's driver starts at its runner's priority (the launcher lowers every other launch at once),
        so a host's loss is not held back by the pipelines already running on a saturated host (its clock
        runs until its first batch), and only then yields the CPU to the console and to the next start; for a
        driver lowered at launch this changes nothing. Only a driver that leads its own session (the
        launcher's) lowers anything: elsewhere the session is its caller's (a shell, a test)."""
        with self._settle_lock:
            if self._settled:
                return
            self._settled = True
        if self.options.niceness > 0 and os.getsid(0) == os.getpid():
            lower_priority(os.getpid(), self.options.niceness)
            log.info("the driver now runs at nice %s", self.options.niceness)

    # -- lifecycle ----------------------------------------------------------------------------------------

    def run(self) -> int:
        """Start the query and block until it ends; returns the exit code."""
        spec, options = self.spec, self.options
        threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True).start()
        if self.fence.enabled:
            threading.Thread(target=self._watch_fence, name="fence-watchdog", daemon=True).start()
        preflight(options.kafka, spec, options.registry)
        limits = topic_limits(self.admin, [*spec.source.topics, *spec.output_topics()])
        self.writer_config = writer_config(
            spec,
            pipeline=options.pipeline,
            revision=options.revision,
            kafka=options.kafka,
            limits=limits,
            registry=options.registry,
            replay_key=os.environ.get(replay_signing.KEY_ENV, "").encode(),
        )
        self.session = build_session(
            app_name=f"streamforge-{options.pipeline}-r{options.revision}",
            master=options.master,
            jars=options.jars,
            conf=cluster_conf(options.driver_host, options.cores_max),
        )
        strategy = spec.delivery.commit_strategy
        if strategy.kind == "low_latency":
            check_realtime_slots(
                source_partitions(self.admin, spec.source.topics),
                self.session.sparkContext.defaultParallelism,
            )
        # Built once for the warm-up and the query (thousands of py4j calls). Real-time mode has no writer to
        # decode values again, so its plan's own decoding must be exact; it reads no registry format.
        realtime = strategy.kind == "low_latency"
        plan = (
            compile_enrich(spec, exact_deserialization=True)
            if realtime
            else compile_enrich(spec, registry=options.registry)
        )
        if options.warm_up:
            self._warm_up(plan)
        reader = (
            self.session.readStream.format("kafka")
            .options(**spark_kafka_options(options.kafka))
            .option("subscribe", ",".join(spec.source.topics))
            .option("startingOffsets", spec.source.starting_offsets)
            .option("includeHeaders", "true")
            # Never skip records that disappeared (retention, topic recreated): stop and say so.
            .option("failOnDataLoss", "true")
            .option("fetchOffset.numRetries", "10")
        )
        if strategy.kind != "low_latency":  # real-time mode refuses it: it reads continuously
            reader = reader.option("maxOffsetsPerTrigger", str(strategy.max_records))
        if spec.delivery.mode == "effectively_once":
            reader = reader.option("kafka.isolation.level", "read_committed")
        # A start that outlasted its lease never opens the checkpoint.
        self._check_fence("before starting the query")
        if realtime:
            query = self._start_realtime(plan.apply(reader.load()))
        else:
            writer = (
                plan.apply(reader.load())
                .writeStream.queryName(self.query_name)
                .foreachBatch(self.process_batch)
                .option("checkpointLocation", options.checkpoint_dir)
            )
            if strategy.kind == "time":
                writer = writer.trigger(processingTime=f"{strategy.interval_ms} milliseconds")
            query = writer.start()
        self.query = query
        self.query_started.set()
        self._query_started_at = time.monotonic()
        self._beat()  # supervision shows RUNNING now, not a heartbeat later
        self._install_signal_handlers(query)
        self._publish({"type": "started", "pipeline": options.pipeline, "run_id": options.run_id,
                       "app_id": self.session.sparkContext.applicationId, "time_ms": int(time.time() * 1000)})  # fmt: skip
        try:
            query.awaitTermination()
        except Exception as exc:
            if self.fenced.is_set():
                raise c.Fenced("the query ended after the driver was fenced") from exc
            halt = realtime_sink_halt(str(exc), spec) if strategy.kind == "low_latency" else None
            if halt is None:
                raise
            raise halt from exc
        if self.fenced.is_set():
            raise c.Fenced("the query was stopped: the driver was fenced")
        return c.EXIT_STOPPED

    def _warm_up(self, plan: EnrichPlan) -> None:
        """Run one synthetic record per core through ``plan`` (the query's own) and the writer's start-up
        before the query starts (``writer.make_warm_up``: nothing is produced). The first micro-batch with
        records otherwise pays for the Python workers, the writer's imports, its producer's connections and the plan's first
        compilation (measured: the first record after the pipeline turned RUNNING took 6.2 s, later ones
        1.1-1.2 s), so an operator's first test message would wait seconds for a pipeline shown as running.
        The driver stays ``starting`` meanwhile. A failure here costs only that time later: logged, not
        raised."""
        assert self.session is not None
        assert self.writer_config is not None
        session = self.session
        cores = max(1, session.sparkContext.defaultParallelism)
        now = datetime.now(UTC)
        rows = [(None, b"{}", "streamforge-warm-up", i, 0, now, 0, None) for i in range(cores)]
        started = time.monotonic()
        try:
            frame = session.createDataFrame(rows, _KAFKA_SOURCE_SCHEMA).repartition(cores)
            if self.spec.delivery.commit_strategy.kind == "low_latency":
                # Real-time mode has no Python worker to start: compile the routed plan (records collected
                # here, none produced).
                route(plan.apply(frame), self.writer_config).collect()
            else:
                plan.apply(frame).mapInArrow(make_warm_up(self.writer_config), SUMMARY_SCHEMA).collect()
        except Exception as exc:
            log.warning("warm-up failed (the first micro-batch will start what it did not): %s", exc)
            return
        log.info("warm-up done in %.1f s", time.monotonic() - started)

    def _install_signal_handlers(self, query: Any) -> None:
        def graceful(signum: int, _frame: object) -> None:
            if self.stop_requested.is_set():
                return
            self.stop_requested.set()
            threading.Thread(target=self._stop_gracefully, args=(query,), daemon=True).start()

        signal.signal(signal.SIGTERM, graceful)
        signal.signal(signal.SIGINT, graceful)

    def _stop_gracefully(self, query: Any) -> None:
        """Let the running micro-batch finish (within the timeout), then stop the query. A real-time batch
        is always active: wait for the end of the current one instead, then stop at once, so only what the
        next batch read in that instant is written again after a restart (at_least_once)."""
        deadline = time.monotonic() + self.options.stop_timeout_seconds
        if self.spec.delivery.commit_strategy.kind == "low_latency":
            self.realtime_batch_ended.clear()
            self.realtime_batch_ended.wait(self.options.stop_timeout_seconds)
        else:
            while time.monotonic() < deadline and query.status.get("isTriggerActive"):
                time.sleep(0.2)
        query.stop()


def source_ranges(sources: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (first offset, last offset)}`` of one progress's Kafka sources (their
    ``startOffset``/``endOffset`` JSON, ``{"topic": {"0": next offset}}``), in the shape ``_commit_group``
    and ``_progress_event`` take: last = end - 1, so a partition that read nothing has last = first - 1.
    A source without a start (the query's first batch) starts at its end."""
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    for source in sources:
        end = _offsets(source.endOffset)
        start = _offsets(source.startOffset)
        for key, next_offset in end.items():
            ranges[key] = (start.get(key, next_offset), next_offset - 1)
    return ranges


def _offsets(text: str | None) -> dict[tuple[str, int], int]:
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in data.items()
        for partition, offset in partitions.items()
    }


class RealtimeProgressListener(StreamingQueryListener):
    """Hands the driver's real-time query progress to ``Driver.realtime_progress`` (on the driver, through
    Py4J). Other queries of the session are ignored. An error is logged, never raised into Spark's listener
    bus: progress is for people, and the next batch reports cumulative offsets again."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        """Nothing: the driver marks the query started when ``start()`` returns."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        """One real-time batch ended: commit and publish (``Driver.realtime_progress``)."""
        if event.progress.name != self.driver.query_name:
            return
        try:
            self.driver.realtime_progress(event.progress)
        except c.Fenced as exc:
            self.driver._on_fenced(exc.detail)  # already reported; stops the real-time query's JVM at once
        except Exception:
            log.exception("real-time progress of batch %s not handled", event.progress.batchId)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """Nothing: real-time batches end on time whether or not records came."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """Nothing: ``awaitTermination`` raises the query's error to ``run``."""


_SINK_TOPIC_ERRORS = (
    re.compile(r"Topic (\S+) not present in metadata"),
    re.compile(r"Not authorized to access topics: \[([^\]]+)\]"),
)


def realtime_sink_halt(text: str, spec: PipelineSpec) -> c.PipelineHalt | None:
    """What a real-time query's failure means when Spark's Kafka sink could not write a topic (``text``: the
    query's error): the DLQ topic missing or forbidden is a DeadLetterQueue halt, a destination topic a Config
    halt (as ``writer.BatchWriter`` decides in micro-batch mode). The Java producer reports a missing topic
    after ``max.block.ms`` (60 s) of waiting for it. None for any other failure (left to restarts)."""
    for pattern in _SINK_TOPIC_ERRORS:
        for found in pattern.finditer(text):
            topics = {t.strip() for t in found.group(1).split(",")}
            if spec.dlq.topic in topics:
                return c.PipelineHalt(
                    c.DEAD_LETTER_QUEUE, f"cannot write to DLQ topic {spec.dlq.topic}: {found[0]}"
                )
            hit = sorted(topics & {d.topic for d in spec.destinations})
            if hit:
                return c.PipelineHalt(
                    c.CONFIG, f"a destination topic cannot be written ({hit[0]}): {found[0]}"
                )
    return None


def classify(exc: BaseException) -> tuple[int, str]:
    """Map an exception that ended the query to (exit code, error type). A ``Fenced`` raised in
    ``foreachBatch`` reaches the driver wrapped by Spark (Python -> JVM ``PythonException`` -> a
    ``StreamingQueryException``), recognised by ``contract.FENCED_MARKER`` in its text, before any other
    marker: a fenced driver's batch may also have failed in other ways, but it stopped because of the lease."""
    text = str(exc)
    if isinstance(exc, c.Fenced) or c.FENCED_MARKER in text:
        return c.EXIT_FENCED, FENCED
    for error_type, code in ((c.DEAD_LETTER_QUEUE, c.EXIT_DLQ), (c.CONFIG, c.EXIT_CONFIG)):
        if c.halt_marker(error_type) in text:
            return code, error_type
    if isinstance(exc, ConfigError | SpecError):
        return c.EXIT_CONFIG, c.CONFIG
    return c.EXIT_CRASHED, "Crash"


def _report_exit(options: DriverOptions, code: int, error_type: str, message: str) -> None:
    report = {
        "exit_code": code,
        "error_type": error_type,
        "message": message[:4000],
        "time_ms": int(time.time() * 1000),
    }
    # The supervisor reads this last line of the driver's log; it is the one place the reason always lands.
    sys.stderr.write(c.EXIT_REASON_MARKER + json.dumps(report) + "\n")
    sys.stderr.flush()
    try:
        client = redis_client.connect(options.redis_url)
        client.set(c.exit_key(options.pipeline, options.run_id), json.dumps(report), ex=7 * 24 * 3600)
        _drop_own_heartbeat(client, options)
    except redis.RedisError:
        pass


#: Deletes KEYS[1] only if it holds the beat of run ARGV[1] (one atomic step on the server).
_DROP_OWN_HEARTBEAT = """
local raw = redis.call('GET', KEYS[1])
if raw then
  local ok, beat = pcall(cjson.decode, raw)
  if ok and type(beat) == 'table' and beat['run_id'] == ARGV[1] then
    return redis.call('DEL', KEYS[1])
  end
end
return 0
"""


def _drop_own_heartbeat(client: redis.Redis, options: DriverOptions) -> None:
    """Delete the pipeline's heartbeat key if it still holds this run's beat (a Lua script: compare and
    delete in one step), so a beat that the run which took over wrote meanwhile survives: a fenced driver must
    not erase its successor's heartbeat. Raises redis.RedisError."""
    client.eval(_DROP_OWN_HEARTBEAT, 1, c.heartbeat_key(options.pipeline), options.run_id)


def _leave_fenced() -> None:
    """End a fenced driver now: SIGKILL every process below it (the JVM, where Spark's tasks and its Kafka
    sink run, and the Python workers), then ``os._exit(EXIT_FENCED)`` without running Python's exit handlers
    (they would talk to the dead JVM). The exit report was written before (``Driver._mark_fenced``)."""
    try:
        below = psutil.Process().children(recursive=True)
    except psutil.Error:
        below = []
    for process in below:
        with contextlib.suppress(psutil.Error):
            process.kill()
    os._exit(c.EXIT_FENCED)


def _short(exc: BaseException) -> str:
    text = str(exc)
    for marker in (c.FENCED_MARKER, c.halt_marker(c.DEAD_LETTER_QUEUE), c.halt_marker(c.CONFIG)):
        if marker in text:
            start = text.index(marker)
            return text[start:].splitlines()[0]
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the pipeline, report how it ended. Returns the exit code."""
    parser = argparse.ArgumentParser(prog="pipelines.spark.driver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec-file", required=True, type=Path, help="the revision's spec as JSON")
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--revision", required=True, type=int)
    parser.add_argument("--run-id", default=None, help="the control plane's run id (default: a new UUID)")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    parser.add_argument(
        "--jars", default=os.environ.get("STREAMFORGE_SPARK_JARS", ""), help="comma-separated"
    )
    parser.add_argument("--epoch", type=int, default=None, help="the run's lease epoch")
    parser.add_argument(
        "--lease-file", default=None, help="the lease file its runner keeps (absent: fencing off)"
    )
    parser.add_argument(
        "--fence-margin",
        type=float,
        default=3.0,
        help="stop committing this many seconds before the lease expires",
    )
    parser.add_argument(
        "--driver-host", default=None, help="spark.driver.host: where executors reach the driver"
    )
    parser.add_argument("--cores-max", type=int, default=None, help="spark.cores.max on a standalone cluster")
    parser.add_argument(
        "--no-warm-up", action="store_true", help="start the query without the warm-up (a takeover)"
    )
    parser.add_argument(
        "--niceness",
        type=int,
        choices=range(20),
        default=0,
        metavar="0-19",
        help="the nice value the driver lowers itself to once its first batch is done (0: none)",
    )
    args = parser.parse_args(argv)
    if args.lease_file is not None and args.epoch is None:
        parser.error("--lease-file needs --epoch (the lease names the epoch this run holds)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    options = DriverOptions(
        pipeline=args.pipeline,
        revision=args.revision,
        run_id=args.run_id or str(uuid.uuid4()),
        # Security (TLS, SASL) from the KAFKA_* environment the supervisor passed: never on the command line.
        kafka=connection_from_environment(os.environ, bootstrap_servers=args.bootstrap),
        redis_url=args.redis_url,
        checkpoint_dir=args.checkpoint_dir,
        master=args.master,
        jars=tuple(j for j in args.jars.split(",") if j),
        epoch=args.epoch,
        lease_file=args.lease_file,
        fence_margin_seconds=args.fence_margin,
        driver_host=args.driver_host,
        cores_max=args.cores_max,
        warm_up=not args.no_warm_up,
        niceness=args.niceness,
        # Like Kafka's: from the SCHEMA_REGISTRY_* environment the runner passed, never the command line.
        registry=registry_from_environment(os.environ),
    )
    driver: Driver | None = None
    try:
        spec = parse_spec(json.loads(args.spec_file.read_text()), pipeline_name=args.pipeline)
        driver = Driver(spec, options)
        code = driver.run()
    except Exception as exc:
        if driver is not None and driver.fenced.is_set():
            # Reported when the fence failed (the reason is there); what ended the query afterwards is a
            # consequence (Spark's wrapped Fenced, or the stop).
            log.error("pipeline %s ended: fenced (%s)", options.pipeline, _short(exc))
            return c.EXIT_FENCED
        code, error_type = classify(exc)
        log.exception("pipeline %s ended: %s", options.pipeline, error_type)
        _report_exit(options, code, error_type, _short(exc))
        return code
    _report_exit(options, code, "Stopped", "stopped on request")
    return code


if __name__ == "__main__":
    sys.exit(main())
