"""Where each microsecond of a record goes in the micro-batch pipeline (issue #34, Deliver 1): CPU µs per
source record for each piece of the path, from three measurements on this machine.

1. **The plan, as a ladder** (Spark, cached 1 KB records, ``noop`` sink, no Kafka): each rung runs the one
   before it plus one piece, so the differences are the pieces: scan -> + parse (Spark's lenient
   ``try_parse_json`` stages) -> + filter and transform evaluation -> + serialization (the transformed value
   back to JSON bytes, key, headers, timestamp, outcome: the rest of ``driver.enrich``) -> + the Arrow
   hand-off to a Python worker -> + the writer's strict decode of every value. CPU of the Spark JVM and its
   Python workers together; the median of ``repeats`` interleaved rounds after a warm-up round.
2. **The writer** (``pipelines.spark.writer.BatchWriter``, in this process, on the plan's own Arrow
   batches, producing to the real broker): the time inside its decode, inside its ``produce`` calls, waiting
   for the acknowledgements, and the rest (Arrow columns to Python values, headers, lineage, size checks);
   and the CPU of librdkafka's threads (process CPU minus this thread's).
3. **The real driver, twice** (``bench.profile``): the same records with large micro-batches and with small
   ones. Total CPU = records x a + batches x b gives the per-record cost ``a`` and the fixed cost of a
   micro-batch ``b`` (planning, offset and commit logs, the writer's producer set-up, the consumer-group
   commit, the progress event). The JVM's per-record cost minus the plan's rungs is what the Kafka source
   costs (fetching, decoding the record batches, the row conversion) plus what the ladder does not see
   (GC of larger heaps, the shuffle-free streaming scan).

Run with ``python -m bench.profile --breakdown`` (the devstack test services up); figures in
bench/FINDINGS.md.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import Services, Topics, load1, pipeline_spec
from bench.micro import _children_cpu, _source
from bench.stats import median
from pipelines.dsl.spark import SourceColumns, lenient_parse_stages, stage_destinations
from pipelines.spark.driver import enrich, topic_limits, writer_config
from pipelines.spark.writer import _SUMMARY_ARROW, SUMMARY_SCHEMA, BatchWriter, deserialization_error
from pipelines.spec import PipelineSpec, parse_spec
from streamforge_core.kafka import KafkaConnection

#: The ladder's rungs, in order; each adds one piece to the rung before it.
RUNGS = ("scan", "parse", "filter_transform", "serialize", "arrow", "decode")


def _arrow_handoff(frame: DataFrame, *, decode: bool) -> DataFrame:
    """``frame`` handed to Python workers as Arrow, as the writer gets it; with ``decode`` the writer's strict
    decode of every value (``writer.deserialization_error``), else the rows are only counted."""

    def handoff(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = 0
        for batch in batches:
            n += batch.num_rows
            if decode:
                values, errors = batch.column("value").to_pylist(), batch.column("deser_error").to_pylist()
                for value, error in zip(values, errors, strict=True):
                    deserialization_error(value, error)
        yield pa.RecordBatch.from_pylist(
            [{"topic": "t", "partition": 0, "min_offset": 0, "max_offset": 0, "records": n, "skipped": False,
              "counts": "{}"}],
            schema=_SUMMARY_ARROW,
        )  # fmt: skip

    return frame.mapInArrow(handoff, SUMMARY_SCHEMA)


def ladder_frames(source: DataFrame, spec: PipelineSpec) -> dict[str, DataFrame]:
    """The rungs of :data:`RUNGS` over ``source`` (Kafka source schema), each a DataFrame for the noop sink."""
    columns = SourceColumns.kafka()
    parsed = source
    for stage in lenient_parse_stages(columns):
        parsed = parsed.select("*", *stage)
    staged, _finals = stage_destinations(
        source,
        [(d.compiled(), spec.error_handling) for d in spec.destinations],
        source=columns,
        now_ms=F.unix_millis(F.current_timestamp()),
        exact_deserialization=False,
    )
    evaluated = [f"__d{i}_{part}" for i in range(len(spec.destinations)) for part in ("p", "x")]
    existing = set(staged.columns)
    enriched = enrich(source, spec)
    return {
        "scan": source.select(F.length("value").alias("n")),
        "parse": parsed.select(F.col("__v").isNull().alias("v"), F.col("__de").alias("e")),
        # the staged frame's later projection (key, headers, timestamp) is pruned: only filter + transform run
        "filter_transform": staged.select(*(F.col(c) for c in evaluated if c in existing), F.col("__de")),
        "serialize": enriched,
        "arrow": _arrow_handoff(enriched, decode=False),
        "decode": _arrow_handoff(enriched, decode=True),
    }


def run_ladder(
    spark: SparkSession, source: DataFrame, spec: PipelineSpec, records: int, repeats: int
) -> dict[str, Any]:
    """CPU µs per record of each rung (cumulative) and of each piece (a rung minus the one before), with the
    load average over the rounds. Round 0 warms up (JIT, code generation, Python workers) and is dropped."""
    frames = ladder_frames(source, spec)
    cpu: dict[str, list[float]] = {name: [] for name in RUNGS}
    loads: list[float] = []
    for round_ in range(repeats + 1):
        for name in RUNGS:
            before = _children_cpu()
            frames[name].write.format("noop").mode("overwrite").save()
            if round_:
                cpu[name].append(_children_cpu() - before)
                loads.append(load1())
    cumulative = {name: median(values) / records * 1e6 for name, values in cpu.items()}
    pieces = {RUNGS[0]: cumulative[RUNGS[0]]}
    for earlier, later in itertools.pairwise(RUNGS):
        pieces[later] = cumulative[later] - cumulative[earlier]
    return {
        "cumulative_us": {k: round(v, 2) for k, v in cumulative.items()},
        "pieces_us": {k: round(v, 2) for k, v in pieces.items()},
        "load": [min(loads), max(loads)],
    }


class TimedWriter(BatchWriter):
    """The writer with its hot paths timed (``perf_counter`` around each call; ~0.1 µs per call of its own):
    ``seconds['decode']`` in the strict decode, ``['produce']`` in ``Producer.produce`` calls,
    ``['flush']`` waiting for the acknowledgements and handling failures at the end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds: dict[str, float] = {"decode": 0.0, "produce": 0.0, "flush": 0.0}

    def _undecodable(self, batch: pa.RecordBatch) -> dict[int, str]:
        started = time.perf_counter()
        try:
            return super()._undecodable(batch)
        finally:
            self.seconds["decode"] += time.perf_counter() - started

    def _produce_fast(self, *args: Any) -> None:
        started = time.perf_counter()
        try:
            super()._produce_fast(*args)
        finally:
            self.seconds["produce"] += time.perf_counter() - started

    def _finish(self) -> None:
        started = time.perf_counter()
        try:
            super()._finish()
        finally:
            self.seconds["flush"] += time.perf_counter() - started


def run_writer(batches: list[pa.RecordBatch], spec: PipelineSpec, bootstrap: str, limits: dict[str, int],
               repeats: int) -> dict[str, Any]:  # fmt: skip
    """The writer over ``batches`` (the plan's output), ``repeats`` times after one warm-up: µs per source
    record in each part (median), records produced per round, and librdkafka's threads' CPU."""
    config = writer_config(spec, pipeline="bench-breakdown", revision=1, kafka=KafkaConnection(bootstrap),
                           limits=limits)  # fmt: skip
    records = sum(b.num_rows for b in batches)
    parts: dict[str, list[float]] = {
        k: [] for k in ("decode", "produce", "flush", "rest", "total", "background_cpu")
    }
    produced = 0
    for round_ in range(repeats + 1):
        writer = TimedWriter(config)
        cpu0, thread0, started = time.process_time(), time.thread_time(), time.perf_counter()
        summaries = list(writer.write(iter(batches)))
        total = time.perf_counter() - started
        background = (time.process_time() - cpu0) - (time.thread_time() - thread0)
        if len(summaries) != 1:
            raise RuntimeError(f"the writer gave {len(summaries)} summaries, not 1")
        if not round_:
            continue
        produced = sum(v for k, v in writer.counts.items() if k.endswith(":produced"))
        timed = sum(writer.seconds.values())
        for key in ("decode", "produce", "flush"):
            parts[key].append(writer.seconds[key])
        parts["rest"].append(total - timed)
        parts["total"].append(total)
        parts["background_cpu"].append(background)
    return {
        "us_per_record": {k: round(median(v) / records * 1e6, 2) for k, v in parts.items()},
        "records": records,
        "produced_per_round": produced,
    }


def plan_batches(frame: DataFrame, rows_per_batch: int) -> list[pa.RecordBatch]:
    """The plan's output as the writer receives it: Arrow record batches of ``rows_per_batch`` rows
    (``spark.sql.execution.arrow.maxRecordsPerBatch``), collected to this process."""
    table = frame.toArrow()
    batches: list[pa.RecordBatch] = table.combine_chunks().to_batches(max_chunksize=rows_per_batch)
    return batches


def fixed_cost(large: dict[str, Any], small: dict[str, Any]) -> dict[str, Any]:
    """Solve records x a + batches x b = CPU seconds, per process group, from two driver runs
    (``bench.profile.run_driver`` results with large and small micro-batches): ``a`` in µs per record and
    ``b`` in ms per micro-batch. The JIT compiler threads (``jvm-jit``) are left out: their work follows the
    JVM's age, not records or batches. Raises ValueError when the two runs have the same records/batch ratio."""
    n1, m1 = large["records"], len(large["batches"])
    n2, m2 = small["records"], len(small["batches"])
    det = n1 * m2 - n2 * m1
    if det == 0:
        raise ValueError("the two runs need different micro-batch sizes")
    out: dict[str, Any] = {"per_record_us": {}, "per_batch_ms": {}}
    for group in sorted((set(large["cpu_s"]) | set(small["cpu_s"])) - {"jvm-jit"}):
        c1, c2 = large["cpu_s"].get(group, 0.0), small["cpu_s"].get(group, 0.0)
        a = (c1 * m2 - c2 * m1) / det
        b = (n1 * c2 - n2 * c1) / det
        out["per_record_us"][group] = round(a * 1e6, 2)
        out["per_batch_ms"][group] = round(b * 1e3, 1)
    out["wall_per_batch_ms_small"] = round(small["wall_s"] / max(1, m2) * 1e3, 1)
    return out


def table(ladder: dict[str, Any], writer: dict[str, Any], fixed: dict[str, Any] | None,
          batch_records: int, jit_us: float | None = None) -> list[tuple[str, float]]:  # fmt: skip
    """One list of (piece, CPU µs per source record), largest first; the per-batch fixed cost spread over
    ``batch_records`` records. The JVM's remainder (the Kafka source and what the ladder does not see) and
    the broker come from the driver runs when given; ``jit_us``: the JIT compiler threads' CPU per record in
    the large-batch run (it falls as the JVM warms, so it belongs to that run's length, not to a record)."""
    rows = [
        ("parse (Spark try_parse_json stages)", ladder["pieces_us"]["parse"]),
        ("filter + transform evaluation", ladder["pieces_us"]["filter_transform"]),
        ("serialization (value to JSON bytes, key, headers, timestamp, outcome)", ladder["pieces_us"]["serialize"]),
        ("Arrow hand-off to the Python worker", ladder["pieces_us"]["arrow"]),
        ("writer: strict decode of each value", writer["us_per_record"]["decode"]),
        ("writer: produce calls (this thread)", writer["us_per_record"]["produce"]),
        ("writer: Arrow to Python values, headers, lineage, size checks", writer["us_per_record"]["rest"]),
        ("writer: librdkafka threads (batching, compression, network)", writer["us_per_record"]["background_cpu"]),
    ]  # fmt: skip
    if fixed is not None:
        jvm = fixed["per_record_us"].get("spark-jvm", 0.0)
        plan_jvm = sum(
            ladder["pieces_us"][k] for k in ("scan", "parse", "filter_transform", "serialize", "arrow")
        )
        rows.append(
            (
                "Kafka source and the rest of the JVM (driver run minus the plan's rungs)",
                round(jvm - plan_jvm, 2),
            )
        )
        rows.append(("Kafka broker (fetch + produce)", fixed["per_record_us"].get("kafka-broker", 0.0)))
        per_batch = sum(fixed["per_batch_ms"].values())
        if jit_us is not None:
            rows.append(("JIT compilation (HotSpot C1/C2 threads) during the large-batch run", jit_us))
        rows.append((f"per-micro-batch fixed cost ({per_batch:.0f} ms CPU) over {batch_records:,} records",
                     round(per_batch * 1e3 / batch_records, 2)))  # fmt: skip
    return sorted(rows, key=lambda r: -r[1])


def measure_plan_and_writer(services: Services, *, records: int, partitions: int, repeats: int, master: str,
                            destinations: int) -> dict[str, Any]:  # fmt: skip
    """Parts 1 and 2 of the module docstring in one Spark session; the writer produces to fresh topics."""
    from pipelines.spark.session import build_session

    topics = Topics(services.bootstrap, prefix="breakdown")
    try:
        dests = [topics.create(f"d{i}", partitions) for i in range(destinations)]
        dlq = topics.create("dlq", 1)
        raw = pipeline_spec(source_topics=["bench"], dest_topics=dests, dlq_topic=dlq, mode="at_least_once",
                            batch=50_000)  # fmt: skip
        spec = parse_spec(raw, pipeline_name="breakdown")
        limits = topic_limits(topics.admin, [*dests, dlq])
        spark = build_session(app_name="bench-breakdown", master=master, jars=services.jars, conf={})
        try:
            source = _source(spark, records, partitions)
            ladder = run_ladder(spark, source, spec, records, repeats)
            rows_per_batch = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") or 10_000)
            batches = plan_batches(enrich(source, spec), rows_per_batch)
        finally:
            spark.stop()
        writer = run_writer(batches, spec, services.bootstrap, limits, repeats)
    finally:
        topics.delete_all()
    return {"ladder": ladder, "writer": writer, "load_end": load1()}
