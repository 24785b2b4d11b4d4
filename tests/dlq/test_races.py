"""Races the DLQ console is built to win, run truly concurrently: each worker is a thread with its own
database connection (on PostgreSQL in ``make test``, where row locks and READ COMMITTED are real; SQLite
serialises writers), lined up on a barrier, and every join has a timeout, so a deadlock fails the test
instead of hanging it. Each test names its guard; with that guard removed it fails on PostgreSQL (checked
by hand: the note in each docstring says how). The twenty simultaneous replays of one message are in
``test_replay.py`` and the two workers claiming one start in ``tests/pipelines/test_supervision.py``."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from access.models import AuditEvent, Role
from dlq import services
from dlq.filters import MessageFilter
from dlq.ingest import TopicOwner, store_batch
from dlq.models import (
    ApprovalRequest,
    BulkAction,
    DeadLetter,
    FailureGroup,
    GroupHourlyCount,
    Replay,
    ReplayState,
    Status,
)
from dlq.services import bulk as bulk_actions
from dlq.services import kafka_io
from streamforge_core import contract as c
from streamforge_core.kafka import Record
from tests.dlq.conftest import dlq_headers
from tests.factories import member
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.kafka, pytest.mark.django_db(transaction=True)]

#: How long a worker may take before the test calls it stuck (a deadlock, or a lock never released).
JOIN_SECONDS = 60.0


def run_together(workers: list[Callable[[], Any]]) -> list[Any]:
    """Start every worker in its own thread and connection, release them at once, and return each one's
    result or the exception it raised, in order. Fails when a worker is still running after JOIN_SECONDS."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)

    def body(index: int, work: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=JOIN_SECONDS)
            results[index] = work()
        except BaseException as exc:  # the test inspects what each worker met
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i, w), daemon=True) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=JOIN_SECONDS)
    stuck = [i for i, thread in enumerate(threads) if thread.is_alive()]
    assert not stuck, f"workers {stuck} still running after {JOIN_SECONDS:.0f} s: a deadlock?"
    return results


@pytest.fixture
def source_topic(pipeline, kafka_admin):
    """The pipeline's source topic on the real broker (replays go there), deleted afterwards."""
    from confluent_kafka.admin import NewTopic

    name = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    yield name
    kafka_admin.delete_topics([name])[name].result(timeout=30)


def test_six_approvers_approving_one_delete_at_once_erase_it_once(team, people, pipeline, park):
    """Guard: the conditional UPDATE ``state=PENDING`` in ``approvals._decide``. Without it every approver
    decides the request: six approvals and six erasures in the audit log (seen on PostgreSQL)."""
    [dead] = park(pipeline, [(b"k", b'{"card": "4111"}', "Validation", "card number in clear")])
    request = services.request_delete(actor=people["operator"], dead_letter=dead, reason="PII")
    approvers = [member(team, Role.APPROVER, username=f"appr-{i}") for i in range(6)]
    copies = [ApprovalRequest.objects.get(pk=request.pk) for _ in approvers]  # each read while pending

    def deciding(user, approval):
        return lambda: services.approve(actor=user, approval=approval, reason="erase it")

    outcomes = run_together([deciding(u, a) for u, a in zip(approvers, copies, strict=True)])

    won = [o for o in outcomes if isinstance(o, ApprovalRequest)]
    lost = [o for o in outcomes if isinstance(o, services.Conflict)]
    assert (len(won), len(lost)) == (1, 5), outcomes
    assert all("only a pending request is decided" in str(o) for o in lost)
    assert AuditEvent.objects.filter(action="approval.approve").count() == 1
    assert AuditEvent.objects.filter(action="dlq.delete", target_id=str(dead.pk)).count() == 1
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.DELETED


def test_two_workers_claiming_the_same_bulk_chunk_replay_each_message_once(
    people, pipeline, park, github_events, source_topic, kafka_bootstrap, monkeypatch
):
    """Guard: ``bulk._claim`` moves only rows still parked, locked first with ``FOR UPDATE SKIP LOCKED``
    (one ``UPDATE ... RETURNING``). Without the lock and the status condition both workers take the same
    40 rows and both replay all of them: 80 records on the topic (seen on PostgreSQL). The second rendezvous holds the
    first claimer's transaction open until the other worker has claimed too (or 3 s passed), so the two
    claims always overlap."""
    parked = park(
        pipeline,
        [(f"k{i}".encode(), github_events[i], "RetryExhausted", "produce timed out") for i in range(40)],
    )
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: None)
    bulk = services.create_bulk(
        actor=people["operator"],
        kind="replay",
        selection=MessageFilter.from_mapping({"pipeline": pipeline.name}),
        reason="broker was down",
        rate_limit=0,
    )
    bulk = BulkAction.objects.select_related("created_by", "team").get(pk=bulk.pk)
    ids = [d.pk for d in parked]
    both_claimed = threading.Barrier(2)
    latest_payloads = bulk_actions.latest_payloads

    def after_the_claim(claimed_ids):
        # The other worker may be waiting on this one's row locks and never come: go on after 3 s.
        with contextlib.suppress(threading.BrokenBarrierError):
            both_claimed.wait(timeout=3)
        return latest_payloads(claimed_ids)

    monkeypatch.setattr(bulk_actions, "latest_payloads", after_the_claim)

    def replay_chunk():
        return bulk_actions._settle_replay_chunk(bulk, bulk_actions._send_replay_chunk(bulk, ids))

    outcomes = run_together([replay_chunk for _ in range(2)])

    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    # The lock skips rows the other worker holds: the chunk may be split between them, never shared.
    assert sum(handled for handled, _ok, _failed in outcomes) == 40
    records = consume_all(kafka_bootstrap, source_topic)
    replayed = Counter(r.header(c.H_REPLAY_OF) for r in records)
    assert len(records) == 40
    assert set(replayed.values()) == {1}
    assert Counter(Replay.objects.values_list("dead_letter_id", flat=True)) == dict.fromkeys(ids, 1)


def test_a_replay_that_fails_again_before_its_produce_is_recorded_stays_failed_again(
    people, pipeline, park, github_events, source_topic, monkeypatch
):
    """Ingest racing a replay of the same record. The replayed record can pass through the pipeline, fail
    again and be ingested (its replay marked FAILED_AGAIN) before the replaying process has recorded the
    broker's acknowledgement. Guard: ``finish_replays`` keeps FAILED_AGAIN (its ``CASE`` in the UPDATE);
    without it the acknowledgement overwrote the newer outcome with PRODUCED and the console said
    "replayed" about a message that had failed again (fails that way on the code before the guard)."""
    [dead] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "broker timed out")])
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    owners = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
    produce = kafka_io.produce
    ingested: list[Any] = []

    def produce_then_ingest_its_failure(records):
        produce(records)  # the broker has it; now the pipeline fails it again, and the ingester stores it
        [record] = records
        replay_id = dict(record.headers)[c.H_REPLAY_ID].decode()
        failed_again = Record(
            topic=topic,
            partition=0,
            offset=10_000 + dead.pk,
            key=b"k",
            value=record.value,
            headers=[
                *dlq_headers(pipeline, error_type="RetryExhausted", message="again", source_offset=7),
                (c.H_REPLAY_ID, replay_id.encode()),
            ],
            timestamp_ms=None,
        )
        # The ingester is another process with its own connection; here a thread with its own.
        ingested.extend(run_together([lambda: store_batch([failed_again], owners)]))

    monkeypatch.setattr(kafka_io, "produce", produce_then_ingest_its_failure)

    outcome = services.replay(actor=people["operator"], dead_letter=dead, reason="retry")

    assert isinstance(outcome, Replay)
    assert [r.inserted for r in ingested] == [1], ingested
    attempt = Replay.objects.get(dead_letter=dead)
    assert attempt.state == ReplayState.FAILED_AGAIN
    assert attempt.produced_offset is not None  # the acknowledgement is still recorded
    assert DeadLetter.objects.get(replay_of=dead).error_message == "again"
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.REPLAYED


def test_two_ingesters_storing_the_same_records_at_once_store_each_once(pipeline, monkeypatch):
    """A consumer-group rebalance can hand the same records to two ingesters at once. Guards: the unique
    constraint ``one_row_per_dlq_record`` (and the group's unique key), and ``store_batch`` storing its
    batch again after losing that race. Both ingesters read "nothing stored yet" before either commits (the
    rendezvous after ``already_stored``); without the retry the loser's batch failed with IntegrityError
    (the ingester stopped), and without the constraint every record was stored twice (both seen on
    PostgreSQL, the constraint dropped by hand)."""
    from dlq import ingest

    topic = pipeline.current_revision.spec["dlq"]["topic"]
    owners = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
    records = [
        Record(
            topic=topic,
            partition=0,
            offset=offset,
            key=f"k{offset}".encode(),
            value=b'{"id": 1}',
            headers=dlq_headers(pipeline, error_type="Validation", message="no id", source_offset=offset),
            timestamp_ms=None,
        )
        for offset in range(30)
    ]
    both_read = threading.Barrier(2)
    first_read = threading.local()
    already_stored = ingest.already_stored

    def read_then_meet(messages):
        found = already_stored(messages)
        if not getattr(first_read, "done", False):
            first_read.done = True
            with contextlib.suppress(threading.BrokenBarrierError):
                both_read.wait(timeout=3)
        return found

    monkeypatch.setattr(ingest, "already_stored", read_then_meet)

    outcomes = run_together([lambda: store_batch(records, owners) for _ in range(2)])

    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert sorted((o.inserted, o.already_stored) for o in outcomes) == [(0, 30), (30, 0)]
    assert DeadLetter.objects.filter(dlq_topic=topic).count() == 30
    [group] = FailureGroup.objects.filter(dlq_topic=topic)
    assert group.count == 30
    assert sum(GroupHourlyCount.objects.filter(group=group).values_list("count", flat=True)) == 30
