"""Where the kill faults' shared loop (``chaos.kill_driver.kill_pipelines``) puts its kills, driven by a
scripted random source against a fake pipeline whose driver restarts at once: no stack, no sleeping."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from chaos import kill_driver
from chaos.context import FaultResult
from chaos.kill_low_latency import MIDSTREAM_DELAY_S as REALTIME_DELAY_S

STARTUP_DELAY_S = (3.0, 15.0)


@dataclass
class ScriptedRandom:
    """``random()`` always answers ``draw``; ``uniform`` answers its low end and records its bounds, which
    tell a start-up wait from a mid-stream one."""

    draw: float
    waits: list[tuple[float, float]] = field(default_factory=list)

    def random(self) -> float:
        return self.draw

    def uniform(self, low: float, high: float) -> float:
        self.waits.append((low, high))
        return low


@dataclass
class Run:
    run_id: int
    pid: int
    attempt: int


@dataclass
class RestartingPipeline:
    """A pipeline whose driver is always processing and is replaced by a new run the moment it is killed."""

    mode: str = "low_latency"
    run: Run = field(default_factory=lambda: Run(1, 1000, 1))
    killed: list[int] = field(default_factory=list)

    def active_run(self) -> Run:
        return self.run

    def processing(self) -> bool:
        return True

    def heartbeat(self) -> dict[str, object]:
        return {"run_id": str(self.run.run_id), "phase": "running", "last_batch_id": 0}

    def kill(self, pid: int) -> None:
        self.killed.append(pid)
        self.run = Run(self.run.run_id + 1, pid + 1, self.run.attempt + 1)


@dataclass
class Ctx:
    rng: ScriptedRandom


@pytest.fixture
def pipeline(monkeypatch) -> RestartingPipeline:
    fake = RestartingPipeline()
    monkeypatch.setattr(os, "killpg", lambda pid, _signal: fake.kill(pid))
    monkeypatch.setattr(time, "sleep", lambda _seconds: None)
    return fake


def _kill(
    pipeline: RestartingPipeline, draw: float, **options: Any
) -> tuple[ScriptedRandom, tuple[int, list[float]]]:
    rng = ScriptedRandom(draw)
    # The fakes stand in for a Context and a PipelineHandle in the parts the loop uses.
    ctx: Any = Ctx(rng)
    handles: dict[str, Any] = {pipeline.mode: pipeline}
    result = FaultResult("kill", "test")
    restarts = kill_driver.kill_pipelines(ctx, handles, 3, result, time.monotonic(), **options)
    return rng, restarts[pipeline.mode]


def test_the_last_kill_is_mid_stream_when_every_draw_said_start_up_and_one_is_wanted(pipeline):
    rng, (done, restarts) = _kill(pipeline, 0.0, midstream_delay_s=REALTIME_DELAY_S, ensure_midstream=True)
    assert rng.waits == [STARTUP_DELAY_S, STARTUP_DELAY_S, REALTIME_DELAY_S]
    assert (done, len(restarts), pipeline.killed) == (3, 2, [1000, 1001, 1002])


def test_kill_driver_keeps_its_draws_every_kill_at_start_up_when_they_say_so(pipeline):
    rng, (done, _restarts) = _kill(pipeline, 0.0)
    assert rng.waits == [STARTUP_DELAY_S] * 3
    assert done == 3


def test_mid_stream_kills_wait_the_window_they_are_given(pipeline):
    rng, (done, _restarts) = _kill(pipeline, 0.9, midstream_delay_s=REALTIME_DELAY_S, ensure_midstream=True)
    assert rng.waits == [REALTIME_DELAY_S] * 3
    assert done == 3


def test_kill_driver_waits_its_own_mid_stream_window(pipeline):
    rng, _ = _kill(pipeline, 0.9)
    assert rng.waits == [kill_driver.MIDSTREAM_DELAY_S] * 3
