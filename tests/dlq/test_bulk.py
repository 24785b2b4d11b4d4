"""Bulk actions on the real broker: a 5,000-message replay at 500 messages/s that needs an approver, shows
progress, is paused half-way, resumed, and replays each message exactly once; a bulk skip paused and
resumed; a dead worker's bulk taken over."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from confluent_kafka.admin import NewTopic
from django.db import connection
from django.test import Client
from django.utils import timezone

from access.models import AuditEvent
from dlq import selectors, services
from dlq.filters import MessageFilter
from dlq.models import BulkAction, BulkState, DeadLetter, Replay, ReplayState, Status
from dlq.services import bulk as bulk_actions
from dlq.services import kafka_io, replays
from streamforge_core import contract as c
from tests.dlq.conftest import api_for
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.kafka, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queued(monkeypatch):
    """Bulk actions that would go to a Celery worker are collected instead; the test runs them itself, in
    a thread, exactly as the task would (``dlq.tasks.run_bulk`` only calls ``services.run_bulk``)."""
    ids: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: ids.append(bulk.pk))
    return ids


@pytest.fixture
def replay_bulk(people, pipeline, park, github_events, kafka_admin, queued):
    """``replay_bulk(n)``: n messages of ``pipeline`` parked and an unthrottled bulk replay of them all
    created (queued, not run); the pipeline's source topic exists (one partition) for the test's duration.
    Returns (source topic, parked dead letters, bulk action)."""
    source = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)

    def make(n: int):
        parked = park(
            pipeline, [(f"k{i}".encode(), github_events[i], "RetryExhausted", "timed out") for i in range(n)]
        )
        bulk = services.create_bulk(
            actor=people["operator"],
            kind="replay",
            selection=MessageFilter(pipeline=pipeline.name),
            reason="after the outage",
            rate_limit=0,
        )
        return source, parked, bulk

    yield make
    kafka_admin.delete_topics([source])[source].result(timeout=30)


def run_in_thread(bulk_id: int) -> threading.Thread:
    def work() -> None:
        try:
            services.run_bulk(bulk_id=bulk_id)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_large_bulk_replay_is_approved_paused_half_way_resumed_and_replays_each_message_once(
    people, pipeline, park, github_events, kafka_admin, kafka_bootstrap, queued
):
    source = pipeline.current_revision.spec["source"]["topics"][0]
    # The destinations exist too: a prediction says a topic that is not there would fail again.
    destinations = [d["topic"] for d in pipeline.current_revision.spec["destinations"]]
    made = [NewTopic(source, 2, 1), *(NewTopic(t, 1, 1) for t in dict.fromkeys(destinations))]
    for future in kafka_admin.create_topics(made).values():
        future.result(timeout=30)
    try:
        rows = [
            (f"k{i}".encode(), github_events[i % len(github_events)], "RetryExhausted", "produce timed out")
            for i in range(5_000)
        ]
        parked = park(pipeline, rows)
        other = park(pipeline, [(b"x", b"{}", "MessageDeserialization", "invalid JSON")])  # not selected
        operator, approver = api_for(people["operator"]), api_for(people["approver"])
        selection = {"pipeline": pipeline.name, "error_type": "RetryExhausted"}

        preview = operator.post(
            "/api/dlq/bulk/", {"kind": "replay", "filters": selection, "dry_run": True}, format="json"
        ).json()
        assert preview == {
            "count": 5_000,
            "teams": {"data-platform": 5_000},
            "needs_approval": True,
            "approval_threshold": 1000,
            # the first 2,000 checked against the pipeline: none would fail again
            "checked": 2000,
            "would_fail": 0,
            "failing": [],
            "failing_ids": [],
            "passing_ids": [],
            "held": 0,
            "held_ids": [],
        }
        created = operator.post(
            "/api/dlq/bulk/",
            {"kind": "replay", "filters": selection, "reason": "broker was down", "rate_limit": 500},
            format="json",
        )
        assert created.status_code == 202, created.json()
        bulk_id = created.json()["id"]
        assert created.json()["state"] == "awaiting_approval"
        approval = approver.get("/api/dlq/approvals/", {"state": "pending"}).json()["results"][0]
        assert approval["bulk"] == bulk_id
        assert (
            approver.post(f"/api/dlq/approvals/{approval['id']}/approve/", {}, format="json").status_code
            == 200
        )
        assert queued == [bulk_id]

        started = time.monotonic()
        worker = run_in_thread(bulk_id)
        seen = []
        while time.monotonic() - started < 60:  # 5 s at the rate; a loaded machine is slower
            progress = operator.get(f"/api/dlq/bulk/{bulk_id}/").json()["progress"]
            seen.append(progress["processed"])
            if progress["processed"] >= 2_500:
                break
            time.sleep(0.25)
        paused = operator.post(
            f"/api/dlq/bulk/{bulk_id}/pause/", {"reason": "check the first half"}, format="json"
        )
        assert paused.status_code == 200
        worker.join(timeout=30)
        half = BulkAction.objects.get(pk=bulk_id)
        assert half.state == BulkState.PAUSED
        assert 2_500 <= half.processed < 5_000
        assert len(set(seen)) > 5, f"progress should move in steps, saw {seen}"
        first_rate = half.processed / (time.monotonic() - started)
        assert first_rate < 650, f"the rate limit is 500/s, ran at {first_rate:.0f}/s"

        assert operator.post(f"/api/dlq/bulk/{bulk_id}/resume/", {}, format="json").status_code == 200
        assert queued == [bulk_id, bulk_id]
        run_in_thread(bulk_id).join(timeout=60)
        done = operator.get(f"/api/dlq/bulk/{bulk_id}/").json()
        assert done["state"] == "completed"
        assert (done["processed"], done["succeeded"], done["failed"], done["runs"]) == (5_000, 5_000, 0, 2)

        replayed = consume_all(kafka_bootstrap, source)
        per_dead_letter = Counter(r.header(c.H_REPLAY_OF) for r in replayed)
        assert len(replayed) == 5_000
        assert set(per_dead_letter.values()) == {1}
        assert set(per_dead_letter) == {p.coordinates for p in parked}
        # each for the destination it failed (the pipeline writes it there only)
        assert {r.header(c.H_REPLAY_DESTINATIONS) for r in replayed} == {"pushes"}
        assert (
            DeadLetter.objects.filter(pk__in=[p.pk for p in parked], status=Status.REPLAYED).count() == 5_000
        )
        assert DeadLetter.objects.get(pk=other[0].pk).status == Status.PARKED
        # One audit event per step of the bulk action, with its counts, not one per message; each message
        # keeps its own trail (its Replay row and closed_by_bulk) and shows the bulk's events.
        assert not AuditEvent.objects.filter(action="dlq.replay").exists()
        events = AuditEvent.objects.filter(target_type="bulk", target_id=str(bulk_id)).order_by("sequence")
        assert [e.action for e in events] == [
            "dlq.bulk_create", "dlq.bulk_pause", "dlq.bulk_stopped", "dlq.bulk_resume", "dlq.bulk_complete",
        ]  # fmt: skip
        stopped, completed = events[2], events[4]
        assert stopped.details["state"] == "paused"
        assert stopped.details["processed"] == half.processed
        assert (completed.details["processed"], completed.details["succeeded"]) == (5_000, 5_000)
        assert DeadLetter.objects.filter(closed_by_bulk=bulk_id).count() == 5_000
        trail = selectors.audit_trail(parked[0], [])
        assert {"dlq.bulk_create", "dlq.bulk_complete"} <= {e.action for e in trail}
    finally:
        for future in kafka_admin.delete_topics([t.topic for t in made]).values():
            future.result(timeout=30)


def test_a_small_bulk_skip_runs_without_approval_and_can_be_paused_and_resumed(
    people, pipeline, park, queued
):
    park(pipeline, [(b"k", b"{}", "MessageDeserialization", "invalid JSON") for _ in range(30)])
    operator = api_for(people["operator"])
    missing_reason = operator.post(
        "/api/dlq/bulk/", {"kind": "skip", "filters": {"pipeline": pipeline.name}}, format="json"
    )
    assert missing_reason.status_code == 400
    assert "reason" in missing_reason.json()
    created = operator.post(
        "/api/dlq/bulk/",
        {"kind": "skip", "filters": {"pipeline": pipeline.name}, "reason": "test traffic", "rate_limit": 10},
        format="json",
    ).json()
    assert created["state"] == "queued"
    worker = run_in_thread(created["id"])
    time.sleep(1.0)
    assert operator.post(f"/api/dlq/bulk/{created['id']}/pause/", {}, format="json").status_code == 200
    worker.join(timeout=20)
    paused = BulkAction.objects.get(pk=created["id"])
    assert paused.state == BulkState.PAUSED
    assert 0 < paused.processed < 30
    assert DeadLetter.objects.filter(status=Status.SKIPPED).count() == paused.processed
    assert operator.post(f"/api/dlq/bulk/{created['id']}/resume/", {}, format="json").status_code == 200
    run_in_thread(created["id"]).join(timeout=20)
    assert BulkAction.objects.get(pk=created["id"]).state == BulkState.COMPLETED
    assert DeadLetter.objects.filter(status=Status.SKIPPED, closed_by_bulk=created["id"]).count() == 30
    assert not AuditEvent.objects.filter(action="dlq.skip").exists()  # the bulk's events say it once
    done = AuditEvent.objects.get(action="dlq.bulk_complete", target_id=str(created["id"]))
    assert done.details["processed"] == 30
    browser = Client()
    browser.force_login(people["operator"])
    page = browser.get(f"/dlq/messages/{DeadLetter.objects.first().pk}/").content.decode()
    assert f"bulk #{created['id']}</a> skipped it" in page
    assert "dlq.bulk_complete" in page  # the bulk's own audit events are on each message's trail
    bad_filter = operator.post(
        "/api/dlq/bulk/", {"kind": "skip", "filters": {"colour": "red"}, "reason": "r"}, format="json"
    )
    assert bad_filter.status_code == 400
    assert "filters.colour" in bad_filter.json()


def test_a_cancelled_bulk_skip_stops_after_the_chunk_in_flight_and_cannot_be_resumed(
    people, pipeline, park, queued
):
    park(pipeline, [(b"k", b"{}", "MessageDeserialization", "invalid JSON") for _ in range(30)])
    operator = api_for(people["operator"])
    created = operator.post(
        "/api/dlq/bulk/",
        {"kind": "skip", "filters": {"pipeline": pipeline.name}, "reason": "test traffic", "rate_limit": 10},
        format="json",
    ).json()
    worker = run_in_thread(created["id"])
    time.sleep(1.0)
    assert operator.post(f"/api/dlq/bulk/{created['id']}/cancel/", {}, format="json").status_code == 200
    worker.join(timeout=20)
    cancelled = BulkAction.objects.get(pk=created["id"])
    assert cancelled.state == BulkState.CANCELLED
    assert 0 < cancelled.processed < 30
    resumed = operator.post(f"/api/dlq/bulk/{created['id']}/resume/", {}, format="json")
    assert resumed.status_code == 409
    assert "is cancelled" in resumed.json()["detail"]
    services.run_bulk(bulk_id=created["id"])
    assert BulkAction.objects.get(pk=created["id"]).processed == cancelled.processed
    assert DeadLetter.objects.filter(status=Status.SKIPPED).count() == cancelled.processed
    assert queued == [created["id"]]


def test_a_bulk_replay_whose_worker_died_is_taken_over_without_replaying_anything_twice(
    people, replay_bulk, kafka_bootstrap, settings
):
    """The worker died mid-chunk: one claimed message had reached the broker, one had not. The takeover
    settles both from the target topic, then finishes the rest; every message lands exactly once."""
    source, parked, bulk = replay_bulk(40)
    # What the dead worker left behind: RUNNING with an old heartbeat, two claims, one produced.
    BulkAction.objects.filter(pk=bulk.pk).update(
        state=BulkState.RUNNING,
        heartbeat_at=timezone.now() - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS + 1),
    )
    landed, lost = parked[0], parked[1]
    claims = []
    for row in (landed, lost):
        DeadLetter.objects.filter(pk=row.pk).update(status=Status.REPLAYING)
        claims.append(
            Replay.objects.create(
                dead_letter=row, bulk=bulk, target_topic=source, requested_by=people["operator"]
            )
        )
    kafka_io.produce([replays.replay_record(landed, claims[0], bytes(landed.value), "olga")])

    assert services.stale_bulk_ids() == [bulk.pk]
    done = services.run_bulk(bulk_id=bulk.pk)
    assert done.state == BulkState.COMPLETED
    replayed = consume_all(kafka_bootstrap, source)
    per_dead_letter = Counter(r.header(c.H_REPLAY_OF) for r in replayed)
    assert set(per_dead_letter) == {p.coordinates for p in parked}
    assert set(per_dead_letter.values()) == {1}
    assert DeadLetter.objects.filter(pk__in=[p.pk for p in parked], status=Status.REPLAYED).count() == 40
    # and the action's figures count the settled message too (found by the chaos run: 777 of 785)
    assert (done.total, done.processed, done.succeeded, done.failed) == (40, 40, 40, 0)


def test_a_settle_that_fails_stops_the_run_and_the_takeover_settles_its_chunk_from_the_topic(
    replay_bulk, kafka_bootstrap, settings, monkeypatch
):
    """The answers are recorded on the settler's own thread and connection; when recording a chunk fails
    (here the second, as if the database went away), the run stops with that error, the chunk's replays
    stay PENDING in doubt, and the takeover finds them on the topic: every message lands exactly once and
    the action's figures count them all."""
    source, parked, bulk = replay_bulk(30)
    record_answers, calls, settled_on = bulk_actions.record_answers, [], set()

    def fail_the_second(done):
        calls.append(len(done))
        settled_on.add(threading.current_thread().name)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        return record_answers(done)

    monkeypatch.setattr(bulk_actions, "record_answers", fail_the_second)
    with pytest.raises(RuntimeError, match="went away"):
        services.run_bulk(bulk_id=bulk.pk, chunk_size=10)
    on_postgres = connection.vendor == "postgresql"  # SQLite's writers take turns: settled inline
    assert settled_on == ({"bulk-settler"} if on_postgres else {threading.current_thread().name})
    left = BulkAction.objects.get(pk=bulk.pk)
    assert left.state == BulkState.RUNNING
    assert left.processed == 10  # the first chunk
    # The second chunk is in doubt, and the third too when it was sent before the error was seen.
    in_doubt = Replay.objects.filter(bulk=bulk, state=ReplayState.PENDING).count()
    assert in_doubt in (10, 20)
    assert DeadLetter.objects.filter(status=Status.REPLAYING).count() == in_doubt

    monkeypatch.setattr(bulk_actions, "record_answers", record_answers)
    BulkAction.objects.filter(pk=bulk.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS + 1)
    )
    done = services.run_bulk(bulk_id=bulk.pk, chunk_size=10)

    assert done.state == BulkState.COMPLETED
    assert (done.processed, done.succeeded, done.failed) == (30, 30, 0)
    replayed = consume_all(kafka_bootstrap, source)
    assert Counter(r.header(c.H_REPLAY_OF) for r in replayed) == {p.coordinates: 1 for p in parked}
    assert not Replay.objects.filter(state=ReplayState.PENDING).exists()
    assert DeadLetter.objects.filter(status=Status.REPLAYED).count() == 30


@pytest.mark.django_db(transaction=False)
def test_inside_a_transaction_the_answers_are_recorded_inline_on_the_same_connection(
    replay_bulk, kafka_bootstrap
):
    """Inside a transaction another connection could not see the claimed rows, so the settler records
    each chunk on the runner's own thread, one chunk behind; the outcome is the same."""
    source, parked, bulk = replay_bulk(25)
    threads = set()
    record_answers = bulk_actions.record_answers

    def note_thread(done):
        threads.add(threading.current_thread().name)
        return record_answers(done)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bulk_actions, "record_answers", note_thread)
        done = services.run_bulk(bulk_id=bulk.pk, chunk_size=10)
    assert threads == {threading.current_thread().name}
    assert (done.state, done.processed, done.succeeded) == (BulkState.COMPLETED, 25, 25)
    replayed = consume_all(kafka_bootstrap, source)
    assert Counter(r.header(c.H_REPLAY_OF) for r in replayed) == {p.coordinates: 1 for p in parked}
