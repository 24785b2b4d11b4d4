""" "Where did it go" tells the truth (issue #30, item 1).

The truth table: every destination shape (a filter that keeps the record, a filter that drops it, no filter
with a transform, a passthrough like the demo's ``archive``, a fan-out of two destinations taking the same
record) against every outcome (produced at a known offset, filtered, dead-lettered, pending, not part of
this replay), through the dry run of a real spec and ``resolve_outcome`` (pure logic). Then the console
replay's headers read as the driver reads them (signed or not, this DLQ or another), and, on the real
broker, a destination record found behind more than a page's worth of large records, and a replay for one
destination whose other destinations say "not part of this replay".
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from django.conf import settings

from dlq import topic_browser
from dlq.test_messages import record_outcomes, replay_destinations, resolve_outcome
from pipelines.dsl import Message
from pipelines.services import dry_run
from pipelines.spec import parse_spec
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import KafkaConnection, Record, consumer_config, producer_config
from tests.dlq.conftest import api_for

PUSH = json.dumps({"type": "PushEvent", "actor": {"login": "a"}, "payload": {"size": 1}}).encode()

#: One destination per shape; the fan-out is two destinations taking the same record.
SHAPES = {
    "filter-keeps": {"filter": "/type,==,PushEvent", "transform": "CONSTRUCT:actor=/actor/login"},
    "filter-drops": {"filter": "/type,==,PullRequestEvent"},
    "transform": {"transform": "CONSTRUCT:size=/payload/size"},
    "passthrough": {},
    "fan-a": {"filter": "/type,==,PushEvent"},
    "fan-b": {"filter": "/type,==,PushEvent"},
}

#: (what is known of a destination) -> the outcome shown, per shape. ``committed``: the pipeline's group has
#: committed past the record; ``found``: its record, with the lineage header, is at a known offset.
KNOWN = {
    "dead letter stored": {"dead_lettered": True, "produced": False, "committed": True, "in_replay": True},
    "found at an offset": {"dead_lettered": False, "produced": True, "committed": True, "in_replay": True},
    "committed, not found": {"dead_lettered": False, "produced": False, "committed": True, "in_replay": True},
    "not committed yet": {"dead_lettered": False, "produced": False, "committed": False, "in_replay": True},
    "replay for others": {"dead_lettered": False, "produced": False, "committed": True, "in_replay": False},
}
TRUTH = {
    # shape: outcome for each KNOWN row, in its order
    "filter-keeps": ["dead_lettered", "produced", "pending", "pending", "not_in_replay"],
    "filter-drops": ["dead_lettered", "produced", "filtered", "pending", "not_in_replay"],
    "transform": ["dead_lettered", "produced", "pending", "pending", "not_in_replay"],
    "passthrough": ["dead_lettered", "produced", "pending", "pending", "not_in_replay"],
    "fan-a": ["dead_lettered", "produced", "pending", "pending", "not_in_replay"],
    "fan-b": ["dead_lettered", "produced", "pending", "pending", "not_in_replay"],
}


def _spec():
    return parse_spec(
        {
            "source": {"topics": ["events"]},
            "destinations": [{"name": n, "topic": f"out.{n}", **shape} for n, shape in SHAPES.items()],
            "dlq": {"topic": "events.dlq"},
        },
        pipeline_name="truth",
    )


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_and_outcome_resolves_to_what_happened(shape):
    """A destination without a filter is never "filtered" (committed past, not found yet: pending, its record
    is searched for), only a dropping filter is; a replay for other destinations says so before anything."""
    spec = _spec()
    [results] = dry_run(spec=spec, messages=[Message(value=PUSH, key=None, headers=(), timestamp_ms=0)])
    expected = {r.destination: r.outcome for r in results}[shape]
    assert expected == ("filtered" if shape == "filter-drops" else "produced")
    shown = [resolve_outcome(expected=expected, **known) for known in KNOWN.values()]
    assert shown == TRUTH[shape], dict(zip(KNOWN, shown, strict=True))


def _replayed(named: str | None, *, replay_of: str = "events.dlq/0/7", sign: bool = True) -> Record:
    headers: list[tuple[str, bytes | None]] = [(c.H_REPLAY_OF, replay_of.encode())]
    if named is not None:
        headers.append((c.H_REPLAY_DESTINATIONS, named.encode()))
    if sign:
        signature = replay_signing.sign(settings.REPLAY_KEY.encode(), replay_of, named or "", PUSH)
        headers.append((c.H_REPLAY_SIGNATURE, signature.encode()))
    return Record(
        topic="events", partition=0, offset=3, key=None, value=PUSH, headers=headers, timestamp_ms=0
    )


def test_a_replay_is_for_the_destinations_its_signed_headers_name():
    names = list(SHAPES)
    assert replay_destinations(_replayed("fan-a"), destinations=names, dlq_topic="events.dlq") == {"fan-a"}
    assert replay_destinations(
        _replayed("fan-a, passthrough"), destinations=names, dlq_topic="events.dlq"
    ) == {
        "fan-a",
        "passthrough",
    }
    # For every destination: a replay of all, names that no longer exist, unsigned (forged) headers.
    assert replay_destinations(_replayed(None), destinations=names, dlq_topic="events.dlq") is None
    assert replay_destinations(_replayed("gone"), destinations=names, dlq_topic="events.dlq") is None
    assert (
        replay_destinations(_replayed("fan-a", sign=False), destinations=names, dlq_topic="events.dlq")
        is None
    )
    # Another pipeline's dead letter replayed to a shared source: for none of this pipeline's destinations.
    other = _replayed("fan-a", replay_of="other.dlq/0/1")
    assert replay_destinations(other, destinations=names, dlq_topic="events.dlq") == frozenset()


@pytest.fixture
def topics(pipeline, kafka_admin):
    spec = pipeline.current_revision.spec
    names = {
        "source": spec["source"]["topics"][0],
        "pushes": spec["destinations"][0]["topic"],
        "prs": spec["destinations"][1]["topic"],
    }
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in names.values()]).values():
        future.result(timeout=30)
    yield names
    for future in kafka_admin.delete_topics(list(names.values())).values():
        future.result(timeout=30)


@pytest.mark.django_db
@pytest.mark.kafka
def test_a_replay_for_one_destination_is_found_past_large_records_and_the_others_are_not_part_of_it(
    people, pipeline, topics, kafka_bootstrap
):
    """A console replay for ``pushes`` only: ``pull-requests`` says "not part of this replay" (before: the
    dry run's "filtered", a reason the driver never applied) and the answer names the replay's destinations
    (before: no such field). The pushes record is found behind 18 MB of larger records, more than a page of
    the browser reads (the search keeps only the record it looks for)."""
    dlq_topic = pipeline.current_revision.spec["dlq"]["topic"]
    replay_of = f"{dlq_topic}/0/9"
    signature = replay_signing.sign(settings.REPLAY_KEY.encode(), replay_of, "pushes", PUSH)
    conn = KafkaConnection(kafka_bootstrap)
    producer = Producer(producer_config(conn))
    producer.produce(
        topics["source"],
        value=PUSH,
        headers=[
            (c.H_REPLAY_OF, replay_of.encode()),
            (c.H_REPLAY_DESTINATIONS, b"pushes"),
            (c.H_REPLAY_SIGNATURE, signature.encode()),
        ],
    )
    filler = b"x" * 900_000
    for n in range(20):  # 18 MB of other records before the one written for the replay
        producer.produce(topics["pushes"], value=filler, headers=[(c.H_LINEAGE, f"elsewhere/0/{n}".encode())])
        producer.poll(0)
    producer.produce(
        topics["pushes"], value=b'{"actor":"a"}', headers=[(c.H_LINEAGE, f"{topics['source']}/0/0".encode())]
    )
    assert producer.flush(30) == 0
    group = Consumer(consumer_config(conn, group_id=f"streamforge-{pipeline.name}"))
    group.commit(offsets=[TopicPartition(topics["source"], 0, 1)], asynchronous=False)
    group.close()

    found = topic_browser.find_by_lineage(pipeline, topics["pushes"], f"{topics['source']}/0/0", since_ms=0)
    assert found is not None
    assert found.offset == 20
    result = record_outcomes(pipeline, topic=topics["source"], partition=0, offset=0)
    by_name = {d.destination: d for d in result.destinations}
    assert (by_name["pushes"].outcome, by_name["pushes"].offset) == ("produced", 20)
    assert by_name["pull-requests"].outcome == "not_in_replay"
    assert result.done
    assert result.replay_for == ("pushes",)
    answer = api_for(people["viewer"]).get(
        f"/api/pipelines/{pipeline.name}/topics/{topics['source']}/records/0/0/outcomes/"
    )
    assert answer.status_code == 200
    assert answer.json()["replay_for"] == ["pushes"]
    assert [d["outcome"] for d in answer.json()["destinations"]] == ["produced", "not_in_replay"]
