"""A redrive policy end to end on real Kafka, Spark, Redis, PostgreSQL and a Celery worker process (issue #32,
acceptance): the running driver dead-letters real GitHub pushes that lack ``payload.size``; they are ingested;
an approved policy for ``JsonPathNotFound`` starts a run on the beat's tick; the worker replays them to the
source topic; the driver dead-letters them again and ingest links each back to the replay; the next tick's
brake pauses the policy, and the worker delivers the ``redrive.paused`` notification to the team's
webhook. Nothing of them reached ``pushes``."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import NewTopic

from dlq.ingest import Ingester
from dlq.models import BulkAction, DeadLetter, RedrivePolicy, RedriveState, Replay, ReplayState, Status
from dlq.services import redrive
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from tests.dlq.conftest import api_for, missing_size_push
from tests.dlq.test_end_to_end import ingest_until
from tests.notifications.conftest import receiver, smtp, webhook_channel, worker_process  # noqa: F401
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_a_policy_replays_on_its_tick_through_a_worker_and_pauses_itself_when_they_fail_again(
    people, team, pipeline, github_events, kafka_admin, kafka_bootstrap, tmp_path, settings,
    worker_process, receiver,  # noqa: F811
):  # fmt: skip
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True
    webhook_channel(people["admin"], team, receiver, events=("redrive.paused",))
    spec = pipeline.current_revision.spec
    source, pushes = spec["source"]["topics"][0], spec["destinations"][0]["topic"]
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=pipeline.name))
    driver = DriverProcess(
        spec=spec, pipeline=pipeline.name, workdir=tmp_path / "driver", bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL, jars=list(settings.SPARK_JARS), revision=1,
    )  # fmt: skip
    ingester = Ingester(group_id=f"ingest-{pipeline.name}", poll_timeout=0.5, refresh_seconds=1)
    try:
        broken = missing_size_push(github_events)
        produce(
            kafka_bootstrap,
            source,
            [(None, e) for e in github_events[:20]] + [(f"rd-{i}".encode(), broken) for i in range(3)],
        )
        driver.start().wait_consumed(23, timeout=240)
        ingest_until(
            ingester,
            lambda: DeadLetter.objects.filter(key_text__startswith="rd-").count() == 3,
            60,
            "three dead letters",
        )
        first = list(DeadLetter.objects.filter(key_text__startswith="rd-").order_by("id"))

        made = api_for(people["operator"]).post(
            "/api/dlq/redrive-policies/",
            {"pipeline": pipeline.name, "name": "retry-data", "error_types": ["JsonPathNotFound"],
             "delay_seconds": 0, "max_attempts": 3, "interval_seconds": 10, "rate_limit": 100,
             "pause_threshold": 0.5, "pause_min_replays": 3},
            format="json",
        )  # fmt: skip
        assert made.status_code == 202, made.json()
        approval = made.json()["pending_approval"]["id"]
        approved = api_for(people["approver"]).post(
            f"/api/dlq/approvals/{approval}/approve/", {}, format="json"
        )
        assert approved.status_code == 200, approved.json()
        policy = RedrivePolicy.objects.get(pk=made.json()["id"])

        [run_id] = redrive.tick().started  # the beat's tick; the run goes to the worker process
        _wait(
            lambda: BulkAction.objects.get(pk=run_id).state == "completed",
            60,
            f"the worker to run bulk {run_id} (log: {worker_process.log_path})",
        )
        run = BulkAction.objects.get(pk=run_id)
        assert (run.total, run.succeeded, run.redrive_policy_id) == (3, 3, policy.pk)
        assert set(
            DeadLetter.objects.filter(pk__in=[d.pk for d in first]).values_list("status", flat=True)
        ) == {Status.REPLAYED}

        # The driver reads the replayed records and dead-letters them again; ingest links each to its replay.
        driver.wait_consumed(26, timeout=180)
        ingest_until(
            ingester,
            lambda: Replay.objects.filter(bulk=run, state=ReplayState.FAILED_AGAIN).count() == 3,
            90,
            "the three replays to come back to the DLQ",
        )
        again = DeadLetter.objects.filter(replay_of__in=first)
        assert sorted(again.values_list("replay_of_id", flat=True)) == [d.pk for d in first]
        assert set(again.values_list("status", flat=True)) == {Status.PARKED}

        RedrivePolicy.objects.filter(pk=policy.pk).update(next_run_at=None)  # its next run is not due yet
        done = redrive.tick()
        assert (done.paused, done.started) == ((policy.pk,), ())
        policy.refresh_from_db()
        assert policy.state == RedriveState.PAUSED
        assert "3 of 3 replays" in policy.paused_reason
        _wait(
            lambda: any(b.get("event") == "redrive.paused" for b in receiver.bodies()),
            60,
            "the redrive.paused notification",
        )
        [sent] = [b for b in receiver.bodies() if b.get("event") == "redrive.paused"]
        assert (sent["data"]["policy"], sent["data"]["pipeline"]) == (policy.pk, pipeline.name)
        assert receiver.bad_signatures == 0
        assert redrive.tick().started == ()  # paused: no further run

        replayed_at = {
            f"{source}/{r.partition}/{r.offset}"
            for r in consume_all(kafka_bootstrap, source)
            if r.header(c.H_REPLAY_OF) is not None
        }
        assert len(replayed_at) == 3
        assert not [r for r in consume_all(kafka_bootstrap, pushes) if r.header(c.H_LINEAGE) in replayed_at]
    finally:
        driver.ensure_stopped()
        ingester.stop.set()
        ingester.run()
