"""Does the pipeline's cost grow linearly with the backlog? The headline configuration (at_least_once, 2
destinations) over backlogs of 100,000, 400,000 and 1,600,000 records (quick: a tenth), each in a topic of
its own read from the start by a fresh driver; the sustained rates should stay within 15% of each other
(#17). Each row also gives its rate as a ratio to the smallest backlog's.

The records cycle over the run's shared 1 KB records, so only the count differs between the rows.
"""

from __future__ import annotations

import dataclasses

from bench import spark_pipeline
from bench.common import Context, Measurement, produce_records

NAME = "linearity"
SIZES = (100_000, 400_000, 1_600_000)
#: Offered-rate phase kept short: these rows are about throughput (the latency rows are spark_pipeline's).
LATENCY_SECONDS = 2.0


def run(ctx: Context) -> list[Measurement]:
    """One driver run per backlog size; returns a Measurement per size (``extra["vs_smallest"]``)."""
    sizes = [size // 10 for size in SIZES] if ctx.quick else list(SIZES)
    out: list[Measurement] = []
    for size in sizes:
        topic = ctx.topics.create(f"lin-{size}", ctx.partitions)
        records = [ctx.records[i % len(ctx.records)] for i in range(size)]
        produce_records(ctx.services.bootstrap, topic, records, ctx.partitions)
        sized = dataclasses.replace(
            ctx, records=records, backlog_topic=topic, latency_seconds=LATENCY_SECONDS
        )
        measured = spark_pipeline.run_variant(sized, "at_least_once", 2, len(out))
        measured.scenario = NAME
        measured.variant = f"at_least_once/2dest, {size:,} records"
        measured.latency_ms = {}
        out.append(measured)
    # The smallest backlog with a sustained rate (a backlog one micro-batch swallows has none).
    smallest = next((m.records_per_s for m in out if m.records_per_s), None)
    for measured in out:
        if smallest and measured.records_per_s:
            measured.extra["vs_smallest"] = round(measured.records_per_s / smallest, 2)
    spread = [m.records_per_s for m in out if m.records_per_s]
    if spread:
        print(f"  linearity: {', '.join(f'{r:,}' for r in spread)} records/s; "
              f"largest/smallest {max(spread) / min(spread):.2f}")  # fmt: skip
    return out
