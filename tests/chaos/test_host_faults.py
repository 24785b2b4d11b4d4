"""The pure parts of the host faults (``chaos.host_crash``, ``chaos.host_partition``): which runner is lost,
when a pipeline counts as moved, how the figures become failures, how the commit log is read; no stack.
Their end-to-end run needs runner hosts with leases (``make chaos``)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos.context import FaultResult, ModeResult
from chaos.host_crash import Placement, busiest_runner, moved, record_bystanders, record_moves
from chaos.host_partition import checkpoint_of, committed_batches

RUNNERS = ("runner-a", "runner-b", "runner-c")


def test_the_busiest_runner_is_lost_and_a_tie_goes_to_the_first_listed():
    assert busiest_runner(["runner-b", "runner-c", "runner-b"], RUNNERS) == "runner-b"
    assert busiest_runner(["runner-c", "runner-b"], RUNNERS) == "runner-b"
    # A host that is not one of the stack's runners (the plain worker's) is never chosen.
    assert busiest_runner(["vm", "vm", "runner-c"], RUNNERS) == "runner-c"
    with pytest.raises(RuntimeError, match="no pipeline runs on a runner host"):
        busiest_runner(["vm"], RUNNERS)


@dataclass
class Run:
    run_id: str
    host: str
    epoch: int | None = None
    pid: int | None = None


@dataclass
class Handle:
    run: Run | None
    batch_done: bool

    def active_run(self) -> Run | None:
        return self.run

    def processing(self) -> bool:
        return self.batch_done


def test_a_pipeline_has_moved_once_a_new_run_on_another_host_finished_a_batch():
    before = Placement("runner-a", "r1", 3, 100)
    assert moved(Handle(Run("r2", "runner-b", 4), batch_done=True), before)
    assert not moved(Handle(Run("r2", "runner-b", 4), batch_done=False), before)
    assert not moved(Handle(Run("r1", "runner-a", 3), batch_done=True), before)
    assert not moved(Handle(Run("r2", "runner-a", 4), batch_done=True), before)
    assert not moved(Handle(None, batch_done=False), before)


@dataclass
class Ctx:
    pipelines: dict[str, Handle]


def test_failover_figures_become_failures_when_a_pipeline_did_not_move_or_kept_its_epoch():
    result = FaultResult("host_crash", "t", modes={m: ModeResult(m) for m in ("alo", "eo", "other")})
    ctx = Ctx(
        {
            "alo": Handle(Run("r2", "runner-b", 5), batch_done=True),
            "eo": Handle(Run("e2", "runner-c", 7), batch_done=True),
            "other": Handle(Run("o1", "runner-c", 1), batch_done=True),
        }
    )
    before = {"alo": Placement("runner-a", "r1", 4, 1), "eo": Placement("runner-a", "e1", 7, 2)}
    record_moves(ctx, result, before, {"alo": 41.5, "eo": 120.0})
    alo, eo = result.modes["alo"], result.modes["eo"]
    assert alo.passed
    assert alo.checks["failover_s"] == 41.5
    assert alo.checks["within_bound"] is True
    assert (alo.checks["to_host"], alo.checks["epoch_after"]) == ("runner-b", 5)
    assert eo.checks["within_bound"] is False
    assert eo.failures == ["moved without a newer lease epoch (7 -> 7)"]
    assert result.modes["other"].checks == {"on_lost_host": False}

    result = FaultResult("host_crash", "t", modes={"alo": ModeResult("alo")})
    record_moves(ctx, result, before, {"alo": None})
    assert "not running on another host" in result.modes["alo"].failures[0]


def test_a_pipeline_on_another_runner_must_keep_its_run():
    result = FaultResult("host_crash", "t", modes={m: ModeResult(m) for m in ("alo", "eo")})
    before = {"alo": Placement("runner-b", "r1", 1, 1), "eo": Placement("runner-c", "e1", 1, 2)}
    after = {"alo": Placement("runner-b", "r1", 1, 1), "eo": Placement("runner-b", "e2", 2, 3)}
    record_bystanders(result, before, "runner-a", after)
    assert result.modes["alo"].passed
    assert result.modes["alo"].checks["same_run_after"] is True
    assert result.modes["eo"].failures == ["its run on runner-c changed although runner-a was lost"]


def test_the_commit_log_is_read_as_batch_ids_with_their_times(tmp_path: Path):
    commits = tmp_path / "commits"
    commits.mkdir()
    for name in ("0", "1", "17", ".18.tmp", "metadata"):
        (commits / name).write_text("v1\n{}")
    os.utime(commits / "17", (1_000.0, 1_000.0))
    found = committed_batches(tmp_path)
    assert sorted(found) == [0, 1, 17]
    assert found[17] == 1_000.0
    assert committed_batches(tmp_path / "absent") == {}


def test_a_drivers_checkpoint_is_read_from_its_command_line_when_it_is_local(tmp_path: Path):
    sleeper = "import time; time.sleep(60)"
    cases = {
        f"file://{tmp_path}/cp": tmp_path / "cp",
        str(tmp_path / "plain"): tmp_path / "plain",
        "hdfs://nn:8020/cp": None,
    }
    for location, expected in cases.items():
        proc = subprocess.Popen([sys.executable, "-c", sleeper, "--checkpoint-dir", location])
        try:
            assert checkpoint_of(proc.pid) == expected, location
        finally:
            proc.kill()
            proc.wait()
    assert checkpoint_of(None) is None
