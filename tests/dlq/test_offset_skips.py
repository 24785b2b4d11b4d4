"""Skip past a poison record without losing it (issue #32, item 3), on the real Kafka and PostgreSQL: the dry
run, the request and its four eyes, the copy to the DLQ before the move, the move of the checkpoint and the
consumer group, a re-run after a crash, and every action as the wrong role, another team and with bad input.
The checkpoint here is written in Spark 4's format by ``spark_checkpoint`` (a stopped pipeline's); the end to
end with a real driver is ``test_offset_skip_driver.py``."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from django.conf import settings as django_settings
from django.test import Client

from access.models import AuditEvent, Role
from dlq import services
from dlq.ingest import Ingester
from dlq.models import ApprovalKind, ApprovalRequest, DeadLetter, OffsetSkip, OffsetSkipState, Status
from dlq.services import offset_skips
from notifications.events import approval_event
from pipelines.services import create_pipeline
from pipelines.spark import checkpoint
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, consumer_config
from tests.dlq.conftest import api_for, github_spec
from tests.dlq.test_end_to_end import ingest_until
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all, produce

pytestmark = [pytest.mark.kafka, pytest.mark.django_db(transaction=True)]

#: The metadata line Spark 4.2 writes in ``offsets/<n>`` (taken from a real checkpoint, shortened ``conf``).
SPARK_METADATA = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1795796089403,"conf":{"spark.sql.shuffle.partitions":"4",'
    '"spark.sql.streaming.multipleWatermarkPolicy":"min"}}'
)


def spark_checkpoint(root: Path, name: str, offsets: dict[str, dict[str, int]], batches: int = 1) -> Path:
    """A checkpoint as Spark 4.2 leaves it after ``batches`` committed batches ending at ``offsets``."""
    folder = root / name
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    (folder / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    for batch in range(batches):
        (folder / "offsets" / str(batch)).write_text(f"v1\n{SPARK_METADATA}\n{json.dumps(offsets)}")
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return folder


@pytest.fixture
def world(people, pipeline, kafka_admin, kafka_bootstrap, settings, tmp_path, monkeypatch):
    """The pipeline's source topic (2 partitions, 10 records each, with a header), its DLQ and destination
    topics, and a checkpoint at offset 3 on partition 0 and 0 on partition 1; applies are collected, not
    sent to a worker."""
    settings.CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    spec = pipeline.current_revision.spec
    source = spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(source, 2, 1)])[source].result(timeout=30)
    plan = ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=pipeline.name))
    records = [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(20)]
    headers = {key: [("trace-id", b"t-" + key)] for key, _ in records}
    coordinates = produce(kafka_bootstrap, source, records, partitions=2, headers=headers)
    folder = spark_checkpoint(tmp_path / "checkpoints", pipeline.name, {source: {"0": 3, "1": 0}})
    applies: list[int] = []
    monkeypatch.setattr(offset_skips, "enqueue_apply", lambda skip, countdown=0: applies.append(skip.pk))
    yield {
        "source": source,
        "dlq": spec["dlq"]["topic"],
        "checkpoint": folder,
        "applies": applies,
        "coordinates": dict(zip(coordinates, records, strict=True)),
        "group": parse_spec(spec, pipeline_name=pipeline.name).source.consumer_group,
    }
    kafka_admin.delete_topics([source, *plan.created])


def skip_url(pipeline) -> str:
    return f"/api/pipelines/{pipeline.name}/offsets/skip/"


def committed(group: str, topic: str, partitions=(0, 1)) -> list[int]:
    consumer = Consumer(
        consumer_config(KafkaConnection(django_settings.KAFKA_BOOTSTRAP_SERVERS), group_id=group)
    )
    try:
        return [
            tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        ]
    finally:
        consumer.close()


def approve_and_apply(people, skip: OffsetSkip) -> OffsetSkip:
    approval = ApprovalRequest.objects.get(offset_skip=skip)
    services.approve(actor=people["approver"], approval=approval, reason="ok")
    return offset_skips.apply_skip(skip_id=skip.pk)


# ------------------------------------------------------------------------------------------------ dry run


def test_a_dry_run_counts_the_records_per_partition_and_creates_nothing(people, pipeline, world):
    # When an operator asks for a dry run of a skip past offset 5 on partition 0 (checkpoint at 3)
    answer = api_for(people["operator"]).post(
        skip_url(pipeline), {"partition": 0, "offset": 5, "dry_run": True}, format="json"
    )
    # Then offsets 3, 4 and 5 would be skipped, the pipeline would resume at 6, and nothing is created
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert [
        (p["partition"], p["current"], p["target"], p["records"], p["direction"]) for p in body["partitions"]
    ] == [(0, 3, 6, 3, "forward")]
    assert (body["records"], body["rereads"]) == (3, 0)
    assert not OffsetSkip.objects.exists()
    assert not ApprovalRequest.objects.filter(kind=ApprovalKind.OFFSETS).exists()


def test_a_dry_run_to_a_time_covers_every_partition_and_says_what_is_read_again(people, pipeline, world):
    # Given a time before every record: partition 0 (at 3) goes back to 0, partition 1 stays at 0
    before = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    answer = api_for(people["operator"]).post(
        skip_url(pipeline), {"to_time": before, "dry_run": True}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    rows = [
        (p["partition"], p["current"], p["target"], p["records"], p["rereads"], p["direction"])
        for p in answer.json()["partitions"]
    ]
    assert rows == [(0, 3, 0, 0, 3, "backward"), (1, 0, 0, 0, 0, "none")]
    # and a time after every record moves every partition to its end
    after = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    answer = api_for(people["operator"]).post(
        skip_url(pipeline), {"to_time": after, "dry_run": True}, format="json"
    )
    assert [(p["target"], p["records"]) for p in answer.json()["partitions"]] == [(10, 7), (10, 10)]


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"partition": 2, "offset": 1}, "partition"),  # the topic has partitions 0 and 1
        ({"partition": 2**31, "offset": 1}, "partition"),  # past a Kafka partition number
        ({"partition": -1, "offset": 1}, "partition"),
        ({"offset": 1}, "partition"),  # an offset needs its partition
        ({"partition": 0, "offset": 10}, "offset"),  # the high watermark is 10: the last record is 9
        ({"partition": 0, "offset": 2**63}, "offset"),
        ({"partition": 0, "offset": -3}, "offset"),
        ({"partition": 0}, "offset"),  # neither an offset nor a time
        ({"partition": 0, "offset": 1, "to_time": "2026-11-27T10:00:00Z"}, "offset"),  # both
        ({"to_time": "yesterday at noon"}, "to_time"),
        ({"to_time": "2026-13-45T10:00:00Z"}, "to_time"),
        ({"partition": 0, "offset": 1, "topic": "not-a-source"}, "topic"),
        ({"partition": 0, "offset": 1, "dry_run": "maybe"}, "dry_run"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(people, pipeline, world, body, field):
    for dry_run in (True, False):
        answer = api_for(people["operator"]).post(
            skip_url(pipeline), {"reason": "poison", "dry_run": dry_run, **body}, format="json"
        )
        assert answer.status_code == 400, answer.json()
        assert field in answer.json(), answer.json()
    assert not OffsetSkip.objects.exists()


def test_a_request_needs_a_reason_and_something_to_move(people, pipeline, world):
    operator = api_for(people["operator"])
    answer = operator.post(skip_url(pipeline), {"partition": 0, "offset": 5, "reason": "  "}, format="json")
    assert (answer.status_code, list(answer.json())) == (400, ["reason"])
    # the checkpoint is at 3 on partition 0: skipping past 1 moves nothing (never a rewind)
    answer = operator.post(
        skip_url(pipeline), {"partition": 0, "offset": 1, "reason": "poison"}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    assert "offset" in answer.json()
    assert not OffsetSkip.objects.exists()


def test_a_pipeline_without_a_checkpoint_is_a_400(people, team, world, kafka_admin):
    suffix = uuid.uuid4().hex[:8]
    spec = github_spec(world["source"], suffix)
    spec["dlq"]["topic"] = f"fresh-{suffix}.dlq"
    fresh = create_pipeline(actor=people["admin"], name=f"fresh-{suffix}", team=team, spec=spec)
    answer = api_for(people["operator"]).post(
        skip_url(fresh), {"partition": 0, "offset": 5, "reason": "poison", "dry_run": True}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    assert "checkpoint" in answer.json()["pipeline"][0]


# -------------------------------------------------------------------------------------------- permissions


def test_a_viewer_may_not_plan_or_request_and_another_team_does_not_see_the_pipeline(people, pipeline, world):
    body = {"partition": 0, "offset": 5, "reason": "poison"}
    for dry_run in (True, False):
        assert (
            api_for(people["viewer"])
            .post(skip_url(pipeline), {**body, "dry_run": dry_run}, format="json")
            .status_code
            == 403
        )
        assert (
            api_for(people["foreign"])
            .post(skip_url(pipeline), {**body, "dry_run": dry_run}, format="json")
            .status_code
            == 404
        )
    assert api_for(people["foreign"]).get(skip_url(pipeline)).status_code == 404
    assert api_for(people["viewer"]).get(skip_url(pipeline)).json() == []
    assert not OffsetSkip.objects.exists()


def test_a_request_waits_for_a_second_person_with_the_approver_role(people, pipeline, world):
    # Given an approver's own request
    answer = api_for(people["approver"]).post(
        skip_url(pipeline), {"partition": 0, "offset": 5, "reason": "poison at 5"}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    skip = OffsetSkip.objects.get()
    assert (skip.state, skip.team, skip.requested_by) == (
        OffsetSkipState.REQUESTED,
        pipeline.team,
        people["approver"],
    )
    approval = answer.json()["approval"]
    assert ApprovalRequest.objects.get(pk=approval).kind == ApprovalKind.OFFSETS
    # a second request for the pipeline is refused while it is open
    again = api_for(people["operator"]).post(
        skip_url(pipeline), {"partition": 1, "offset": 2, "reason": "another"}, format="json"
    )
    assert again.status_code == 409, again.json()
    # Then neither the requester, nor an operator, nor another team's approver may approve it
    other_approver = member(TeamFactory(name="elsewhere"), Role.APPROVER, username="zed")
    for user, code in (
        (people["approver"], 403),
        (people["operator"], 403),
        (people["viewer"], 403),
        (other_approver, 404),
    ):
        decided = api_for(user).post(
            f"/api/dlq/approvals/{approval}/approve/", {"reason": "me"}, format="json"
        )
        assert decided.status_code == code, (user.username, decided.json())
    assert OffsetSkip.objects.get().state == OffsetSkipState.REQUESTED
    assert world["applies"] == []
    # and a second approver may: it is queued for a worker
    decided = api_for(people["approver2"]).post(
        f"/api/dlq/approvals/{approval}/approve/", {"reason": "seen"}, format="json"
    )
    assert decided.status_code == 200, decided.json()
    assert (OffsetSkip.objects.get().state, world["applies"]) == (OffsetSkipState.APPROVED, [skip.pk])
    # deciding twice is a conflict
    assert (
        api_for(people["admin"]).post(f"/api/dlq/approvals/{approval}/reject/", {}, format="json").status_code
        == 409
    )


def test_a_rejected_skip_is_never_applied(people, pipeline, world):
    skip = offset_skips.request_skip(
        actor=people["operator"], pipeline=pipeline, partition=0, past_offset=5, reason="poison"
    )
    approval = ApprovalRequest.objects.get(offset_skip=skip)
    services.reject(actor=people["approver"], approval=approval, reason="not poison")
    skip.refresh_from_db()
    assert skip.state == OffsetSkipState.REJECTED
    assert offset_skips.apply_skip(skip_id=skip.pk).state == OffsetSkipState.REJECTED
    assert checkpoint.committed_position(world["checkpoint"]).batch_id == 0
    assert world["applies"] == []


# ------------------------------------------------------------------------------------------------- apply


def dlq_copies(bootstrap: str, dlq: str, skip: OffsetSkip):
    return [r for r in consume_all(bootstrap, dlq) if r.header(c.H_SKIP) == str(skip.pk)]


def test_an_approved_skip_copies_the_records_to_the_dlq_first_then_moves_checkpoint_and_group(
    people, pipeline, world, kafka_bootstrap
):
    # Given a request to skip past offset 5 on partition 0 (the checkpoint is at 3)
    skip = offset_skips.request_skip(
        actor=people["operator"], pipeline=pipeline, partition=0, past_offset=5, reason="poison at 5"
    )
    # When it is approved and applied
    skip = approve_and_apply(people, skip)
    # Then it is done, with the range it copied
    assert skip.state == OffsetSkipState.DONE, skip.error
    assert (skip.copied, [(r["partition"], r["copied"], r["copied_records"]) for r in skip.result]) == (
        3,
        [(0, [3, 6], 3)],
    )
    # the DLQ holds the three records with their original bytes and headers and the driver's headers
    copies = dlq_copies(kafka_bootstrap, world["dlq"], skip)
    assert sorted(int(r.header(c.H_SOURCE_OFFSET)) for r in copies) == [3, 4, 5]  # keyed: any DLQ partition
    for copy in copies:
        key, value = world["coordinates"][(0, int(copy.header(c.H_SOURCE_OFFSET)))]
        assert (copy.key, copy.value, copy.header("trace-id")) == (key, value, "t-" + key.decode())
        assert (
            copy.header(c.H_ERROR_TYPE),
            copy.header(c.H_SOURCE_TOPIC),
            copy.header(c.H_SOURCE_PARTITION),
        ) == ("Skipped", world["source"], "0")
        assert (copy.header(c.H_PIPELINE), copy.header(c.H_DESTINATION)) == (pipeline.name, "*")
        assert int(copy.header(c.H_SOURCE_RECORD_TIMESTAMP)) > 0
    # the checkpoint resumes at 6 on partition 0 and 0 on partition 1, in a new committed batch
    position = checkpoint.committed_position(world["checkpoint"])
    assert (position.batch_id, position.offsets) == (1, {(world["source"], 0): 6, (world["source"], 1): 0})
    assert (world["checkpoint"] / "commits" / "1").read_text() == 'v1\n{"nextBatchWatermarkMs":0}'
    # the consumer group says the same
    assert committed(world["group"], world["source"], (0,)) == [6]
    # and the move is audited with the range
    event = AuditEvent.objects.get(action="pipeline.offsets.skipped")
    assert event.details["ranges"][0] | {} == {
        "topic": world["source"],
        "partition": 0,
        "current": 3,
        "target": 6,
        "records": 3,
        "rereads": 0,
        "copied": [3, 6],
    }
    assert AuditEvent.objects.filter(action="pipeline.offsets.skip_requested").count() == 1


def test_the_copies_become_parked_skipped_dead_letters_that_can_be_replayed(
    people, pipeline, world, kafka_bootstrap
):
    skip = offset_skips.request_skip(
        actor=people["operator"], pipeline=pipeline, partition=0, past_offset=4, reason="poison"
    )
    skip = approve_and_apply(people, skip)
    assert skip.state == OffsetSkipState.DONE, skip.error
    ingester = Ingester(group_id=f"ingest-{uuid.uuid4().hex[:6]}", poll_timeout=0.5, refresh_seconds=1)
    try:
        ingest_until(
            ingester,
            lambda: DeadLetter.objects.filter(error_type="Skipped").count() == 2,
            60,
            "2 dead letters",
        )
    finally:
        ingester.stop.set()
        ingester.run()
    letters = list(DeadLetter.objects.filter(error_type="Skipped").order_by("source_offset"))
    assert [
        (d.status, d.pipeline_id, d.destination, d.source_topic, d.source_partition, d.source_offset)
        for d in letters
    ] == [
        (Status.PARKED, pipeline.pk, "*", world["source"], 0, 3),
        (Status.PARKED, pipeline.pk, "*", world["source"], 0, 4),
    ]
    key, value = world["coordinates"][(0, 3)]
    assert (bytes(letters[0].key), bytes(letters[0].value)) == (key, value)
    # the DLQ list's filter finds them
    listed = (
        api_for(people["viewer"])
        .get(f"/api/dlq/messages/?pipeline={pipeline.name}&error_type=Skipped")
        .json()
    )
    assert sorted(m["id"] for m in listed["results"]) == sorted(d.pk for d in letters)
    # When one is replayed, it goes back to the source topic with its original key, value and headers
    replay = services.replay(actor=people["operator"], dead_letter=letters[0])
    back = [
        r
        for r in consume_all(kafka_bootstrap, world["source"])
        if r.header(c.H_REPLAY_ID) == str(replay.replay_id)
    ]
    assert [(r.key, r.value, r.header("trace-id"), r.header(c.H_ERROR_TYPE)) for r in back] == [
        (key, value, "t-" + key.decode(), None)
    ]
    letters[0].refresh_from_db()
    assert letters[0].status == Status.REPLAYED


def test_a_skip_to_a_time_moves_every_partition_and_copies_what_it_skips(
    people, pipeline, world, kafka_bootstrap
):
    after = datetime.now(UTC) + timedelta(hours=1)
    skip = offset_skips.request_skip(
        actor=people["operator"], pipeline=pipeline, to_time=after, reason="drop the backlog"
    )
    assert [(p["partition"], p["records"]) for p in skip.plan] == [(0, 7), (1, 10)]
    skip = approve_and_apply(people, skip)
    assert (skip.state, skip.copied) == (OffsetSkipState.DONE, 17), skip.error
    assert len(dlq_copies(kafka_bootstrap, world["dlq"], skip)) == 17
    assert checkpoint.committed_position(world["checkpoint"]).offsets == {
        (world["source"], 0): 10,
        (world["source"], 1): 10,
    }
    assert committed(world["group"], world["source"]) == [10, 10]


def test_a_worker_that_dies_mid_copy_leaves_the_positions_and_a_rerun_copies_each_record_once(
    people, pipeline, world, kafka_bootstrap, monkeypatch
):
    # Given a skip of 17 records copied in chunks of 5 (partition 0: 5 + 2, partition 1: 5 + 5), and a worker
    # that dies while sending the fourth
    monkeypatch.setattr(offset_skips, "COPY_CHUNK", 5)
    real_produce = offset_skips.kafka_io.produce
    calls = []

    class WorkerDied(BaseException):
        pass

    def dying(chunk):
        calls.append(len(chunk))
        if len(calls) == 4:
            raise WorkerDied
        real_produce(chunk)

    monkeypatch.setattr(offset_skips.kafka_io, "produce", dying)
    skip = offset_skips.request_skip(
        actor=people["operator"],
        pipeline=pipeline,
        to_time=datetime.now(UTC) + timedelta(hours=1),
        reason="backlog",
    )
    approval = ApprovalRequest.objects.get(offset_skip=skip)
    services.approve(actor=people["approver"], approval=approval)
    with pytest.raises(WorkerDied):
        offset_skips.apply_skip(skip_id=skip.pk)
    skip.refresh_from_db()
    # Then nothing moved yet: it is still applying, with its progress
    assert (skip.state, skip.copied, skip.progress) == (
        OffsetSkipState.APPLYING,
        12,
        {f"{world['source']}/0": 10, f"{world['source']}/1": 5},
    )
    assert checkpoint.committed_position(world["checkpoint"]).batch_id == 0
    # When the task is delivered again, it finishes, and no record was copied twice
    monkeypatch.setattr(offset_skips.kafka_io, "produce", real_produce)
    skip = offset_skips.apply_skip(skip_id=skip.pk)
    assert (skip.state, skip.copied) == (OffsetSkipState.DONE, 17), skip.error
    copies = dlq_copies(kafka_bootstrap, world["dlq"], skip)
    coordinates = sorted(
        (int(r.header(c.H_SOURCE_PARTITION)), int(r.header(c.H_SOURCE_OFFSET))) for r in copies
    )
    assert coordinates == [(0, o) for o in range(3, 10)] + [(1, o) for o in range(10)]


def test_a_dlq_that_refuses_the_copies_fails_the_skip_without_moving_anything(
    people, pipeline, world, monkeypatch
):
    def refused(chunk):
        for out in chunk:
            out.error, out.done = "Broker: Topic authorization failed", True

    monkeypatch.setattr(offset_skips.kafka_io, "produce", refused)
    skip = offset_skips.request_skip(
        actor=people["operator"], pipeline=pipeline, partition=0, past_offset=5, reason="poison"
    )
    skip = approve_and_apply(people, skip)
    assert skip.state == OffsetSkipState.FAILED
    assert "refused 3 of 3 copies: Broker: Topic authorization failed" in skip.error, skip.error
    assert checkpoint.committed_position(world["checkpoint"]).batch_id == 0
    assert committed(world["group"], world["source"], (0,)) == [-1001]  # never committed
    assert AuditEvent.objects.filter(action="pipeline.offsets.skip_failed").count() == 1


def test_a_planned_batch_without_its_commit_is_replaced_by_the_move(tmp_path):
    folder = spark_checkpoint(tmp_path, "p", {"t": {"0": 7, "1": 2}}, batches=3)
    (folder / "offsets" / "3").write_text(f'v1\n{SPARK_METADATA}\n{{"t":{{"0":9,"1":2}}}}')
    (folder / "offsets" / ".3.crc").write_bytes(b"crc")
    position = checkpoint.committed_position(folder)
    assert (position.batch_id, position.offsets, position.uncommitted) == (2, {("t", 0): 7, ("t", 1): 2}, 3)
    assert checkpoint.move(folder, {("t", 0): 8}, now_ms=123) == 3
    assert not (folder / "offsets" / ".3.crc").exists()
    lines = (folder / "offsets" / "3").read_text().split("\n")
    assert lines[0] == "v1"
    assert json.loads(lines[2]) == {"t": {"0": 8, "1": 2}}
    assert json.loads(lines[1])["batchTimestampMs"] == 123
    assert json.loads(lines[1])["conf"] == json.loads(SPARK_METADATA)["conf"]
    assert checkpoint.committed_position(folder) == checkpoint.CommittedPosition(
        3, {("t", 0): 8, ("t", 1): 2}
    )


def test_a_checkpoint_in_another_format_is_refused(tmp_path):
    folder = spark_checkpoint(tmp_path, "p", {"t": {"0": 1}})
    (folder / "offsets" / "0").write_text('v2\n{}\n{"0":"{}"}')
    with pytest.raises(checkpoint.CheckpointError, match="v1"):
        checkpoint.committed_position(folder)
    with pytest.raises(checkpoint.CheckpointError, match="no committed batch"):
        checkpoint.committed_position(tmp_path / "nowhere")


# ------------------------------------------------------------------------------------------------- pages


def page_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(type(user).objects.get(pk=user.pk))
    return client


def test_the_offsets_page_shows_positions_a_dry_run_and_requests_a_skip_with_csrf(people, pipeline, world):
    operator = page_client(people["operator"])
    url = f"/pipelines/{pipeline.name}/offsets/"
    # Given the pipeline page, it links to the offsets page
    assert url in page_client(people["viewer"]).get(f"/pipelines/{pipeline.name}/").content.decode()
    # The page lists each partition with where the pipeline resumes, and a form per partition for operators
    page = operator.get(url).content.decode()
    assert 'data-testid="skip-form-0"' in page
    assert 'data-testid="skip-form-1"' in page
    assert 'data-testid="dry-run"' not in page
    # When the operator asks for the dry run of a skip past 5 on partition 0
    dry = operator.get(url, {"topic": world["source"], "partition": "0", "offset": "5"}).content.decode()
    # Then it counts 3 records and offers the request form, with a CSRF token
    assert '<strong data-testid="plan-records">3</strong>' in dry
    assert 'data-testid="request-skip"' in dry
    assert "csrfmiddlewaretoken" in dry
    assert not OffsetSkip.objects.exists()
    # a POST without the CSRF token is refused
    body = {"topic": world["source"], "partition": "0", "offset": "5", "reason": "poison at 5"}
    assert operator.post(url, body).status_code == 403
    token = operator.cookies["csrftoken"].value
    # bad input is shown with the field, nothing is created
    bad = operator.post(url, {**body, "offset": "99"}, HTTP_X_CSRFTOKEN=token)
    assert bad.status_code == 400
    assert 'data-testid="error-offset"' in bad.content.decode()
    # and with the token it is requested, and listed with its range
    done = operator.post(url, body, HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 302
    skip = OffsetSkip.objects.get()
    assert (skip.requested_by, skip.past_offset, skip.partition) == (people["operator"], 5, 0)
    listed = operator.get(url).content.decode()
    assert f'data-skip="{skip.pk}"' in listed
    assert "3 → 6" in listed.replace("&gt;", ">") or "3 \u2192 6" in listed
    # the approvals page names it for the approver
    approvals = page_client(people["approver"]).get("/dlq/approvals/").content.decode()
    assert 'data-testid="offset-skip-link"' in approvals
    assert "3 records copied to the DLQ first" in approvals


def test_a_viewer_sees_the_offsets_page_without_forms_and_another_team_gets_a_404(people, pipeline, world):
    url = f"/pipelines/{pipeline.name}/offsets/"
    viewer = page_client(people["viewer"])
    page = viewer.get(url, {"partition": "0", "offset": "5"}).content.decode()
    assert 'data-testid="partitions"' in page
    assert "skip-form-0" not in page
    assert 'data-testid="dry-run"' not in page
    viewer.get(url)
    token = viewer.cookies["csrftoken"].value
    assert (
        viewer.post(url, {"partition": "0", "offset": "5", "reason": "x"}, HTTP_X_CSRFTOKEN=token).status_code
        == 403
    )
    assert page_client(people["foreign"]).get(url).status_code == 404
    assert not OffsetSkip.objects.exists()


def test_the_approvers_are_told_what_the_skip_moves(people, pipeline, world):
    skip = offset_skips.request_skip(
        actor=people["operator"], pipeline=pipeline, partition=0, past_offset=5, reason="poison"
    )
    event = approval_event(ApprovalRequest.objects.get(offset_skip=skip))
    assert event.title == (
        f"Approval waiting: offset skip {skip.pk} of {pipeline.name} past offset 5 (3 records copied to the DLQ first)"
    )
    assert event.data["kind"] == "offsets"
