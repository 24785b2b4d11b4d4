"""Routing compiled into the query plan: every record the Python writer would write, as rows for Spark's
Kafka sink (``topic, key, value, headers``), for the ``low_latency`` commit strategy (Spark real-time mode).

Real-time mode runs one long-lived task per Kafka partition and checks the physical plan against an
allow-list (projections, filters, generators, unions, observed metrics, the Kafka sink); Python operators
(``mapInArrow``, Python UDFs) are not on it. So what ``pipelines.spark.writer.BatchWriter`` decides in
Python per row is decided here with built-in expressions on the columns of ``driver.enrich`` (with
``exact_deserialization``: no writer decodes the values again), and the records are produced by ``inline``
of one array of structs per source record (a ``GenerateExec``):

* a destination whose outcome is ``produced`` gets its value, key and headers plus the lineage header
  (``x-streamforge-source: topic/partition/offset``), unless the record is larger than the topic's
  ``max.message.bytes`` by the writer's own estimate (``streamforge_core.kafka.record_size``): then it is
  dead-lettered as ``RecordTooLarge`` with the writer's message;
* ``dead_lettered`` by the DSL: one DLQ record for that destination (error type and message from the plan);
* a value that did not decode (``deser_error``): one DLQ record for every destination (``*``);
* replays are restricted exactly as ``writer.replay_restrictions`` does (only under the console's valid
  signature, computed here from ``sha2``; last header wins; another DLQ's
  replay is for none; unknown destination names mean every destination), counted as ``replay_skipped``.

DLQ records carry the original key, value and (when ``include_original_headers``) headers, then the
``x-streamforge-*`` headers in the writer's order. What the plan cannot know, and how it says it honestly:

* ``x-streamforge-attempts`` is ``1``: every failure decided here is decided before any produce attempt, as
  in the writer for these cases. Failures the writer finds only by producing (a transient error retried to
  ``RetryExhausted``, the broker's own MESSAGE_TOO_LARGE after the client-side estimate passed) have no row
  here: Spark's Kafka sink retries inside its producer and otherwise fails the task, so the query stops
  and restarts from its checkpoint (nothing is lost, nothing is dead-lettered for them).
* ``x-streamforge-stack-trace`` is never written: no Python frame exists (the writer has none either for
  these cases; it passes no trace for plan-decided failures).
* ``x-streamforge-error`` of a ``MessageDeserialization`` is the plan's exact parse's reason ("invalid JSON",
  "invalid UTF-8", "invalid JSON: number out of range"), the same kind as the writer's but without the
  Python decoder's detail (line and column), which only that decoder knows.
* ``x-streamforge-timestamp`` is the query's current time as Spark fixes it for a batch
  (``current_timestamp()``), ISO-8601 UTC in milliseconds; in real-time mode that is the start of the
  long-running batch, up to its duration before the write.

The destination's record timestamp is not a column: Spark's Kafka sink has no timestamp column, so the
producer stamps records when it sends them (``pipelines.spec`` allows only ``timestamp: CURRENT`` with
``low_latency`` for that reason).

No Django here (the driver imports it).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines.spark.writer import WriterConfig
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import HEADER_OVERHEAD, RECORD_OVERHEAD

__all__ = ["OUTCOMES", "metric_columns", "route", "routed_records", "with_fates"]

#: Per destination, each source record counts once under exactly one of these (the writer's count keys).
OUTCOMES: tuple[str, ...] = ("produced", "filtered", "dead_lettered", "replay_skipped")
#: Error types a plan can decide (``RetryExhausted`` needs produce attempts, ``SchemaValidation`` a registry
#: schema, which ``low_latency`` pipelines cannot use, and ``Skipped`` is the console's: none appears here).
_PLAN_ERROR_TYPES = tuple(
    t for t in c.DLQ_ERROR_TYPES if t not in (c.RETRY_EXHAUSTED, c.SCHEMA_VALIDATION, c.SKIPPED)
)
_DLQ_OF_ALL = "__dlq_all"


def _text(value: str) -> Column:
    return F.encode(F.lit(value), "UTF-8")


def _header(name: str, value: Column) -> Column:
    return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))


def _last_header(headers: Column, name: str) -> Column:
    """The value of the last header called ``name``, as text (null when absent)."""
    found = F.filter(headers, lambda h: h["key"] == F.lit(name))
    return F.decode(F.try_element_at(found, F.lit(-1))["value"], "UTF-8")


def _no_headers() -> Column:
    return F.array().cast("array<struct<key:string,value:binary>>")


def _replay_columns(config: WriterConfig) -> list[Column]:
    """``__ro{i}`` per destination: is this record for destination i (``writer.replay_scope``)? And
    ``__rr``: is the record restricted at all (``writer.replay_restrictions`` lists its row)?"""
    headers = F.coalesce(F.col("headers"), _no_headers())
    replay_of = _last_header(headers, c.H_REPLAY_OF)
    named = _last_header(headers, c.H_REPLAY_DESTINATIONS)
    signed = _signature_verifies(
        config.replay_key, replay_of, named, _last_header(headers, c.H_REPLAY_SIGNATURE)
    )
    # Python's ``text.rsplit("/", 2)[0]``: the text without its last two "/"-separated parts.
    dlq_of = F.regexp_extract(replay_of, r"(?s)^(.*?)(?:/[^/]*)?(?:/[^/]*)?$", 1)
    foreign = signed & replay_of.isNotNull() & (dlq_of != F.lit(config.dlq_topic))
    # str.strip() with no argument: ASCII whitespace is what a header written by the console can carry.
    names = F.transform(F.split(named, ","), lambda n: F.trim(n, F.lit(" \t\n\r\x0b\x0c")))
    known = F.array_intersect(names, F.array(*(F.lit(d.name) for d in config.destinations)))
    narrowed = signed & named.isNotNull() & (F.size(known) > 0)
    columns = [(foreign | narrowed).alias("__rr")]
    for i, dest in enumerate(config.destinations):
        for_it = ~foreign & (~narrowed | F.array_contains(known, F.lit(dest.name)))
        columns.append(for_it.alias(f"__ro{i}"))
    return columns


def _signature_verifies(key: bytes, replay_of: Column, named: Column, signature: Column) -> Column:
    """Does ``signature`` (text) verify as ``replay_signing.sign(key, replay_of, named, value)``? HMAC-SHA256
    (RFC 2104) from Spark's ``sha2``: H((K ^ opad) || H((K ^ ipad) || message)), the padded keys computed
    here. Evaluated only for a row that carries a signature (CASE WHEN is lazy per row), so an ordinary
    record costs one header scan and no hashing; False for every row without a key."""
    if not key:
        return F.lit(False)
    inner_pad, outer_pad = replay_signing.hmac_pads(key)
    nul = F.lit(b"\x00")
    message = F.concat(
        F.lit(replay_signing.MESSAGE_PREFIX),
        F.encode(F.coalesce(replay_of, F.lit("")), "UTF-8"),
        nul,
        F.encode(F.coalesce(named, F.lit("")), "UTF-8"),
        nul,
        F.unhex(F.sha2(F.coalesce(F.col("value"), F.lit(b"")), 256)),
    )
    inner = F.unhex(F.sha2(F.concat(F.lit(inner_pad), message), 256))
    expected = F.sha2(F.concat(F.lit(outer_pad), inner), 256)
    return F.when(signature.isNull(), F.lit(False)).otherwise(
        F.coalesce(F.lower(F.trim(signature)) == expected, F.lit(False))
    )


def _header_bytes(headers: Column) -> Column:
    """Bytes ``record_size`` counts for these headers: name + value + HEADER_OVERHEAD each (long)."""
    return F.aggregate(
        headers,
        F.lit(0).cast("long"),
        lambda total, h: (
            total + F.octet_length(h["key"]) + F.coalesce(F.length(h["value"]), F.lit(0)) + HEADER_OVERHEAD
        ),
    )


def with_fates(enriched: DataFrame, config: WriterConfig) -> DataFrame:
    """``enriched`` (the columns of ``driver.enrich``) plus, per destination i: ``f{i}`` the record's final
    outcome there (one of OUTCOMES), ``hh{i}`` the headers to produce (the destination's plus lineage),
    ``et{i}``/``mt{i}`` the error type and message of the DLQ record written for this destination alone
    (null unless one is), and ``__rr``/``__ro{i}`` (replay restriction, see ``_replay_columns``).

    One row per source record, so ``metric_columns`` counts over it; ``routed_records`` turns it into
    Kafka records. Raises nothing at plan time; ``config.destinations[i].max_message_bytes`` is the limit.
    """
    frame = enriched.select("*", *_replay_columns(config))
    lineage = _header(
        c.H_LINEAGE,
        F.encode(F.concat_ws("/", F.col("topic"), F.col("partition"), F.col("offset")), "UTF-8"),
    )
    staged: list[Column] = []
    for i, _dest in enumerate(config.destinations):
        headers = F.concat(F.coalesce(F.col(f"h{i}"), _no_headers()), F.array(lineage))
        staged.append(F.when(F.col(f"o{i}") == "produced", headers).alias(f"hh{i}"))
    frame = frame.select("*", *staged)
    fates: list[Column] = []
    deser_failed = F.col("deser_error").isNotNull()
    for i, dest in enumerate(config.destinations):
        outcome, for_it = F.col(f"o{i}"), F.col(f"__ro{i}")
        value = F.col(f"v{i}")
        size = (
            F.lit(RECORD_OVERHEAD)
            + F.coalesce(F.length(value), F.lit(0))
            + F.coalesce(F.length(F.col(f"k{i}")), F.lit(0))
            + _header_bytes(F.col(f"hh{i}"))
        )
        too_large = (outcome == "produced") & (size > dest.max_message_bytes)
        fate = (
            F.when(~for_it, F.lit("replay_skipped"))
            .when(too_large, F.lit("dead_lettered"))
            .otherwise(outcome)
        )
        own_dlq = for_it & ~deser_failed & ((outcome == "dead_lettered") | too_large)
        error_type = F.when(too_large, F.lit(c.RECORD_TOO_LARGE)).otherwise(F.col(f"e{i}"))
        too_large_message = F.concat(
            F.lit("record of "),
            F.coalesce(F.length(value), F.lit(0)).cast("string"),
            F.lit(f" bytes exceeds max.message.bytes={dest.max_message_bytes} of topic {dest.topic}"),
        )
        message = F.when(too_large, too_large_message).otherwise(F.coalesce(F.col(f"m{i}"), F.col(f"e{i}")))
        fates += [
            fate.alias(f"f{i}"),
            F.when(own_dlq, error_type).alias(f"et{i}"),
            F.when(own_dlq, message).alias(f"mt{i}"),
        ]
    # The decode failure's one DLQ record: for every destination ("*"), or, for a restricted replay, for the
    # destinations it is for (names in spec order); none when it is for none of them.
    for_names = F.concat_ws(
        ",", *(F.when(F.col(f"__ro{i}"), F.lit(d.name)) for i, d in enumerate(config.destinations))
    )
    all_name = F.when(~F.col("__rr"), F.lit(c.ALL_DESTINATIONS)).otherwise(for_names)
    fates.append(F.when(deser_failed & (all_name != ""), all_name).alias(_DLQ_OF_ALL))
    return frame.select("*", *fates)


def metric_columns(config: WriterConfig) -> list[Column]:
    """Aggregate expressions over ``with_fates`` rows, named like the writer's count keys: ``consumed``,
    ``dest:<name>:<outcome>`` for each destination and outcome, ``dlq_type:<type>`` for each error type a
    plan can decide, and ``dlq_records``. Each is a long (zero when nothing counted). For
    ``DataFrame.observe`` (CollectMetricsExec is on real-time mode's allow-list) or ``agg``."""

    def count(condition: Column) -> Column:
        return F.sum(F.when(condition, F.lit(1)).otherwise(F.lit(0))).cast("long")

    deser_dlq = F.col(_DLQ_OF_ALL).isNotNull()
    columns = [F.count(F.lit(1)).alias("consumed")]
    for i, dest in enumerate(config.destinations):
        for outcome in OUTCOMES:
            columns.append(count(F.col(f"f{i}") == outcome).alias(f"dest:{dest.name}:{outcome}"))
    for error_type in _PLAN_ERROR_TYPES:
        hits = [F.col(f"et{i}") == error_type for i in range(len(config.destinations))]
        if error_type == c.MESSAGE_DESERIALIZATION:
            hits.append(deser_dlq)
        total = sum((F.coalesce(h.cast("long"), F.lit(0)) for h in hits), start=F.lit(0).cast("long"))
        columns.append(F.sum(total).cast("long").alias(f"dlq_type:{error_type}"))
    dlq_total = sum(
        (F.col(f"et{i}").isNotNull().cast("long") for i in range(len(config.destinations))),
        start=deser_dlq.cast("long"),
    )
    columns.append(F.sum(dlq_total).cast("long").alias("dlq_records"))
    return columns


def _dlq_record(
    config: WriterConfig, destination: Column, filter_text: str, transform_text: str, error_type: Column,
    message: Column,
) -> Column:  # fmt: skip
    """One DLQ record (``writer.BatchWriter._dlq_record``'s fields, attempts 1, no stack trace)."""
    original = F.coalesce(F.col("headers"), _no_headers()) if config.include_original_headers else None
    stamp = F.date_format(F.current_timestamp(), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    ours = F.array(
        _header(c.H_ERROR, F.encode(message, "UTF-8")),
        _header(c.H_ERROR_TYPE, F.encode(error_type, "UTF-8")),
        _header(c.H_SOURCE_TOPIC, F.encode(F.col("topic"), "UTF-8")),
        _header(c.H_SOURCE_PARTITION, F.encode(F.col("partition").cast("string"), "UTF-8")),
        _header(c.H_SOURCE_OFFSET, F.encode(F.col("offset").cast("string"), "UTF-8")),
        _header(c.H_TIMESTAMP, F.encode(stamp, "UTF-8")),
        _header(c.H_PIPELINE, _text(config.pipeline)),
        _header(c.H_DESTINATION, F.encode(destination, "UTF-8")),
        _header(c.H_FILTER, _text(filter_text)),
        _header(c.H_TRANSFORM, _text(transform_text)),
        _header(c.H_REVISION, _text(str(config.revision))),
        _header(c.H_ATTEMPTS, _text("1")),
    )
    return F.struct(
        F.lit(config.dlq_topic).alias("topic"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        (F.concat(original, ours) if original is not None else ours).alias("headers"),
    )


def routed_records(fated: DataFrame, config: WriterConfig) -> DataFrame:
    """``with_fates`` rows -> Kafka records ``topic string, key binary, value binary, headers
    array<struct<key:string,value:binary>>``: zero or more per source record (see the module docstring),
    destinations in spec order, then their DLQ records, then the decode failure's."""
    records: list[Column] = []
    for i, dest in enumerate(config.destinations):
        produced = F.struct(
            F.lit(dest.topic).alias("topic"),
            F.col(f"k{i}").cast("binary").alias("key"),
            F.col(f"v{i}").cast("binary").alias("value"),
            F.col(f"hh{i}").alias("headers"),
        )
        records.append(F.when(F.col(f"f{i}") == "produced", produced))
    for i, dest in enumerate(config.destinations):
        dlq = _dlq_record(
            config,
            F.lit(dest.name),
            dest.filter or "",
            dest.transform or "",
            F.col(f"et{i}"),
            F.col(f"mt{i}"),
        )
        records.append(F.when(F.col(f"et{i}").isNotNull(), dlq))
    deser = _dlq_record(
        config, F.col(_DLQ_OF_ALL), "", "", F.lit(c.MESSAGE_DESERIALIZATION), F.col("deser_error")
    )
    records.append(F.when(F.col(_DLQ_OF_ALL).isNotNull(), deser))
    return fated.select(F.inline(F.array_compact(F.array(*records))))


def route(enriched: DataFrame, config: WriterConfig, *, metrics_name: str | None = None) -> DataFrame:
    """The whole routing: ``with_fates``, optionally ``observe(metrics_name, *metric_columns)`` (the counts
    arrive in each progress report's ``observedMetrics[metrics_name]``), then ``routed_records``."""
    fated = with_fates(enriched, config)
    if metrics_name is not None:
        fated = fated.observe(metrics_name, *metric_columns(config))
    return routed_records(fated, config)
