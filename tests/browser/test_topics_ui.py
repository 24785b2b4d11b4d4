"""The test message page in a real browser: an operator produces a test message and sees its outcome at every
destination appear within seconds.

No Spark driver runs here (one takes about 30 s to start on the test machine): the test plays the pipeline's
part itself, as the driver would, by producing the pushes destination's record with the lineage header
(``x-streamforge-source: topic/partition/offset``) and committing the pipeline's consumer group past the
source record (the pull-requests filter drops a PushEvent, so nothing is written there).
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from playwright.sync_api import expect

from access.models import AuditEvent, Role
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]


@pytest.fixture
def people():
    team = TeamFactory(name="data-platform")
    return {
        "team": team,
        "operator": member(team, Role.OPERATOR, username="olga"),
        "admin": member(team, Role.ADMIN, username="ada"),
    }


@pytest.fixture
def pipeline(people, kafka_admin):
    """A GitHub-events pipeline whose source, destination and DLQ topics exist on the test broker."""
    suffix = uuid.uuid4().hex[:8]
    made = create_pipeline(
        actor=people["admin"],
        name=f"github-{suffix}",
        team=people["team"],
        spec=github_spec(f"github.events-{suffix}", suffix),
    )
    spec = made.current_revision.spec
    topics = [spec["source"]["topics"][0], *(d["topic"] for d in spec["destinations"]), spec["dlq"]["topic"]]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    yield made
    for future in kafka_admin.delete_topics(topics).values():
        future.result(timeout=30)


def test_an_operator_sees_a_test_messages_outcome_per_destination_within_seconds(
    open_page, people, pipeline, kafka_bootstrap
):
    spec = pipeline.current_revision.spec
    source, pushes = spec["source"]["topics"][0], spec["destinations"][0]["topic"]
    page = open_page(people["operator"])
    page.goto(f"/pipelines/{pipeline.name}/test-message/")
    push = {"type": "PushEvent", "actor": {"login": "octocat"}, "payload": {"size": 2}}
    page.fill("textarea[name=value]", json.dumps(push))
    page.fill("input[name=reason]", "does the pushes transform keep the size?")
    page.get_by_test_id("produce").click()

    expect(page.get_by_test_id("record-outcomes")).to_be_visible()
    rows = page.get_by_test_id("outcome")
    expect(rows.nth(0)).to_have_attribute("data-outcome", "pending")
    assert AuditEvent.objects.filter(action="topic.test_message", target_id=pipeline.name).count() == 1

    # The pipeline's part (see the module docstring): pushes gets the record, pull-requests filters it.
    conn = KafkaConnection(kafka_bootstrap)
    producer = Producer(producer_config(conn))
    producer.produce(
        pushes, value=b'{"actor":"octocat","size":2}', headers=[(c.H_LINEAGE, f"{source}/0/0".encode())]
    )
    assert producer.flush(10) == 0
    group = Consumer(consumer_config(conn, group_id=f"streamforge-{pipeline.name}"))
    group.commit(offsets=[TopicPartition(source, 0, 1)], asynchronous=False)
    group.close()

    expect(page.locator("[data-destination=pushes]")).to_have_attribute(
        "data-outcome", "produced", timeout=5_000
    )
    expect(page.locator("[data-destination=pull-requests]")).to_have_attribute(
        "data-outcome", "filtered", timeout=5_000
    )
    expect(page.get_by_test_id("record-outcomes")).to_have_attribute("data-done", "true")
    page.get_by_test_id("produced-link").click()
    expect(page.get_by_test_id("lineage-link")).to_have_text(f"{source}/0/0")
