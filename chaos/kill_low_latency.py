"""Fault 7: ``kill -9`` of a low_latency pipeline's driver process group at random points.

low_latency runs the pipeline in Spark's real-time mode (``pipelines.spark.driver``): long-running tasks
write each record through Spark's Kafka sink as it comes, and only at the end of each 5 s real-time batch
does the checkpoint advance and a listener commit the consumer group. A mid-stream kill therefore lands
inside a batch, and the restarted run, resuming from the last batch in the checkpoint, writes again what
that batch had written (nothing when the kill lands in the seconds the first batches after a start take
to begin writing).
Those are the duplicates: allowed (at_least_once) and counted; a lost record fails the fault.

The pipeline lives only during this fault: started here (its own destination and DLQ topics, reading the
run's source topic from earliest, so the identity covers every source record of the run), killed like
``chaos.kill_driver`` kills the others (same code, same seeded start-up points, later mid-stream points:
``MIDSTREAM_DELAY_S``, and at least one mid-stream kill: a quick run's three kills are all start-up kills
one seed in sixteen), checked, then stopped, so the other faults and the delivery modes' pipelines run
as without it and the two cores carry a third driver for a few minutes only. The check covers the other
pipelines' window too.

Its row's checks: ``kills``, ``restart_s_mean``/``restart_s_max`` (seconds from a kill until a new run
finished a real-time batch), ``runs`` and ``run_ends`` (how the ended runs ended, by supervision's error
type: ``Killed``, or ``Lost`` when the worker process that noticed the death was not the driver's parent and
so could not read the signal; nothing to do with records).
"""

from __future__ import annotations

import time
from collections import Counter

from chaos.context import Context, FaultResult
from chaos.kill_driver import KILLS_FULL, KILLS_QUICK, kill_pipelines, record_restarts
from chaos.workload import LOW_LATENCY, create_archive_topics, start_pipelines, stop_pipelines
from pipelines.models import PipelineRun

#: How long a mid-stream kill waits once the run is seen processing, in seconds (uniform). Longer than for
#: micro-batches: the first real-time batches after a start spend 2-4 s of their 5 s starting their tasks
#: and then catch up in bursts (measured from the records' produce times and the checkpoint's logs), so
#: kills 0-6 s in mostly found nothing written yet; 0-20 s also reaches the steady batches that follow,
#: which write continuously, where a crash in production would most often land.
MIDSTREAM_DELAY_S = (0.0, 20.0)

TITLE = (
    "kill -9 of a low_latency pipeline's driver (Spark real-time mode) at random points: restarted from "
    "the checkpoint, nothing lost, the re-written records counted as duplicates"
)


def run(ctx: Context) -> FaultResult:
    result = FaultResult("kill_low_latency", TITLE)
    kills = KILLS_QUICK if ctx.quick else KILLS_FULL
    began = time.monotonic()
    create_archive_topics(ctx.bootstrap, ctx.tag, [LOW_LATENCY])
    redis_url = ctx.stack.profile.redis_url
    (handle,) = start_pipelines(ctx.actor, ctx.tag, [LOW_LATENCY], ctx.bootstrap, redis_url).values()
    result.actions.append(
        f"+0s {handle.name} started: at_least_once in Spark's real-time mode, reading "
        f"{handle.spec.source.topics[0]} from earliest"
    )
    try:
        # Its accountant is made after the kills: reading the whole source again takes a while, and the
        # kills' start-up points count from the launch.
        restarts = kill_pipelines(
            ctx, {LOW_LATENCY: handle}, kills, result, began, MIDSTREAM_DELAY_S, ensure_midstream=True
        )
        end = time.monotonic()
        ctx.add_pipeline(LOW_LATENCY, handle)
        ctx.settle(result, end)
        record_restarts(result, restarts, kills)
        ends = Counter(
            run.error_type or run.state
            for run in PipelineRun.objects.filter(pipeline_id=handle.pk, ended_at__isnull=False)
        )
        r = result.modes[LOW_LATENCY]
        r.checks["runs"] = PipelineRun.objects.filter(pipeline_id=handle.pk).count()
        r.checks["run_ends"] = dict(ends)
    finally:
        stop_pipelines(ctx.actor, [handle], reason="chaos: the low_latency fault is over")
        if LOW_LATENCY in ctx.pipelines:
            ctx.remove_pipeline(LOW_LATENCY)
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s {handle.name} stopped ({handle.refresh().state})"
        )
    result.duration_s = time.monotonic() - began
    return result
