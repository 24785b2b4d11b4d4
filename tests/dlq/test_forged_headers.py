"""Headers a producer can write decide nothing (security review #28, finding 4), on the real broker and
database: a record carrying another team's replay id, read by the real ingester from its own team's DLQ
topic, neither flips that replay to ``failed_again`` nor becomes its later failure; a same-team record
whose source is not where the replay landed is not linked either, while the replayed record's real failure
still is; who sent a test message is the console's own record, never the ``x-streamforge-test`` header; and
a test message cannot carry ``x-streamforge-*`` headers (400 naming the header)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from access.models import AuditEvent, Role
from dlq import services
from dlq.ingest import Ingester
from dlq.models import DeadLetter, Replay, ReplayState, Status
from dlq.test_messages import record_outcomes
from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from tests.dlq.conftest import api_for, dlq_headers, github_spec, produce_with_headers
from tests.factories import member

pytestmark = [pytest.mark.django_db, pytest.mark.kafka]


def _topics_of(pipeline: Pipeline) -> list[str]:
    assert pipeline.current_revision is not None
    spec = pipeline.current_revision.spec
    return [spec["source"]["topics"][0], spec["dlq"]["topic"], *(d["topic"] for d in spec["destinations"])]


@pytest.fixture
def two_teams(people, team, kafka_admin: AdminClient) -> Iterator[tuple[Pipeline, Pipeline]]:
    """Two pipelines with their topics on the broker: ``ours`` of ``team`` and ``theirs`` of ``payments``
    (whose operator is ``fred``)."""
    foreign_team = people["foreign"].memberships.get().team
    admin = member(foreign_team, Role.ADMIN, username="fay")
    made = []
    for owner, actor in ((team, people["admin"]), (foreign_team, admin)):
        suffix = uuid.uuid4().hex[:8]
        made.append(
            create_pipeline(
                actor=actor,
                name=f"forge-{suffix}",
                team=owner,
                spec=github_spec(f"forge.events-{suffix}", suffix),
            )
        )
    names = [t for p in made for t in _topics_of(p)]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in names]).values():
        future.result(timeout=30)
    yield made[0], made[1]
    for future in kafka_admin.delete_topics(names).values():
        future.result(timeout=30)


def _ingest_until(ingester: Ingester, count: int, *, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while DeadLetter.objects.count() < count and time.monotonic() < deadline:
        ingester.run_once()
    assert DeadLetter.objects.count() == count


def test_review_28_4_a_forged_replay_id_from_another_team_changes_nothing(
    people, two_teams, kafka_bootstrap, github_events
):
    ours, theirs = two_teams
    our_dlq, their_dlq = (
        ours.current_revision.spec["dlq"]["topic"],
        theirs.current_revision.spec["dlq"]["topic"],
    )
    our_source = ours.current_revision.spec["source"]["topics"][0]
    ingester = Ingester(
        group_id=f"g-{uuid.uuid4().hex[:8]}", instance_id="", poll_timeout=0.5, refresh_seconds=3600
    )
    try:
        produce_with_headers(
            kafka_bootstrap,
            our_dlq,
            [
                (
                    b"k",
                    github_events[0],
                    dlq_headers(ours, error_type="JsonPathNotFound", message="no", source_offset=0),
                )
            ],
        )
        _ingest_until(ingester, 1)
        first = DeadLetter.objects.get()
        replay = services.replay(actor=people["operator"], dead_letter=first, force=True, reason="retry")
        assert replay.state == ReplayState.PRODUCED
        assert replay.target_topic == our_source
        forged_id = str(replay.replay_id).encode()

        # Another team's DLQ topic gets a record with our replay id (a test message, or any producer).
        forged = dlq_headers(
            theirs, error_type="RetryExhausted", message="fake later failure", source_offset=0
        )
        # ... and a record on our own DLQ topic with the id, whose source is not where the replay landed.
        misplaced = dlq_headers(ours, error_type="RetryExhausted", message="misplaced", source_offset=77)
        produce_with_headers(
            kafka_bootstrap,
            their_dlq,
            [
                (
                    b"k",
                    b"{}",
                    [*forged, (c.H_REPLAY_ID, forged_id), (c.H_REPLAY_OF, first.coordinates.encode())],
                )
            ],
        )
        produce_with_headers(
            kafka_bootstrap, our_dlq, [(b"k", b"{}", [*misplaced, (c.H_REPLAY_ID, forged_id)])]
        )
        _ingest_until(ingester, 3)

        replay.refresh_from_db()
        assert replay.state == ReplayState.PRODUCED
        assert not DeadLetter.objects.filter(replay_of=first).exists()
        fake = DeadLetter.objects.get(dlq_topic=their_dlq)
        assert fake.team_id == theirs.team_id
        assert fake.replay_of_id is None
        assert "replay" in fake.ownership_warning
        assert DeadLetter.objects.get(error_message="misplaced").replay_of_id is None
        inspection = services.inspect_message(user=people["viewer"], dead_letter=first)
        assert inspection.later_failures == ()

        # The replayed record's real failure (its source is where the replay landed) is still linked.
        real = dlq_headers(
            ours, error_type="RetryExhausted", message="real", source_offset=replay.produced_offset
        )
        produce_with_headers(kafka_bootstrap, our_dlq, [(b"k", b"{}", [*real, (c.H_REPLAY_ID, forged_id)])])
        _ingest_until(ingester, 4)
        replay.refresh_from_db()
        assert replay.state == ReplayState.FAILED_AGAIN
        assert DeadLetter.objects.get(error_message="real").replay_of_id == first.pk
    finally:
        ingester.stop.set()
        ingester.run()


@pytest.fixture
def source_only(pipeline, kafka_admin: AdminClient) -> Iterator[str]:
    topic = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    yield topic
    kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def test_review_28_4_a_forged_test_header_does_not_change_the_sender(
    people, pipeline, source_only, kafka_bootstrap
):
    # Any producer to the source topic can write the header: it names a sender the console never had.
    produce_with_headers(
        kafka_bootstrap, source_only, [(b"k", b'{"type": "PushEvent"}', [(c.H_TEST, b"abe")])]
    )
    sent = api_for(people["operator"]).post(
        f"/api/pipelines/{pipeline.name}/test-messages/", {"value": "{}", "reason": "real"}, format="json"
    )
    assert sent.status_code == 201, sent.content

    records = api_for(people["viewer"]).get(f"/api/pipelines/{pipeline.name}/topics/{source_only}/messages/")
    by_offset = {r["offset"]: r for r in records.json()["records"]}
    assert by_offset[0]["test_by"] == ""
    assert by_offset[1]["test_by"] == "olga"
    assert record_outcomes(pipeline, topic=source_only, partition=0, offset=0).test_by == ""
    assert record_outcomes(pipeline, topic=source_only, partition=0, offset=1).test_by == "olga"


@pytest.mark.parametrize("header", [c.H_TEST, c.H_REPLAY_ID, "X-StreamForge-Pipeline"])
def test_review_28_4_a_test_message_with_streamforge_headers_is_refused_with_400(
    people, pipeline, source_only, header
):
    body = {"value": "{}", "reason": "spoof", "headers": {"trace": "t", header: str(uuid.uuid4())}}
    response = api_for(people["operator"]).post(
        f"/api/pipelines/{pipeline.name}/test-messages/", body, format="json"
    )
    assert response.status_code == 400, response.content
    assert header in json.dumps(response.json()["headers"])
    assert not AuditEvent.objects.filter(action="topic.test_message").exists()
    records = api_for(people["operator"]).get(
        f"/api/pipelines/{pipeline.name}/topics/{source_only}/messages/"
    )
    assert records.json()["records"] == []


def test_review_28_4_a_forged_replay_id_on_the_target_topic_does_not_settle_a_replay_in_doubt(
    people, pipeline, park, github_events, source_only, kafka_bootstrap
):
    [dead] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "timeout")])
    # Step 1 of the replay protocol, then the process dies: the replay is in doubt, its record never sent.
    DeadLetter.objects.filter(pk=dead.pk).update(status=Status.REPLAYING)
    claim = Replay.objects.create(dead_letter=dead, target_topic=source_only, requested_by=people["operator"])
    # Someone who saw the replay id on the message page writes it (and the replay-of) on another record.
    forged = [(c.H_REPLAY_ID, str(claim.replay_id).encode()), (c.H_REPLAY_OF, dead.coordinates.encode())]
    produce_with_headers(kafka_bootstrap, source_only, [(b"k", b'{"forged": true}', forged)])

    assert services.resolve_in_doubt(older_than_seconds=0) == {"produced": 0, "failed": 1}
    claim.refresh_from_db()
    assert claim.state == ReplayState.FAILED
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.PARKED  # nothing of ours landed: replay again
