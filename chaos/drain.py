"""Fault (multi-host): drain the runner holding the most pipelines through the API of the last web
(``POST /api/hosts/{name}/drain/``, as an admin), under load; undrain it once it is empty.

Expected (issue #29 "Drain"): its pipelines move off one at a time, each with a clean stop (the batch
finished and committed) and a start on another runner (a new run, lease epoch + 1); at no moment are two of
them stopped by the drain at once; pipelines on other runners keep their runs; 0 lost, and 0 duplicates in
effectively_once (a clean stop commits its transaction and its offsets together).
"""

from __future__ import annotations

import time

from django.db import connection

from chaos.context import Context, FaultResult
from chaos.host_crash import choose_victim, placements, record_bystanders
from chaos.web_api import WebApi
from pipelines.models import PipelineRun, PipelineState

TITLE = "drain the busiest runner through the API under load: one pipeline at a time, 0 lost"

#: Seconds allowed for the whole drain (each pipeline: a clean stop, then a start elsewhere that processes).
DRAIN_TIMEOUT_S = 600.0


def run(ctx: Context) -> FaultResult:
    result = FaultResult("drain", TITLE)
    victim, before_all = choose_victim(ctx)
    before = {mode: p for mode, p in before_all.items() if p.host == victim}
    web = WebApi.on_port(ctx.stack.profile.web_ports[-1], ctx.actor)
    began = time.monotonic()
    web.call("POST", f"/api/hosts/{victim}/drain/", {"reason": "chaos: drain under load"})
    result.actions.append(f"+0s drain {victim} ({len(before)} pipelines) through {web.base_url}")
    moved_at: dict[str, float] = {}
    most_stopping = 0
    while time.monotonic() - began < DRAIN_TIMEOUT_S and len(moved_at) < len(before):
        stopping = PipelineRun.objects.filter(host=victim, state=PipelineState.STOPPING).count()
        most_stopping = max(most_stopping, stopping)
        now = placements(ctx.pipelines)
        for mode, old in before.items():
            new = now.get(mode)
            if (
                mode not in moved_at
                and new is not None
                and new.run_id != old.run_id
                and new.host != victim
                and ctx.pipelines[mode].processing()
            ):
                moved_at[mode] = time.monotonic() - began
                result.actions.append(f"+{moved_at[mode]:.0f}s {mode} processing on {new.host}")
        time.sleep(1)
    host = web.call("GET", f"/api/hosts/{victim}/")
    web.call("POST", f"/api/hosts/{victim}/undrain/", {"reason": "chaos: drain checked"})
    result.actions.append(
        f"+{time.monotonic() - began:.0f}s {victim} left with {len(host.get('pipelines', []))} pipelines; undrained"
    )
    connection.close()
    ctx.settle(result, time.monotonic())
    after = placements(ctx.pipelines)
    record_bystanders(result, before_all, victim, after)
    for mode in before:
        r = result.modes[mode]
        seconds = moved_at.get(mode)
        r.checks.update(
            {
                "from_host": victim,
                "to_host": after[mode].host if mode in after else None,
                "moved_after_s": None if seconds is None else round(seconds, 1),
            }
        )
        if seconds is None:
            r.failures.append(f"not moved off {victim} within {DRAIN_TIMEOUT_S:.0f}s")
    if most_stopping > 1:
        result.error = f"the drain stopped {most_stopping} pipelines at once (one at a time expected)"
    result.actions.append(f"most pipelines stopping on {victim} at once: {most_stopping}")
    result.duration_s = time.monotonic() - began
    return result
