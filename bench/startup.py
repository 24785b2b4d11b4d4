"""How long a pipeline takes to start: launch to RUNNING (the driver's query started, after its warm-up:
the moment supervision shows it running, the ``started`` event) and launch to its first records delivered
(the end of the first micro-batch that consumed any), over ``STARTS`` fresh drivers (quick: 2) of the headline
configuration (at_least_once, 2 destinations), each on topics of its own holding ``RECORDS`` records. The
goal (issue #34): the median launch to RUNNING at most 8 s.

A fresh driver pays everything a pipeline's start pays: the JVM (with the class data archive), the Spark
session, the Python workers, the plan's compilation (warmed up before RUNNING).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.common import Context, Measurement, load1, pipeline_spec, produce_records
from bench.spark_pipeline import ProgressReader
from tests.pipelines.spark.harness import DriverProcess

NAME = "startup"
STARTS, QUICK_STARTS = 5, 2
RECORDS = 20
VARIANT = "at_least_once/2dest, launch to RUNNING"


def _one(ctx: Context, index: int) -> tuple[float, float]:
    """(launch to RUNNING, launch to first records delivered) in seconds, for one fresh driver."""
    topics, services = ctx.topics, ctx.services
    source = topics.create(f"start-{index}", ctx.partitions)
    produce_records(services.bootstrap, source, ctx.records[:RECORDS], ctx.partitions)
    dests = [topics.create(f"start-{index}-d{i}", ctx.partitions) for i in range(2)]
    spec = pipeline_spec(source_topics=[source], dest_topics=dests, dlq_topic=topics.create(f"start-{index}-dlq", 1),
                         mode="at_least_once", batch=ctx.batch)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-start-") as workdir:
        driver = DriverProcess(spec=spec, pipeline=f"{topics.prefix}-start-{index}", workdir=Path(workdir),
                               bootstrap=services.bootstrap, redis_url=services.redis_url, jars=list(services.jars),
                               master=ctx.master)  # fmt: skip
        reader = ProgressReader(services.redis_url, driver.run_id, types=("started", "progress"))
        launched = time.time()
        driver.start()
        try:
            deadline = time.monotonic() + 300
            while True:
                events = reader.poll()
                started = next((e for e in events if e["type"] == "started"), None)
                delivered = next((e for e in events if e["type"] == "progress" and e["consumed"]), None)
                if started and delivered:
                    break
                assert driver.process is not None
                if driver.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"driver {index} did not start:\n{driver.log_tail()}")
                time.sleep(0.1)
        finally:
            driver.stop()
            driver.ensure_stopped()
    return started["time_ms"] / 1000 - launched, delivered["time_ms"] / 1000 - launched


def run(ctx: Context) -> list[Measurement]:
    """``STARTS`` (quick: ``QUICK_STARTS``) fresh drivers one after the other; one Measurement whose
    ``seconds`` is the median launch to RUNNING, with every start's figures in ``extra``."""
    before = load1()
    running, delivered = [], []
    for index in range(QUICK_STARTS if ctx.quick else STARTS):
        to_running, to_records = _one(ctx, index)
        running.append(round(to_running, 2))
        delivered.append(round(to_records, 2))
        print(
            f"  start {index + 1}: RUNNING after {to_running:.1f} s, first records after {to_records:.1f} s"
        )
    return [
        Measurement(
            scenario=NAME,
            variant=VARIANT,
            records=RECORDS,
            seconds=round(statistics.median(running), 2),
            load={"start": before, "end": load1()},
            extra={
                "running_s": running,
                "median_running_s": round(statistics.median(running), 2),
                "first_records_s": delivered,
                "median_first_records_s": round(statistics.median(delivered), 2),
            },
        )
    ]
