"""Fault 2: the Kafka broker stopped (SIGTERM, a clean shutdown) and started again after an outage.

The producer buffers meanwhile (10-minute delivery timeout); drivers may fail their batch and exit, and
supervision restarts them with backoff until the broker answers. Nothing may be lost.
"""

from __future__ import annotations

import time

from chaos.context import Context, FaultResult
from pipelines.models import PipelineRun

TITLE = "Kafka broker stopped and restarted while the producer and the pipelines run"


def run(ctx: Context) -> FaultResult:
    result = FaultResult("broker_restart", TITLE)
    outage = 12.0 if ctx.quick else 30.0
    ctx.wait_processing()
    began = time.monotonic()
    before = {mode: h.last_run() for mode, h in ctx.pipelines.items()}
    ctx.stack.stop("kafka")
    result.actions.append(f"+{time.monotonic() - began:.0f}s broker stopped (SIGTERM)")
    time.sleep(outage)
    took = ctx.stack.start("kafka")
    end = time.monotonic()
    result.actions.append(f"+{end - began:.0f}s broker started again, ready after {took:.0f}s")
    ctx.settle(result, end)
    for mode, handle in ctx.pipelines.items():
        first = before[mode]
        runs = PipelineRun.objects.filter(pipeline_id=handle.pk)
        if first is not None:
            runs = runs.filter(started_at__gte=first.started_at).exclude(pk=first.pk)
        ended = [f"{r.error_type or r.state}" for r in runs.order_by("started_at") if r.ended_at]
        r = result.modes[mode]
        r.checks["runs_after_fault"] = runs.count()
        r.checks["run_ends"] = ended
        r.checks["state_after"] = handle.refresh().state
        if first is not None:
            first.refresh_from_db()
            r.checks["run_before"] = f"{first.state} {first.error_type}".strip()
    result.duration_s = time.monotonic() - began
    return result
