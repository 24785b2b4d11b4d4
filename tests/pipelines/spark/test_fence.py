"""The lease file a runner keeps for its driver, and the fence that stops a driver no longer holding it."""

from __future__ import annotations

import stat
from typing import Any

import pytest

from pipelines.spark.fence import HELD, LOST, Fence, Lease, read_lease, write_lease
from streamforge_core.contract import FENCED_MARKER, Fenced

NOW_S = 1_800_000_000.0


def _lease(**changes) -> Lease:
    values: dict[str, Any] = {
        "pipeline": "orders",
        "run_id": "run-7",
        "epoch": 7,
        "host": "runner-b",
        "expires_at_ms": int((NOW_S + 20) * 1000),
        "state": HELD,
    }
    values.update(changes)
    return Lease(**values)


def _fence(path, *, now=NOW_S, epoch=7, run_id="run-7", margin_s=3.0) -> Fence:
    return Fence(str(path), run_id=run_id, epoch=epoch, margin_s=margin_s, clock=lambda: now)


def test_a_written_lease_reads_back_and_only_its_owner_can_read_it(tmp_path):
    path = tmp_path / "lease.json"
    write_lease(path, _lease())
    assert read_lease(path) == _lease()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_lease(path, _lease(expires_at_ms=5))
    assert read_lease(path).expires_at_ms == 5
    assert [p.name for p in tmp_path.iterdir()] == ["lease.json"]  # no temporary file left behind


def test_a_held_unexpired_lease_of_this_run_and_epoch_lets_the_driver_commit(tmp_path):
    write_lease(tmp_path / "lease.json", _lease())
    assert _fence(tmp_path / "lease.json").valid() == (True, "")
    _fence(tmp_path / "lease.json").check("before committing")


@pytest.mark.parametrize(
    ("lease", "fence_args", "reason"),
    [
        (_lease(expires_at_ms=int((NOW_S - 1) * 1000)), {}, "expired 1.0 s ago"),
        (_lease(expires_at_ms=int((NOW_S + 2) * 1000)), {}, "within the margin"),
        (_lease(epoch=8), {}, "epoch 8"),
        (_lease(run_id="run-8"), {}, "run-8"),
        (_lease(state=LOST), {}, "lost"),
        (_lease(), {"now": NOW_S + 600}, "expired"),  # a driver thawed after a long SIGSTOP
    ],
)
def test_a_lease_that_is_not_this_runs_any_more_fences_the_driver(tmp_path, lease, fence_args, reason):
    write_lease(tmp_path / "lease.json", lease)
    fence = _fence(tmp_path / "lease.json", **fence_args)
    ok, why = fence.valid()
    assert not ok
    assert reason in why
    with pytest.raises(Fenced) as raised:
        fence.check("batch 12: before committing")
    assert str(raised.value).startswith(FENCED_MARKER)
    assert "batch 12: before committing" in str(raised.value)


@pytest.mark.parametrize("content", [None, "", "{not json", '{"pipeline": "orders"}'])
def test_a_missing_or_unreadable_lease_file_fences_the_driver(tmp_path, content):
    path = tmp_path / "lease.json"
    if content is not None:
        path.write_text(content)
    assert _fence(path).valid()[0] is False


def test_a_driver_started_without_a_lease_file_is_not_fenced():
    assert Fence(None, run_id="r", epoch=None, margin_s=3).valid() == (True, "")
