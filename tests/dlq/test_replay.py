"""Replays on the real broker: what a replayed record carries, exactly one record for twenty concurrent
requests, idempotency keys, and in-doubt replays settled from the target topic after a crash."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client

from access.models import Role
from dlq import services
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter, Replay, ReplayState, Status
from dlq.services import kafka_io, replays
from streamforge_core import contract as c
from streamforge_core.kafka import Record
from tests.dlq.conftest import api_for, dlq_headers, missing_size_push
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.kafka]


@pytest.fixture
def source_topic(pipeline, kafka_admin, make_topic):
    """The pipeline's source topic, created on the broker (replays go there)."""
    from confluent_kafka.admin import NewTopic

    name = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    yield name
    kafka_admin.delete_topics([name])[name].result(timeout=30)


def test_a_replay_is_for_the_dead_letters_destinations_when_it_goes_back_through_its_pipeline():
    topics = replays.PipelineTopics(
        sources=frozenset({"events"}), destinations={"pushes": "out.pushes", "archive": "out.archive"}
    )
    assert topics.scope("pushes", "events") == "pushes"
    assert topics.scope("archive,pushes", "events") == "archive,pushes"
    assert topics.scope(c.ALL_DESTINATIONS, "events") == ""  # did not decode: failed everywhere
    assert topics.scope("renamed", "events") == ""  # no longer in the spec: every destination, not none
    assert topics.scope("pushes", "out.pushes") == ""  # straight to a destination topic: no pipeline
    assert topics.targets == {"events", "out.pushes", "out.archive"}


@pytest.mark.django_db
def test_a_replay_sends_the_fixed_payload_with_the_original_key_and_headers(
    people, pipeline, park, github_events, source_topic, pipeline_topics, kafka_bootstrap
):
    [dead] = park(
        pipeline,
        [(b"repo-1", missing_size_push(github_events), "JsonPathNotFound", "path /payload/size not found")],
    )
    api = api_for(people["operator"])
    event = json.loads(bytes(dead.value))
    event["payload"]["size"] = 2
    assert (
        api.post(
            f"/api/dlq/messages/{dead.pk}/fix/",
            {"value": event, "reason": "size from commits"},
            format="json",
        ).status_code
        == 201
    )
    answer = api.post(f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["state"] == "produced"
    [record] = consume_all(kafka_bootstrap, source_topic)
    assert (record.partition, record.offset) == (body["partition"], body["offset"])
    assert record.key == b"repo-1"
    assert json.loads(record.value) == event
    assert record.header("trace-id") == "t-1"
    assert record.header(c.H_ERROR_TYPE) is None  # the failure context stays behind
    assert record.header(c.H_REPLAY_ID) == body["replay_id"]
    assert record.header(c.H_REPLAY_OF) == dead.coordinates
    assert record.header(c.H_REPLAYED_BY) == "olga"
    # It failed at "pushes": the pipeline writes the replay there only, not to "pull-requests" again.
    assert record.header(c.H_REPLAY_DESTINATIONS) == "pushes"
    assert body["destinations"] == "pushes"
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.REPLAYED
    again = api.post(f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json")
    assert again.status_code == 409


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_replay_requests_produce_one_record(
    people, pipeline, park, github_events, source_topic, kafka_bootstrap
):
    [dead] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "broker timed out")])
    clients = [api_for(people["operator"]) for _ in range(20)]
    barrier = threading.Barrier(20)

    def click(client):
        barrier.wait()
        try:
            return client.post(f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json").status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(click, clients))
    assert sorted(codes) == [201] + [409] * 19
    records = consume_all(kafka_bootstrap, source_topic)
    assert len(records) == 1
    assert Replay.objects.filter(dead_letter=dead).count() == 1


@pytest.mark.django_db
def test_a_retried_request_with_the_same_idempotency_key_gets_the_first_replay(
    people, pipeline, park, github_events, source_topic, kafka_bootstrap
):
    [dead] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "broker timed out")])
    api = api_for(people["operator"])
    first = api.post(
        f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json", HTTP_IDEMPOTENCY_KEY="click-1"
    )
    second = api.post(
        f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json", HTTP_IDEMPOTENCY_KEY="click-1"
    )
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["replay_id"] == second.json()["replay_id"]
    assert len(consume_all(kafka_bootstrap, source_topic)) == 1


@pytest.mark.django_db
def test_operators_replay_only_to_the_pipelines_topics(people, pipeline, park, github_events):
    [dead] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "broker timed out")])
    elsewhere = api_for(people["operator"]).post(
        f"/api/dlq/messages/{dead.pk}/replay/", {"target_topic": "payments"}, format="json"
    )
    assert elsewhere.status_code == 400
    assert "other topics need an admin" in elsewhere.json()["target_topic"][0]
    into_dlq = api_for(people["admin"]).post(
        f"/api/dlq/messages/{dead.pk}/replay/", {"target_topic": dead.dlq_topic}, format="json"
    )
    assert into_dlq.status_code == 400


@pytest.mark.django_db
def test_replays_left_in_doubt_by_a_crash_are_settled_from_the_target_topic(
    people, pipeline, park, github_events, source_topic, kafka_bootstrap
):
    landed, lost = park(
        pipeline,
        [
            (b"a", github_events[0], "RetryExhausted", "timeout"),
            (b"b", github_events[1], "RetryExhausted", "timeout"),
        ],
    )
    operator = people["operator"]
    claims = []
    for row in (landed, lost):  # step 1 of the replay protocol, then the process "dies"
        DeadLetter.objects.filter(pk=row.pk).update(status=Status.REPLAYING)
        claims.append(
            Replay.objects.create(dead_letter=row, target_topic=source_topic, requested_by=operator)
        )
    out = replays.replay_record(landed, claims[0], bytes(landed.value), "olga")
    kafka_io.produce([out])  # the first one reached the broker before the crash, the second did not
    assert out.error == ""
    assert services.resolve_in_doubt(older_than_seconds=0) == {"produced": 1, "failed": 1}
    claims[0].refresh_from_db()
    claims[1].refresh_from_db()
    assert (claims[0].state, claims[0].produced_offset) == (ReplayState.PRODUCED, out.offset)
    assert claims[1].state == ReplayState.FAILED
    assert DeadLetter.objects.get(pk=landed.pk).status == Status.REPLAYED
    assert DeadLetter.objects.get(pk=lost.pk).status == Status.PARKED  # nothing landed: safe to replay again


@pytest.mark.django_db
def test_a_replayed_record_that_fails_again_is_linked_to_its_earlier_failure(
    people, pipeline, park, github_events
):
    [first] = park(pipeline, [(b"k", github_events[0], "JsonPathNotFound", "path /payload/size not found")])
    source = pipeline.current_revision.spec["source"]["topics"][0]
    attempt = Replay.objects.create(
        dead_letter=first,
        target_topic=source,
        requested_by=people["operator"],
        state=ReplayState.PRODUCED,
        produced_partition=0,
        produced_offset=4242,
    )
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    # The replayed record failing again: the driver names the record it read, where the replay landed.
    where = {c.H_SOURCE_TOPIC: source.encode(), c.H_SOURCE_PARTITION: b"0", c.H_SOURCE_OFFSET: b"4242"}
    headers = [
        (name, where.get(name, bytes(value) if value else None))
        for name, value in services.decode_headers(first.headers)
    ]
    headers += [(c.H_REPLAY_ID, str(attempt.replay_id).encode()), (c.H_REPLAY_OF, first.coordinates.encode())]
    result = store_batch(
        [
            Record(
                topic=topic,
                partition=0,
                offset=999_999,
                key=b"k",
                value=bytes(first.value),
                headers=headers,
                timestamp_ms=None,
            )
        ],
        {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)},
    )
    second = DeadLetter.objects.get(pk=result.new_ids[0])
    assert second.replay_of_id == first.pk
    attempt.refresh_from_db()
    assert attempt.state == ReplayState.FAILED_AGAIN
    assert list(services.inspect_message(user=people["viewer"], dead_letter=first).later_failures) == [
        second.pk
    ]
    # Its badge says so, on its page and in the list, instead of "replayed".
    DeadLetter.objects.filter(pk=first.pk).update(status=Status.REPLAYED)
    browser = Client()
    browser.force_login(people["viewer"])
    page = browser.get(f"/dlq/messages/{first.pk}/").content.decode()
    assert 'class="state status-failed_again"' in page
    listing = browser.get("/dlq/", {"pipeline": pipeline.name}).content.decode()
    assert listing.count('class="state status-failed_again"') == 1  # the first; the second is parked
    assert listing.count('class="state status-parked"') == 1


@pytest.mark.django_db
def test_a_replay_that_would_fail_again_is_refused_naming_where_until_forced_with_a_reason(
    people, pipeline, park, github_events, source_topic, kafka_bootstrap
):
    [dead] = park(
        pipeline,
        [(b"k", missing_size_push(github_events), "JsonPathNotFound", "path /payload/size not found")],
    )
    api = api_for(people["operator"])
    url = f"/api/dlq/messages/{dead.pk}/replay/"
    refused = api.post(url, {}, format="json")
    assert refused.status_code == 409
    assert "would be dead-lettered again at pushes (JsonPathNotFound)" in refused.json()["detail"]
    assert [(w["destination"], w["error_type"]) for w in refused.json()["would_fail"]] == [
        ("pushes", "JsonPathNotFound")
    ]
    browser = Client()
    browser.force_login(people["operator"])
    page = browser.get(f"/dlq/messages/{dead.pk}/").content.decode()
    assert f"Replay #{dead.pk} although it would fail again?" in page  # the button asks first
    assert api.post(url, {"force": True}, format="json").status_code == 400  # a reason is required
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.PARKED
    assert consume_all(kafka_bootstrap, source_topic) == []
    forced = api.post(url, {"force": True, "reason": "the pipeline is fixed in r2"}, format="json")
    assert forced.status_code == 201
    assert len(consume_all(kafka_bootstrap, source_topic)) == 1


@pytest.mark.django_db
def test_the_would_fail_warning_is_told_only_to_who_may_replay(people, pipeline, park, github_events):
    """The 409 names destinations and errors (which may quote the payload): a viewer gets 403 and another
    team's operator 404 before anything is checked, and neither learns what would fail."""
    [dead] = park(
        pipeline,
        [(b"k", missing_size_push(github_events), "JsonPathNotFound", "path /payload/size not found")],
    )
    url = f"/api/dlq/messages/{dead.pk}/replay/"
    viewer = api_for(people["viewer"]).post(url, {"force": True, "reason": "r"}, format="json")
    assert viewer.status_code == 403
    assert "would_fail" not in viewer.json()
    stranger = member(TeamFactory(name="elsewhere"), Role.OPERATOR, username="stranger")
    foreign = api_for(stranger).post(url, {}, format="json")
    assert foreign.status_code == 404
    assert "would_fail" not in foreign.json()
    browser = Client()
    browser.force_login(people["viewer"])
    page = browser.get(f"/dlq/messages/{dead.pk}/").content.decode()
    assert "although it would fail again" not in page  # no replay button, no warning
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.PARKED


@pytest.mark.django_db
def test_the_dead_letters_of_one_source_record_are_shown_together_and_each_replays_to_its_destination(
    people, pipeline, github_events, source_topic, kafka_bootstrap
):
    """One source record failed both destinations: two dead letters (two DLQ records), siblings of each
    other on the API and the page; replaying each writes it for its own destination only."""
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic,
            partition=0,
            offset=500 + i,
            key=b"k",
            value=github_events[0],
            headers=dlq_headers(
                pipeline, error_type="JsonPathNotFound", message="no", source_offset=42, destination=name
            ),
            timestamp_ms=None,
        )
        for i, name in enumerate(("pushes", "pull-requests"))
    ]
    store_batch(records, {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)})
    pushes, prs = DeadLetter.objects.filter(pipeline=pipeline).order_by("id")
    api = api_for(people["operator"])

    detail = api.get(f"/api/dlq/messages/{pushes.pk}/").json()
    assert detail["siblings"] == [
        {"id": prs.pk, "destination": "pull-requests", "error_type": "JsonPathNotFound", "status": "parked"}
    ]
    browser = Client()
    browser.force_login(people["viewer"])
    page = browser.get(f"/dlq/messages/{prs.pk}/").content.decode()
    assert f'href="/dlq/messages/{pushes.pk}/">pushes</a>' in page

    for dead in (pushes, prs):
        assert api.post(f"/api/dlq/messages/{dead.pk}/replay/", {}, format="json").status_code == 201
    sent = consume_all(kafka_bootstrap, source_topic)
    assert sorted(r.header(c.H_REPLAY_DESTINATIONS) for r in sent) == ["pull-requests", "pushes"]
    assert api.get(f"/api/dlq/messages/{pushes.pk}/").json()["siblings"][0]["status"] == "replayed"


@pytest.mark.django_db
def test_a_fixed_dead_letter_and_its_siblings_are_fixed_and_replayed_together(
    people, pipeline, github_events, source_topic, pipeline_topics, kafka_bootstrap
):
    """#18 item 1: one source record (a push without payload.size) failed both destinations; the operator
    fixes it once and replays the record's dead letters together: the sibling gets the same fix, each
    replay is for its own destination, and one that cannot go is named while the others go."""
    broken = missing_size_push(github_events)
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic, partition=0, offset=700 + i, key=b"k", value=broken,
            headers=dlq_headers(pipeline, error_type="JsonPathNotFound", message="no size", source_offset=77, destination=name),
            timestamp_ms=None,
        )
        for i, name in enumerate(("pushes", "pull-requests", "archive"))
    ]  # fmt: skip
    store_batch(records, {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)})
    pushes, prs, archive = DeadLetter.objects.filter(pipeline=pipeline).order_by("id")
    services.skip(actor=people["operator"], dead_letter=archive, reason="not needed there")
    fixed = json.loads(broken)
    fixed["payload"]["size"] = len(fixed["payload"].get("commits", []))
    operator = api_for(people["operator"])
    url = f"/api/dlq/messages/{pushes.pk}/replay-with-siblings/"
    assert api_for(people["viewer"]).post(url, {"reason": "r"}, format="json").status_code == 403
    assert operator.post(url, {}, format="json").status_code == 400  # a reason is required
    assert (
        operator.post(
            f"/api/dlq/messages/{pushes.pk}/fix/", {"value": fixed, "reason": "size = commits"}, format="json"
        ).status_code
        == 201
    )

    browser = Client()
    browser.force_login(people["operator"])
    page = browser.get(f"/dlq/messages/{pushes.pk}/").content.decode()
    assert "Fix and replay all 2 together" in page
    done = operator.post(url, {"reason": "relay fixed"}, format="json")
    assert done.status_code == 200, done.content
    results = {r["id"]: r for r in done.json()}
    assert set(results) == {pushes.pk, prs.pk}  # the skipped one is not a parked sibling
    assert results[prs.pk]["fixed"] is True
    assert all(r["replay_id"] and not r["error"] for r in results.values())
    assert json.loads(services.current_payload(DeadLetter.objects.get(pk=prs.pk))[0]) == fixed
    sent = consume_all(kafka_bootstrap, source_topic)
    assert sorted(r.header(c.H_REPLAY_DESTINATIONS) for r in sent) == ["pull-requests", "pushes"]
    assert all(json.loads(r.value) == fixed for r in sent)
    assert set(DeadLetter.objects.filter(pk__in=[pushes.pk, prs.pk]).values_list("status", flat=True)) == {
        Status.REPLAYED
    }
    again = operator.post(url, {"reason": "twice"}, format="json").json()
    assert [r["replay_id"] for r in again] == [None]  # already replayed: named, nothing sent
    assert "not parked" in again[0]["error"] or "replayed" in again[0]["error"]
