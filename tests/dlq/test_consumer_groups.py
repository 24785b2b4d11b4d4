"""Consumer groups of the team's topics on the real test broker (issue #30, item 9): ``GET
/api/consumer-groups/`` lists every group with committed offsets on a topic of the pipelines the user may
see, with state, members, topics, total lag and per partition committed offset, end offset and lag; another
team's topics stay out, even of a group that reads both; a cluster that is not reached is named with the
reason while the others are still listed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from dlq import consumer_groups
from pipelines.services import create_pipeline
from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config
from tests.dlq.conftest import api_for, github_spec

pytestmark = [pytest.mark.kafka, pytest.mark.django_db]


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer(consumer_config(KafkaConnection(bootstrap), group_id=group))
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_the_consumer_groups_of_the_teams_topics_with_lag_per_partition(
    people, pipeline, pipeline_topics, kafka_admin, kafka_bootstrap, monkeypatch
):
    source = pipeline_topics[0]
    suffix = uuid.uuid4().hex[:8]
    others = create_pipeline(
        actor=people["admin"],
        name=f"payments-{suffix}",
        team=people["foreign"].memberships.get().team,
        spec=github_spec(f"payments.events-{suffix}", f"p{suffix}"),
    )
    foreign_topic = others.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(foreign_topic, 1, 1)])[foreign_topic].result(timeout=30)
    try:
        producer = Producer(producer_config(KafkaConnection(kafka_bootstrap)))
        for _n in range(5):
            producer.produce(source, value=b"{}")
            producer.produce(foreign_topic, value=b"{}")
        assert producer.flush(10) == 0
        mine, both, foreign = f"audit-{suffix}", f"mirror-{suffix}", f"billing-{suffix}"
        _commit(kafka_bootstrap, mine, [TopicPartition(source, 0, 2)])
        _commit(kafka_bootstrap, both, [TopicPartition(source, 0, 5), TopicPartition(foreign_topic, 0, 1)])
        _commit(kafka_bootstrap, foreign, [TopicPartition(foreign_topic, 0, 4)])

        answer = api_for(people["viewer"]).get("/api/consumer-groups/")
        assert answer.status_code == 200
        body = answer.json()
        assert body["cluster_errors"] == []
        groups = {g["group"]: g for g in body["groups"]}
        assert foreign not in groups  # another team's topic only
        assert groups[mine] == {
            "cluster": "default",
            "group": mine,
            "state": "empty",
            "members": 0,
            "topics": [source],
            "lag": 3,
            "partitions": [{"topic": source, "partition": 0, "committed": 2, "end": 5, "lag": 3}],
        }
        assert groups[both]["topics"] == [source]  # its other team's partition is not shown
        assert groups[both]["lag"] == 0
        assert (body["count"], body["page"], body["pages"]) == (len(groups), 1, 1)
        foreigner = {
            g["group"] for g in api_for(people["foreign"]).get("/api/consumer-groups/").json()["groups"]
        }
        assert {foreign, both} <= foreigner
        assert mine not in foreigner
        assert api_for(people["viewer"]).get("/api/consumer-groups/", {"page": "x"}).status_code == 400

        # A cluster that is not reached: named with the reason, within the bound.
        monkeypatch.setattr(consumer_groups, "connection_for", lambda cluster: KafkaConnection("127.0.0.1:9"))
        unreached = consumer_groups.team_consumer_groups(people["viewer"], timeout=2)
        assert unreached.groups == []
        [problem] = unreached.errors
        assert problem.cluster == "default"
        assert problem.error.startswith("not reached within 2 s")
    finally:
        kafka_admin.delete_topics([foreign_topic])[foreign_topic].result(timeout=30)
