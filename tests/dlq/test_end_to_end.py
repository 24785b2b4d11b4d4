"""The console's round trip on real Kafka, Spark and Redis: a real GitHub event dead-lettered by the running
pipeline is ingested, fixed, replayed, and arrives on its destination; a record replayed without a fix fails
again and comes back linked to its first failure."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import NewTopic
from django.conf import settings

from dlq.ingest import Ingester
from dlq.models import DeadLetter, Replay, ReplayState, Status
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from tests.dlq.conftest import api_for, missing_size_push
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]


def ingest_until(ingester: Ingester, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ingester.run_once()
        if predicate():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_a_fixed_github_event_is_replayed_through_the_running_pipeline(
    people, pipeline, github_events, kafka_admin, kafka_bootstrap, tmp_path
):
    spec = pipeline.current_revision.spec
    source = spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    plan = ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=pipeline.name))
    driver = DriverProcess(
        spec=spec,
        pipeline=pipeline.name,
        workdir=tmp_path / "driver",
        bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL,
        jars=list(settings.SPARK_JARS),
    ).start()
    ingester = Ingester(group_id=f"ingest-{pipeline.name}", poll_timeout=0.5, refresh_seconds=1)
    try:
        broken = missing_size_push(github_events)
        real = [(None, line) for line in github_events[:40]]
        produce(kafka_bootstrap, source, [*real, (b"fix-me", broken), (b"replay-as-is", broken)])
        driver.wait_consumed(42, timeout=240)

        ingest_until(
            ingester,
            lambda: (
                DeadLetter.objects.filter(key_text__startswith="fix-me").exists()
                and DeadLetter.objects.filter(key_text__startswith="replay-as-is").exists()
            ),
            60,
            "the two dead letters",
        )
        to_fix = DeadLetter.objects.get(key_text="fix-me")
        as_is = DeadLetter.objects.get(key_text="replay-as-is")
        assert (to_fix.error_type, to_fix.destination, to_fix.pipeline_id) == (
            "JsonPathNotFound",
            "pushes",
            pipeline.pk,
        )
        assert bytes(to_fix.value) == broken  # the original bytes, untouched

        operator = api_for(people["operator"])
        event = json.loads(broken)
        event["payload"]["size"] = len(event["payload"]["commits"])
        fixed = operator.post(
            f"/api/dlq/messages/{to_fix.pk}/fix/",
            {"value": event, "reason": "size = number of commits"},
            format="json",
        ).json()
        assert fixed["check"]["would_pass"] is True
        replayed = operator.post(f"/api/dlq/messages/{to_fix.pk}/replay/", {}, format="json")
        assert replayed.status_code == 201, replayed.json()
        at = f"{source}/{replayed.json()['partition']}/{replayed.json()['offset']}"
        pushes = spec["destinations"][0]["topic"]

        deadline = time.monotonic() + 120
        arrived = []
        while not arrived and time.monotonic() < deadline:
            arrived = [r for r in consume_all(kafka_bootstrap, pushes) if r.header(c.H_LINEAGE) == at]
            time.sleep(1)
        assert arrived, f"the replayed record {at} did not reach {pushes}:\n{driver.log_tail()}"
        assert json.loads(arrived[0].value) == {
            "actor": event["actor"]["login"],
            "size": event["payload"]["size"],
        }

        # Replayed without a fix it would fail again: refused, naming where, until forced with a reason.
        warned = operator.post(f"/api/dlq/messages/{as_is.pk}/replay/", {}, format="json")
        assert warned.status_code == 409
        assert [(w["destination"], w["error_type"]) for w in warned.json()["would_fail"]] == [
            ("pushes", "JsonPathNotFound")
        ]
        assert DeadLetter.objects.get(pk=as_is.pk).status == Status.PARKED  # nothing was claimed
        again = operator.post(
            f"/api/dlq/messages/{as_is.pk}/replay/", {"force": True, "reason": "see it fail"}, format="json"
        )
        assert again.status_code == 201
        ingest_until(
            ingester, lambda: DeadLetter.objects.filter(replay_of=as_is).exists(), 120, "the second failure"
        )
        second = DeadLetter.objects.get(replay_of=as_is)
        assert (second.error_type, second.status) == ("JsonPathNotFound", Status.PARKED)
        assert Replay.objects.get(dead_letter=as_is).state == ReplayState.FAILED_AGAIN
        assert DeadLetter.objects.get(pk=to_fix.pk).status == Status.REPLAYED
    finally:
        driver.ensure_stopped()
        ingester.stop.set()
        ingester.run()
        kafka_admin.delete_topics([source, *plan.created])
