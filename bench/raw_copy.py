"""The physical limit: a raw Kafka copy of the backlog with a native tool and no processing.

``kcat -C`` reads the backlog topic from the beginning to its end and pipes ``key<TAB>value`` lines into
``kcat -P``, which produces them to a fresh destination topic (librdkafka defaults: acks=all, linger 5 ms)
and exits after the last acknowledgement. Records/s = backlog records / wall time of the whole copy (both
processes' start-up included, a few tens of milliseconds). Each copy is checked for completeness.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from bench.common import Context, Measurement, end_offsets, load1
from bench.stats import median

NAME = "raw_copy"


def _copy_once(ctx: Context, index: int) -> float:
    """Copy the backlog once with a kcat pipe; returns the wall seconds."""
    bootstrap = ctx.services.bootstrap
    dest = ctx.topics.create(f"rawcopy-{index}", ctx.partitions)
    started = time.perf_counter()
    consumer = subprocess.Popen(
        ["kcat", "-C", "-b", bootstrap, "-t", ctx.backlog_topic, "-o", "beginning", "-e", "-q",
         "-f", "%k\t%s\n", "-X", "fetch.max.bytes=52428800"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    producer = subprocess.Popen(
        ["kcat", "-P", "-b", bootstrap, "-t", dest, "-K", "\t", "-X", "linger.ms=5", "-X", "acks=all"],
        stdin=consumer.stdout,
    )  # fmt: skip
    assert consumer.stdout is not None
    consumer.stdout.close()  # the producer owns the pipe now
    if producer.wait(600) != 0 or consumer.wait(60) != 0:
        raise RuntimeError("kcat copy failed")
    elapsed = time.perf_counter() - started
    copied = sum(end_offsets(bootstrap, dest).values())
    if copied != len(ctx.records):
        raise RuntimeError(f"kcat copied {copied} of {len(ctx.records)} records")
    return elapsed


def run(ctx: Context) -> list[Measurement]:
    """Copy the backlog ``3`` times (1 in quick mode) and report the median rate."""
    if shutil.which("kcat") is None:
        raise RuntimeError("kcat is not installed (python -m devstack system installs it)")
    runs = 1 if ctx.quick else 3
    before = load1()
    seconds = [_copy_once(ctx, i) for i in range(runs)]
    rates = [len(ctx.records) / s for s in seconds]
    print(f"  raw copy: {', '.join(f'{r:,.0f}' for r in rates)} records/s")
    return [
        Measurement(
            scenario=NAME,
            variant="kcat pipe",
            records=len(ctx.records),
            seconds=round(median(seconds), 2),
            records_per_s=round(median(rates)),
            load={"start": before, "end": load1()},
            extra={"runs_records_per_s": [round(r) for r in rates], "tool": "kcat -C | kcat -P"},
        )
    ]
