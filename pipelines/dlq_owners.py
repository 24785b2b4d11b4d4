"""One owner per DLQ topic (of a cluster: topic names are a cluster's own). The DLQ ingest gives every record of a DLQ topic to the topic's owner (its team
sees the payloads, may replay and delete them), so two owners of one topic would see, and act on, each
other's dead letters. A DLQ topic therefore belongs to one pipeline (its spec's ``dlq.topic``) or to one
registered extra topic, never to two.

Apps that register extra DLQ topics (the DLQ console) add a lookup here in their ``AppConfig.ready()``, so a
pipeline's DLQ topic is checked against them without the pipelines app importing them.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection

from pipelines.models import KafkaCluster, Pipeline

#: Given a topic and its cluster (None: the default), who else reads it as a DLQ (e.g. "the extra DLQ topic
#: registered for team ops"), or None.
DlqTopicClaim = Callable[[str, KafkaCluster | None], str | None]

_claims: list[DlqTopicClaim] = []

# Any fixed 64-bit key: all claimers of DLQ topics take this PostgreSQL advisory lock.
_LOCK_KEY = 0x5F_D1_0E_70


def register_dlq_topic_claim(claim: DlqTopicClaim) -> None:
    """Add a lookup of other DLQ topic owners (once: registering the same lookup again does nothing)."""
    if claim not in _claims:
        _claims.append(claim)


def serialise_claims() -> None:
    """Make the caller's transaction the only one claiming a DLQ topic until it ends, so two concurrent
    claims of one topic cannot both see it free. PostgreSQL: a transaction-level advisory lock; SQLite
    serialises writing transactions already."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def pipeline_using_dlq_topic(
    topic: str, *, cluster: KafkaCluster | None, except_pipeline: Pipeline | None = None
) -> Pipeline | None:
    """The pipeline (of any team) on ``cluster`` whose current revision writes its dead letters to ``topic``,
    if any."""
    others = Pipeline.objects.filter(current_revision__spec__dlq__topic=topic, cluster=cluster)
    if except_pipeline is not None:
        others = others.exclude(pk=except_pipeline.pk)
    return others.order_by("pk").first()


def dlq_topic_taken(
    topic: str, *, cluster: KafkaCluster | None, pipeline: Pipeline | None = None
) -> str | None:
    """Why ``topic`` on ``cluster`` cannot be the DLQ topic of ``pipeline`` (None for a new pipeline): the
    other owner, named whatever its team, or None when the topic is free. Call inside ``serialise_claims``."""
    other = pipeline_using_dlq_topic(topic, cluster=cluster, except_pipeline=pipeline)
    if other is not None:
        return f"{topic} is already the DLQ topic of pipeline {other.name}; each pipeline needs its own"
    for claim in _claims:
        owner = claim(topic, cluster)
        if owner is not None:
            return f"{topic} is already {owner}; each pipeline needs its own DLQ topic"
    return None
