"""Fault: a runner host lost (``devstack crash-host``: SIGKILL of the runner and every driver it launched).

Expected (docs/design/runner-hosts.md §3.16, §4): the host's heartbeat and lease renewals stop; after the lease
TTL plus the grace the global reconcile takes each of its pipelines over on another runner (a new run, lease
epoch + 1) from the shared checkpoint, and that run finishes a batch; the pipelines on other runners are left
alone (same run); the accounting identity holds (0 lost; duplicates counted, none read_committed in
effectively_once). The acceptance bound is 90 s from the crash to a new batch elsewhere: measured and
reported per pipeline (``failover_s``); the fault fails past ``FAILOVER_TIMEOUT_S``. The crashed runner is
started again at the end, so the next fault has every runner.

``placements``, ``choose_victim`` and ``moved`` serve ``chaos.host_partition`` too.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.db import connection

from chaos.context import Context, FaultResult
from chaos.workload import PipelineHandle

TITLE = "kill -9 of a whole runner host (runner + its drivers): its pipelines resume on another runner"

#: The issue's acceptance bound, crash to a new batch on another host (reported, per pipeline).
FAILOVER_BOUND_S = 90.0
#: How long the fault waits for a pipeline to move before failing it (room for 2 busy cores).
FAILOVER_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Placement:
    """Where a pipeline's active run is: its runner ``host``, ``run_id`` (str), lease ``epoch`` (None for a
    run from before leases) and driver ``pid`` (None while launching)."""

    host: str
    run_id: str
    epoch: int | None
    pid: int | None


def placements(handles: Mapping[str, PipelineHandle]) -> dict[str, Placement]:
    """{mode: Placement} of every pipeline that has an active run (the others are left out)."""
    found = {}
    for mode, handle in handles.items():
        run = handle.active_run()
        if run is not None:
            found[mode] = Placement(run.host, str(run.run_id), run.epoch, run.pid)
    return found


def busiest_runner(hosts: Iterable[str], runners: tuple[str, ...]) -> str:
    """The runner among ``runners`` that the most of ``hosts`` (one entry per pipeline) name; a tie goes to
    the one listed first in ``runners``. Raises RuntimeError when none of ``hosts`` is a runner (the
    pipelines run on a host this stack cannot crash)."""
    counts = Counter(host for host in hosts if host in runners)
    if not counts:
        raise RuntimeError(f"no pipeline runs on a runner host ({', '.join(runners) or 'none'})")
    most = max(counts.values())
    return next(runner for runner in runners if counts[runner] == most)


def choose_victim(ctx: Context) -> tuple[str, dict[str, Placement]]:
    """Once the pipelines are processing: the runner holding most of them, and every pipeline's placement
    (by mode) before the fault, as both host faults start."""
    ctx.wait_processing()
    before_all = placements(ctx.pipelines)
    return busiest_runner((p.host for p in before_all.values()), ctx.stack.profile.runners), before_all


def moved(handle: PipelineHandle, before: Placement) -> bool:
    """Whether ``handle``'s pipeline runs again elsewhere: an active run other than ``before``'s, on
    another host, that has finished a batch (its heartbeat says "running" for that run)."""
    run = handle.active_run()
    return (
        run is not None
        and str(run.run_id) != before.run_id
        and run.host != before.host
        and handle.processing()
    )


def wait_moved(
    ctx: Context, before: Mapping[str, Placement], since: float, timeout: float
) -> dict[str, float | None]:
    """Poll until every pipeline of ``before`` (mode -> its placement on the lost host) has ``moved``;
    {mode: seconds from ``since`` (monotonic) until it was seen moved, or None past ``timeout``}."""
    times: dict[str, float | None] = dict.fromkeys(before)
    deadline = since + timeout
    try:
        while time.monotonic() < deadline and any(t is None for t in times.values()):
            for mode, placement in before.items():
                if times[mode] is None and moved(ctx.pipelines[mode], placement):
                    times[mode] = time.monotonic() - since
            time.sleep(0.5)
    finally:
        connection.close()
    return times


def record_moves(
    ctx: Context, result: FaultResult, before: Mapping[str, Placement], times: Mapping[str, float | None]
) -> None:
    """Into the settled ``result``: per moved pipeline its failover time, new host and epochs (a failure
    when it did not move, or its epoch did not grow); per pipeline left on other hosts, that its run is the
    same one (a failure otherwise)."""
    after = placements(ctx.pipelines)
    for mode, r in result.modes.items():
        now = after.get(mode)
        if mode not in before:
            r.checks["on_lost_host"] = False
            continue
        old, seconds = before[mode], times.get(mode)
        r.checks.update(
            {
                "on_lost_host": True,
                "from_host": old.host,
                "to_host": now.host if now else None,
                "epoch_before": old.epoch,
                "epoch_after": now.epoch if now else None,
                "failover_s": None if seconds is None else round(seconds, 1),
                "within_bound": seconds is not None and seconds <= FAILOVER_BOUND_S,
            }
        )
        if seconds is None:
            r.failures.append(
                f"not running on another host with a new batch within {FAILOVER_TIMEOUT_S:.0f}s"
            )
        elif now is None or now.epoch is None or old.epoch is None or now.epoch <= old.epoch:
            r.failures.append(
                f"moved without a newer lease epoch ({old.epoch} -> {now.epoch if now else None})"
            )


def record_bystanders(
    result: FaultResult, before_all: Mapping[str, Placement], lost_host: str, after: Mapping[str, Placement]
) -> None:
    """A pipeline that was not on ``lost_host`` keeps its run: a failure when its run changed."""
    for mode, old in before_all.items():
        if old.host == lost_host or mode not in result.modes:
            continue
        now = after.get(mode)
        same = now is not None and now.run_id == old.run_id
        result.modes[mode].checks["same_run_after"] = same
        if not same:
            result.modes[mode].failures.append(f"its run on {old.host} changed although {lost_host} was lost")


def run(ctx: Context) -> FaultResult:
    result = FaultResult("host_crash", TITLE)
    victim, before_all = choose_victim(ctx)
    before = {mode: p for mode, p in before_all.items() if p.host == victim}
    began = time.monotonic()
    crashed = time.monotonic()
    for line in ctx.stack.crash_host(victim):
        result.actions.append(f"+{crashed - began:.0f}s {line}")
    times = wait_moved(ctx, before, crashed, FAILOVER_TIMEOUT_S)
    end = time.monotonic()
    result.actions.append(
        f"+{end - began:.0f}s moved off {victim}: "
        + ", ".join(f"{mode} {'never' if t is None else f'{t:.0f}s'}" for mode, t in times.items())
    )
    ctx.settle(result, end)
    record_moves(ctx, result, before, times)
    record_bystanders(result, before_all, victim, placements(ctx.pipelines))
    took = ctx.stack.start(victim)
    result.actions.append(
        f"+{time.monotonic() - began:.0f}s {victim} started again (ready after {took:.1f}s)"
    )
    result.duration_s = time.monotonic() - began
    return result
