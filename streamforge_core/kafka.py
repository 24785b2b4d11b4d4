"""The Kafka boundary: every Kafka client of the product is configured here, and nowhere else.

One function per client role builds the librdkafka configuration (``producer_config``,
``transactional_producer_config``, ``consumer_config``, ``admin_config``) or the Spark Kafka source/sink
options (``spark_kafka_options``, the ``kafka.``-prefixed Java client settings of Spark's Structured Streaming
Kafka integration guide) from one ``KafkaConnection``: how to reach one cluster. A setting that every client
needs (the bootstrap servers today; TLS and SASL settings later) is added to ``KafkaConnection.client_settings``
once and reaches the driver, the writer, DLQ ingest, replay, lag reads, topic administration, chaos and bench.

Also here: one ``Record`` (a consumed record as plain data), the one list of transient errors with
``is_transient`` and ``retrying``, ``record_size``, the size rule the writer and the accounting share, and
``topic_name_problem``, Kafka's own rule for topic names, which every topic a user names is checked with.
Plain Python on confluent-kafka: no Django, no pyspark.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message

#: librdkafka's client settings (string keys such as ``linger.ms``; values as librdkafka takes them).
ClientConfig = dict[str, Any]


#: Kafka's longest topic name (``org.apache.kafka.common.internals.Topic.MAX_NAME_LENGTH``).
TOPIC_NAME_MAX = 249
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None when it is: Kafka's own rule
    (``org.apache.kafka.common.internals.Topic.validate``): 1 to 249 ASCII letters, digits, '.', '_' and
    '-', and neither "." nor "..". The broker refuses anything else, so it is refused before it gets there."""
    if not name:
        return "a topic name is required"
    if len(name) > TOPIC_NAME_MAX:
        return f"a Kafka topic name is at most {TOPIC_NAME_MAX} characters"
    if name in {".", ".."}:
        return 'a Kafka topic may not be named "." or ".."'
    if not _TOPIC_NAME.fullmatch(name):
        return "not a valid Kafka topic name (only ASCII letters, digits, '.', '_' and '-')"
    return None


@dataclass(frozen=True)
class KafkaConnection:
    """How to reach one Kafka cluster: ``bootstrap_servers`` is librdkafka's and the Java client's
    comma-separated ``host:port`` list (``bootstrap.servers``)."""

    bootstrap_servers: str

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ValueError("a Kafka connection needs at least one bootstrap server (host:port)")

    def client_settings(self) -> ClientConfig:
        """The settings every librdkafka client of this cluster starts from, whatever its role."""
        return {"bootstrap.servers": self.bootstrap_servers}


def _merged(conn: KafkaConnection, role: ClientConfig, extra: Mapping[str, Any] | None) -> ClientConfig:
    # The connection's settings come last but one: a role never silently replaces where or how to connect;
    # ``extra`` (a caller's tuning) comes last and may, which tests and benchmarks need.
    return {**role, **conn.client_settings(), **(extra or {})}


def producer_config(
    conn: KafkaConnection,
    *,
    client_id: str | None = None,
    idempotent: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A producer's configuration. ``idempotent`` (the default) turns on ``enable.idempotence`` with
    ``acks=all``, so a retried send is written once per partition (KIP-98); ``extra`` adds or overrides
    librdkafka settings (``linger.ms``, ``message.max.bytes`` ...)."""
    role: ClientConfig = {}
    if idempotent:
        role.update({"enable.idempotence": True, "acks": "all"})
    if client_id:
        role["client.id"] = client_id
    return _merged(conn, role, extra)


def transactional_producer_config(
    conn: KafkaConnection,
    *,
    transactional_id: str,
    transaction_timeout_ms: int = 60_000,
    client_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A transactional producer's configuration (idempotent, ``transactional.id`` set). The coordinator
    aborts a transaction left open longer than ``transaction_timeout_ms`` (milliseconds); a new producer with
    the same ``transactional_id`` fences every earlier one in ``init_transactions`` (KIP-98)."""
    role = producer_config(conn, client_id=client_id, extra=extra)
    role.update({"transactional.id": transactional_id, "transaction.timeout.ms": transaction_timeout_ms})
    return role


def consumer_config(
    conn: KafkaConnection,
    *,
    group_id: str,
    read_committed: bool = True,
    offset_reset: str | None = None,
    client_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A consumer's configuration in consumer group ``group_id``. Offsets are never auto-committed (the
    product commits after its own work is durable). ``read_committed`` (librdkafka's default too) hides
    aborted transactional records and open transactions, and makes watermark reads answer the last stable
    offset; False reads everything written (``read_uncommitted``). ``offset_reset`` is ``auto.offset.reset``
    (``earliest``/``latest``) for a group with no committed offset."""
    role: ClientConfig = {
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
    }
    if offset_reset:
        role["auto.offset.reset"] = offset_reset
    if client_id:
        role["client.id"] = client_id
    return _merged(conn, role, extra)


def admin_config(conn: KafkaConnection, *, extra: Mapping[str, Any] | None = None) -> ClientConfig:
    """An admin client's configuration (topics, configs, consumer-group offsets)."""
    return _merged(conn, {}, extra)


def spark_kafka_options(conn: KafkaConnection) -> dict[str, str]:
    """The connection as options of Spark's Kafka source and sink: each Java client setting prefixed with
    ``kafka.`` (Spark's Structured Streaming + Kafka Integration Guide, "Kafka Specific Configurations")."""
    return {f"kafka.{name}": str(value) for name, value in conn.client_settings().items()}


@dataclass(frozen=True)
class Record:
    """One consumed record as plain data. ``headers`` keep their order and duplicates; ``timestamp_ms`` is
    epoch milliseconds, None when the broker gave none; ``topic_id`` is Kafka's id of the topic it was read
    from when the reader knows it (a message does not carry it), else empty."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int | None
    topic_id: str = ""

    @classmethod
    def from_message(cls, message: Message, topic_id: str = "") -> Record:
        """Copy a confluent-kafka message; ValueError when it is an error event, not a record."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            raise ValueError(f"not a record but an error event: {message.error()}")
        kind, millis = message.timestamp()
        raw_headers = message.headers() or []
        pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            key=_as_bytes(message.key()),
            value=_as_bytes(message.value()),
            headers=[(name, _as_bytes(value)) for name, value in pairs],
            timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE or millis is None or millis < 0 else millis,
            topic_id=topic_id,
        )

    def header(self, name: str) -> str | None:
        """The first header called ``name`` as text, or None when absent (or a null value)."""
        for key, value in self.headers:
            if key == name:
                return None if value is None else value.decode()
        return None


def _as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


# Record batch v2 framing (Kafka protocol guide, "Record Batch"): 61 bytes of batch header plus per-record
# varints and attributes; 96 bytes covers one record's framing with room to spare.
RECORD_OVERHEAD = 96
#: Per header: its varint lengths and framing, in bytes, on top of the name and value.
HEADER_OVERHEAD = 10


def record_size(value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """An upper bound, in bytes, of one record alone in a batch on the wire, to compare with a topic's
    ``max.message.bytes`` before producing (the broker checks the whole batch against it)."""
    size = RECORD_OVERHEAD + len(value or b"") + len(key or b"")
    for name, data in headers:
        size += len(name) + len(data or b"") + HEADER_OVERHEAD
    return size


#: Errors a broker or the client answers while a broker starts, a leader or coordinator moves, or the network
#: blips; the same request succeeds a moment later. Kafka marks most of these retriable itself
#: (``KafkaError.retriable()``); librdkafka's local ones (``_TRANSPORT``, ``_TIMED_OUT``...) it does not.
TRANSIENT_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
    }
)


def is_transient(error: KafkaError) -> bool:
    """Whether repeating the failed request later may succeed (see ``TRANSIENT_ERRORS``)."""
    return error.retriable() or error.code() in TRANSIENT_ERRORS


T = TypeVar("T")


def retrying(call: Callable[[], T], *, within: float = 60.0) -> T:
    """``call()``, repeated (0.5 s, doubling to 4 s) while it raises a KafkaException with a transient error
    (``is_transient``), for at most ``within`` seconds; then, or on any other error, the exception is raised."""
    deadline = time.monotonic() + within
    delay = 0.5
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or not is_transient(error) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 4.0)
