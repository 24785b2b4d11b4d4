"""Fault (multi-host): stop and start a pipeline through the *last* web process while its driver runs on
the last runner host (``web-2`` and ``runner-c`` on the cluster profile), as an operator would from any web.

Expected (issue #29 "every action reaches the driver wherever it runs"): the stop, claimed in PostgreSQL by
that web and routed to the owner's queue, ends the run gracefully (the driver's process is gone, the run
STOPPED with its batch committed); the start places it again (any runner with room) and it processes again;
the accounting identity holds (0 lost; 0 duplicates in effectively_once: a clean stop commits its batch).
"""

from __future__ import annotations

import time

import psutil
from django.db import connection

from chaos.context import Context, FaultResult
from chaos.host_crash import placements
from chaos.web_api import WebApi
from chaos.workload import wait_until
from pipelines.models import PipelineState

TITLE = "stop and start through the last web while the driver runs on the last runner"

#: Seconds allowed for the graceful stop (a batch in flight finishes first) and for the start to process.
STOP_TIMEOUT_S = 150.0
START_TIMEOUT_S = 240.0


def run(ctx: Context) -> FaultResult:
    result = FaultResult("routed_stop", TITLE)
    ctx.wait_processing()
    runners = ctx.stack.profile.runners
    before = placements(ctx.pipelines)
    # The last runner that holds a pipeline (runner-c when placement put one there, as it does with six).
    owned = [(runners.index(p.host), mode) for mode, p in before.items() if p.host in runners]
    if not owned:
        raise RuntimeError("no pipeline runs on a runner host of this stack")
    mode = max(owned)[1]
    handle, placement = ctx.pipelines[mode], before[mode]
    web = WebApi.on_port(ctx.stack.profile.web_ports[-1], ctx.actor)
    began = time.monotonic()
    web.call("POST", f"/api/pipelines/{handle.name}/stop/", {"reason": "chaos: routed stop"})
    stopped = wait_until(handle.ended, STOP_TIMEOUT_S, 0.5)
    result.actions.append(
        f"+0s stop of {handle.name} (on {placement.host}, pid {placement.pid}) through {web.base_url}: "
        + ("never ended" if stopped is None else f"STOPPED after {stopped:.1f}s")
    )
    run_after = handle.last_run()
    gone = placement.pid is None or not psutil.pid_exists(placement.pid)
    restart_at = time.monotonic()
    web.call("POST", f"/api/pipelines/{handle.name}/start/", {"reason": "chaos: routed start"})
    started = wait_until(handle.processing, START_TIMEOUT_S, 1.0)
    now = handle.active_run()
    result.actions.append(
        f"+{restart_at - began:.0f}s start through {web.base_url}: "
        + (
            "never processed"
            if started is None
            else f"processing on {now.host if now else '?'} after {started:.1f}s"
        )
    )
    connection.close()
    ctx.settle(result, time.monotonic())
    checks = result.modes[mode].checks
    checks.update(
        {
            "stopped_from": web.base_url,
            "was_on": placement.host,
            "stop_s": None if stopped is None else round(stopped, 1),
            "run_stopped": run_after is not None and run_after.state == PipelineState.STOPPED,
            "driver_gone": gone,
            "start_to_processing_s": None if started is None else round(started, 1),
        }
    )
    failures = result.modes[mode].failures
    if stopped is None or not checks["run_stopped"]:
        failures.append(f"the stop through {web.base_url} did not end the run STOPPED")
    if not gone:
        failures.append(f"the driver (pid {placement.pid}) still runs after the stop")
    if started is None:
        failures.append(f"not processing within {START_TIMEOUT_S:.0f}s of the start")
    result.duration_s = time.monotonic() - began
    return result
