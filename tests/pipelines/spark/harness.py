"""Running the real driver as a child process against the test broker and Redis, and reading what it wrote.

``Record`` and ``consume_all`` live in ``chaos.accounting`` (the fault-injection run uses them too) and
are re-exported here for the tests.

Used by the end-to-end tests and by the throughput benchmark; nothing here is a stand-in: the driver is the
same ``python -m pipelines.spark.driver`` the supervisor launches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Producer
from django.conf import settings

from chaos.accounting import consume_all
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import KafkaConnection, Record, producer_config

__all__ = ["REPO", "DriverProcess", "Record", "consume_all", "produce", "written_fates"]

REPO = Path(__file__).resolve().parents[3]


def _kafka_headers(pairs: list[tuple[str, bytes]] | None) -> list[tuple[str, str | bytes | None]] | None:
    return None if pairs is None else [(name, value) for name, value in pairs]


def produce(
    bootstrap: str | KafkaConnection,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    partitions: int = 1,
    headers: Mapping[bytes | None, list[tuple[str, bytes]]] | None = None,
) -> list[tuple[int, int]]:
    """Produce (key, value) pairs round-robin over ``partitions``; returns each record's (partition, offset)
    in input order, after every acknowledgement. ``bootstrap``: plaintext servers or a whole connection.
    ``headers``: {key: the headers of the record with that key}, for the records that carry some."""
    conn = bootstrap if isinstance(bootstrap, KafkaConnection) else KafkaConnection(bootstrap)
    producer = Producer(producer_config(conn, extra={"linger.ms": 5, "message.max.bytes": 10_000_000}))
    coordinates: list[tuple[int, int] | None] = []

    def remember(index: int):
        def report(err, msg) -> None:
            assert err is None, err
            coordinates[index] = (msg.partition(), msg.offset())

        return report

    for i, (key, value) in enumerate(records):
        coordinates.append(None)
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=i % partitions,
                    headers=_kafka_headers((headers or {}).get(key)),
                    on_delivery=remember(i),
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert all(c is not None for c in coordinates)
    return [c for c in coordinates if c is not None]


@dataclass
class DriverProcess:
    """The driver as a child process in its own session (as the supervisor runs it)."""

    spec: dict[str, Any]
    pipeline: str
    workdir: Path
    bootstrap: str
    redis_url: str
    jars: list[str]
    revision: int = 1
    master: str = "local[2]"
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    env: dict[str, str] = field(default_factory=dict)  # added to the child's environment (KAFKA_* security)
    args: list[str] = field(default_factory=list)  # added to the command line (--epoch, --lease-file)
    process: subprocess.Popen[bytes] | None = None

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"driver-{self.run_id}.log"

    def start(self) -> DriverProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        spec_file = self.workdir / "spec.json"
        spec_file.write_text(json.dumps(self.spec))
        # The installation's replay key, as the launcher gives it (a replay's destinations count only under
        # the console's signature); self.env may name another. None outside Django (the bench replays nothing).
        replay_key = {replay_signing.KEY_ENV: settings.REPLAY_KEY} if settings.configured else {}
        env = {
            **os.environ,
            **replay_key,
            **self.env,
            "PYTHONUNBUFFERED": "1",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "pipelines.spark.driver",
                "--spec-file", str(spec_file), "--pipeline", self.pipeline, "--revision", str(self.revision),
                "--run-id", self.run_id, "--bootstrap", self.bootstrap, "--redis-url", self.redis_url,
                "--checkpoint-dir", str(self.checkpoint), "--master", self.master, "--jars", ",".join(self.jars),
                *self.args,
            ],
            cwd=REPO, env=env, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        return self

    def restart(self) -> DriverProcess:
        """A new run (new run id) on the same checkpoint."""
        self.run_id = str(uuid.uuid4())
        self.process = None
        return self.start()

    def events(self) -> list[dict[str, Any]]:
        """This run's progress events, oldest first."""
        client = redis.Redis.from_url(self.redis_url)
        events = []
        for _id, fields in client.xrange(c.PROGRESS_STREAM):  # type: ignore[union-attr]  # sync client
            event = json.loads(fields[b"event"])
            if event.get("run_id") == self.run_id and event.get("type") == "progress":
                events.append(event)
        return events

    def consumed(self) -> int:
        return sum(e["consumed"] for e in self.events())

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"driver exited with {self.process.returncode} while waiting for {what}:\n{self.log_tail()}"
                )
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.log_tail()}")

    def wait_consumed(self, count: int, timeout: float = 180) -> None:
        self.wait_for(lambda: self.consumed() >= count, timeout, f"{count} records consumed")

    def stop(self, timeout: float = 90) -> int:
        """SIGTERM to the driver process only (graceful: the running batch finishes and the driver stops its
        own JVM; signalling the whole group would kill the JVM under it), then wait for the exit code."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        """kill -9 of the driver's whole process group (JVM and Python workers included)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def wait(self, timeout: float = 180) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"driver did not exit within {timeout}s:\n{self.log_tail()}") from None

    def exit_report(self) -> dict[str, Any]:
        for line in reversed(self.log_path.read_text(errors="replace").splitlines()):
            if line.startswith(c.EXIT_REASON_MARKER):
                return dict(json.loads(line[len(c.EXIT_REASON_MARKER) :]))
        raise AssertionError(f"no exit report in the driver log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def ensure_stopped(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


def written_fates(
    bootstrap: str | KafkaConnection,
    spec: dict[str, Any],
    *,
    read_committed: bool = False,
    group_prefix: str = "reader-",
) -> dict[tuple[str, int, int], list[tuple[str, Record]]]:
    """What the driver wrote, per source record and destination:
    {(dest, source partition, source offset): [("produced", record) | ("dlq", record), ...]}, read from the
    destination topics (by the lineage header) and the DLQ (by the source headers; a record for every
    destination counts for each)."""
    fates: dict[tuple[str, int, int], list[tuple[str, Record]]] = {}
    for dest in spec["destinations"]:
        for record in consume_all(
            bootstrap, dest["topic"], read_committed=read_committed, group_prefix=group_prefix
        ):
            _topic, part_text, offset_text = str(record.header(c.H_LINEAGE)).rsplit("/", 2)
            fates.setdefault((dest["name"], int(part_text), int(offset_text)), []).append(
                ("produced", record)
            )
    for record in consume_all(
        bootstrap, spec["dlq"]["topic"], read_committed=read_committed, group_prefix=group_prefix
    ):
        partition, offset = (
            int(str(record.header(c.H_SOURCE_PARTITION))),
            int(str(record.header(c.H_SOURCE_OFFSET))),
        )
        names = (
            [d["name"] for d in spec["destinations"]]
            if record.header(c.H_DESTINATION) == c.ALL_DESTINATIONS
            else [str(record.header(c.H_DESTINATION))]
        )
        for name in names:
            fates.setdefault((name, partition, offset), []).append(("dlq", record))
    return fates
