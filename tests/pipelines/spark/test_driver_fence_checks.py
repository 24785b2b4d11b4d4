"""Where the driver checks its fence, without Spark (pure logic; the real driver is fenced end to end in
``test_driver_fencing.py``): ``process_batch`` writes nothing once the lease is gone, commits nothing when the
lease went during the write, the at_most_once skip cannot swallow a fence, ``classify`` recognises a
``Fenced`` after Spark wrapped it, a fenced driver's heartbeat stays silent, and ``--lease-file`` needs
``--epoch``."""

from __future__ import annotations

import json
import threading
import time
import uuid
from types import SimpleNamespace

import pytest
import redis

from pipelines.spark import driver as driver_module
from pipelines.spark.driver import FENCED, Driver, DriverOptions, classify, main
from pipelines.spark.fence import Fence, Lease, write_lease
from pipelines.spec import parse_spec
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection

RUN = "run-1"
EPOCH = 3

# What awaitTermination raises when foreachBatch raised Fenced: a StreamingQueryException, captured from PySpark
# 4.2.0 (a rate-source query whose foreachBatch raised it; paths shortened): STREAM_FAILED around
# FOREACH_BATCH_USER_FUNCTION_ERROR around the Python traceback, then Spark's query description.
SPARK_WRAPPED = (
    "[STREAM_FAILED] Query [id = 7af2804f-4de4-4ae9-a7ea-b5797f4982f3, runId = 2309d69c-421c-48be-a7d0-"
    "9e4c2ba81a11] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the "
    "user provided function in foreach batch sink. Reason: An exception was raised by the Python Proxy. "
    "Return Message: Traceback (most recent call last):\n"
    '  File ".venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy\n'
    "    return_value = getattr(self.pool[obj_id], method)(*params)\n"
    '  File ".venv/lib/python3.11/site-packages/pyspark/sql/utils.py", line 166, in call\n'
    "    raise e\n"
    '  File ".venv/lib/python3.11/site-packages/pyspark/sql/utils.py", line 163, in call\n'
    "    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)\n"
    '  File "pipelines/spark/driver.py", line 376, in process_batch\n'
    '    self._check_fence(f"batch {batch_id}: before writing")\n'
    "streamforge_core.contract.Fenced: [streamforge-fenced] batch 4: before writing: the lease expired "
    "0.4 s ago\n SQLSTATE: 39000 SQLSTATE: XXKST\n=== Streaming Query ===\n"
    "Identifier: [id = 7af2804f-4de4-4ae9-a7ea-b5797f4982f3, runId = 2309d69c-421c-48be-a7d0-9e4c2ba81a11]\n"
    "Current Committed Offsets: {}\nCurrent State: ACTIVE\nThread State: RUNNABLE\n"
)


def _spec(mode: str = "at_least_once"):
    strategy: dict[str, object] = (
        {"kind": "low_latency"} if mode == "low_latency" else {"kind": "batch", "max_records": 50}
    )
    return parse_spec(
        {
            "source": {"topics": ["src"]},
            "destinations": [{"name": "all", "topic": "out", "filter": "EXISTS:/id"}],
            "delivery": {
                "mode": "at_least_once" if mode == "low_latency" else mode,
                "commit_strategy": strategy,
            },
            "dlq": {"topic": "dlq"},
        },
        pipeline_name="orders",
    )


def _lease(expires_in_s: float) -> Lease:
    return Lease("orders", RUN, EPOCH, "runner-a", int((time.time() + expires_in_s) * 1000))


class Batch:
    """Stands in for the micro-batch DataFrame: ``during_write`` runs while "writing", then one summary row."""

    def __init__(self, during_write=lambda: None) -> None:
        self.during_write = during_write
        self.written = 0

    def mapInArrow(self, _function, _schema):  # Spark's name
        return self

    def collect(self):
        self.written += 1
        self.during_write()
        row = SimpleNamespace(
            topic="src", partition=0, min_offset=10, max_offset=19, records=10, skipped=False, counts="{}"
        )
        return [row]

    def count(self) -> int:
        return 10


@pytest.fixture
def harness(tmp_path, monkeypatch):
    """A Driver built without Kafka, Redis or Spark: a real lease file and Fence, spies for the commit, the
    progress event and the exit report."""
    lease_file = tmp_path / "lease.json"
    write_lease(lease_file, _lease(60))
    reports: list[tuple[int, str, str]] = []
    commits: list[dict] = []
    published: list[dict] = []
    monkeypatch.setattr(
        driver_module, "_report_exit", lambda _o, code, kind, message: reports.append((code, kind, message))
    )

    def build(mode: str = "at_least_once") -> Driver:
        driver = Driver.__new__(Driver)
        driver.spec = _spec(mode)
        driver.options = DriverOptions(
            pipeline="orders", revision=1, run_id=RUN, kafka=KafkaConnection("127.0.0.1:1"),
            redis_url="redis://127.0.0.1:1/0", checkpoint_dir=str(tmp_path / "cp"), master="local[1]",
            jars=(), epoch=EPOCH, lease_file=str(lease_file), fence_margin_seconds=1.0,
        )  # fmt: skip
        driver.fence = Fence(str(lease_file), RUN, EPOCH, 1.0)
        driver.fenced = threading.Event()
        driver._fenced_lock = threading.Lock()
        driver._stopping_fenced = False
        driver._settled = False
        driver._settle_lock = threading.Lock()
        driver._query_started_at = None
        driver.query = None
        driver.writer_config = SimpleNamespace()  # type: ignore[assignment]

        def commit(ranges: dict) -> bool:
            commits.append(ranges)
            return True

        driver._commit_group = commit  # type: ignore[method-assign]
        driver._latest_offsets = lambda partitions: {}  # type: ignore[method-assign]
        driver._publish = published.append  # type: ignore[method-assign,assignment]
        driver.last_batch = {}
        return driver

    monkeypatch.setattr(driver_module, "replace", lambda config, **_changes: config)
    return SimpleNamespace(
        build=build, lease_file=lease_file, reports=reports, commits=commits, published=published
    )


def test_a_batch_under_a_valid_lease_is_written_and_committed(harness):
    driver = harness.build()
    batch = Batch()
    driver.process_batch(batch, 4)
    assert batch.written == 1
    assert harness.commits == [{("src", 0): (10, 19)}]
    assert harness.published[0]["batch_id"] == 4
    assert harness.reports == []


@pytest.mark.parametrize("mode", ["at_least_once", "at_most_once", "effectively_once"])
def test_a_batch_that_starts_after_the_lease_expired_writes_nothing(harness, mode):
    write_lease(harness.lease_file, _lease(-1))
    driver = harness.build(mode)
    batch = Batch()
    with pytest.raises(c.Fenced, match="batch 4: before writing"):
        driver.process_batch(batch, 4)
    # at_most_once skips a failed batch and returns (Spark then commits it): a fence must not be skipped.
    assert batch.written == 0
    assert harness.commits == []
    assert harness.published == []
    assert driver.fenced.is_set()
    [(code, kind, message)] = harness.reports
    assert (code, kind) == (c.EXIT_FENCED, FENCED)
    assert message.startswith(f"{c.FENCED_MARKER} batch 4: before writing: the lease expired")


@pytest.mark.parametrize(
    "takeover",
    [
        _lease(-1),  # expired while the batch was being written
        Lease("orders", "run-2", EPOCH + 1, "runner-b", int((time.time() + 60) * 1000)),  # taken over
    ],
)
def test_a_lease_lost_during_the_write_stops_the_batch_before_any_commit(harness, takeover):
    driver = harness.build()
    batch = Batch(during_write=lambda: write_lease(harness.lease_file, takeover))
    with pytest.raises(c.Fenced, match="batch 4: before committing"):
        driver.process_batch(batch, 4)
    assert batch.written == 1
    # Raising from foreachBatch is what keeps Spark from writing commits/4; the group is not committed.
    assert harness.commits == []
    assert harness.published == []
    assert [code for code, _kind, _message in harness.reports] == [c.EXIT_FENCED]


def test_a_lease_lost_after_the_group_commit_still_keeps_the_batch_out_of_the_checkpoint(
    harness, monkeypatch
):
    driver = harness.build()
    monkeypatch.setattr(
        driver, "_latest_offsets", lambda _p: write_lease(harness.lease_file, _lease(-1)) or {}
    )
    with pytest.raises(c.Fenced, match="batch 4: before returning to Spark"):
        driver.process_batch(Batch(), 4)
    # Raising, even this late, keeps Spark from writing commits/4 (the group only feeds lag tools).
    assert len(harness.commits) == 1


def test_a_driver_reports_its_fence_once_however_many_checks_fail(harness):
    write_lease(harness.lease_file, _lease(-1))
    driver = harness.build()
    for batch_id in (4, 5):
        with pytest.raises(c.Fenced):
            driver.process_batch(Batch(), batch_id)
    assert len(harness.reports) == 1


def test_classify_recognises_a_fence_that_spark_wrapped():
    assert classify(RuntimeError(SPARK_WRAPPED)) == (c.EXIT_FENCED, "Fenced")
    assert classify(c.Fenced("watchdog: the lease expired 2.0 s ago")) == (c.EXIT_FENCED, "Fenced")
    # A fenced batch whose write also hit a halt is still a fence: the lease decided that it stopped.
    both = SPARK_WRAPPED + "\n" + c.halt_marker(c.DEAD_LETTER_QUEUE) + " DLQ topic gone"
    assert classify(RuntimeError(both)) == (c.EXIT_FENCED, "Fenced")
    assert classify(RuntimeError("[STREAM_FAILED] something else")) == (c.EXIT_CRASHED, "Crash")
    assert driver_module._short(RuntimeError(SPARK_WRAPPED)) == (
        "[streamforge-fenced] batch 4: before writing: the lease expired 0.4 s ago"
    )


class Redis:
    def __init__(self) -> None:
        self.beats: list[dict] = []

    def set(self, _key, value, ex=None) -> None:
        self.beats.append(json.loads(value))


def test_a_fenced_driver_writes_no_heartbeat_and_a_holder_beats_with_its_epoch(harness):
    driver = harness.build()
    client = Redis()
    driver.redis = client
    driver.session = None
    driver.query_started = threading.Event()
    driver._beat()
    assert [(b["run_id"], b["epoch"]) for b in client.beats] == [(RUN, EPOCH)]
    write_lease(harness.lease_file, _lease(-1))
    driver._beat()
    assert len(client.beats) == 1, "a driver past its lease must not write the pipeline's heartbeat key"


def test_a_lease_file_without_an_epoch_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(
            ["--spec-file", str(tmp_path / "s.json"), "--pipeline", "orders", "--revision", "1",
             "--checkpoint-dir", str(tmp_path), "--lease-file", str(tmp_path / "lease.json")]
        )  # fmt: skip
    assert exited.value.code == 2
    assert "--lease-file needs --epoch" in capsys.readouterr().err


@pytest.mark.redis
def test_an_exiting_driver_deletes_the_heartbeat_only_while_it_is_its_own(settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    options = SimpleNamespace(pipeline=f"hb-{uuid.uuid4().hex[:8]}", run_id=RUN)
    key = c.heartbeat_key(options.pipeline)
    client.set(key, json.dumps({"run_id": "run-2", "epoch": EPOCH + 1}), ex=60)
    driver_module._drop_own_heartbeat(client, options)
    assert json.loads(client.get(key))["run_id"] == "run-2", "the successor's beat survives"
    client.set(key, json.dumps({"run_id": RUN, "epoch": EPOCH}), ex=60)
    driver_module._drop_own_heartbeat(client, options)
    assert client.get(key) is None


def _realtime_progress(batch_id: int) -> SimpleNamespace:
    source = SimpleNamespace(startOffset='{"src": {"0": 10}}', endOffset='{"src": {"0": 20}}')
    return SimpleNamespace(
        batchId=batch_id, batchDuration=5000, observedMetrics={}, numInputRows=0, sources=[source], name="q"
    )


def test_a_real_time_driver_past_its_lease_commits_no_group_offsets_and_is_killed_at_once(
    harness, monkeypatch
):
    left: list[bool] = []
    monkeypatch.setattr(driver_module, "_leave_fenced", lambda: left.append(True))
    driver = harness.build("low_latency")
    driver.query_name = "q"
    driver.realtime_batch_ended = threading.Event()
    driver.realtime_progress(_realtime_progress(6))
    assert harness.commits == [{("src", 0): (10, 19)}]

    write_lease(harness.lease_file, _lease(-1))
    listener = driver_module.RealtimeProgressListener(driver)
    listener.onQueryProgress(SimpleNamespace(progress=_realtime_progress(7)))
    assert harness.commits == [{("src", 0): (10, 19)}], "batch 7's offsets must not reach the group"
    # Real-time mode: Spark's Kafka sink writes in the JVM, so the driver does not wait: it kills it.
    assert left == [True]
    assert [code for code, _kind, _message in harness.reports] == [c.EXIT_FENCED]


class Query:
    def __init__(self) -> None:
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1


def test_the_watchdog_stops_the_query_of_a_driver_fenced_by_a_batch_and_leaves_if_it_hangs(
    harness, monkeypatch
):
    left = threading.Event()
    monkeypatch.setattr(driver_module, "_leave_fenced", left.set)
    monkeypatch.setattr(driver_module, "FENCED_STOP_SECONDS", 0.1)
    driver = harness.build()
    query = Query()
    driver.query = query
    write_lease(harness.lease_file, _lease(-1))
    with pytest.raises(c.Fenced):
        driver.process_batch(Batch(), 4)
    driver._watch_fence()  # returns at once: the batch's check already found the driver fenced
    assert query.stops == 1
    assert left.wait(5), "a query that does not stop within FENCED_STOP_SECONDS: the driver leaves (exit 4)"
    driver._on_fenced("again")
    assert query.stops == 1
    assert len(harness.reports) == 1


def test_the_watchdog_fences_a_driver_between_batches(harness, monkeypatch):
    monkeypatch.setattr(driver_module, "_leave_fenced", lambda: None)
    monkeypatch.setattr(driver_module, "FENCE_WATCH_SECONDS", 0.05)
    driver = harness.build()
    query = Query()
    driver.query = query
    watchdog = threading.Thread(target=driver._watch_fence, daemon=True)
    watchdog.start()
    time.sleep(0.2)
    assert query.stops == 0, "a valid lease keeps the query running"
    write_lease(harness.lease_file, _lease(-1))
    watchdog.join(5)
    assert query.stops == 1
    [(code, kind, message)] = harness.reports
    assert (code, kind) == (c.EXIT_FENCED, FENCED)
    assert message.startswith(f"{c.FENCED_MARKER} watchdog: the lease expired")
