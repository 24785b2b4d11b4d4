"""Fault 1: ``kill -9`` of the driver's whole process group (driver, JVM, Python workers) at random points.

Supervision restarts it: the beat's reconcile sees the pid gone, ends the run as Killed and launches a new
attempt on the same checkpoint after the backoff. Each pipeline is killed independently, in its own
thread, at points drawn from the run's seeded random source: about 40% during start-up (the JVM booting,
before the first batch), the rest mid-stream (``MIDSTREAM_DELAY_S`` after the run was seen to finish a
batch, often inside the next one).
``kill_pipelines`` and ``record_restarts`` serve ``chaos.kill_low_latency`` too, for its own pipeline.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from django.db import connection

from chaos.context import Context, FaultResult
from chaos.workload import PipelineHandle, wait_until

#: Kills per pipeline in a quick run and in a full one.
KILLS_QUICK = 3
KILLS_FULL = 10

#: The share of kills that land during start-up (JVM booting, query not yet running) rather than mid-stream.
STARTUP_SHARE = 0.4
#: How long a mid-stream kill waits once the run is seen processing (its heartbeat, every 5 s, says a batch
#: finished): uniform, in seconds. With 2 s micro-batches that is within the next few batches.
MIDSTREAM_DELAY_S = (0.0, 6.0)

TITLE = "kill -9 of the driver process group at random points (supervision restarts it from the checkpoint)"


def _pid(handle: PipelineHandle) -> int | None:
    run = handle.active_run()
    return run.pid if run is not None else None


def _kill_one(
    ctx: Context,
    handle: PipelineHandle,
    kills: int,
    result: FaultResult,
    began: float,
    midstream_delay_s: tuple[float, float],
    ensure_midstream: bool,
) -> tuple[int, list[float]]:
    """Kill ``handle``'s driver ``kills`` times. A start-up kill lands 3-15 s after the run was launched
    (the next round starts as soon as supervision launched a new run); a mid-stream kill waits until the
    run finished a batch, then a random ``midstream_delay_s`` (low, high) seconds. With
    ``ensure_midstream`` the last kill is a mid-stream one when none was before. Returns (kills done,
    seconds from each kill until a new run finished a batch, for the kills followed by a mid-stream round
    or the end)."""
    restarts: list[float] = []
    done = 0
    midstream_done = False
    last_kill: tuple[float, object] | None = None  # (when, run id) of a kill whose restart is not timed yet
    try:
        for n in range(1, kills + 1):
            # Drawn even when overruled, so the seeded sequence of draws stays the same.
            during_startup = ctx.rng.random() < STARTUP_SHARE
            if ensure_midstream and n == kills and not midstream_done:
                during_startup = False
            if wait_until(lambda: _pid(handle) is not None, 300, 0.5) is None:
                result.actions.append(f"{handle.mode}: no active run to kill (kill {n})")
                break
            if during_startup:
                time.sleep(ctx.rng.uniform(3.0, 15.0))
            else:
                if wait_until(handle.processing, 400, 0.5) is None:
                    result.actions.append(f"{handle.mode}: the run never finished a batch (kill {n})")
                    break
                if last_kill is not None:
                    restarts.append(time.monotonic() - last_kill[0])
                    last_kill = None
                time.sleep(ctx.rng.uniform(*midstream_delay_s))
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
            done += 1
            midstream_done = midstream_done or not during_startup
            last_kill = (killed_at, run.run_id)
            result.actions.append(
                f"+{killed_at - began:.0f}s {handle.mode}: kill -9 #{n} of pgid {run.pid} (attempt {run.attempt}, "
                f"phase {phase}, last batch {beat.get('last_batch_id')})"
            )

            killed_run_id = run.run_id

            def relaunched(old_id: object = killed_run_id) -> bool:
                active = handle.active_run()
                return active is not None and active.run_id != old_id

            if wait_until(relaunched, 120, 0.5) is None:
                result.actions.append(
                    f"{handle.mode}: supervision launched no new run within 120s of kill {n}"
                )
                break
        if last_kill is not None:
            if wait_until(handle.processing, 400, 0.5) is not None:
                restarts.append(time.monotonic() - last_kill[0])
            else:
                result.actions.append(f"{handle.mode}: no run finished a batch within 400s of the last kill")
    finally:
        connection.close()
    return done, restarts


def kill_pipelines(
    ctx: Context,
    handles: dict[str, PipelineHandle],
    kills: int,
    result: FaultResult,
    began: float,
    midstream_delay_s: tuple[float, float] = MIDSTREAM_DELAY_S,
    ensure_midstream: bool = False,
) -> dict[str, tuple[int, list[float]]]:
    """Kill each pipeline's driver ``kills`` times (``_kill_one``, which says what ``midstream_delay_s``
    and ``ensure_midstream`` do), every pipeline in its own thread, each kill recorded in
    ``result.actions`` with the seconds since ``began`` (monotonic: the fault's start). Returns {mode:
    (kills done, seconds from each timed kill until a new run finished a batch)}."""
    restarts: dict[str, tuple[int, list[float]]] = {}
    threads = []
    for mode, handle in handles.items():

        def work(m: str = mode, h: PipelineHandle = handle) -> None:
            restarts[m] = _kill_one(ctx, h, kills, result, began, midstream_delay_s, ensure_midstream)

        thread = threading.Thread(target=work, name=f"kill-{mode}", daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        while thread.is_alive():
            thread.join(1.0)  # in slices, so Ctrl-C reaches the main thread
    return restarts


def record_restarts(result: FaultResult, restarts: dict[str, tuple[int, list[float]]], kills: int) -> None:
    """Put ``kill_pipelines``' figures into the settled ``result``: per mode the kills done and the restart
    times (mean and max, seconds; the max becomes the row's recovery time). Fewer kills than ``kills``, or
    none timed, fails the mode."""
    for mode, (done, times) in restarts.items():
        r = result.modes[mode]
        r.checks["kills"] = done
        r.checks["restart_s_mean"] = round(sum(times) / len(times), 1) if times else None
        r.checks["restart_s_max"] = round(max(times), 1) if times else None
        r.recovery_s = max(times) if times else r.recovery_s  # the worst kill-to-processing time
        if done < kills or not times:
            r.failures.append(f"{done} of {kills} kills done, {len(times)} restarts timed")


def run(ctx: Context) -> FaultResult:
    result = FaultResult("kill_driver", TITLE)
    kills = KILLS_QUICK if ctx.quick else KILLS_FULL
    began = time.monotonic()
    restarts = kill_pipelines(ctx, ctx.pipelines, kills, result, began)
    ctx.settle(result, time.monotonic())
    record_restarts(result, restarts, kills)
    result.duration_s = time.monotonic() - began
    return result
