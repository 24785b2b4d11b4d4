"""Consumer groups of the team's topics (issue #30, item 9): every consumer group that has committed offsets on
a topic of a pipeline the user may see (its sources, destinations and DLQ topic), with its state, members,
the topics it reads, its total lag and per partition the committed offset, the end offset and the lag.

Per cluster one batch of broker requests (``topic_browser.groups_reading``: metadata and watermarks of the
pipelines' topics, one ListGroups, one OffsetFetch per group sent together, one DescribeGroups), each
bounded to ``TIMEOUT`` seconds; a cluster that does not answer is reported with the reason, the others are
still listed. Only the partitions of visible pipelines' topics are shown, so a group that also reads
another team's topics shows nothing of those. Listed ``PAGE_SIZE`` groups at a time, by cluster and name.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from access.permissions import AnyUser
from dlq import topic_browser
from pipelines.clusters import connection_for
from pipelines.models import KafkaCluster
from pipelines.selectors import visible_pipelines
from pipelines.spec import SpecError

#: Groups per page, and seconds each broker request may take.
PAGE_SIZE = 50
TIMEOUT = 5.0


@dataclass(frozen=True)
class GroupPartition:
    """A group's position on one partition: ``committed`` (None: nothing committed there), ``end`` (the
    high watermark) and ``lag`` (``end - committed``; ``end - low`` without a commit)."""

    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int


@dataclass(frozen=True)
class ConsumerGroup:
    """One consumer group on one cluster, as far as the user's topics go: ``state`` as the broker reports
    it, ``members`` (None: not known), the ``topics`` it committed on, the total ``lag`` over them and the
    per-partition ``partitions``."""

    cluster: str
    group: str
    state: str
    members: int | None
    topics: list[str]
    lag: int
    partitions: list[GroupPartition]


@dataclass(frozen=True)
class ClusterProblem:
    """A cluster whose groups could not be read: its name and why (not reached, not verified...)."""

    cluster: str
    error: str


@dataclass(frozen=True)
class ConsumerGroupsPage:
    """One page of ``team_consumer_groups``: the ``groups`` (``page`` of ``pages``, ``count`` in all) and
    the ``errors`` of clusters that did not answer."""

    groups: list[ConsumerGroup]
    errors: list[ClusterProblem]
    count: int
    page: int
    pages: int


def _topics_per_cluster(user: AnyUser) -> dict[int | None, tuple[KafkaCluster | None, set[str]]]:
    """The topics of the pipelines ``user`` may see, by cluster (None: the installation's default)."""
    clusters: dict[int | None, tuple[KafkaCluster | None, set[str]]] = {}
    for pipeline in visible_pipelines(user).select_related("cluster", "current_revision"):
        if pipeline.current_revision is None:
            continue
        try:
            topics = topic_browser.owned_topics(topic_browser.spec_of(pipeline))
        except SpecError:
            continue
        clusters.setdefault(pipeline.cluster_id, (pipeline.cluster, set()))[1].update(topics)
    return clusters


def _read_cluster(cluster: KafkaCluster | None, topics: set[str], timeout: float) -> list[ConsumerGroup]:
    """The groups with commits on ``topics`` of one cluster. Raises KafkaException, ValueError (a cluster
    the product may not connect to: ``pipelines.clusters.connection_for``)."""
    name = cluster.name if cluster is not None else "default"
    conn = connection_for(cluster)
    consumer = topic_browser._browse_consumer(conn)
    try:
        metadata = consumer.list_topics(timeout=timeout).topics  # one request for every topic's partitions
        watermarks = {}
        for topic in sorted(topics):
            if topic in metadata and metadata[topic].error is None:
                watermarks[topic] = topic_browser._read_watermarks(consumer, topic, timeout) or {}
    finally:
        consumer.close()
    readings = topic_browser.groups_reading(conn, watermarks, timeout=timeout, members=True)
    return [
        ConsumerGroup(
            cluster=name,
            group=g.group,
            state=g.state,
            members=g.members,
            topics=sorted(g.topics),
            lag=g.lag,
            partitions=[
                GroupPartition(topic, o.partition, o.committed, o.end, o.lag)
                for topic, offsets in sorted(g.topics.items())
                for o in offsets
            ],
        )
        for g in readings
    ]


def team_consumer_groups(
    user: AnyUser, *, page: int = 1, page_size: int = PAGE_SIZE, timeout: float = TIMEOUT
) -> ConsumerGroupsPage:
    """Page ``page`` (from 1; past the last: the last) of the consumer groups with committed offsets on a
    topic of a pipeline ``user`` may see, by cluster then group name, and the clusters that could not be
    read with the reason. Never raises for a cluster: its problem is in ``errors``."""
    groups: list[ConsumerGroup] = []
    errors: list[ClusterProblem] = []
    for cluster, topics in _topics_per_cluster(user).values():
        name = cluster.name if cluster is not None else "default"
        try:
            groups.extend(_read_cluster(cluster, topics, timeout))
        except (KafkaException, TimeoutError) as exc:
            reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else "no answer"
            errors.append(ClusterProblem(name, f"not reached within {timeout:g} s ({reason})"))
        except ValueError as exc:  # not verified, a credential not readable
            errors.append(ClusterProblem(name, str(exc)))
    groups.sort(key=lambda g: (g.cluster, g.group))
    pages = max(1, -(-len(groups) // page_size))
    page = min(max(page, 1), pages)
    return ConsumerGroupsPage(
        groups=groups[(page - 1) * page_size : page * page_size],
        errors=sorted(errors, key=lambda e: e.cluster),
        count=len(groups),
        page=page,
        pages=pages,
    )
