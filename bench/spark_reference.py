"""Spark's own ceiling on this machine: how fast Structured Streaming moves the same backlog with Spark's
Kafka source and Spark's Kafka sink, without our writer and without our delivery accounting.

Two reference queries, each a child process (``python -m bench.spark_reference --child ...``) with the same
session settings as the driver (``pipelines.spark.session``), ``local[2]``, the same ``maxOffsetsPerTrigger``
and the same sustained-rate window (first micro-batch excluded):

- ``copy``: ``key``/``value`` read and written back unchanged. What the client's stack costs before any
  record is looked at; no pipeline built on Spark's Kafka source and sink can be faster on this machine.
- ``dsl``: the benchmark pipeline's compiled DSL plan (``pipelines.spark.driver.enrich``: deserialization,
  filters and transforms of both destinations) with its produced records written by Spark's Kafka sink.
  No dead-letter routing, no per-record delivery report, no retry policy, no transactions: it is *not* a
  pipeline we could ship (``bench/FINDINGS.md`` says why), it shows what the Python writer costs.

Neither is one of our delivery modes; the report lists them apart as references.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.common import REPO, Context, LoadSampler, Measurement, end_offsets, load1, pipeline_spec
from bench.stats import sustained_rate
from streamforge_core.kafka import KafkaConnection, spark_kafka_options

NAME = "spark_reference"
VARIANTS = ("copy", "dsl")


def _query(args: argparse.Namespace) -> dict[str, Any]:
    """Run one reference query to the end of the backlog; returns its progress points and output count."""
    from pyspark.sql import functions as F

    from pipelines.spark.driver import enrich
    from pipelines.spark.session import build_session
    from pipelines.spec import parse_spec

    spark = build_session(
        app_name=f"bench-reference-{args.variant}", master=args.master, jars=args.jars.split(",")
    )
    source = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(KafkaConnection(args.bootstrap)))
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.batch))
        .option("includeHeaders", "true")
        .load()
    )
    if args.variant == "copy":
        out = source.select("key", "value", F.lit(args.dest[0]).alias("topic"))
    else:
        spec = parse_spec(
            pipeline_spec(source_topics=[args.source], dest_topics=args.dest, dlq_topic=f"{args.source}-unused-dlq",
                          mode="at_least_once", batch=args.batch),
            pipeline_name="bench-reference",
        )  # fmt: skip
        enriched = enrich(source, spec)
        produced = F.array(
            *[
                F.when(
                    F.col(f"o{i}") == "produced",
                    F.struct(
                        F.lit(topic).alias("topic"),
                        F.col(f"k{i}").alias("key"),
                        F.col(f"v{i}").alias("value"),
                    ),
                )
                for i, topic in enumerate(args.dest)
            ]
        )
        out = enriched.select(F.explode(F.filter(produced, lambda r: r.isNotNull())).alias("r")).select("r.*")
    with tempfile.TemporaryDirectory(prefix="bench-reference-") as checkpoint:
        query = (
            out.writeStream.format("kafka")
            .options(**spark_kafka_options(KafkaConnection(args.bootstrap)))
            .option("kafka.linger.ms", "5")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = [
            {
                "time_ms": int(_epoch_ms(p["timestamp"]) + p["durationMs"].get("triggerExecution", 0)),
                "rows": int(p["numInputRows"]),
                "duration_ms": int(p["durationMs"].get("triggerExecution", 0)),
            }
            for p in query.recentProgress
            if p["numInputRows"]
        ]
    spark.stop()
    return {"progress": progress}


def _epoch_ms(stamp: str) -> float:
    """Milliseconds since the epoch of a progress timestamp (``2026-11-21T12:00:00.123Z``, UTC)."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def run_variant(ctx: Context, variant: str, index: int) -> Measurement:
    """One reference query of ``variant`` over the backlog in a child process."""
    n = len(ctx.records)
    count = 1 if variant == "copy" else 2
    dests = [ctx.topics.create(f"ref-{variant}-{index}-d{i}", ctx.partitions) for i in range(count)]
    before = load1()
    sampler = LoadSampler().start()
    started = time.time()
    child = subprocess.run(
        [sys.executable, "-m", "bench.spark_reference", "--child", "--variant", variant, "--source", ctx.backlog_topic,
         "--bootstrap", ctx.services.bootstrap, "--batch", str(ctx.batch), "--master", ctx.master,
         "--jars", ",".join(ctx.services.jars), *[a for d in dests for a in ("--dest", d)]],
        cwd=REPO, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    load = sampler.stop()
    if child.returncode != 0:
        raise RuntimeError(f"spark reference {variant} failed ({child.returncode}):\n{child.stderr[-3000:]}")
    result = json.loads(child.stdout.strip().splitlines()[-1])
    done = 0
    points: list[tuple[float, int]] = []
    for p in result["progress"]:
        done += p["rows"]
        points.append((p["time_ms"] / 1000, done))
    seconds, rate = sustained_rate(points, n)
    written = sum(sum(end_offsets(ctx.services.bootstrap, d).values()) for d in dests)
    label = "Kafka -> Kafka copy" if variant == "copy" else "our DSL plan -> Spark's Kafka sink"
    print(
        f"  spark reference {variant}: {rate:,.0f} records/s sustained ({written:,} records written)",
        flush=True,
    )
    return Measurement(
        scenario=NAME,
        variant=label,
        records=n,
        seconds=round(seconds, 2),
        records_per_s=round(rate),
        load={"start": before, "end": load1(), **{f"during_{k}": v for k, v in load.items()}},
        extra={
            "written": written,
            "batches": len(points),
            "batch_records": ctx.batch,
            "wall_s": round(time.time() - started, 1),
            "batch_ms": [p["duration_ms"] for p in result["progress"]],
        },
    )


def run(ctx: Context) -> list[Measurement]:
    """Both reference queries, once each (the median of ``ctx.repeats`` runs with ``--repeats``)."""
    out: list[Measurement] = []
    for variant in VARIANTS:
        runs = [run_variant(ctx, variant, i) for i in range(ctx.repeats)]
        runs.sort(key=lambda m: m.records_per_s or 0)
        chosen = runs[len(runs) // 2]
        chosen.extra["runs_records_per_s"] = [m.records_per_s for m in runs]
        out.append(chosen)
    return out


def main(argv: list[str] | None = None) -> int:
    """The child process: run one query and print its progress as one JSON line."""
    parser = argparse.ArgumentParser(prog="bench.spark_reference")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--dest", action="append", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--jars", required=True)
    args = parser.parse_args(argv)
    print(json.dumps(_query(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
