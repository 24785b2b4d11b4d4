"""Fault 3: Redis stopped and started again (empty: the chaos Redis keeps no snapshot, like a lost cache).

Expected: the drivers keep running and committing (progress events and heartbeats are side channels whose
write failures are logged and skipped), the same runs are active afterwards; the web answers /readyz with
503 "not ready" during the outage (an anonymous probe is told no more since security review #28) and 200
after it; progress reaches the database again afterwards.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from functools import partial
from typing import Any

from chaos.context import Context, FaultResult
from chaos.workload import wait_until
from pipelines.models import MetricSample

TITLE = "Redis stopped and restarted: pipelines keep running, /readyz degrades and recovers"


def readyz(url: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of the web's readiness probe; (0, {}) when the web does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own loopback URL
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return 0, {}


def _progress_since(pipeline_id: int, time_ms: int) -> bool:
    return MetricSample.objects.filter(pipeline_id=pipeline_id, time_ms__gt=time_ms).exists()


def run(ctx: Context) -> FaultResult:
    result = FaultResult("redis_restart", TITLE)
    outage = 15.0 if ctx.quick else 30.0
    url = f"{ctx.stack.profile.web_url}/readyz"
    ctx.wait_processing()
    began = time.monotonic()
    runs = {mode: h.active_run() for mode, h in ctx.pipelines.items()}
    committed_before = {mode: h.committed() for mode, h in ctx.pipelines.items()}
    ctx.stack.stop("redis")
    stopped_ms = int(time.time() * 1000)
    result.actions.append(f"+{time.monotonic() - began:.0f}s Redis stopped")
    degraded: list[tuple[int, str]] = []
    deadline = time.monotonic() + outage
    while time.monotonic() < deadline:
        status, body = readyz(url)
        degraded.append((status, str(body.get("status", ""))))
        time.sleep(2)
    committed_during = {mode: h.committed() for mode, h in ctx.pipelines.items()}
    took = ctx.stack.start("redis")
    end = time.monotonic()
    restarted_ms = int(time.time() * 1000)
    result.actions.append(f"+{end - began:.0f}s Redis started again (ready after {took:.1f}s)")
    ready_after = wait_until(lambda: readyz(url)[0] == 200, 120, 0.5)
    result.actions.append(f"/readyz during the outage: {sorted(set(degraded))}")
    ctx.settle(result, end)
    # /readyz caches its probe for a few seconds: the first answers after the stop may still be the last
    # probe's; every answer once that ran out must be 503.
    settled = degraded[3:]
    names_redis = bool(settled) and all(s == 503 and f == "not ready" for s, f in settled)
    for mode, handle in ctx.pipelines.items():
        r = result.modes[mode]
        before, during = committed_before[mode], committed_during[mode]
        advanced = sum(max(0, during.get(p, 0) - before.get(p, 0)) for p in during)
        after = handle.active_run()
        same_run = runs[mode] is not None and after is not None and after.run_id == runs[mode].run_id  # type: ignore[union-attr]
        progress_back = wait_until(
            partial(_progress_since, handle.pk, restarted_ms),
            60,
            1.0,
        )
        r.checks.update(
            {
                "committed_during_outage": advanced,
                "same_run_after": same_run,
                "readyz_503_naming_redis": names_redis,
                "readyz_200_after_s": None if ready_after is None else round(ready_after, 1),
                "progress_stored_again_after_s": None if progress_back is None else round(progress_back, 1),
                "outage_ms": restarted_ms - stopped_ms,
            }
        )
        if advanced == 0:
            r.failures.append("the pipeline committed nothing while Redis was down")
        if not same_run:
            r.failures.append("the driver did not survive the Redis outage (a new run was started)")
        if not names_redis:
            r.failures.append(f"/readyz did not answer 503 throughout the outage: {degraded}")
        if ready_after is None:
            r.failures.append("/readyz did not come back to 200 within 120s")
        if progress_back is None:
            r.failures.append("no progress reached the database within 60s after Redis came back")
    result.duration_s = time.monotonic() - began
    return result
