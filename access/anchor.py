"""The audit chain's anchors: each event's (sequence, hash) copied outside the database, so that someone who can
rewrite the database (edit an event and re-hash the ones after it, or cut off the newest) is still caught.

- Kafka (``settings.AUDIT_ANCHOR_TOPIC``): every event, appended by an idempotent producer to a topic with
  ``cleanup.policy=delete`` and no retention limit. The application only ever appends to it; give its Kafka
  principal Write/Read/Describe on the topic and nothing that deletes or alters it. ``verify`` reads it back.
- Redis: the newest five, a second witness that costs one round trip.

Records are keyed by the chain id (a fingerprint of the audit key), so several databases sharing a broker (test
runs, staging) never mix their chains. Both writes happen after commit and never raise: a broker or Redis that is
down is logged, and the next ``verify`` reports the anchor behind (unverified) until a later event is anchored.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from dataclasses import dataclass

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings

from streamforge_core import redis_client
from streamforge_core.kafka import (
    KafkaConnection,
    admin_config,
    connection_from_environment,
    consumer_config,
    producer_config,
)

log = logging.getLogger(__name__)

_REDIS_PREFIX = "streamforge:audit:anchor:"
#: After a failure to create the topic, no new attempt for this many seconds, so a broker that is down costs a
#: mutation's commit hook at most ``settings.AUDIT_ANCHOR_TIMEOUT`` seconds once per RETRY_AFTER.
RETRY_AFTER = 30.0
#: Seconds librdkafka keeps trying to deliver one anchor record before giving up (and logging it).
DELIVERY_TIMEOUT_MS = 60_000
TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}

Point = tuple[int, str]


class AnchorUnavailable(Exception):
    """An anchor could not be read; the message says which and why."""


@dataclass
class _KafkaState:
    producer: Producer | None = None
    topic_ready: bool = False
    retry_at: float = 0.0


_kafka: dict[tuple[int, KafkaConnection, str], _KafkaState] = {}
_lock = threading.Lock()


def _connection() -> KafkaConnection:
    return connection_from_environment(os.environ, bootstrap_servers=str(settings.KAFKA_BOOTSTRAP_SERVERS))


def _state() -> _KafkaState:
    # Per process, connection (another cluster, or a rotated password) and topic.
    key = (os.getpid(), _connection(), str(settings.AUDIT_ANCHOR_TOPIC))
    with _lock:
        return _kafka.setdefault(key, _KafkaState())


def _timeout() -> float:
    """Seconds to wait for Kafka to answer (``STREAMFORGE_AUDIT_ANCHOR_TIMEOUT``)."""
    return float(settings.AUDIT_ANCHOR_TIMEOUT)


def ensure_topic(conn: KafkaConnection, topic: str, *, timeout: float) -> None:
    """Create the anchor topic (one partition, delete policy, kept forever) unless it exists; raises
    KafkaException when the broker does not answer in ``timeout`` seconds."""
    admin = AdminClient(admin_config(conn, extra={"socket.timeout.ms": int(timeout * 1000)}))
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=-1, config=TOPIC_CONFIG)],
        request_timeout=timeout,
        operation_timeout=timeout,
    )[topic]
    try:
        future.result(timeout=timeout + 1)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def _producer(state: _KafkaState) -> Producer | None:
    """The process's anchor producer, once the topic exists; None while the broker cannot be reached."""
    if state.producer is not None:
        return state.producer
    if time.monotonic() < state.retry_at:
        return None
    conn = _connection()
    try:
        ensure_topic(conn, str(settings.AUDIT_ANCHOR_TOPIC), timeout=_timeout())
    except (KafkaException, TimeoutError) as exc:  # never let the anchor fail a committed mutation
        state.retry_at = time.monotonic() + RETRY_AFTER
        log.warning("audit anchor topic %s unavailable: %s", settings.AUDIT_ANCHOR_TOPIC, exc)
        return None
    state.producer = Producer(
        producer_config(
            conn,
            client_id="streamforge-audit-anchor",
            extra={"delivery.timeout.ms": DELIVERY_TIMEOUT_MS, "linger.ms": 5},
        )
    )
    atexit.register(state.producer.flush, 10)
    return state.producer


def _delivered(error: KafkaError | None, message: Message) -> None:
    if error is not None:
        log.warning("audit anchor record %r was not written to Kafka: %s", message.value(), error)


def publish(chain: str, points: list[Point]) -> None:
    """Append each (sequence, hash) to both anchors. Call after commit; never raises (see the module)."""
    if not points:
        return
    _publish_kafka(chain, points)
    _publish_redis(chain, points[-1])


def _publish_kafka(chain: str, points: list[Point]) -> None:
    state = _state()
    producer = _producer(state)
    if producer is None:
        log.warning("audit events #%s to #%s not anchored in Kafka", points[0][0], points[-1][0])
        return
    try:
        for sequence, event_hash in points:
            producer.produce(
                str(settings.AUDIT_ANCHOR_TOPIC),
                key=chain.encode(),
                value=json.dumps({"sequence": sequence, "hash": event_hash}).encode(),
                on_delivery=_delivered,
            )
            producer.poll(0)
    except (BufferError, KafkaException) as exc:
        log.warning("audit events from #%s not anchored in Kafka: %s", points[0][0], exc)


def _redis() -> redis.Redis:
    return redis_client.shared(settings.REDIS_URL, timeout=2)


def _publish_redis(chain: str, newest: Point) -> None:
    sequence, event_hash = newest
    key = _REDIS_PREFIX + chain
    try:
        with _redis().pipeline() as pipe:
            pipe.zadd(key, {f"{sequence}:{event_hash}": sequence})
            pipe.zremrangebyrank(key, 0, -6)  # the newest five are plenty
            pipe.execute()
    except redis.RedisError as exc:
        log.warning("could not anchor audit event #%s in Redis: %s", sequence, exc)


def read_redis(chain: str) -> Point | None:
    """The newest (sequence, hash) anchored in Redis, None when nothing was; AnchorUnavailable when Redis
    does not answer."""
    try:
        newest: list[bytes] = _redis().zrevrange(_REDIS_PREFIX + chain, 0, 0)  # type: ignore[assignment]
    except redis.RedisError as exc:
        raise AnchorUnavailable(f"the Redis anchor could not be read ({exc})") from exc
    if not newest:
        return None
    sequence, _, event_hash = newest[0].decode().partition(":")
    return int(sequence), event_hash


def read_kafka(chain: str) -> dict[int, str]:
    """Every (sequence -> hash) anchored in Kafka for ``chain``, read from the start of the topic; for a
    sequence anchored twice the first record counts (a later one cannot overwrite history). An empty dict when
    the topic does not exist. AnchorUnavailable when the broker does not answer, or stops sending records, for
    ``settings.AUDIT_ANCHOR_TIMEOUT`` seconds.

    First waits for this process's own pending anchor records, so a verify right after a mutation sees it."""
    timeout = _timeout()
    state = _state()
    if state.producer is not None:
        state.producer.flush(timeout)
    topic = str(settings.AUDIT_ANCHOR_TOPIC)
    consumer = Consumer(
        consumer_config(
            _connection(),
            group_id="streamforge-audit-verify",
            offset_reset="earliest",
            extra={"socket.timeout.ms": int(timeout * 1000)},
        )
    )
    try:
        return _read_all(consumer, topic, chain.encode(), timeout=timeout)
    except KafkaException as exc:
        raise AnchorUnavailable(f"the Kafka anchor {topic} could not be read ({exc.args[0]})") from exc
    finally:
        consumer.close()


def _read_all(consumer: Consumer, topic: str, chain: bytes, *, timeout: float) -> dict[int, str]:
    metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if metadata is None or (
        metadata.error is not None and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        return {}
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    ends: dict[int, int] = {}
    assignment = []
    for partition in metadata.partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        if high > low:
            ends[partition] = high
            assignment.append(TopicPartition(topic, partition, low))
    points: dict[int, str] = {}
    if not assignment:
        return points
    consumer.assign(assignment)
    # The whole topic may take a while to read; what is bounded is the wait for the next record.
    idle_until = time.monotonic() + timeout
    while ends:
        message = consumer.poll(1.0)
        if message is None:
            if time.monotonic() > idle_until:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "the anchor stopped sending records"))
            continue
        idle_until = time.monotonic() + timeout
        if message.error() is not None:
            raise KafkaException(message.error())
        partition, offset = message.partition(), message.offset()
        if message.key() == chain:
            point = json.loads(message.value() or b"{}")
            points.setdefault(int(point["sequence"]), str(point["hash"]))
        if partition is not None and offset is not None and offset + 1 >= ends.get(partition, 0):
            ends.pop(partition, None)
    return points
