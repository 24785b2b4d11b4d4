"""Fencing inside the real driver (plan §3.7): a driver whose lease file says it no longer holds the pipeline
exits 4 (Fenced) without committing another batch, whether the lease ran out while it was working or while
it was frozen (SIGSTOP of its whole process group, as ``devstack freeze-host`` does to a runner).

Real Kafka, real Spark (local), real Redis; the lease file is written with ``pipelines.spark.fence.write_lease``,
as the runner writes it. "Committed" is checked where Spark and Kafka keep it: the files in the checkpoint's
``commits/`` folder (Spark writes ``commits/<batch>`` only after ``foreachBatch`` returned) and the pipeline
consumer group's committed offsets. The driver is left idle with every batch committed before its lease is
expired, and the records that follow arrive after the expiry, so any commit or output after that point is a
fenced driver's.

Each test starts one driver (~25-40 s on the shared CI machine).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from django.conf import settings

from pipelines.spark.fence import Lease, write_lease
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, consumer_config
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

EPOCH = 7
PARTITIONS = 2


def _spec(source: str, suffix: str) -> dict:
    return {
        "source": {"topics": [source]},
        "destinations": [{"name": "all", "topic": f"fenced-out-{suffix}", "filter": "EXISTS:/id"}],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 50}},
        "dlq": {"topic": f"fenced-dlq-{suffix}"},
    }


def _records(first: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(first, first + count)]


def _logged(driver: DriverProcess, log: str) -> list[int]:
    """The batch ids in one of the checkpoint's logs (``offsets``: planned, ``commits``: committed; a file per
    batch, ``.crc`` files skipped)."""
    folder = driver.checkpoint / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def _commits(driver: DriverProcess) -> list[int]:
    """The batch ids in the checkpoint's commit log: Spark writes ``commits/<batch>`` only after
    ``foreachBatch`` returned."""
    return _logged(driver, "commits")


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer(consumer_config(KafkaConnection(bootstrap), group_id=group))
    try:
        return [
            tp.offset
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        ]
    finally:
        consumer.close()


def _lease(driver: DriverProcess, expires_in_s: float) -> Lease:
    return Lease(
        pipeline=driver.pipeline,
        run_id=driver.run_id,
        epoch=EPOCH,
        host="runner-test",
        expires_at_ms=int((time.time() + expires_in_s) * 1000),
    )


class Fenced:
    """One driver with a lease file, its source and its output, and what it had committed before the fence."""

    def __init__(self, tmp_path: Path, bootstrap: str, admin: AdminClient, source: str) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.source = source
        self.spec = _spec(source, suffix)
        self.parsed = parse_spec(self.spec, pipeline_name=f"fenced-{suffix}")
        self.created = ensure_topics(admin, self.parsed).created
        self.lease_file = tmp_path / "lease.json"
        self.driver = DriverProcess(
            spec=self.spec,
            pipeline=f"fenced-{suffix}",
            workdir=tmp_path / "driver",
            bootstrap=bootstrap,
            redis_url=settings.REDIS_URL,
            jars=list(settings.SPARK_JARS),
            args=["--epoch", str(EPOCH), "--lease-file", str(self.lease_file), "--fence-margin", "1"],
        )
        self.ends: list[int] = []

    def run_until_idle(self, count: int) -> None:
        """Start the driver under a lease valid for an hour, feed it ``count`` records and wait until every
        one is committed to the consumer group and the batch that read the last of them is in ``commits/``."""
        self.lease_file.parent.mkdir(parents=True, exist_ok=True)
        write_lease(self.lease_file, _lease(self.driver, 3600))
        coordinates = produce(self.bootstrap, self.source, _records(0, count), partitions=PARTITIONS)
        self.ends = [max(o for p, o in coordinates if p == part) + 1 for part in range(PARTITIONS)]
        driver = self.driver
        driver.start()
        group = self.parsed.source.consumer_group

        def idle() -> bool:  # every batch Spark planned (offsets/<n>) is committed, and the group too
            planned = _logged(driver, "offsets")
            return (
                bool(planned)
                and _committed(self.bootstrap, group, self.source) == self.ends
                and _commits(driver) == planned
            )

        driver.wait_for(idle, 300, "every record committed (group and checkpoint)")

    def expire(self) -> None:
        write_lease(self.lease_file, _lease(self.driver, -1))

    def assert_nothing_committed_after(self, commits: list[int]) -> None:
        assert _commits(self.driver) == commits, "a fenced driver committed a batch to the checkpoint"
        group = self.parsed.source.consumer_group
        assert _committed(self.bootstrap, group, self.source) == self.ends, "the consumer group moved"
        written = consume_all(self.bootstrap, self.spec["destinations"][0]["topic"])
        late = []
        for record in written:
            _topic, partition, offset = str(record.header(c.H_LINEAGE)).rsplit("/", 2)
            if int(offset) >= self.ends[int(partition)]:
                late.append((partition, offset))
        assert late == [], "a fenced driver wrote records read after its lease expired"
        assert len(written) == sum(self.ends), "every record read under the lease was written"


@pytest.fixture
def fenced(tmp_path, kafka_bootstrap, kafka_admin: AdminClient, make_topic):
    env = Fenced(tmp_path, kafka_bootstrap, kafka_admin, make_topic("fenced-src", partitions=PARTITIONS))
    yield env
    env.driver.ensure_stopped()
    existing = set(kafka_admin.list_topics(timeout=10).topics)
    doomed = sorted(set(env.created) & existing)
    if doomed:
        for future in kafka_admin.delete_topics(doomed).values():
            future.result(timeout=30)


def _assert_fenced_exit(driver: DriverProcess) -> dict:
    assert driver.wait(60) == c.EXIT_FENCED, driver.log_tail()
    report = driver.exit_report()
    assert (report["exit_code"], report["error_type"]) == (c.EXIT_FENCED, "Fenced"), report
    assert report["message"].startswith(c.FENCED_MARKER), report
    assert "expired" in report["message"], report
    return report


def test_a_driver_whose_lease_expires_stops_with_exit_4_and_commits_nothing_more(fenced):
    fenced.run_until_idle(200)
    commits = _commits(fenced.driver)
    assert len(commits) >= 2, "the driver committed batches while it held the lease"

    fenced.expire()
    produce(fenced.bootstrap, fenced.source, _records(200, 100), partitions=PARTITIONS)

    _assert_fenced_exit(fenced.driver)
    fenced.assert_nothing_committed_after(commits)


def test_a_driver_thawed_after_its_lease_expired_commits_nothing_and_leaves_the_new_runs_heartbeat(fenced):
    fenced.run_until_idle(200)
    commits = _commits(fenced.driver)
    pid = fenced.driver.process.pid

    os.killpg(pid, signal.SIGSTOP)  # the whole group: driver, JVM, Python workers (devstack freeze-host)
    try:
        fenced.expire()
        produce(fenced.bootstrap, fenced.source, _records(200, 100), partitions=PARTITIONS)
        # The run that took over meanwhile beats under the same per-pipeline key.
        client = redis.Redis.from_url(settings.REDIS_URL)
        successor = json.dumps({"run_id": "successor", "epoch": EPOCH + 1})
        client.set(c.heartbeat_key(fenced.driver.pipeline), successor, ex=120)
        time.sleep(2)  # past the driver's 1 s watchdog period and its trigger: both are due at the thaw
    finally:
        os.killpg(pid, signal.SIGCONT)

    _assert_fenced_exit(fenced.driver)
    fenced.assert_nothing_committed_after(commits)
    assert client.get(c.heartbeat_key(fenced.driver.pipeline)) == successor.encode(), (
        "the fenced driver overwrote or deleted its successor's heartbeat"
    )
