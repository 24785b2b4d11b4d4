"""Fixtures for the DLQ console tests: one team with a person per role, a foreign team, a GitHub-events
pipeline, and dead letters stored through the real ingest code (``store_batch``)."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import Role
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter
from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, producer_config
from tests.factories import TeamFactory, member

EVENTS = Path(__file__).resolve().parents[2] / "demo" / "data" / "github-events-2021-07-21.ndjson"
_offsets = itertools.count(1)


@pytest.fixture
def team():
    return TeamFactory(name="data-platform")


@pytest.fixture
def people(team):
    """One user per role in ``team``, a second approver, and an operator of another team."""
    other = TeamFactory(name="payments")
    return {
        "viewer": member(team, Role.VIEWER, username="vic"),
        "operator": member(team, Role.OPERATOR, username="olga"),
        "approver": member(team, Role.APPROVER, username="abe"),
        "approver2": member(team, Role.APPROVER, username="amy"),
        "admin": member(team, Role.ADMIN, username="ada"),
        "foreign": member(other, Role.OPERATOR, username="fred"),
    }


def api_for(user) -> APIClient:
    """A REST client authenticated with the user's token."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def github_events() -> list[bytes]:
    return EVENTS.read_bytes().splitlines()


def github_spec(source: str, suffix: str) -> dict:
    """PushEvents -> pushes (EXTRACT of the actor and the push size); PullRequestEvents -> pull-requests."""
    return {
        "source": {"topics": [source]},
        "destinations": [
            {
                "name": "pushes",
                "topic": f"github.pushes-{suffix}",
                "filter": "/type,==,PushEvent",
                "transform": "CONSTRUCT:actor=/actor/login:size=/payload/size",
            },
            {
                "name": "pull-requests",
                "topic": f"github.prs-{suffix}",
                "filter": "/type,==,PullRequestEvent",
                "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name",
            },
        ],
        "dlq": {"topic": f"{source}.dlq"},
    }


@pytest.fixture
def pipeline(team, people) -> Pipeline:
    """A GitHub-events pipeline of ``team`` (no driver: the DLQ console needs only its definition)."""
    suffix = uuid.uuid4().hex[:8]
    return create_pipeline(
        actor=people["admin"],
        name=f"github-{suffix}",
        team=team,
        spec=github_spec(f"github.events-{suffix}", suffix),
    )


def dlq_headers(pipeline, *, error_type: str, message: str, source_offset: int, destination: str = "pushes"):
    spec = pipeline.current_revision.spec
    return [
        ("trace-id", b"t-1"),
        (c.H_ERROR, message.encode()),
        (c.H_ERROR_TYPE, error_type.encode()),
        (c.H_SOURCE_TOPIC, spec["source"]["topics"][0].encode()),
        (c.H_SOURCE_PARTITION, b"0"),
        (c.H_SOURCE_OFFSET, str(source_offset).encode()),
        # The failure time is now: the groups' "last 24 h" trend counts it whatever day the suite runs.
        (c.H_TIMESTAMP, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ").encode()),
        (c.H_PIPELINE, pipeline.name.encode()),
        (c.H_DESTINATION, destination.encode()),
        (c.H_REVISION, str(pipeline.current_revision.number).encode()),
        (c.H_ATTEMPTS, b"1"),
    ]


@pytest.fixture
def park() -> Callable[..., list[DeadLetter]]:
    """Store dead letters of ``pipeline`` through the ingest code, as if read from its DLQ topic:
    ``park(pipeline, [(key, value, error_type, message)...])``."""

    def make(pipeline, rows):
        topic = pipeline.current_revision.spec["dlq"]["topic"]
        records = []
        for key, value, error_type, message in rows:
            offset = next(_offsets)
            records.append(
                Record(
                    topic=topic,
                    partition=0,
                    offset=offset,
                    key=key,
                    value=value,
                    headers=dlq_headers(
                        pipeline, error_type=error_type, message=message, source_offset=offset
                    ),
                    timestamp_ms=int(time.time() * 1000),
                )
            )
        owners = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
        result = store_batch(records, owners)
        return list(DeadLetter.objects.filter(pk__in=result.new_ids).order_by("id"))

    return make


def missing_size_push(github_events: list[bytes]) -> bytes:
    """A real PushEvent with ``payload.size`` removed: the pushes transform fails with JsonPathNotFound."""
    event = next(json.loads(line) for line in github_events if b'"PushEvent"' in line)
    del event["payload"]["size"]
    return json.dumps(event).encode()


def produce_with_headers(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None, list]]
) -> None:
    """Produce (key, value, headers) records and wait for every acknowledgement."""
    producer = Producer(producer_config(KafkaConnection(bootstrap), extra={"linger.ms": 20}))
    errors: list[str] = []
    for key, value, headers in records:
        while True:
            try:
                producer.produce(
                    topic, key=key, value=value, headers=headers,
                    on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]


@pytest.fixture
def pipeline_topics(pipeline, kafka_admin) -> Iterator[list[str]]:
    """The pipeline's source and destination topics on the test broker (those not there yet are created and
    deleted afterwards): a prediction names a topic that does not exist as ``UnknownTopicOrPartition``."""
    spec = pipeline.current_revision.spec
    wanted = [*spec["source"]["topics"], *(d["topic"] for d in spec["destinations"])]
    there = kafka_admin.list_topics(timeout=10).topics
    made = [t for t in dict.fromkeys(wanted) if t not in there]
    if made:
        for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in made]).values():
            future.result(timeout=30)
    yield wanted
    if made:
        for future in kafka_admin.delete_topics(made).values():
            future.result(timeout=30)
