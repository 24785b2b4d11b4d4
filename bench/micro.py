"""Micro-benchmarks of the pipeline's Spark stages on cached 1 KB records (no Kafka): how many records/s each
piece of the compiled plan sustains on this machine, so the end-to-end figure can be split into its parts.

    python -m bench.micro [--records 100000] [--repeats 3] [--only name,...] [--master local[2]]

Each case runs ``repeats`` times, interleaved with the other cases, and the median is printed. Not part of
``make bench``; the figures go into bench/FINDINGS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import psutil
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import Services, load1, one_kb_records, pipeline_spec
from bench.stats import median
from pipelines.dsl.spark import SourceColumns, parse_stages, parsed_value, stage_destinations
from pipelines.spark.session import build_session
from pipelines.spec import parse_spec


def _children_cpu() -> float:
    """CPU seconds used so far by this process's children (the Spark JVM, the Python workers)."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _source(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    rows = [
        ("bench", i % partitions, i // partitions, key, value, None, 0)
        for i, (key, value) in enumerate(one_kb_records(n))
    ]
    schema = (
        "topic string, partition int, offset long, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>, ts long"
    )
    frame = spark.createDataFrame(rows, schema).repartition(partitions)
    frame = frame.withColumn("timestamp", F.timestamp_millis(F.col("ts"))).drop("ts")
    frame = frame.withColumn("timestampType", F.lit(0)).cache()
    frame.count()
    return frame


def cases(source: DataFrame, destinations: int) -> dict[str, Callable[[], DataFrame]]:
    """Named DataFrames to evaluate (``noop`` sink), from the scan alone to the driver's whole plan."""
    from pipelines.spark.driver import enrich

    spec = parse_spec(
        pipeline_spec(source_topics=["bench"], dest_topics=["d0", "d1"][:destinations], dlq_topic="dlq",
                      mode="at_least_once", batch=1000),
        pipeline_name="micro",
    )  # fmt: skip
    text = F.col("value").cast("string")

    def value_only() -> DataFrame:
        return source.select(F.length("value").alias("n"))

    def parse_json_only() -> DataFrame:
        return source.select(F.try_parse_json(text).isNull().alias("p"))

    def parsed_value_only() -> DataFrame:
        v, e = parsed_value(SourceColumns.kafka())
        return source.select(v.isNull().alias("v"), e.alias("e"))

    def deserialization_staged() -> DataFrame:
        frame = source
        for stage in parse_stages(SourceColumns.kafka()):
            frame = frame.select("*", *stage)
        return frame.select(F.col("__v").isNull().alias("v"), F.col("__de").alias("e"))

    def staged() -> DataFrame:
        frame, finals = stage_destinations(
            source, [(d.compiled(), spec.error_handling) for d in spec.destinations],
            source=SourceColumns.kafka(), now_ms=F.unix_millis(F.current_timestamp()),
        )  # fmt: skip
        return frame.select(*(f.outcome.alias(f"o{i}") for i, f in enumerate(finals)),
                            *(f.value.alias(f"v{i}") for i, f in enumerate(finals)))  # fmt: skip

    def enriched() -> DataFrame:
        return enrich(source, spec)

    def enriched_exact() -> DataFrame:
        return enrich(source, spec, exact_deserialization=True)

    def arrow(frame: DataFrame, *, decode: bool) -> DataFrame:
        """``frame`` handed to Python workers as Arrow, as the writer gets it; ``decode``: the writer's strict
        decoding of every value too (``writer.deserialization_error``), else only counted."""
        from pipelines.spark.writer import _SUMMARY_ARROW, SUMMARY_SCHEMA

        def count_only(batches):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            from pipelines.spark.writer import deserialization_error

            n = 0
            for batch in batches:
                n += batch.num_rows
                if decode:
                    for value, error in zip(batch.column("value").to_pylist(),
                                            batch.column("deser_error").to_pylist(), strict=True):  # fmt: skip
                        deserialization_error(value, error)
            yield pa.RecordBatch.from_pylist(
                [{"topic": "t", "partition": 0, "min_offset": 0, "max_offset": 0, "records": n,
                  "skipped": False, "counts": "{}"}],
                schema=_SUMMARY_ARROW,
            )  # fmt: skip

        return frame.mapInArrow(count_only, SUMMARY_SCHEMA)

    return {
        "scan": value_only,
        "try_parse_json": parse_json_only,
        "parsed_value": parsed_value_only,
        "deserialization_staged": deserialization_staged,
        "staged_destinations": staged,
        "enrich": enriched,
        "enrich_exact": enriched_exact,
        # what the micro-batch pipeline runs: lenient plan, strict decoding in the writer
        "enrich+arrow": lambda: arrow(enriched(), decode=True),
        # before #17 step 2: the exact checks in the plan, none in the writer
        "enrich_exact+arrow": lambda: arrow(enriched_exact(), decode=False),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the cases and print records/s per case as JSON."""
    parser = argparse.ArgumentParser(prog="bench.micro")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--destinations", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--conf", action="append", default=[], help="spark key=value")
    parser.add_argument(
        "--ab",
        action="append",
        default=[],
        help="a runtime SQL conf variant 'k=v[,k=v]' (repeatable): every case also runs under each, interleaved",
    )
    args = parser.parse_args(argv)
    services = Services.from_env()
    conf = dict(c.split("=", 1) for c in args.conf)
    spark = build_session(app_name="bench-micro", master=args.master, jars=services.jars, conf=conf)
    source = _source(spark, args.records, args.partitions)
    chosen = cases(source, args.destinations)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    variants: dict[str, dict[str, str]] = {"": {}}
    for spec in args.ab:
        variants[spec] = dict(kv.split("=", 1) for kv in spec.split(","))
    defaults = {k: spark.conf.get(k, None) for v in variants.values() for k in v}
    timings: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    loads = []
    for round_ in range(args.repeats + 1):  # round 0 warms up: JIT, codegen caches, Python workers
        for label, settings in variants.items():
            for key, value in {**defaults, **settings}.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
            for name, build in chosen.items():
                frame = build()
                cpu0 = _children_cpu()
                started = time.perf_counter()
                frame.write.format("noop").mode("overwrite").save()
                if round_:
                    cpu.setdefault(f"{name} [{label}]" if label else name, []).append(_children_cpu() - cpu0)
                    timings.setdefault(f"{name} [{label}]" if label else name, []).append(
                        time.perf_counter() - started
                    )
                    loads.append(load1())
    result = {
        "records": args.records,
        "master": args.master,
        "cpus": os.cpu_count(),
        "load": {"min": min(loads), "max": max(loads)},
        "records_per_s": {name: round(args.records / median(t)) for name, t in timings.items()},
        "cpu_us_per_record": {name: round(median(t) / args.records * 1e6, 1) for name, t in cpu.items()},
        "runs_s": {name: [round(s, 2) for s in t] for name, t in timings.items()},
    }
    print(json.dumps(result, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
