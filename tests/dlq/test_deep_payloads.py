"""Security review #28, finding 5 (no 500 from shape): a dead letter whose payload nests 3,000 levels deep
(valid JSON, 18 KB) made the message API and page, the topic page and exports fail with RecursionError.
Such a payload is "too deep to display" everywhere, its raw bytes still there for those who may see them,
and withheld from a masked viewer (its masked paths cannot be checked without decoding it)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.test import Client

from streamforge_core.kafka import KafkaConnection, producer_config
from tests.dlq.conftest import api_for

pytestmark = pytest.mark.django_db

#: Valid JSON, 3,000 objects deep: what the review parked.
DEEP = b'{"a":' * 3000 + b"1" + b"}" * 3000


def page_for(user) -> Client:
    client = Client()
    client.force_login(type(user).objects.get(pk=user.pk))
    return client


@pytest.fixture
def deep_letter(pipeline, park):
    return park(pipeline, [(b"k-deep", DEEP, "TransformEvaluation", "maximum recursion depth exceeded")])[0]


def test_the_message_api_shows_a_3000_deep_payload_as_too_deep_with_its_raw_bytes(people, deep_letter):
    response = api_for(people["operator"]).get(f"/api/dlq/messages/{deep_letter.pk}/")

    assert response.status_code == 200, response.content[:300]
    value = response.json()["value"]
    assert value["encoding"] == "too_deep"
    assert value["text"] == DEEP.decode()
    assert value["size"] == len(DEEP)
    listed = api_for(people["operator"]).get("/api/dlq/messages/")
    assert listed.status_code == 200


def test_a_masked_viewer_gets_a_3000_deep_payload_withheld_not_a_500(people, deep_letter, settings):
    settings.DLQ_MASKED_PATHS = ["/a/a"]

    response = api_for(people["viewer"]).get(f"/api/dlq/messages/{deep_letter.pk}/")

    assert response.status_code == 200, response.content[:300]
    assert response.json()["value"]["encoding"] == "withheld"
    page = page_for(people["viewer"]).get(f"/dlq/messages/{deep_letter.pk}/")
    assert page.status_code == 200
    assert '{"a":{"a"' not in page.content.decode()


def test_the_message_page_says_too_deep_to_display_and_keeps_the_raw_tab(people, deep_letter):
    response = page_for(people["operator"]).get(f"/dlq/messages/{deep_letter.pk}/")

    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="value-too-deep"' in page
    assert "too deep to display" in page
    assert "{&quot;a&quot;:" * 100 in page  # the raw tab: the bytes as stored (HTML-escaped)
    assert page_for(people["operator"]).get("/dlq/").status_code == 200


def test_exports_carry_a_3000_deep_payload_raw_as_too_deep(people, deep_letter):
    client = api_for(people["operator"])

    as_csv = client.get("/api/dlq/messages/export/?as=csv")
    as_json = client.get("/api/dlq/messages/export/?as=json")

    assert as_csv.status_code == 200
    assert as_json.status_code == 200
    csv.field_size_limit(10**6)
    (row,) = list(csv.DictReader(io.StringIO(b"".join(as_csv.streaming_content).decode())))
    assert (row["value"], row["value_encoding"]) == (DEEP.decode(), "too_deep")
    (line,) = b"".join(as_json.streaming_content).decode().splitlines()
    assert (json.loads(line)["value"], json.loads(line)["value_encoding"]) == (DEEP.decode(), "too_deep")


@pytest.fixture
def source_topic(pipeline, kafka_admin: AdminClient) -> Iterator[str]:
    topic = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    yield topic
    kafka_admin.delete_topics([topic])[topic].result(timeout=30)


@pytest.mark.kafka
def test_the_topic_page_and_api_show_a_3000_deep_record_as_too_deep(
    people, pipeline, source_topic, kafka_bootstrap
):
    producer = Producer(producer_config(KafkaConnection(kafka_bootstrap)))
    producer.produce(source_topic, key=b"k", value=DEEP)
    assert producer.flush(30) == 0

    api = api_for(people["operator"]).get(f"/api/pipelines/{pipeline.name}/topics/{source_topic}/messages/")
    page = page_for(people["operator"]).get(f"/pipelines/{pipeline.name}/topics/{source_topic}/")

    assert api.status_code == 200, api.content[:300]
    (record,) = api.json()["records"]
    assert record["value"]["encoding"] == "too_deep"
    assert record["value"]["raw"] == DEEP.decode()
    assert page.status_code == 200
    assert 'data-testid="value-too-deep"' in page.content.decode()
