"""Our Spark pipeline: the real driver (``python -m pipelines.spark.driver``, as the supervisor launches it),
the benchmark's filter/transform on 1 and 2 destinations, in each delivery mode, and at_least_once in Spark's
real-time mode (``realtime``: the ``low_latency`` commit strategy; its "batches" are real-time batches of 5 s,
or ``--realtime-batch-ms``, so its progress events are that far apart whatever the rate; it needs a task slot
per source partition, so a ``local[N]`` master with fewer cores than that is widened for it).

Each variant is one driver run in two phases:

1. throughput: the driver subscribes to the shared backlog topic (already full) and a fresh latency topic
   (empty for now); sustained records/s come from the driver's own progress events (one per micro-batch,
   published after every acknowledgement and before Spark commits the batch), from the end of the first
   batch (JVM warm-up, planning and Python worker start excluded) to the batch that completes the backlog;
2. latency: once the backlog is done, records are offered to the latency topic at a fixed rate well below
   saturation; latency p50/p99 come from broker append times (``bench.latency``).

Variants run one after another in the same time window; with ``--repeats`` the whole set repeats
(interleaved) and the medians are reported.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Context, LoadSampler, Measurement, load1, pipeline_spec
from bench.latency import latencies_ms, offer
from bench.stats import latency_summary, median, sustained_rate
from streamforge_core import contract as c
from streamforge_core import redis_client
from tests.pipelines.spark.harness import DriverProcess

NAME = "spark_pipeline"
#: Delivery modes, plus ``realtime``: at_least_once with the ``low_latency`` commit strategy (Spark's real-time
#: mode: routing compiled into the plan, Spark's Kafka sink, progress every real-time batch of 5 s).
MODES = ("at_least_once", "effectively_once", "at_most_once", "realtime")
_SHORT = {"at_least_once": "alo", "effectively_once": "eos", "at_most_once": "amo", "realtime": "rtm"}


class ProgressReader:
    """Reads one run's progress events (``types``: also ``started``, the driver's RUNNING) from the Redis
    stream, incrementally (the stream is shared and long: each poll reads only what arrived since the
    previous one)."""

    def __init__(self, redis_url: str, run_id: str, types: tuple[str, ...] = ("progress",)) -> None:
        self.client = redis_client.connect(redis_url)
        self.run_id = run_id
        self.types = types
        last: Any = self.client.xrevrange(c.PROGRESS_STREAM, count=1)
        self.cursor = last[0][0].decode() if last else "0-0"
        self.events: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        """Every progress event of the run so far, oldest first."""
        while True:
            entries: Any = self.client.xrange(c.PROGRESS_STREAM, min=f"({self.cursor}", count=1000)
            if not entries:
                return self.events
            for entry_id, fields in entries:
                self.cursor = entry_id.decode()
                event = json.loads(fields[b"event"])
                if event.get("run_id") == self.run_id and event.get("type") in self.types:
                    self.events.append(event)

    def consumed(self) -> int:
        """Records consumed by the run so far."""
        return sum(e["consumed"] for e in self.poll() if e.get("type") == "progress")


def sustained_from_progress(events: list[dict[str, Any]], total: int) -> tuple[float, float]:
    """(seconds, records/s) sustained over a run's progress ``events`` until ``total`` records were consumed,
    from the end of the first batch on (``stats.sustained_rate``)."""
    points: list[tuple[float, int]] = []
    done = 0
    for event in events:
        done += event["consumed"]
        points.append((event["time_ms"] / 1000, done))
    return sustained_rate(points, total)


def wait_consumed(
    driver: DriverProcess, reader: ProgressReader, count: int, timeout: float, what: str
) -> None:
    """Wait until the run has consumed ``count`` records. Raises RuntimeError (with the driver's log tail)
    when the driver exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while reader.consumed() < count:
        assert driver.process is not None
        if driver.process.poll() is not None:
            raise RuntimeError(
                f"driver exited with {driver.process.returncode} during {what}:\n{driver.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n{driver.log_tail()}")
        time.sleep(0.5)


def run_variant(
    ctx: Context,
    mode: str,
    destinations: int,
    index: int,
    *,
    driver_args: list[str] | None = None,
    driver_env: dict[str, str] | None = None,
) -> Measurement:
    """One driver run (throughput then latency) of ``mode`` with ``destinations`` destinations; ``driver_args``
    and ``driver_env`` are added to the driver's command line and environment (``--cores-max`` on a cluster)."""
    topics, services = ctx.topics, ctx.services
    name = f"spark-{_SHORT[mode]}{destinations}-{index}"
    latency_topic = topics.create(f"{name}-lat", ctx.partitions, log_append_time=True)
    dest_topics = [
        topics.create(f"{name}-d{i}", ctx.partitions, log_append_time=True) for i in range(destinations)
    ]
    dlq = topics.create(f"{name}-dlq", 1)
    realtime = mode == "realtime"
    realtime_batch_ms = int(ctx.options.get("realtime_batch_ms") or 0)
    spec = pipeline_spec(
        source_topics=[ctx.backlog_topic, latency_topic], dest_topics=dest_topics, dlq_topic=dlq,
        mode="at_least_once" if realtime else mode, batch=ctx.batch, realtime=realtime,
        realtime_batch_ms=realtime_batch_ms,
    )  # fmt: skip
    master = _realtime_master(ctx.master, 2 * ctx.partitions) if realtime else ctx.master
    n = len(ctx.records)
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as workdir:
        driver = DriverProcess(spec=spec, pipeline=f"{topics.prefix}-{name}", workdir=Path(workdir),
                               bootstrap=services.bootstrap, redis_url=services.redis_url, jars=list(services.jars),
                               master=master, args=list(driver_args or []), env=dict(driver_env or {}))  # fmt: skip
        reader = ProgressReader(services.redis_url, driver.run_id)
        before = load1()
        sampler = LoadSampler().start()
        launched = time.time()
        driver.start()
        try:
            wait_consumed(driver, reader, n, 1800, "the backlog")
            load = sampler.stop()
            backlog_events = list(reader.events)
            since_ms = int(time.time() * 1000)
            offered, achieved = offer(services.bootstrap, latency_topic, ctx.records,
                                      rate=ctx.latency_rate, seconds=ctx.latency_seconds)  # fmt: skip
            wait_consumed(driver, reader, n + offered, 300, "the latency records")
        finally:
            driver.stop()
            driver.ensure_stopped()
    seconds, rate = sustained_from_progress(backlog_events, n)
    first = backlog_events[0]
    steady = [e for e in backlog_events[1:] if e["consumed"]]
    in_batch = (
        sum(e["consumed"] for e in steady) / (sum(e["duration_ms"] for e in steady) / 1000)
        if steady
        else math.nan
    )
    lat = latencies_ms(
        services.bootstrap, latency_topic, dest_topics, since_ms, read_committed=mode == "effectively_once"
    )
    variant = f"{mode}/{destinations}dest"
    if realtime:
        variant += f", {(realtime_batch_ms or 5_000) / 1000:g} s batches, {master}"
    print(f"  spark {variant}: {rate:,.0f} records/s sustained ({in_batch:,.0f} inside batches); "
          f"latency {latency_summary(lat)}")  # fmt: skip
    return Measurement(
        scenario=NAME,
        variant=variant,
        records=n,
        seconds=round(seconds, 2),
        records_per_s=None if math.isnan(rate) else round(rate),
        latency_ms=latency_summary(lat),
        load={"start": before, "end": load1(), **{f"during_{k}": v for k, v in load.items()}},
        extra={
            "mode": mode,
            "destinations": destinations,
            "batches": len(backlog_events),
            "batch_records": ctx.batch,
            "startup_s": round((first["time_ms"] - first["duration_ms"]) / 1000 - launched, 1),
            "first_batch_s": round(first["duration_ms"] / 1000, 1),
            "in_batch_records_per_s": None if math.isnan(in_batch) else round(in_batch),
            "batch_ms": [e["duration_ms"] for e in backlog_events],
            "batch_consumed": [e["consumed"] for e in backlog_events],
            "offered_rate": round(achieved),
            "latency_samples": len(lat),
            "dead_lettered": sum(e["dlq_records"] for e in backlog_events),
        },
    )


def _realtime_master(master: str, partitions: int) -> str:
    """``master``, or ``local[partitions]`` when it is ``local[N]`` with fewer cores than the source
    partitions (real-time mode runs one long-running task per partition and refuses fewer slots)."""
    match = re.fullmatch(r"local\[(\d+)\]", master)
    if match and int(match.group(1)) < partitions:
        return f"local[{partitions}]"
    return master


def variants(ctx: Context) -> list[tuple[str, int]]:
    """(mode, destinations) pairs to run: every mode with 2 and 1 destinations (quick: 2 only), or the
    ``spark_variants`` option (``["at_least_once/2", ...]``)."""
    chosen = ctx.options.get("spark_variants")
    if chosen:
        return [(v.split("/")[0], int(v.split("/")[1])) for v in chosen]
    counts = (2,) if ctx.quick else (2, 1)
    return [(mode, d) for d in counts for mode in MODES]


def run(ctx: Context) -> list[Measurement]:
    """Every variant, ``ctx.repeats`` times interleaved; one Measurement per variant (medians over repeats)."""
    runs: dict[str, list[Measurement]] = {}
    for index in range(ctx.repeats):
        for mode, destinations in variants(ctx):
            m = run_variant(ctx, mode, destinations, index)
            runs.setdefault(m.variant, []).append(m)
    out: list[Measurement] = []
    for ms in runs.values():
        if len(ms) == 1:
            out.append(ms[0])
            continue
        rates = [m.records_per_s for m in ms if m.records_per_s is not None]
        merged = ms[len(ms) // 2]
        merged.records_per_s = round(median(rates)) if rates else None
        merged.latency_ms = {
            k: round(statistics.median(m.latency_ms[k] for m in ms if k in m.latency_ms), 1)
            for k in ("p50", "p90", "p99", "max")
            if any(k in m.latency_ms for m in ms)
        }
        merged.extra["runs_records_per_s"] = [m.records_per_s for m in ms]
        merged.extra["runs_latency_ms"] = [m.latency_ms for m in ms]
        out.append(merged)
    return out
