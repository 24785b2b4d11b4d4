"""Skip past a poison record on a running pipeline, end to end on the real Kafka, Spark, Redis and PostgreSQL
(issue #32, item 3, acceptance): a supervised driver is running behind a poison record at offset X of
partition 0; an operator requests "skip past X", a second person approves, the worker stops the pipeline
through the usual stop path, copies the record to the DLQ, moves the Spark checkpoint and the consumer group
to X+1 and starts the pipeline again. Then the pipeline resumes after X, the poison record is a parked
``Skipped`` dead letter with its original bytes, headers and coordinates, and every source record is
produced, filtered or dead-lettered exactly once (the accounting identity, record by record)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from django.conf import settings

from access.models import AuditEvent
from dlq.ingest import Ingester
from dlq.models import ApprovalRequest, DeadLetter, OffsetSkipState, Status
from dlq.services import offset_skips
from pipelines.models import Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline
from pipelines.spark import checkpoint
from pipelines.spec import parse_spec
from pipelines.supervision import checkpoint_dir, request_start
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, consumer_config
from tests.dlq.conftest import api_for
from tests.dlq.test_end_to_end import ingest_until
from tests.pipelines.spark.harness import consume_all, produce, written_fates
from tests.pipelines.test_managed_pipeline import until

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]

#: The window the test needs between the driver's first batch and its next one, seconds.
QUIET_S = 300
POISON = 5


def record(i: int) -> tuple[bytes, bytes]:
    body = {"id": i, "kind": "a" if i % 2 == 0 or i == POISON else "b"}
    if i == POISON:
        body["poison"] = "would take the consumer down"
    return f"k{i}".encode(), json.dumps(body).encode()


def quiet_interval_ms(now_ms: float, quiet_s: float = QUIET_S) -> int:
    """A processing-time trigger interval (whole minutes, 10 to 60: the spec allows up to an hour) whose next
    firing after ``now_ms`` is at least ``quiet_s`` away. After its first batch (at start) the driver reads
    nothing new until then, so it stays behind the poison record while the test runs, as a pipeline stuck on
    one would. Spark aligns a processing-time trigger to multiples of its interval since the epoch
    (``ProcessingTimeExecutor.nextBatchTime``), so the interval is chosen, not waited for."""
    for minutes in range(60, 9, -1):
        interval = minutes * 60_000
        if interval - now_ms % interval >= quiet_s * 1000:
            return interval
    raise AssertionError("no interval of 10 to 60 minutes leaves the window free")


@pytest.fixture
def running(people, team, make_topic, kafka_admin, supervised_drivers):
    """A supervised pipeline of ``team`` running on a 1-partition source, having processed offsets 0-4."""
    source = make_topic("skip-src", partitions=1)
    suffix = uuid.uuid4().hex[:8]
    spec = {
        "source": {"topics": [source]},
        "destinations": [
            {"name": "a", "topic": f"skip-a-{suffix}", "filter": "/kind,==,a", "transform": "EXTRACT:/id,id"}
        ],
        "delivery": {
            "commit_strategy": {"kind": "time", "interval_ms": quiet_interval_ms(time.time() * 1000)}
        },
        "dlq": {"topic": f"skip-dlq-{suffix}"},
    }
    pipeline = create_pipeline(actor=people["admin"], name=f"skip-{suffix}", team=team, spec=spec)
    yield pipeline, spec, source
    existing = set(kafka_admin.list_topics(timeout=10).topics)
    doomed = [t for t in (spec["destinations"][0]["topic"], spec["dlq"]["topic"]) if t in existing]
    if doomed:
        for future in kafka_admin.delete_topics(doomed).values():
            future.result(timeout=30)


def test_a_skip_past_a_poison_record_on_a_running_pipeline_keeps_it_in_the_dlq_and_the_identity_holds(
    people, running, kafka_bootstrap, monkeypatch
):
    pipeline, spec, source = running
    applies: list[int] = []
    monkeypatch.setattr(offset_skips, "enqueue_apply", lambda skip, countdown=0: applies.append(skip.pk))
    headers = {f"k{i}".encode(): [("trace-id", f"t-{i}".encode())] for i in range(10)}
    produce(kafka_bootstrap, source, [record(i) for i in range(POISON)], headers=headers)
    folder = Path(checkpoint_dir(pipeline.name))

    # Given the pipeline running, its first batch (offsets 0-4) committed
    request_start(actor=people["operator"], pipeline=pipeline, reason="go")

    def position() -> int | None:
        try:
            return checkpoint.committed_position(folder).offsets.get((source, 0))
        except checkpoint.CheckpointError:
            return None

    until(lambda: position() == POISON, 300, "the first batch committed")
    until(lambda: Pipeline.objects.get(pk=pipeline.pk).state == PipelineState.RUNNING, 60, "RUNNING")
    first_run = PipelineRun.objects.get(pipeline=pipeline)
    # and the poison record at offset 5 with records after it on the source
    coordinates = produce(kafka_bootstrap, source, [record(i) for i in range(POISON, 10)], headers=headers)
    assert coordinates[0] == (0, POISON)

    # When an operator asks to skip past offset 5 (the dry run first) and a second person approves
    operator = api_for(people["operator"])
    url = f"/api/pipelines/{pipeline.name}/offsets/skip/"
    dry = operator.post(url, {"partition": 0, "offset": POISON, "dry_run": True}, format="json").json()
    assert [(p["current"], p["target"], p["records"]) for p in dry["partitions"]] == [(POISON, POISON + 1, 1)]
    created = operator.post(url, {"partition": 0, "offset": POISON, "reason": "poison at 5"}, format="json")
    assert created.status_code == 201, created.json()
    skip_id = created.json()["id"]
    approved = api_for(people["approver"]).post(
        f"/api/dlq/approvals/{created.json()['approval']}/approve/", {"reason": "seen it"}, format="json"
    )
    assert approved.status_code == 200, approved.json()
    assert applies == [skip_id]

    # and the worker applies it, step by step while the pipeline stops (the beat ticks meanwhile)
    def step():
        skip = offset_skips.apply_skip(skip_id=skip_id)
        return skip if skip.state != OffsetSkipState.APPLYING else None

    skip = until(step, 180, "the skip applied", pause=2.0)
    assert skip.state == OffsetSkipState.DONE, skip.error
    assert (skip.was_running, skip.copied, skip.result[0]["copied"]) == (True, 1, [POISON, POISON + 1])
    first_run.refresh_from_db()
    assert (first_run.state, first_run.exit_code, first_run.stop_cause) == ("stopped", 0, "operator")

    # Then the pipeline runs again and resumes after the poison record
    until(lambda: position() == 10, 300, "the restarted pipeline read offsets 6-9")
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 2
    assert Pipeline.objects.get(pk=pipeline.pk).desired_state == "running"
    group = parse_spec(spec, pipeline_name=pipeline.name).source.consumer_group
    until(lambda: committed_offset(group, source) == 10, 60, "the consumer group at 10")

    # and every source record has exactly one fate: produced, filtered or dead-lettered (Skipped)
    fates = written_fates(kafka_bootstrap, spec)
    for offset in range(10):
        fate = fates.get(("a", 0, offset), [])
        kinds = [kind for kind, _ in fate]
        if offset == POISON:
            assert kinds == ["dlq"], offset
            copy = fate[0][1]
            assert (copy.key, copy.value) == record(POISON)
            assert copy.header(c.H_ERROR_TYPE) == c.SKIPPED
            assert copy.header("trace-id") == f"t-{POISON}"
        elif json.loads(record(offset)[1])["kind"] == "a":
            assert kinds == ["produced"], offset
            assert json.loads(fate[0][1].value) == {"id": offset}
        else:
            assert kinds == [], offset  # filtered out
    assert len(consume_all(kafka_bootstrap, source)) == 10

    # and the ingest parks it as a Skipped dead letter with its original bytes, headers and coordinates
    ingester = Ingester(group_id=f"ingest-{pipeline.name}", poll_timeout=0.5, refresh_seconds=1)
    try:
        ingest_until(
            ingester, lambda: DeadLetter.objects.filter(pipeline=pipeline).exists(), 60, "the dead letter"
        )
    finally:
        ingester.stop.set()
        ingester.run()
    [letter] = DeadLetter.objects.filter(pipeline=pipeline)
    assert (letter.status, letter.error_type, letter.destination) == (Status.PARKED, "Skipped", "*")
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (source, 0, POISON)
    assert (bytes(letter.key), bytes(letter.value)) == record(POISON)
    assert ["trace-id", base64.b64encode(b"t-5").decode()] in letter.headers, letter.headers
    event = AuditEvent.objects.get(action="pipeline.offsets.skipped")
    assert event.details["ranges"] == [
        {"topic": source, "partition": 0, "current": POISON, "target": POISON + 1, "records": 1, "rereads": 0,
         "copied": [POISON, POISON + 1]}
    ]  # fmt: skip
    assert ApprovalRequest.objects.get(offset_skip_id=skip_id).decided_by == people["approver"]


def committed_offset(group: str, topic: str) -> int:
    consumer = Consumer(consumer_config(KafkaConnection(settings.KAFKA_BOOTSTRAP_SERVERS), group_id=group))
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()
