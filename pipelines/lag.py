"""Consumer-group lag as Kafka itself sees it: each partition's committed offset against its earliest and
latest offsets, read with the admin API (what kafka-consumer-groups, Burrow or a lag exporter show)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipelines.clusters import default_kafka
from streamforge_core.kafka import KafkaConnection, admin_config


@dataclass(frozen=True)
class GroupLag:
    """One partition as the pipeline's Kafka consumer group stands on it: the committed offset (None when
    the group has committed nothing there), the partition's earliest and latest offsets, and the lag
    (``latest - committed``; ``latest - earliest`` without a commit)."""

    topic: str
    partition: int
    committed: int | None
    earliest: int
    latest: int
    lag: int


def consumer_group_lag(
    *, group: str, topics: list[str], kafka: KafkaConnection | None = None, timeout: float = 10.0
) -> list[GroupLag]:
    """The consumer group's lag per partition of ``topics`` on ``kafka``'s cluster (default: the
    installation's), from Kafka (what kafka-consumer-groups, Burrow or a lag exporter would show). Missing
    topics are left out. Raises KafkaException when the broker does not answer within ``timeout`` seconds."""
    admin = AdminClient(admin_config(kafka or default_kafka()))
    metadata = admin.list_topics(timeout=timeout)
    partitions = [
        TopicPartition(topic, partition)
        for topic in topics
        if topic in metadata.topics
        for partition in sorted(metadata.topics[topic].partitions)
    ]
    if not partitions:
        return []
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    result = admin.list_consumer_group_offsets(request, request_timeout=timeout)[group].result(timeout)
    committed = {
        (tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in result.topic_partitions
    }

    def offsets(spec: OffsetSpec) -> dict[tuple[str, int], int]:
        futures = admin.list_offsets(dict.fromkeys(partitions, spec), request_timeout=timeout)
        return {(tp.topic, tp.partition): int(f.result(timeout).offset) for tp, f in futures.items()}

    latest = offsets(OffsetSpec.latest())  # type: ignore[no-untyped-call]
    earliest = offsets(OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    lags: list[GroupLag] = []
    for tp in partitions:
        key = (tp.topic, tp.partition)
        done = committed.get(key)
        lags.append(
            GroupLag(
                topic=tp.topic,
                partition=tp.partition,
                committed=done,
                earliest=earliest[key],
                latest=latest[key],
                lag=latest[key] - (done if done is not None else earliest[key]),
            )
        )
    return lags
