"""The DLQ console's Kafka I/O: one idempotent producer per process and cluster, producing records and
waiting for the broker's answer to each, and finding replay ids on a topic (how ``resolve_in_doubt`` learns
whether a replay whose process died had landed). A dead letter is replayed on the cluster it was read from
(``DeadLetter.cluster``; None: the installation's default)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from django.conf import settings
from django.core.cache import cache

from pipelines.clusters import connection_for
from pipelines.models import KafkaCluster
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, admin_config, consumer_config, producer_config


@dataclass
class OutgoingRecord:
    """One record to produce on the cluster ``cluster_id`` (None: the default) and, once the broker answered
    (``done``), where it landed (``partition``, ``offset``) or why not (``error``, empty on success).
    ``produce`` fills in the answer."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    cluster_id: int | None = None
    partition: int | None = None
    offset: int | None = None
    error: str = ""
    done: bool = False


_producer_lock = threading.Lock()
_producer_state: dict[str, Any] = {}
_producers: dict[KafkaConnection, Producer] = {}


def connection_of(cluster_id: int | None) -> KafkaConnection:
    """The connection to the cluster ``cluster_id`` (None: the default). Raises KafkaCluster.DoesNotExist,
    or ValueError when its password cannot be read."""
    return connection_for(KafkaCluster.objects.get(pk=cluster_id) if cluster_id is not None else None)


def producer(conn: KafkaConnection) -> Producer:
    """One idempotent producer per process and connection (re-created after a fork; one per cluster, and a
    new one when a connection changes, e.g. a rotated password read from its file). acks=all and idempotence make the
    broker drop the duplicates its own retries would create; ``delivery.timeout.ms`` bounds how long a
    record may still land after ``produce``, which is what lets ``resolve_in_doubt`` decide. A replaced
    producer stays alive while a caller still holds it, so its records are still answered."""
    with _producer_lock:
        if _producer_state.get("pid") != os.getpid():
            _producers.clear()
            _producer_state["pid"] = os.getpid()
        # A cluster's earlier producer (before a rotation) is dropped from the cache; callers holding it keep it.
        for stale in [known for known in _producers if known.bootstrap_servers == conn.bootstrap_servers]:
            if stale != conn:
                del _producers[stale]
        if conn not in _producers:
            _producers[conn] = Producer(
                producer_config(
                    conn,
                    client_id=f"streamforge-replay-{socket.gethostname()}-{os.getpid()}",
                    extra={
                        "linger.ms": 5,
                        "delivery.timeout.ms": settings.DLQ_PRODUCE_TIMEOUT_SECONDS * 1000,
                    },
                )
            )
        return _producers[conn]


def produce(records: Sequence[OutgoingRecord]) -> None:
    """Produce every record on its cluster and wait until the broker answered each, or the delivery timeout
    (``STREAMFORGE_DLQ_PRODUCE_TIMEOUT_SECONDS``) passed; fills in each record's answer. Never raises for
    a record the broker refused, nor for a cluster that cannot be connected to: its ``error`` says why."""
    send(records).wait()


@dataclass
class Sending:
    """Records handed to their clusters' producers whose answers may still be on the way (``send``)."""

    records: Sequence[OutgoingRecord]
    producers: list[Producer]
    deadline: float

    def wait(self) -> None:
        """Serve the producers' callbacks until every record is answered or the delivery timeout (plus 5 s)
        passed since sending; a record still unanswered then gets an error saying so."""
        while not all(o.done for o in self.records) and time.monotonic() < self.deadline:
            for kafka in self.producers:
                kafka.poll(0.05 if len(self.producers) == 1 else 0.01)
        for out in self.records:
            if not out.done:
                out.error = out.error or "no acknowledgement from the broker before the delivery timeout"


def send(records: Sequence[OutgoingRecord]) -> Sending:
    """Hand every record to its cluster's producer without waiting for the broker: the caller does other
    work (a bulk replay claims its next chunk) and then calls ``wait``. Errors as ``produce``."""
    by_cluster: dict[int | None, list[OutgoingRecord]] = {}
    for out in records:
        by_cluster.setdefault(out.cluster_id, []).append(out)
    used = []
    for cluster_id, outs in by_cluster.items():
        try:
            conn = connection_of(cluster_id)
        except (KafkaCluster.DoesNotExist, ValueError) as exc:
            for out in outs:
                out.error, out.done = f"the Kafka cluster cannot be used: {exc}", True
            continue
        kafka = producer(conn)
        _send_on(kafka, outs)
        used.append(kafka)
    return Sending(records, used, time.monotonic() + settings.DLQ_PRODUCE_TIMEOUT_SECONDS + 5)


def _send_on(kafka: Producer, records: Sequence[OutgoingRecord]) -> None:

    def callback(out: OutgoingRecord) -> Callable[[KafkaError | None, Any], None]:
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                out.error = str(err)
            else:
                out.partition, out.offset = msg.partition(), msg.offset()
            out.done = True

        return report

    for out in records:
        while True:
            try:
                kafka.produce(
                    out.topic,
                    value=out.value,
                    key=out.key,
                    headers=list(out.headers),
                    on_delivery=callback(out),
                )
                break
            except BufferError:  # local queue full: serve callbacks, then try again
                kafka.poll(0.1)
            except KafkaException as exc:
                out.error, out.done = str(exc), True
                break
    kafka.poll(0)  # serve what is already answered


def find_replay_ids(
    topic: str, wanted: Mapping[str, tuple[str, bytes | None]], since_ms: int, cluster_id: int | None = None
) -> dict[str, tuple[int, int]]:
    """Read ``topic`` of the cluster ``cluster_id`` (None: the default) from ``since_ms`` (epoch
    milliseconds) to its current end and return, for each replay id of ``wanted`` found in an
    ``x-streamforge-replay-id`` header, the (partition, offset) of its record. Stops early once all are
    found, or after 60 seconds; a missing topic finds nothing. Raises ValueError when the cluster's password
    cannot be read.

    ``wanted`` maps each replay id to what the console sent with it: the ``x-streamforge-replay-of``
    coordinates and the value. A record whose id matches but whose replay-of header or value does not is
    not the replay: anyone who writes to the topic can write the id header (replay ids are shown on the
    message page), and a forged one must not settle a replay as produced."""
    consumer = Consumer(
        consumer_config(connection_of(cluster_id), group_id=f"streamforge-resolve-{uuid.uuid4()}")
    )
    found: dict[str, tuple[int, int]] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return found
        partitions = [TopicPartition(topic, p, since_ms) for p in metadata.partitions]
        starts = consumer.offsets_for_times(partitions, timeout=10)
        ends: dict[int, int] = {}
        assign = []
        for tp in starts:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if tp.offset < 0 or tp.offset >= high:  # nothing at or after the time
                continue
            ends[tp.partition] = high
            assign.append(TopicPartition(topic, tp.partition, tp.offset))
        if not assign:
            return found
        consumer.assign(assign)
        remaining = set(ends)
        deadline = time.monotonic() + 60
        while remaining and time.monotonic() < deadline and len(found) < len(wanted):
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                if msg.error() is not None:
                    continue
                record = Record.from_message(msg)
                replay_id = _sent_replay(record, wanted)
                if replay_id is not None and replay_id not in found:
                    found[replay_id] = (record.partition, record.offset)
                if record.offset + 1 >= ends.get(record.partition, 0):
                    remaining.discard(record.partition)
    finally:
        consumer.close()
    return found


def _sent_replay(record: Record, wanted: Mapping[str, tuple[str, bytes | None]]) -> str | None:
    """The replay id of ``wanted`` that ``record`` is (its id header, with the replay-of header and the value
    the console sent with that id; the last of a repeated header), else None."""
    last = dict(record.headers)
    replay_id = (last.get(c.H_REPLAY_ID) or b"").decode("utf-8", "replace")
    sent = wanted.get(replay_id)
    replay_of = (last.get(c.H_REPLAY_OF) or b"").decode("utf-8", "replace")
    return replay_id if sent is not None and (replay_of, record.value) == sent else None


#: How long a topic's ``retention.ms`` is remembered (seconds): it changes rarely, and the message page
#: must not wait on the broker every time it is shown.
RETENTION_CACHE_SECONDS = 300


def topic_retention_ms(topic: str, cluster_id: int | None) -> int | None:
    """The DLQ topic's ``retention.ms`` as the broker reports it (Kafka topic config; -1 means kept
    forever), cached for ``RETENTION_CACHE_SECONDS``; None when the broker does not answer within 2 s (the
    page then says so without a figure; that answer is cached for a minute, so a broker outage costs a page
    2 s once, not on every view)."""
    key = f"dlq:retention-ms:{cluster_id or 0}:{topic}"
    cached = cache.get(key)
    if cached is not None:
        return None if cached == _UNKNOWN else int(cached)
    try:
        admin = AdminClient(admin_config(connection_of(cluster_id)))
        futures = admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, topic)], request_timeout=2
        )
        value = int(next(iter(futures.values())).result(timeout=2)["retention.ms"].value)
    except Exception:  # the broker is away or the topic is gone: the figure is left out, nothing fails
        cache.set(key, _UNKNOWN, 60)
        return None
    cache.set(key, value, RETENTION_CACHE_SECONDS)
    return value


_UNKNOWN = "unknown"


def retention_text(retention_ms: int | None) -> str:
    """How long Kafka keeps a record, for people: "at least 7 days (retention.ms = 604800000)", "forever
    (retention.ms = -1)", or a plain "until the topic's retention removes it" when unknown. A record goes
    no earlier than ``retention.ms`` after its timestamp, once its log segment is closed (Kafka's topic
    config ``retention.ms``)."""
    if retention_ms is None:
        return "until the topic's retention removes it"
    if retention_ms < 0:
        return "forever (retention.ms = -1)"
    hours = retention_ms / 3_600_000
    if hours >= 48 and hours % 24 == 0:
        amount = f"{int(hours // 24)} days"
    elif hours >= 1:
        amount = f"{hours:g} hours"
    else:
        amount = f"{retention_ms / 60_000:g} minutes"
    return f"at least {amount} (retention.ms = {retention_ms})"


#: How long a topic's ``max.message.bytes`` (or that it is forbidden or unknown) is cached (seconds).
LIMITS_CACHE_SECONDS = 60


#: ``TopicLimit.problem`` values: the names Kafka gives the errors a produce there ends with.
TOPIC_FORBIDDEN = "TopicAuthorizationFailed"
UNKNOWN_TOPIC = "UnknownTopicOrPartition"


@dataclass(frozen=True)
class TopicLimit:
    """What the broker says of a topic a record would be produced to: its ``max.message.bytes`` (None when
    not known: the broker did not answer, or the topic does not exist and the broker would create it on
    first write), and ``problem``, non-empty when producing there fails whatever the record:
    ``TopicAuthorizationFailed`` (the console's principal may not describe or write it) or
    ``UnknownTopicOrPartition`` (the topic does not exist and the broker's ``auto.create.topics.enable`` is
    false: a producer's record then waits for the topic until its delivery timeout and fails)."""

    max_message_bytes: int | None
    problem: str = ""

    def problem_text(self, topic: str) -> str:
        """``problem`` in words, naming ``topic`` (empty when there is none)."""
        if self.problem == TOPIC_FORBIDDEN:
            return f"the console may not write to topic {topic}"
        if self.problem == UNKNOWN_TOPIC:
            return f"topic {topic} does not exist (and the broker does not create topics on first write)"
        return self.problem


def _broker_auto_creates(admin: AdminClient) -> bool | None:
    """The broker's ``auto.create.topics.enable`` (Kafka broker config; one broker asked, 2 s bound), or
    None when it does not say. Our producers keep librdkafka's producer default
    ``allow.auto.create.topics=true``, so a record to a missing topic creates it exactly when this is true."""
    try:
        brokers = admin.list_topics(timeout=2).brokers
        broker = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
        (future,) = admin.describe_configs([broker], request_timeout=2).values()
        return str(future.result(timeout=2)["auto.create.topics.enable"].value).lower() == "true"
    except Exception:  # not answered, or not allowed to describe the broker: unknown
        return None


def topic_limits(topics: Sequence[str], cluster_id: int | None) -> dict[str, TopicLimit]:
    """Each topic's ``TopicLimit`` on cluster ``cluster_id`` (Kafka topic config ``max.message.bytes``: the
    largest record batch the broker accepts, ``RecordTooLarge`` above it), read with one DescribeConfigs
    request bounded to 2 s and cached for ``LIMITS_CACHE_SECONDS`` per topic; a topic the broker does not
    know is ``UnknownTopicOrPartition`` unless the broker creates topics on first write
    (``_broker_auto_creates``, asked only then). Never raises: an unanswered topic is ``TopicLimit(None)``."""
    found: dict[str, TopicLimit] = {}
    wanted = []
    for topic in dict.fromkeys(topics):
        cached = cache.get(f"dlq:topic-limit:{cluster_id or 0}:{topic}")
        if cached is not None:
            found[topic] = TopicLimit(*cached)
        else:
            wanted.append(topic)
    if not wanted:
        return found
    try:
        admin = AdminClient(admin_config(connection_of(cluster_id)))
        futures = admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, t) for t in wanted], request_timeout=2
        )
    except Exception:  # no admin client: nothing is known, nothing is claimed
        return {**found, **{t: TopicLimit(None) for t in wanted}}
    auto_creates: list[bool | None] = []  # asked once, for the first missing topic
    for resource, future in futures.items():
        try:
            limit = TopicLimit(int(future.result(timeout=2)["max.message.bytes"].value))
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
            limit = TopicLimit(None)
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                limit = TopicLimit(None, TOPIC_FORBIDDEN)
            elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                if not auto_creates:
                    auto_creates.append(_broker_auto_creates(admin))
                if auto_creates[0] is False:
                    limit = TopicLimit(None, UNKNOWN_TOPIC)
        except Exception:  # a timeout: unknown
            limit = TopicLimit(None)
        found[resource.name] = limit
        cache.set(
            f"dlq:topic-limit:{cluster_id or 0}:{resource.name}",
            (limit.max_message_bytes, limit.problem),
            LIMITS_CACHE_SECONDS,
        )
    return found
