"""What every benchmark scenario shares: the services, the records, the pipeline under test, topics, the
statistics, and the shape of a measurement.

Nothing here measures anything by itself; the scenario modules (``bench.raw_copy``, ``bench.python_loop``,
``bench.spark_pipeline``, ``bench.dlq_console``) do, and ``bench.runner`` puts them in one report.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.stats import median
from streamforge_core.kafka import KafkaConnection, admin_config, consumer_config, producer_config

REPO = Path(__file__).resolve().parent.parent
EVENTS = REPO / "demo" / "data" / "github-events-2021-07-21.ndjson"

#: The StreamForge Rust engine's published throughput (messages/s), the bar issue #3 sets.
STREAMFORGE_RUST_MSGS_PER_S = 35_000
#: The lineage header every produced record carries: ``topic/partition/offset`` of its source record.
LINEAGE_HEADER = "x-streamforge-source"

#: The pipeline every scenario runs (issue #3's example): PushEvents -> the actor's login,
#: PullRequestEvents -> a constructed object. The first ``n`` are used for an n-destination run.
DESTINATIONS: tuple[dict[str, str], ...] = (
    {"name": "pushes", "filter": "/type,==,PushEvent", "transform": "EXTRACT:/actor/login,login"},
    {
        "name": "pull-requests",
        "filter": "/type,==,PullRequestEvent",
        "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:merged=/payload/pull_request/merged",
    },
)


@dataclass(frozen=True)
class Services:
    """Where Kafka and Redis are and which connector jars Spark needs (from the devstack environment)."""

    bootstrap: str
    redis_url: str
    jars: tuple[str, ...]

    @classmethod
    def from_env(cls) -> Services:
        """Read ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL`` and ``STREAMFORGE_SPARK_JARS`` (comma-separated),
        as ``python -m devstack --profile test env`` exports them."""
        return cls(
            bootstrap=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"),
            redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:16379/0"),
            jars=tuple(j for j in os.environ.get("STREAMFORGE_SPARK_JARS", "").split(",") if j),
        )

    def check(self) -> None:
        """Raise RuntimeError naming the service that does not answer (Kafka metadata, Redis PING)."""
        import redis

        from streamforge_core import redis_client

        try:
            AdminClient(admin_config(KafkaConnection(self.bootstrap))).list_topics(timeout=10)
        except KafkaException as exc:
            raise RuntimeError(f"Kafka at {self.bootstrap} does not answer: {exc}") from exc
        try:
            redis_client.connect(self.redis_url).ping()
        except redis.RedisError as exc:
            raise RuntimeError(f"Redis at {self.redis_url} does not answer: {exc}") from exc


@dataclass
class Measurement:
    """One figure of the report.

    ``scenario`` is the module (``raw_copy``, ``python_loop``, ``spark_pipeline``, ``dlq_console``);
    ``variant`` names the configuration (``at_least_once/2dest``). ``records_per_s`` is the sustained rate in
    records/s (None when the scenario measures something else); ``latency_ms`` maps ``p50``/``p99``/...
    to milliseconds; ``load`` holds the 1-minute load average at the start and end; ``extra`` anything else
    worth keeping (per-batch figures, settings). ``status`` is ``measured`` or ``not_implemented``.
    """

    scenario: str
    variant: str
    records: int = 0
    seconds: float = 0.0
    records_per_s: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    load: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    status: str = "measured"

    def to_json(self) -> dict[str, Any]:
        """The measurement as a JSON-ready dict."""
        return asdict(self)


def load1() -> float:
    """The 1-minute load average of the machine."""
    return round(os.getloadavg()[0], 2)


class LoadSampler:
    """Samples ``os.getloadavg()`` every ``interval`` seconds in a daemon thread until ``stop()``."""

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float, float, float]] = []  # (unix s, load1, load5, load15)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def start(self) -> LoadSampler:
        """Begin sampling; returns self."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), *os.getloadavg()))
            if self._stop.wait(self.interval):
                return

    def stop(self) -> dict[str, float]:
        """Stop and summarise the 1-minute load: min, median, max over the samples."""
        self._stop.set()
        self._thread.join(5)
        values = [s[1] for s in self.samples] or [load1()]
        return {
            "min": round(min(values), 2),
            "median": round(median(values), 2),
            "max": round(max(values), 2),
        }


# -- records --------------------------------------------------------------------------------------------------


def one_kb_records(count: int, size: int = 1024) -> list[tuple[bytes, bytes]]:
    """``count`` (key, value) records of exactly ``size`` bytes of value each, shaped like the real GitHub
    events (same top-level fields, actor/repo objects, a payload), cycling over the 800 real ones with
    fresh ids; the key is the id."""
    events = [json.loads(line) for line in EVENTS.read_bytes().splitlines()]
    out: list[tuple[bytes, bytes]] = []
    for i in range(count):
        event = events[i % len(events)]
        payload = event.get("payload", {})
        record = {
            "id": f"bench-{i}",
            "type": event["type"],
            "actor": {k: event["actor"][k] for k in ("id", "login", "display_login", "url")},
            "repo": event["repo"],
            "payload": {
                "ref": payload.get("ref"),
                "size": payload.get("size"),
                "action": payload.get("action"),
                "pull_request": {"merged": payload["pull_request"].get("merged")}
                if "pull_request" in payload
                else None,
            },
            "public": event["public"],
            "created_at": event["created_at"],
            "pad": "",
        }
        if record["payload"]["pull_request"] is None:
            del record["payload"]["pull_request"]
        text = json.dumps(record, separators=(",", ":"))
        record["pad"] = "x" * max(0, size - len(text))
        out.append((record["id"].encode(), json.dumps(record, separators=(",", ":")).encode()))
    return out


def pipeline_spec(
    *,
    source_topics: Sequence[str],
    dest_topics: Sequence[str],
    dlq_topic: str,
    mode: str,
    batch: int,
    realtime: bool = False,
    realtime_batch_ms: int = 0,
) -> dict[str, Any]:
    """The pipeline spec (``pipelines.spec`` JSON) of the benchmark with ``len(dest_topics)`` destinations
    (1 or 2) of :data:`DESTINATIONS`, ``mode`` delivery and ``batch`` records per micro-batch at most; with
    ``realtime`` the ``low_latency`` commit strategy instead (Spark real-time mode; ``batch`` unused) with
    real-time batches of ``realtime_batch_ms`` (0: the strategy's default, 5 s)."""
    dests = [{**DESTINATIONS[i], "topic": topic} for i, topic in enumerate(dest_topics[: len(DESTINATIONS)])]
    strategy: dict[str, Any] = (
        {"kind": "low_latency", "interval_ms": realtime_batch_ms}
        if realtime
        else {"kind": "batch", "max_records": batch}
    )
    return {
        "source": {"topics": list(source_topics), "starting_offsets": "earliest"},
        "destinations": dests,
        "delivery": {"mode": mode, "commit_strategy": strategy},
        "dlq": {"topic": dlq_topic},
    }


# -- topics ---------------------------------------------------------------------------------------------------


class Topics:
    """Creates uniquely named topics (the broker is shared) and deletes them all at the end."""

    def __init__(self, bootstrap: str, prefix: str = "bench") -> None:
        self.admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
        self.prefix = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.created: list[str] = []

    def create(self, name: str, partitions: int, *, log_append_time: bool = False) -> str:
        """Create ``<prefix>-<name>`` with ``partitions`` partitions; with ``log_append_time`` the broker
        stamps each record with its append time (used to measure end-to-end latency on one clock)."""
        topic = f"{self.prefix}-{name}"
        config = {"message.timestamp.type": "LogAppendTime"} if log_append_time else {}
        self.admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
        self.created.append(topic)
        return topic

    def delete_all(self) -> None:
        """Delete every topic this object created (errors ignored: the broker may be gone)."""
        if not self.created:
            return
        for future in self.admin.delete_topics(self.created, operation_timeout=30).values():
            try:
                future.result(60)
            except Exception as exc:
                print(f"  could not delete a topic: {exc}")
        self.created = []


def produce_records(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]], partitions: int
) -> float:
    """Produce ``records`` round-robin over ``partitions`` and wait for every acknowledgement; returns the
    seconds it took."""
    producer = Producer(
        producer_config(KafkaConnection(bootstrap), extra={"linger.ms": 10, "batch.size": 1_000_000})
    )
    started = time.perf_counter()
    for i, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not produce every record to {topic}")
    return time.perf_counter() - started


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark (the offset the next record will get)."""
    consumer = Consumer(
        consumer_config(KafkaConnection(bootstrap), group_id=f"bench-probe-{uuid.uuid4().hex}")
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.partitions
        }
    finally:
        consumer.close()


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    """How many records of ``topic`` the consumer group ``group`` has committed (sum over partitions)."""
    consumer = Consumer(consumer_config(KafkaConnection(bootstrap), group_id=group))
    try:
        parts = [TopicPartition(topic, p) for p in end_offsets(bootstrap, topic)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(parts, timeout=10))
    finally:
        consumer.close()


@dataclass
class Context:
    """One benchmark run: the services, the shared backlog topic (``records`` 1 KB records over
    ``partitions`` partitions, produced once and read by every throughput scenario), and the knobs.

    ``quick`` shortens every scenario (smoke runs). ``latency_rate`` (records/s) and ``latency_seconds``
    set the fixed offered load of the latency phases. ``spark_conf`` / ``producer_config`` /
    ``batch`` let a caller try variants of the Spark pipeline.
    """

    services: Services
    topics: Topics
    records: list[tuple[bytes, bytes]]
    backlog_topic: str
    partitions: int
    quick: bool
    out_dir: Path
    batch: int
    latency_rate: float
    latency_seconds: float
    master: str = "local[2]"
    repeats: int = 1
    options: dict[str, Any] = field(default_factory=dict)
