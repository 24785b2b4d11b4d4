"""The topic browser and test messages against the real test broker: records newest first from an offset
and from a timestamp, masked for viewers as the DLQ message page masks them, other teams' and unowned
topics refused, no consumer group created by browsing; a test message produced with its header, audited,
refused without a reason or for a viewer; a source record's outcome per destination."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from access.models import AuditEvent
from dlq import presenters, services, topic_browser
from dlq.test_messages import record_outcomes
from pipelines.models import Pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config
from tests.dlq.conftest import api_for

pytestmark = [pytest.mark.django_db, pytest.mark.kafka]


@pytest.fixture
def topics(pipeline, kafka_admin: AdminClient) -> Iterator[dict]:
    """The pipeline's source, destination and DLQ topics created on the test broker (deleted after)."""
    spec = pipeline.current_revision.spec
    names = {
        "source": spec["source"]["topics"][0],
        "pushes": spec["destinations"][0]["topic"],
        "prs": spec["destinations"][1]["topic"],
        "dlq": spec["dlq"]["topic"],
    }
    futures = kafka_admin.create_topics([NewTopic(t, 1, 1) for t in names.values()])
    for future in futures.values():
        future.result(timeout=30)
    yield names
    for future in kafka_admin.delete_topics(list(names.values())).values():
        future.result(timeout=30)


def produce(bootstrap: str, topic: str, rows: list[tuple[bytes, int | None, list]]) -> None:
    """Produce (value, timestamp ms or None, headers) records in order and wait for the broker."""
    producer = Producer(producer_config(KafkaConnection(bootstrap)))
    for value, ts, headers in rows:
        producer.produce(topic, value=value, key=b"k-" + value[:8], headers=headers, timestamp=ts or 0)
    assert producer.flush(30) == 0


def messages(user, pipeline: Pipeline, topic: str, **query) -> Any:
    response = api_for(user).get(f"/api/pipelines/{pipeline.name}/topics/{topic}/messages/", query)
    assert response.status_code == 200, response.content
    return response.json()


def test_records_are_shown_newest_first_from_an_offset_and_from_a_timestamp(
    people, pipeline, topics, kafka_bootstrap
):
    t0 = int(time.time() * 1000) - 60_000
    produce(
        kafka_bootstrap,
        topics["source"],
        [(json.dumps({"n": i}).encode(), t0 + i * 1000, []) for i in range(6)],
    )
    viewer = people["viewer"]

    assert [r["offset"] for r in messages(viewer, pipeline, topics["source"])["records"]] == [
        5,
        4,
        3,
        2,
        1,
        0,
    ]
    assert [r["offset"] for r in messages(viewer, pipeline, topics["source"], from_offset=3)["records"]] == [
        5,
        4,
        3,
    ]
    from_time = (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((t0 + 2000) / 1000)) + f".{(t0 + 2000) % 1000:03d}Z"
    )
    assert [r["offset"] for r in messages(viewer, pipeline, topics["source"], from_time=from_time)["records"]] == [
        5, 4, 3, 2,
    ]  # fmt: skip
    first = messages(viewer, pipeline, topics["source"], limit=4)
    assert [r["offset"] for r in first["records"]] == [5, 4, 3, 2]
    second = messages(viewer, pipeline, topics["source"], limit=4, cursor=first["next_cursor"])
    assert [r["offset"] for r in second["records"]] == [1, 0]
    assert second["next_cursor"] == ""
    oldest = messages(viewer, pipeline, topics["source"], order="oldest", limit=2)
    assert [r["offset"] for r in oldest["records"]] == [0, 1]


def test_a_viewer_sees_a_record_masked_as_on_the_dlq_message_page(
    people, pipeline, topics, kafka_bootstrap, settings
):
    settings.DLQ_MASKED_PATHS = ["/actor/login"]
    settings.DLQ_MASKED_HEADERS = ["trace-id"]
    value = json.dumps({"type": "PushEvent", "actor": {"login": "octocat"}}).encode()
    produce(kafka_bootstrap, topics["source"], [(value, None, [("trace-id", b"secret-trace")])])

    seen = messages(people["viewer"], pipeline, topics["source"])["records"][0]
    as_on_message_page = presenters.payload_views(
        value, masking=services.masking_for(people["viewer"], pipeline.team)
    )
    assert seen["value"]["pretty"] == as_on_message_page.pretty
    assert "octocat" not in json.dumps(seen)
    assert services.MASK in seen["value"]["pretty"]
    assert {"name": "trace-id", "encoding": "masked", "value": services.MASK} in seen["headers"]
    operator_sees = messages(people["operator"], pipeline, topics["source"])["records"][0]
    assert "octocat" in operator_sees["value"]["pretty"]


def test_another_teams_topics_and_topics_the_pipeline_does_not_own_are_refused(
    people, pipeline, topics, make_topic
):
    foreign = api_for(people["foreign"])
    assert (
        foreign.get(f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/messages/").status_code == 404
    )
    assert foreign.get(f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/").status_code == 404
    elsewhere = make_topic("not-the-pipelines")  # exists on the cluster, but no spec of the pipeline names it
    operator = api_for(people["operator"])
    assert operator.get(f"/api/pipelines/{pipeline.name}/topics/{elsewhere}/messages/").status_code == 404
    assert operator.get(f"/api/pipelines/{pipeline.name}/topics/{elsewhere}/").status_code == 404
    assert operator.get(f"/pipelines/{pipeline.name}/topics/{elsewhere}/").status_code in (302, 404)


def test_browsing_joins_and_commits_no_consumer_group(people, pipeline, topics, kafka_admin, kafka_bootstrap):
    produce(kafka_bootstrap, topics["source"], [(b'{"n": 1}', None, [])])

    def groups() -> set[str]:
        listed = kafka_admin.list_consumer_groups(request_timeout=10).result(timeout=10)
        return {g.group_id for g in listed.valid}

    before = groups()
    assert messages(people["viewer"], pipeline, topics["source"])["records"]
    overview = (
        api_for(people["viewer"]).get(f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/").json()
    )
    assert overview["partitions"] == [{"partition": 0, "low": 0, "high": 1}]
    assert "retention.ms" in overview["configs"]
    new = groups() - before
    assert not [g for g in new if g.startswith("streamforge-browse")], new


def test_an_operator_produces_a_test_message_with_the_test_header_and_one_audit_event(
    people, pipeline, topics
):
    operator = api_for(people["operator"])
    body = {"value": '{"type": "PushEvent"}', "reason": "check the pushes filter"}
    response = operator.post(f"/api/pipelines/{pipeline.name}/test-messages/", body, format="json")
    assert response.status_code == 201, response.content
    landed = response.json()
    assert landed["topic"] == topics["source"]

    record = messages(people["operator"], pipeline, topics["source"])["records"][0]
    assert record["offset"] == landed["offset"]
    assert record["test_by"] == "olga"
    assert {"name": c.H_TEST, "encoding": "text", "value": "olga"} in record["headers"]
    event = AuditEvent.objects.get(action="topic.test_message", target_id=pipeline.name)
    assert event.reason == "check the pushes filter"
    assert event.details == {"topic": topics["source"], "partition": 0, "offset": landed["offset"]}
    assert "PushEvent" not in json.dumps(event.details)


def test_a_test_message_needs_a_reason_and_the_operator_role(people, pipeline, topics):
    url = f"/api/pipelines/{pipeline.name}/test-messages/"
    no_reason = api_for(people["operator"]).post(url, {"value": "{}"}, format="json")
    assert no_reason.status_code == 400
    assert "reason" in no_reason.json()
    as_viewer = api_for(people["viewer"]).post(url, {"value": "{}", "reason": "r"}, format="json")
    assert as_viewer.status_code == 403
    assert (
        api_for(people["foreign"]).post(url, {"value": "{}", "reason": "r"}, format="json").status_code == 404
    )
    assert not AuditEvent.objects.filter(action="topic.test_message").exists()


def test_outcomes_say_produced_where_dead_lettered_why_and_filtered(
    people, pipeline, topics, kafka_bootstrap, park
):
    push = json.dumps({"type": "PushEvent", "actor": {"login": "a"}, "payload": {"size": 1}}).encode()
    produce(kafka_bootstrap, topics["source"], [(push, None, [(c.H_TEST, b"olga")])])
    lineage = f"{topics['source']}/0/0".encode()
    assert record_outcomes(pipeline, topic=topics["source"], partition=0, offset=0).done is False

    # What the driver would write: the pushes record with its lineage header; prs filters it out.
    produce(kafka_bootstrap, topics["pushes"], [(b'{"actor":"a","size":1}', None, [(c.H_LINEAGE, lineage)])])
    consumer = Consumer(
        consumer_config(KafkaConnection(kafka_bootstrap), group_id=f"streamforge-{pipeline.name}")
    )
    consumer.commit(offsets=[TopicPartition(topics["source"], 0, 1)], asynchronous=False)
    consumer.close()

    result = (
        api_for(people["viewer"])
        .get(f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/records/0/0/outcomes/")
        .json()
    )
    by_destination = {d["destination"]: d for d in result["destinations"]}
    assert by_destination["pushes"]["outcome"] == "produced"
    assert (by_destination["pushes"]["partition"], by_destination["pushes"]["offset"]) == (0, 0)
    assert by_destination["pull-requests"]["outcome"] == "filtered"
    assert by_destination["pull-requests"]["expected"] == "filtered"
    assert result["done"] is True
    # Produced straight to the topic, not through the console: its test header names no sender (#28, 4).
    assert result["test_by"] == ""

    # A dead letter stored for the source record (source coordinates as the ingester stores them).
    [dead] = park(pipeline, [(b"k", push, "JsonPathNotFound", "no /payload/size")])
    dead.source_topic, dead.source_partition, dead.source_offset = topics["source"], 0, 0
    dead.save(update_fields=["source_topic", "source_partition", "source_offset"])
    again = record_outcomes(pipeline, topic=topics["source"], partition=0, offset=0)
    assert again.destinations[0].outcome == "dead_lettered"
    assert again.destinations[0].error_type == "JsonPathNotFound"
    assert again.destinations[0].dead_letter_id == dead.pk


def test_the_pages_show_records_with_links_and_take_an_operator_from_a_test_message_to_its_outcomes(
    client, people, pipeline, topics, kafka_bootstrap
):
    lineage = f"{topics['source']}/0/0".encode()
    produce(kafka_bootstrap, topics["pushes"], [(b'{"actor":"a"}', None, [(c.H_LINEAGE, lineage)])])
    client.force_login(people["viewer"])
    page = client.get(f"/pipelines/{pipeline.name}/topics/{topics['pushes']}/").content.decode()
    assert 'data-testid="lineage-link"' in page
    assert client.get(f"/pipelines/{pipeline.name}/topics/").status_code == 200
    assert client.get(f"/pipelines/{pipeline.name}/test-message/").status_code == 403

    client.force_login(people["operator"])
    form = {"topic": topics["source"], "value": '{"type": "PushEvent"}', "key": "", "reason": "smoke"}
    response = client.post(f"/pipelines/{pipeline.name}/test-message/", form)
    assert response.status_code == 302
    assert response["Location"] == f"/pipelines/{pipeline.name}/topics/{topics['source']}/records/0/0/"
    outcome = client.get(response["Location"]).content.decode()
    assert 'data-testid="record-outcomes"' in outcome
    assert 'http-equiv="refresh"' in outcome  # pending: nothing ran the pipeline
    assert client.post(f"/pipelines/{pipeline.name}/test-message/", {**form, "reason": ""}).status_code == 200


def test_the_command_browses_and_produces_a_test_message_from_a_file(people, pipeline, topics, tmp_path):
    from io import StringIO

    from django.core.management import call_command

    event = tmp_path / "event.json"
    event.write_text('{"type": "PushEvent"}')
    out = StringIO()
    call_command("topics", "test-message", pipeline.name, "--as", "olga", "--value", f"@{event}",
                 "--reason", "from the shell", stdout=out)  # fmt: skip
    assert json.loads(out.getvalue())["offset"] == 0
    out = StringIO()
    call_command(
        "topics", "browse", pipeline.name, topics["source"], "--as", "vic", "--from-offset", "0", stdout=out
    )
    [record] = json.loads(out.getvalue())["records"]
    assert record["test_by"] == "olga"


# ------------------------------------------------------------------------------------------ search, tail, groups


def events(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    """Produce ``count`` records n=start.. with key ``order-<n>``: every third a PushEvent, the others
    WatchEvents, each by actor ``user<n>``."""
    producer = Producer(producer_config(KafkaConnection(bootstrap)))
    for n in range(start, start + count):
        value = {"n": n, "type": "PushEvent" if n % 3 == 0 else "WatchEvent", "actor": {"login": f"user{n}"}}
        producer.produce(topic, value=json.dumps(value).encode(), key=f"order-{n}".encode())
    assert producer.flush(30) == 0


def search(user, pipeline: Pipeline, topic: str, status: int = 200, **query) -> Any:
    response = api_for(user).get(f"/api/pipelines/{pipeline.name}/topics/{topic}/search/", query)
    assert response.status_code == status, response.content
    return response.json()


def numbers(step: dict) -> list[int]:
    return [json.loads(r["value"]["raw"])["n"] for r in step["records"]]


def test_search_matches_keys_and_values_by_substring_or_dsl_over_a_bounded_range_with_progress(
    people, pipeline, topics, kafka_bootstrap, settings, monkeypatch
):
    events(kafka_bootstrap, topics["source"], 30)
    operator, source = people["operator"], topics["source"]

    everything = search(operator, pipeline, source, q="pushevent")  # values, case-insensitively
    assert numbers(everything) == list(range(0, 30, 3))
    assert (everything["scanned"], everything["matched"], everything["done"]) == (30, 10, True)
    assert everything["ranges"] == [{"partition": 0, "first": 0, "next": 30, "end": 30}]
    assert numbers(search(operator, pipeline, source, q="ORDER-17")) == [17]  # keys too

    bounded = search(operator, pipeline, source, q="PushEvent", from_offset=10, max_scan=5)
    assert numbers(bounded) == [12]
    assert bounded["scanned"] == 5
    assert bounded["ranges"] == [{"partition": 0, "first": 10, "next": 15, "end": 15}]

    dsl = search(operator, pipeline, source, q="AND:/n,>,20:/type,==,WatchEvent", mode="dsl")
    assert numbers(dsl) == [22, 23, 25, 26, 28, 29]
    assert numbers(search(operator, pipeline, source, q="KEY_MATCHES:^order-2.$", mode="dsl")) == list(
        range(20, 30)
    )

    # A step ends at its match budget and says how far it got; its cursor continues where it stopped.
    monkeypatch.setattr(topic_browser, "MAX_MATCHES_PER_STEP", 4)
    first = search(operator, pipeline, source, q="PushEvent")
    assert numbers(first) == [0, 3, 6, 9]
    assert (first["stopped"], first["done"], first["scanned"]) == ("matches", False, 10)
    assert first["ranges"] == [{"partition": 0, "first": 0, "next": 10, "end": 30}]
    second = search(operator, pipeline, source, q="PushEvent", cursor=first["next_cursor"])
    assert numbers(second) == [12, 15, 18, 21]
    third = search(operator, pipeline, source, q="PushEvent", cursor=second["next_cursor"])
    assert numbers(third) == [24, 27]
    assert third["done"]
    assert third["next_cursor"] == ""

    # A viewer searches what the viewer sees: a masked value matches nothing, by substring or by filter.
    settings.DLQ_MASKED_PATHS = ["/actor/login"]
    viewer = people["viewer"]
    assert search(viewer, pipeline, source, q="user7")["matched"] == 0
    assert search(viewer, pipeline, source, q="/actor/login,==,user7", mode="dsl")["matched"] == 0
    assert numbers(search(operator, pipeline, source, q="/actor/login,==,user7", mode="dsl")) == [7]


def test_bad_search_tail_and_group_input_is_a_400_naming_the_field_and_another_team_gets_404(
    client, people, pipeline, topics
):
    operator, source = people["operator"], topics["source"]
    refused = search(operator, pipeline, source, 400, q="AND:/n,>", mode="dsl")
    assert refused["q"][0].startswith("at character "), refused
    assert "expected /path,OP,value" in refused["q"][0]
    assert "mode" in search(operator, pipeline, source, 400, q="x", mode="sql")
    assert "max_scan" in search(operator, pipeline, source, 400, q="x", max_scan=0)
    assert "cursor" in search(operator, pipeline, source, 400, q="x", cursor="zz")
    assert "cursor" in search(operator, pipeline, source, 400, q="x", cursor="0:5:1:9")
    assert "partition" in search(operator, pipeline, source, 400, q="x", partition=7)
    assert "q" in search(operator, pipeline, source, 400, q="  ")
    assert "from_time" in search(
        operator, pipeline, source, 400, q="x", from_offset=1, from_time="2025-01-01T00:00:00Z"
    )
    tail = api_for(operator).get(f"/api/pipelines/{pipeline.name}/topics/{source}/tail/", {"after": "x:1"})
    assert tail.status_code == 400
    assert "after" in tail.json()

    foreign = api_for(people["foreign"])
    client.force_login(people["foreign"])
    for what in ("search/?q=x", "tail/", "groups/"):
        assert foreign.get(f"/api/pipelines/{pipeline.name}/topics/{source}/{what}").status_code == 404
    for what in ("search/?q=x", "tail/"):
        assert client.get(f"/pipelines/{pipeline.name}/topics/{source}/{what}").status_code == 404


def test_the_tail_returns_what_was_written_since_its_position(people, pipeline, topics, kafka_bootstrap):
    events(kafka_bootstrap, topics["source"], 5)
    url = f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/tail/"
    viewer = api_for(people["viewer"])
    start = viewer.get(url).json()
    assert start == {"records": [], "position": "0:5"}
    events(kafka_bootstrap, topics["source"], 3, start=5)
    new = viewer.get(url, {"after": start["position"]}).json()
    assert numbers(new) == [5, 6, 7]
    assert new["position"] == "0:8"
    assert viewer.get(url, {"after": new["position"]}).json() == {"records": [], "position": "0:8"}


def test_consumer_groups_reading_the_topic_with_committed_end_and_lag_per_partition(
    client, people, pipeline, topics, kafka_bootstrap, kafka_admin, make_topic
):
    events(kafka_bootstrap, topics["source"], 10)
    elsewhere = make_topic("another-teams")
    reader, stranger = f"billing-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    for group, topic, offset in ((reader, topics["source"], 4), (stranger, elsewhere, 0)):
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])]
        kafka_admin.alter_consumer_group_offsets(request)[group].result(timeout=30)

    response = api_for(people["viewer"]).get(
        f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/groups/"
    )
    assert response.status_code == 200, response.content
    groups = {g["group"]: g for g in response.json()}
    own = pipeline.current_revision.spec["source"]["consumer_group"]
    assert next(iter(groups)) == own
    assert groups[own]["pipeline_group"]
    assert groups[own]["partitions"] == [{"partition": 0, "committed": None, "end": 10, "lag": 10}]
    assert groups[reader]["partitions"] == [{"partition": 0, "committed": 4, "end": 10, "lag": 6}]
    assert groups[reader]["lag"] == 6
    assert not groups[reader]["pipeline_group"]
    assert stranger not in groups  # reads only a topic that is not the team's

    client.force_login(people["viewer"])
    page = client.get(f"/pipelines/{pipeline.name}/topics/{topics['source']}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-group="{reader}"' in html
    assert stranger not in html
    refused = client.get(
        f"/pipelines/{pipeline.name}/topics/{topics['source']}/search/", {"q": "/n,>", "mode": "dsl"}
    )
    assert refused.status_code == 400
    assert 'data-error-field="q"' in refused.content.decode()
    assert "at character 4: expected /path,OP,value" in refused.content.decode()
