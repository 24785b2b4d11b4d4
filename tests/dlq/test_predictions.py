"""Predictions are never wrong in the hopeful direction (issue #30, item 2), against the real test broker: a
replay that the broker or the driver would refuse is named before it is sent. A projection larger than the
destination topic's ``max.message.bytes`` is ``RecordTooLarge`` there (as the driver dead-letters it); a
replayed record larger than the target topic's limit is refused at the target; a payload that does not parse
is ``MessageDeserialization``; and only the destinations the replay is for are listed."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import NewTopic
from django.core.cache import cache

from dlq import services
from dlq.models import Status
from dlq.services import kafka_io
from dlq.services.errors import ReplayFailed, WouldFailAgain
from tests.dlq.conftest import api_for

pytestmark = [pytest.mark.django_db, pytest.mark.kafka]


@pytest.fixture
def small_topics(pipeline, kafka_admin):
    """The source topic (64 KiB records at most) and the pushes topic (2,000 bytes at most) on the broker."""
    spec = pipeline.current_revision.spec
    made = [
        NewTopic(spec["source"]["topics"][0], 1, 1, config={"max.message.bytes": "65536"}),
        NewTopic(spec["destinations"][0]["topic"], 1, 1, config={"max.message.bytes": "2000"}),
    ]
    for future in kafka_admin.create_topics(made).values():
        future.result(timeout=30)
    cache.clear()
    yield spec
    for future in kafka_admin.delete_topics([t.topic for t in made]).values():
        future.result(timeout=30)


def _push(login: str) -> bytes:
    return json.dumps({"type": "PushEvent", "actor": {"login": login}, "payload": {"size": 1}}).encode()


def test_a_replay_that_the_broker_or_the_driver_would_refuse_is_named_first(
    people, pipeline, small_topics, park
):
    operator = people["operator"]
    fits, too_large, huge, garbled = park(
        pipeline,
        [
            (b"k1", _push("octocat"), "JsonPathNotFound", "x"),
            (b"k2", _push("o" * 3000), "JsonPathNotFound", "x"),  # its pushes projection: > 2,000 bytes
            (b"k3", _push("o" * 70_000), "JsonPathNotFound", "x"),  # the record itself: > 64 KiB
            (b"k4", b"{not json", "MessageDeserialization", "x"),
        ],
    )
    assert services.would_fail_again(fits, bytes(fits.value)) == []

    [at_pushes] = services.would_fail_again(too_large, bytes(too_large.value))
    assert (at_pushes.destination, at_pushes.error_type) == ("pushes", "RecordTooLarge")
    assert "exceeds max.message.bytes=2000" in at_pushes.error_message

    [at_target] = services.would_fail_again(huge, bytes(huge.value))
    assert (at_target.topic, at_target.error_type) == (small_topics["source"]["topics"][0], "RecordTooLarge")

    # Only the destination the replay is for (pushes), though pull-requests would not parse it either.
    [unparsed] = services.would_fail_again(garbled, bytes(garbled.value))
    assert (unparsed.destination, unparsed.error_type) == ("pushes", "MessageDeserialization")

    # The fix editor's check lists only pushes too, and its verdict is over pushes alone.
    draft = services.check_draft(actor=operator, dead_letter=garbled, value=b"{still not json")
    assert [d.destination for d in draft.check.destinations] == ["pushes"]
    assert draft.check.would_pass is False
    draft = services.check_draft(actor=operator, dead_letter=too_large, value=_push("o" * 2500))
    assert [(d.destination, d.error_type) for d in draft.check.destinations] == [("pushes", "RecordTooLarge")]

    with pytest.raises(WouldFailAgain):
        services.replay(actor=operator, dead_letter=too_large)
    refused = api_for(operator).post(f"/api/dlq/messages/{too_large.pk}/replay/", {}, format="json")
    assert refused.status_code == 409
    assert "pushes (RecordTooLarge)" in refused.json()["detail"]


def test_a_replay_to_a_topic_that_is_not_there_is_predicted_to_fail_as_the_broker_fails_it(
    people, pipeline, park, kafka_admin, settings, monkeypatch
):
    """The test broker does not create topics on first write (``auto.create.topics.enable=false``) and the
    console's producer keeps librdkafka's ``allow.auto.create.topics`` default. Before: a missing topic's
    limit was "not known", so the replay was predicted to pass, then waited out its delivery timeout."""
    cache.clear()
    operator = people["operator"]
    spec = pipeline.current_revision.spec
    source = spec["source"]["topics"][0]  # not created
    [dead] = park(pipeline, [(b"k1", _push("octocat"), "JsonPathNotFound", "x")])
    missing_text = f"topic {source} does not exist (and the broker does not create topics on first write)"
    [missing] = services.would_fail_again(dead, bytes(dead.value))
    assert (missing.topic, missing.error_type, missing.error_message) == (
        source,
        "UnknownTopicOrPartition",
        missing_text,
    )
    refused = api_for(operator).post(f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json")
    assert refused.status_code == 409
    assert refused.json()["would_fail"] == [
        {"destination": source, "error_type": "UnknownTopicOrPartition", "error_message": missing_text}
    ]

    # The broker agrees: forced, the record waits for the topic until its delivery timeout and fails;
    # nothing is created, the message is parked again.
    settings.DLQ_PRODUCE_TIMEOUT_SECONDS = 2
    monkeypatch.setattr(kafka_io, "_producers", {})
    with pytest.raises(ReplayFailed):
        services.replay(actor=operator, dead_letter=dead, force=True, reason="try it anyway")
    assert source not in kafka_admin.list_topics(timeout=10).topics
    dead.refresh_from_db()
    assert dead.status == Status.PARKED

    # A destination topic that is not there: the driver cannot write it (it halts), so nothing lands there.
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    try:
        cache.clear()
        [at_pushes] = services.would_fail_again(dead, bytes(dead.value))
        pushes = spec["destinations"][0]["topic"]
        assert (at_pushes.destination, at_pushes.topic, at_pushes.error_type) == (
            "pushes",
            pushes,
            "UnknownTopicOrPartition",
        )
    finally:
        kafka_admin.delete_topics([source])[source].result(timeout=30)
