"""Fault 1: ``kill -9`` of the driver's whole process group (driver, JVM, Python workers) at random points.

Supervision restarts it: the beat's reconcile sees the pid gone, ends the run as Killed and launches a new
attempt on the same checkpoint after the backoff. Each pipeline is killed independently, in its own
thread, at points drawn from the run's seeded random source: a quarter during start-up (the JVM booting,
before the first batch), the rest mid-stream (0-6 s after a batch completed, often inside the next one).
"""

from __future__ import annotations

import os
import signal
import threading
import time

from django.db import connection

from chaos.context import Context, FaultResult
from chaos.workload import PipelineHandle, wait_until

TITLE = "kill -9 of the driver process group at random points (supervision restarts it from the checkpoint)"


def _pid(handle: PipelineHandle) -> int | None:
    run = handle.active_run()
    return run.pid if run is not None else None


def _kill_one(
    ctx: Context, handle: PipelineHandle, kills: int, result: FaultResult, began: float
) -> list[float]:
    """Kill ``handle``'s driver ``kills`` times; returns the seconds from each kill until the next run
    finished a batch (the restart time)."""
    restarts: list[float] = []
    try:
        for n in range(1, kills + 1):
            during_startup = ctx.rng.random() < 0.25
            if wait_until(lambda: _pid(handle) is not None, 120, 0.5) is None:
                result.actions.append(f"{handle.mode}: no active run to kill (kill {n})")
                break
            if during_startup:
                time.sleep(ctx.rng.uniform(3.0, 15.0))
            else:
                if wait_until(handle.processing, 300, 0.5) is None:
                    result.actions.append(f"{handle.mode}: the run never finished a batch (kill {n})")
                    break
                time.sleep(ctx.rng.uniform(0.0, 6.0))
            run = handle.active_run()
            if run is None or run.pid is None:
                continue
            beat = handle.heartbeat() or {}
            phase = beat.get("phase", "no heartbeat") if beat.get("run_id") == str(run.run_id) else "starting"
            try:
                os.killpg(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                result.actions.append(f"{handle.mode}: run {run.run_id} already gone (kill {n})")
                continue
            killed_at = time.monotonic()
            result.actions.append(
                f"+{killed_at - began:.0f}s {handle.mode}: kill -9 #{n} of pgid {run.pid} (attempt {run.attempt}, "
                f"phase {phase}, last batch {beat.get('last_batch_id')})"
            )
            old = run.run_id

            def restarted(old_id: object = old) -> bool:
                active = handle.active_run()
                return active is not None and active.run_id != old_id and handle.processing()

            took = wait_until(restarted, 300, 0.5)
            if took is None:
                result.actions.append(f"{handle.mode}: no new run processed a batch within 300s of kill {n}")
                break
            restarts.append(took)
    finally:
        connection.close()
    return restarts


def run(ctx: Context) -> FaultResult:
    result = FaultResult("kill_driver", TITLE)
    kills = 3 if ctx.quick else 10
    began = time.monotonic()
    restarts: dict[str, list[float]] = {}
    threads = []
    for mode, handle in ctx.pipelines.items():

        def work(m: str = mode, h: PipelineHandle = handle) -> None:
            restarts[m] = _kill_one(ctx, h, kills, result, began)

        thread = threading.Thread(target=work, name=f"kill-{mode}")
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    end = time.monotonic()
    ctx.settle(result, end)
    for mode, times in restarts.items():
        r = result.modes[mode]
        r.checks["kills"] = len(times)
        r.checks["restart_s_mean"] = round(sum(times) / len(times), 1) if times else None
        r.checks["restart_s_max"] = round(max(times), 1) if times else None
        r.recovery_s = max(times) if times else r.recovery_s  # the worst kill-to-processing time
        if len(times) < kills:
            r.failures.append(f"only {len(times)} of {kills} kills were followed by a restart")
    result.duration_s = time.monotonic() - began
    return result
