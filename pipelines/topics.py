"""Creating the topics a pipeline writes, before its driver starts (the broker does not auto-create topics).

The DLQ topic is sized to hold any record the source may hold: a record dead-lettered as ``RecordTooLarge``
keeps its original bytes, so the DLQ's ``max.message.bytes`` must be at least the source's plus room for the
``x-streamforge-*`` headers. Existing topics are left as they are (their owners may have tuned them), except
that a DLQ too small for the source is reported, because writing to it would halt the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from pipelines.spec import PipelineSpec

#: Room for the DLQ headers (error text, coordinates, pipeline, expressions) on top of the original record.
DLQ_HEADER_ROOM = 64 * 1024


@dataclass(frozen=True)
class TopicPlan:
    """What ``ensure_topics`` did: topics it created, topics already there, and problems to show."""

    created: list[str]
    existing: list[str]
    problems: list[str]


def _max_message_bytes(admin: AdminClient, topics: list[str]) -> dict[str, int]:
    if not topics:
        return {}
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    return {res.name: int(f.result(timeout=15)["max.message.bytes"].value) for res, f in futures.items()}


def ensure_topics(
    admin: AdminClient, spec: PipelineSpec, *, partitions: int = 1, replication_factor: int = 1
) -> TopicPlan:
    """Create missing destination and DLQ topics; never touches source topics (they belong to producers).

    ``partitions`` defaults to the source topics' largest partition count when they exist. Raises
    KafkaException when the broker refuses a creation for any reason other than "already exists".
    """
    metadata = admin.list_topics(timeout=15)
    sources = [t for t in spec.source.topics if t in metadata.topics]
    if sources:
        partitions = max(partitions, *(len(metadata.topics[t].partitions) for t in sources))
    source_limit = max(_max_message_bytes(admin, sources).values(), default=spec.source.max_record_bytes)
    dlq_limit = max(source_limit, spec.source.max_record_bytes) + DLQ_HEADER_ROOM

    wanted: dict[str, dict[str, str]] = {}
    for dest in spec.destinations:
        wanted.setdefault(dest.topic, {})
    wanted[spec.dlq.topic] = {"max.message.bytes": str(dlq_limit), "retention.ms": str(14 * 24 * 3600 * 1000)}

    existing = [t for t in wanted if t in metadata.topics]
    missing = [t for t in wanted if t not in metadata.topics]
    created: list[str] = []
    if missing:
        futures = admin.create_topics(
            [NewTopic(t, partitions, replication_factor, config=wanted[t]) for t in missing],
            operation_timeout=30,
        )
        for topic, future in futures.items():
            try:
                future.result(timeout=30)
                created.append(topic)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                existing.append(topic)
    problems: list[str] = []
    if spec.dlq.topic in existing:
        actual = _max_message_bytes(admin, [spec.dlq.topic])[spec.dlq.topic]
        if actual < source_limit + DLQ_HEADER_ROOM // 2:
            problems.append(
                f"DLQ topic {spec.dlq.topic} accepts records up to {actual} bytes but the source may hold "
                f"{source_limit}: an oversized record could not be dead-lettered and would halt the pipeline"
            )
    return TopicPlan(created=created, existing=existing, problems=problems)
