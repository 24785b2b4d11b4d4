"""When a driver takes its host's niceness (``Driver._settle_priority``): once, after its first batch or
``SETTLE_IDLE_SECONDS`` after its query started without one, and only when it leads its own session. A Driver
built without Kafka, Redis or Spark; the lowering itself is ``tests/streamforge_core/test_process_priority.py``,
a real driver's ``tests/pipelines/test_managed_pipeline.py``."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pipelines.spark import driver as driver_module
from pipelines.spark.driver import SETTLE_IDLE_SECONDS, Driver, DriverOptions
from streamforge_core.kafka import KafkaConnection


@pytest.fixture
def lowered(monkeypatch) -> list[tuple[int, int]]:
    """The (pid, niceness) of each ``lower_priority`` call, with this process taken for a session leader."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(driver_module, "lower_priority", lambda pid, niceness: calls.append((pid, niceness)))
    monkeypatch.setattr(os, "getsid", lambda _pid: os.getpid())
    return calls


def _driver(niceness: int = 7, query_started_at: float | None = None) -> Driver:
    driver = Driver.__new__(Driver)
    driver.options = DriverOptions(
        pipeline="orders", revision=1, run_id="r", kafka=KafkaConnection("127.0.0.1:1"),
        redis_url="redis://127.0.0.1:1/0", checkpoint_dir="/nowhere", master="local[1]", jars=(),
        niceness=niceness, heartbeat_seconds=0.01,
    )  # fmt: skip
    driver._settled = False
    driver._settle_lock = threading.Lock()
    driver._query_started_at = query_started_at
    driver.stop_requested = threading.Event()
    driver._beat = lambda: driver.stop_requested.set()  # type: ignore[method-assign]  # one round of the loop
    return driver


def test_the_first_batch_lowers_the_driver_once(lowered):
    driver = _driver()
    driver._settle_priority()
    driver._settle_priority()  # the second batch
    assert lowered == [(os.getpid(), 7)]


def test_a_driver_that_does_not_lead_its_session_lowers_nothing(lowered, monkeypatch):
    # started from a shell or a test: lowering "its" session would lower the caller's
    monkeypatch.setattr(os, "getsid", lambda _pid: os.getpid() + 1)
    _driver()._settle_priority()
    assert lowered == []


def test_niceness_0_lowers_nothing(lowered):
    _driver(niceness=0)._settle_priority()
    assert lowered == []


@pytest.mark.parametrize(
    ("started_ago", "expected"),
    [(None, []), (0.0, []), (SETTLE_IDLE_SECONDS + 1, [7])],
    ids=["query-not-started", "query-just-started", "no-batch-for-the-idle-time"],
)
def test_a_query_without_a_batch_settles_after_the_idle_time(lowered, started_ago, expected):
    # Spark runs no micro-batch while the source has nothing new: such a driver must not keep the start's
    # priority for ever
    started_at = None if started_ago is None else time.monotonic() - started_ago
    driver = _driver(query_started_at=started_at)
    driver._heartbeat()
    assert [niceness for _pid, niceness in lowered] == expected
