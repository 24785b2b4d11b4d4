"""Fault (multi-host soak): for ``--soak-minutes`` (default 30), again and again: crash a random runner
host that holds pipelines (``crash-host``: SIGKILL of the runner and its drivers), wait until each of its
pipelines runs on another host with a new batch, start the crashed runner again, check the accounting
identity, and wait a random pause before the next crash.

Expected (issue #29 acceptance): every crash's pipelines move (lease epoch + 1), 0 lost over the whole loop,
duplicates counted (none read_committed in effectively_once); reported: the failover time of every move
(crash to a new batch elsewhere) with its p50/p95/max, the crash count and the duplicates per crash.
"""

from __future__ import annotations

import time

from bench.stats import percentile
from chaos.context import Context, FaultResult
from chaos.host_crash import FAILOVER_TIMEOUT_S, placements, record_moves, wait_moved

TITLE = "random runner-host crashes in a loop (soak): every pipeline moves each time, 0 lost"

#: Pause between one crash's recovery and the next crash, seconds (drawn uniformly).
PAUSE_S = (10.0, 40.0)


def run(ctx: Context) -> FaultResult:
    result = FaultResult("host_kill_loop", TITLE)
    runners = ctx.stack.profile.runners
    minutes = ctx.soak_minutes
    began = time.monotonic()
    failovers: list[float] = []
    crashes = 0
    while time.monotonic() - began < minutes * 60:
        ctx.wait_processing()
        before_all = placements(ctx.pipelines)
        holding = sorted({p.host for p in before_all.values() if p.host in runners})
        victim = ctx.rng.choice(holding)
        before = {mode: p for mode, p in before_all.items() if p.host == victim}
        crashed = time.monotonic()
        ctx.stack.crash_host(victim)
        crashes += 1
        times = wait_moved(ctx, before, crashed, FAILOVER_TIMEOUT_S)
        took = ctx.stack.start(victim)
        step = FaultResult(f"crash {crashes}", f"crash of {victim}")
        ctx.settle(step, time.monotonic())
        record_moves(ctx, step, before, times)
        moved = [t for t in times.values() if t is not None]
        failovers.extend(moved)
        result.actions.append(
            f"+{crashed - began:.0f}s crash {crashes}: {victim} with {len(before)} pipelines; moved in "
            + ", ".join("never" if t is None else f"{t:.0f}s" for t in times.values())
            + f"; restarted in {took:.0f}s"
        )
        for mode, r in step.modes.items():
            into = result.modes.setdefault(mode, r)
            if into is not r:
                into.produced += r.produced
                into.lost += r.lost
                into.lost_total = r.lost_total
                into.duplicates += r.duplicates
                into.duplicates_total = r.duplicates_total
                into.failures.extend(f"crash {crashes}: {f}" for f in r.failures)
        time.sleep(ctx.rng.uniform(*PAUSE_S))
    summary = {
        "crashes": crashes,
        "moves": len(failovers),
        "failover_p50_s": round(percentile(failovers, 50), 1) if failovers else None,
        "failover_p95_s": round(percentile(failovers, 95), 1) if failovers else None,
        "failover_max_s": round(max(failovers), 1) if failovers else None,
    }
    result.actions.append(f"summary: {summary}")
    for r in result.modes.values():
        r.checks.update(summary)
    if crashes == 0:
        result.error = "no crash happened (--soak-minutes too short?)"
    result.duration_s = time.monotonic() - began
    return result
