"""The topic browser keeps the DLQ console's promises (security review #28, finding 3), on the real broker and
database: a destination topic's records are masked by what is known of that topic (the source's paths only
where the record is the source record unchanged; withheld from viewers where a transform reshaped it), so
``masked`` never claims a masking that did not happen; and a dead letter erased by an approved (four-eyes)
delete is withheld in the browser from its DLQ topic, from its source topic and from the destination
records produced from that source record, for every role."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from django.test import Client

from dlq import services
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter, ErasedRecord, Status
from dlq.test_messages import record_outcomes
from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import Record
from tests.dlq.conftest import api_for, dlq_headers, produce_with_headers

pytestmark = [pytest.mark.django_db, pytest.mark.kafka]

SECRET = "octocat-the-secret-login"


@pytest.fixture
def shaped(team, people, kafka_admin: AdminClient) -> Iterator[tuple[Pipeline, dict[str, str]]]:
    """A pipeline of ``team`` with two destinations: ``raw`` writes the source record unchanged (its key and
    one header taken from ``/actor/login``), ``pushes`` reshapes it with a CONSTRUCT; its topics are
    created on the test broker (deleted after)."""
    suffix = uuid.uuid4().hex[:8]
    names = {
        "source": f"browse.events-{suffix}",
        "raw": f"browse.raw-{suffix}",
        "pushes": f"browse.pushes-{suffix}",
        "dlq": f"browse.events-{suffix}.dlq",
    }
    spec = {
        "source": {"topics": [names["source"]]},
        "destinations": [
            {
                "name": "raw",
                "topic": names["raw"],
                "key_transform": "/actor/login",
                "header_transforms": {"who": "FROM:/actor/login"},
            },
            {
                "name": "pushes",
                "topic": names["pushes"],
                "filter": "/type,==,PushEvent",
                "transform": "CONSTRUCT:actor=/actor/login:size=/payload/size",
            },
        ],
        "dlq": {"topic": names["dlq"]},
    }
    pipeline = create_pipeline(actor=people["admin"], name=f"browse-{suffix}", team=team, spec=spec)
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in names.values()]).values():
        future.result(timeout=30)
    yield pipeline, names
    for future in kafka_admin.delete_topics(list(names.values())).values():
        future.result(timeout=30)


def records_of(user, pipeline: Pipeline, topic: str) -> list[dict[str, Any]]:
    response = api_for(user).get(f"/api/pipelines/{pipeline.name}/topics/{topic}/messages/")
    assert response.status_code == 200, response.content
    return list(response.json()["records"])


def page_of(user, pipeline: Pipeline, topic: str) -> str:
    browser = Client()
    browser.force_login(user)
    response = browser.get(f"/pipelines/{pipeline.name}/topics/{topic}/")
    assert response.status_code == 200
    return response.content.decode()


def test_review_28_3_a_viewer_sees_no_clear_value_on_a_destination_topic_and_masked_is_truthful(
    people, shaped, kafka_bootstrap, settings
):
    settings.DLQ_MASKED_PATHS = ["/actor/login"]
    pipeline, topics = shaped
    lineage = f"{topics['source']}/0/0".encode()
    event = {"type": "PushEvent", "actor": {"login": SECRET}, "payload": {"size": 1}}
    # What the driver writes for the source record at each destination.
    produce_with_headers(
        kafka_bootstrap,
        topics["raw"],
        [(SECRET.encode(), json.dumps(event).encode(), [("who", SECRET.encode()), (c.H_LINEAGE, lineage)])],
    )
    produce_with_headers(
        kafka_bootstrap,
        topics["pushes"],
        [(None, json.dumps({"actor": SECRET, "size": 1}).encode(), [(c.H_LINEAGE, lineage)])],
    )
    viewer = people["viewer"]

    # Reshaped by a transform: the source's paths say nothing about where the login went, so a viewer gets
    # none of the value (not even a hash: a short value is found by trying them all).
    [pushed] = records_of(viewer, pipeline, topics["pushes"])
    assert SECRET not in json.dumps(pushed)
    assert pushed["value"]["withheld"] is True
    assert pushed["value"]["masked"] is True
    assert "transform" in pushed["value"]["raw"]
    assert "sha256" not in pushed["value"]["raw"]
    assert SECRET not in page_of(viewer, pipeline, topics["pushes"])

    # The source record unchanged: the source's paths apply, and the key and header the destination filled
    # from a masked path are hidden with it.
    [raw] = records_of(viewer, pipeline, topics["raw"])
    assert SECRET not in json.dumps(raw)
    assert raw["value"]["masked"] is True
    assert raw["value"]["withheld"] is False
    assert json.loads(raw["value"]["raw"])["actor"]["login"] == services.MASK
    assert raw["key"]["withheld"] is True
    assert {"name": "who", "encoding": "masked", "value": services.MASK} in raw["headers"]
    assert SECRET not in page_of(viewer, pipeline, topics["raw"])

    # Whenever the answer says masked, the masked value is not there in clear; operators see it all.
    for record in records_of(viewer, pipeline, topics["pushes"]) + records_of(
        viewer, pipeline, topics["raw"]
    ):
        if record["value"]["masked"]:
            assert SECRET not in record["value"]["pretty"] + record["value"]["raw"] + record["value"]["hex"]
    [seen] = records_of(people["operator"], pipeline, topics["pushes"])
    assert SECRET in seen["value"]["raw"]
    assert seen["value"]["masked"] is False


def _park_from_kafka(pipeline: Pipeline, topic: str, value: bytes, source_offset: int) -> DeadLetter:
    """The dead letter of the DLQ record at ``topic``/0/0, as the ingester stores it."""
    headers = dlq_headers(
        pipeline, error_type="JsonPathNotFound", message="no /x", source_offset=source_offset
    )
    record = Record(
        topic=topic, partition=0, offset=0, key=b"k", value=value, headers=headers, timestamp_ms=None
    )
    result = store_batch([record], {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)})
    return DeadLetter.objects.get(pk=result.new_ids[0])


def test_review_28_3_an_erased_dead_letter_and_its_source_record_are_withheld_in_the_browser(
    people, shaped, kafka_bootstrap
):
    pipeline, topics = shaped
    event = json.dumps({"type": "PushEvent", "actor": {"login": SECRET}}).encode()
    produce_with_headers(kafka_bootstrap, topics["source"], [(b"k", event, [("trace", SECRET.encode())])])
    headers = dlq_headers(pipeline, error_type="JsonPathNotFound", message="no /x", source_offset=0)
    produce_with_headers(kafka_bootstrap, topics["dlq"], [(b"k", event, headers)])
    lineage = f"{topics['source']}/0/0".encode()
    produce_with_headers(kafka_bootstrap, topics["raw"], [(b"k", event, [(c.H_LINEAGE, lineage)])])
    dead = _park_from_kafka(pipeline, topics["dlq"], event, source_offset=0)
    # Before the delete, an operator reads the record on every topic that holds it.
    assert SECRET in json.dumps(records_of(people["operator"], pipeline, topics["dlq"]))

    approval = services.request_delete(actor=people["operator"], dead_letter=dead, reason="GDPR erasure")
    services.approve(actor=people["approver"], approval=approval)
    dead.refresh_from_db()
    assert dead.status == Status.DELETED
    assert set(ErasedRecord.objects.values_list("topic", "partition", "offset", "kind")) == {
        (topics["dlq"], 0, 0, "dlq"),
        (topics["source"], 0, 0, "source"),
    }

    for who in ("operator", "admin", "viewer"):
        for topic in ("dlq", "source", "raw"):
            [record] = records_of(people[who], pipeline, topics[topic])
            assert SECRET not in json.dumps(record), (who, topic)
            assert record["erased"] is True
            assert record["headers"] == []
            assert record["value"]["raw"] == "erased by an approved delete"
            assert record["key"]["raw"] == "erased by an approved delete"
    page = page_of(people["operator"], pipeline, topics["dlq"])
    assert SECRET not in page
    assert "erased by an approved delete" in page
    assert SECRET not in page_of(people["admin"], pipeline, topics["source"])
    # The outcome page of the erased source record does not evaluate (and quote) its content either.
    outcomes = record_outcomes(pipeline, topic=topics["source"], partition=0, offset=0)
    assert SECRET not in json.dumps([d.expected_error for d in outcomes.destinations])
    assert outcomes.erased is True
