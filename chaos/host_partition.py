"""Fault: a runner host partitioned away and back (``devstack freeze-host`` / ``thaw-host``: SIGSTOP of the
runner and its drivers past the lease TTL, then SIGCONT, drivers first).

Expected (docs/design/runner-hosts.md §3.7, §3.8, §3.16): while frozen, its leases expire and each of its
pipelines is taken over on another runner (lease epoch + 1). On thaw the old drivers run before their agent
can act, so their own fence must stop them: within ``WATCH_S`` the old runs finish no further batch (no
progress sample of an old run beyond what it had committed when frozen), write no commit file to the
checkpoint, and their processes are gone (fenced, exit 4, or killed by their agent); the checkpoints stay
usable (the new runs keep committing) and the accounting identity holds (0 lost).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
from django.conf import settings
from django.db import connection

from chaos.context import Context, FaultResult
from chaos.host_crash import (
    FAILOVER_TIMEOUT_S,
    Placement,
    choose_victim,
    placements,
    record_bystanders,
    record_moves,
    wait_moved,
)
from devstack.services import local_path
from pipelines.models import MetricSample, PipelineRun

TITLE = (
    "a runner host frozen past its lease TTL and thawed: the takeover holds, the old drivers commit nothing"
)

#: How long after the thaw the old drivers are watched for a batch, a commit file or a live process.
WATCH_S = 30.0


@dataclass
class OldRun:
    """What an old run on the frozen host had done when it was frozen: the last batch it committed to the
    checkpoint (``commits/<id>``, -1 for none) or reported (a progress sample), its checkpoint folder
    (None when not a local path) and the driver's pid and start time."""

    run_id: str
    pid: int | None
    started: float | None
    checkpoint: Path | None
    last_batch: int


def committed_batches(checkpoint: Path) -> dict[int, float]:
    """{batch id: modification time (s since the epoch)} of the files in ``<checkpoint>/commits``: Spark's
    commit log, one file per finished micro-batch named by its id (temporary ``.…tmp`` files and anything
    not a number are skipped). Empty when there is no such folder."""
    found: dict[int, float] = {}
    try:
        entries = list((checkpoint / "commits").iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = entry.stat().st_mtime
            except FileNotFoundError:
                continue
    return found


def checkpoint_of(pid: int | None) -> Path | None:
    """The ``--checkpoint-dir`` of the driver process ``pid`` as a local path; None when the process is gone
    or its checkpoint is not a local path (HDFS, S3A: the commit-file check is then skipped)."""
    if pid is None:
        return None
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return None
    if "--checkpoint-dir" not in cmdline or cmdline.index("--checkpoint-dir") + 1 >= len(cmdline):
        return None
    location = cmdline[cmdline.index("--checkpoint-dir") + 1]
    if "://" in location and not location.startswith("file:"):
        return None
    return Path(local_path(location))


def last_reported_batch(run_id: str) -> int:
    """The highest batch id of the run's stored progress samples, -1 for none."""
    ids = MetricSample.objects.filter(run__run_id=run_id).values_list("batch_id", flat=True)
    return max(ids, default=-1)


def snapshot(before: Mapping[str, Placement]) -> dict[str, OldRun]:
    """Right after the freeze: each old run's last committed or reported batch (nothing can move it now
    unless the fence fails) and where its checkpoint is."""
    found = {}
    for mode, placement in before.items():
        started = None
        if placement.pid is not None:
            try:
                started = psutil.Process(placement.pid).create_time()
            except psutil.Error:
                started = None
        checkpoint = checkpoint_of(placement.pid)
        commits = committed_batches(checkpoint) if checkpoint is not None else {}
        last = max(max(commits, default=-1), last_reported_batch(placement.run_id))
        found[mode] = OldRun(placement.run_id, placement.pid, started, checkpoint, last)
    return found


def zombie_findings(
    old: OldRun, thawed_at: float, until: float, new_run_batches: set[int]
) -> dict[str, object]:
    """What ``old``'s driver did in the watch after the thaw (``thawed_at`` to ``until``, s since the epoch):
    ``batches_after``, the progress samples of the old run beyond its last batch (must be none);
    ``commit_files_after``, commit files written in the watch whose batch no other run reported (must be
    none: the new run's own commits are the ones it reported in ``new_run_batches``); ``alive``, whether its
    process still exists."""
    batches = sorted(
        MetricSample.objects.filter(run__run_id=old.run_id, batch_id__gt=old.last_batch).values_list(
            "batch_id", flat=True
        )
    )
    commit_files = []
    if old.checkpoint is not None:
        commit_files = sorted(
            batch
            for batch, mtime in committed_batches(old.checkpoint).items()
            if thawed_at <= mtime <= until and batch not in new_run_batches
        )
    alive = False
    if old.pid is not None and old.started is not None:
        try:
            process = psutil.Process(old.pid)
            alive = abs(process.create_time() - old.started) < 1 and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
    return {"batches_after": batches, "commit_files_after": commit_files, "alive": alive}


def run(ctx: Context) -> FaultResult:
    result = FaultResult("host_partition", TITLE)
    victim, before_all = choose_victim(ctx)
    before = {mode: p for mode, p in before_all.items() if p.host == victim}
    began = time.monotonic()
    frozen = time.monotonic()
    for line in ctx.stack.freeze_host(victim):
        result.actions.append(f"+{frozen - began:.0f}s {line}")
    try:
        old = snapshot(before)
        # The lease runs out TTL after the last renewal; a claimer waits the grace on top; then a tick.
        budget = settings.LEASE_TTL_SECONDS + settings.LEASE_GRACE_SECONDS + 2 * settings.HOST_TICK_SECONDS
        times = wait_moved(ctx, before, frozen, budget + FAILOVER_TIMEOUT_S)
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s taken over from {victim} (lease budget {budget}s): "
            + ", ".join(f"{mode} {'never' if t is None else f'{t:.0f}s'}" for mode, t in times.items())
        )
    finally:
        thawed_at = time.time()
        for line in ctx.stack.thaw_host(victim):
            result.actions.append(f"+{time.monotonic() - began:.0f}s {line}")
    time.sleep(WATCH_S)
    watched_until = time.time()
    end = time.monotonic()
    ctx.settle(result, end)
    record_moves(ctx, result, before, times)
    record_bystanders(result, before_all, victim, placements(ctx.pipelines))
    try:
        for mode, old_run in old.items():
            handle = ctx.pipelines[mode]
            new_batches = set(
                MetricSample.objects.filter(pipeline_id=handle.pk)
                .exclude(run__run_id=old_run.run_id)
                .values_list("batch_id", flat=True)
            )
            found = zombie_findings(old_run, thawed_at, watched_until, new_batches)
            ended = PipelineRun.objects.filter(run_id=old_run.run_id).values(
                "state", "exit_code", "error_type"
            )
            r = result.modes[mode]
            r.checks.update({"old_last_batch": old_run.last_batch, "old_run": list(ended)[:1], **found})
            if found["batches_after"]:
                r.failures.append(f"the old run finished batches {found['batches_after']} after the takeover")
            if found["commit_files_after"]:
                r.failures.append(
                    f"commit files {found['commit_files_after']} written after the thaw by no new run"
                )
            if found["alive"]:
                r.failures.append(
                    f"the old driver (pid {old_run.pid}) still runs {WATCH_S:.0f}s after the thaw"
                )
    finally:
        connection.close()
    result.duration_s = time.monotonic() - began
    return result
