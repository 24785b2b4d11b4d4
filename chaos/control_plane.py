"""Fault (multi-host): kill -9 of one web process and one beat (``web-1`` and ``beat-1`` on the cluster
profile), left down for a while, then started again.

Expected (issue #29 "no single control process"): no pipeline stops or moves (every pipeline keeps the run
it had, and keeps finishing batches), the other web answers the API throughout, and the accounting identity
holds (0 lost, 0 duplicates in effectively_once: nothing restarted).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from chaos.context import Context, FaultResult
from chaos.host_crash import placements
from chaos.web_api import WebApi

TITLE = "kill -9 of one web and one beat: no pipeline stops, the other web answers"

#: How long the killed web and beat stay down (quick / full), seconds.
DOWN_S = {True: 30.0, False: 90.0}


def _last_batches(ctx: Context) -> dict[str, Any]:
    return {mode: (handle.heartbeat() or {}).get("last_batch_id") for mode, handle in ctx.pipelines.items()}


def run(ctx: Context) -> FaultResult:
    result = FaultResult("control_plane", TITLE)
    ctx.wait_processing()
    profile = ctx.stack.profile
    names = [s.name for s in ctx.stack.services()]
    webs = [n for n in names if n == "web" or n.startswith("web-")]
    beats = [n for n in names if n == "beat" or n.startswith("beat-")]
    victims = [webs[0], beats[0]]
    survivor = WebApi.on_port(profile.web_ports[-1], ctx.actor) if len(webs) > 1 else None
    before = placements(ctx.pipelines)
    batches_before = _last_batches(ctx)
    began = time.monotonic()
    for name in victims:
        pid = ctx.stack.kill9(name)
        result.actions.append(f"+{time.monotonic() - began:.0f}s kill -9 {name} (pid {pid})")
    answered = failed = 0
    moved: set[str] = set()
    while time.monotonic() - began < DOWN_S[ctx.quick]:
        now = placements(ctx.pipelines)
        moved |= {m for m, p in before.items() if m not in now or now[m].run_id != p.run_id}
        if survivor is not None:
            try:
                survivor.call("GET", "/api/pipelines/?page_size=100", timeout=10)
                answered += 1
            except OSError:
                failed += 1
        time.sleep(2)
    batches_after = _last_batches(ctx)
    connection.close()
    result.actions.append(
        f"+{time.monotonic() - began:.0f}s still down: {', '.join(victims)}; the other web answered "
        f"{answered} of {answered + failed} API reads"
    )
    for name in victims:
        took = ctx.stack.start(name)
        result.actions.append(f"+{time.monotonic() - began:.0f}s {name} started again ({took:.1f}s)")
    ctx.settle(result, time.monotonic())
    for mode, r in result.modes.items():
        was, became = batches_before.get(mode), batches_after.get(mode)
        advanced = became is not None and (was is None or became > was)
        r.checks.update({"same_run": mode not in moved, "batches_advanced_while_down": advanced})
        if mode in moved:
            r.failures.append("its run changed while a web and a beat were down")
        if not advanced:
            r.failures.append(
                f"no new batch while they were down ({batches_before.get(mode)} -> {batches_after.get(mode)})"
            )
    if survivor is not None and failed:
        result.error = f"the other web failed {failed} of {answered + failed} API reads"
    result.duration_s = time.monotonic() - began
    return result
