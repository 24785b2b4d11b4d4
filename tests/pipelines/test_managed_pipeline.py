"""A managed pipeline end to end, driven only through the REST API, on the real Kafka, Spark and Redis.

One pipeline lives through the whole story, so the Spark start-ups are shared: create, start, 100,000
records with the lag seen falling to 0 in three places, ``kill -9`` and the automatic restart, a graceful
``stop/``, a new start, and a DLQ made unwritable, which halts it for good. The supervisor's beat work
(``reconcile`` and progress ingestion) is called in a loop, as the beat would call it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, TopicPartition
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import Role
from pipelines import lag, progress, supervision
from pipelines.models import MetricSample, Pipeline, PipelineRun, PipelineState
from streamforge_core.kafka import KafkaConnection, consumer_config
from streamforge_core.process_priority import autogroup_niceness
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all, produce

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]

RECORDS = 100_000


def api_for(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def records(start: int, count: int) -> list[tuple[bytes, bytes]]:
    """~1 KB JSON records; even ids are kind "a" (produced), odd ids kind "b" (filtered out)."""
    pad = "x" * 960
    return [
        (str(i).encode(), json.dumps({"id": i, "kind": "a" if i % 2 == 0 else "b", "pad": pad}).encode())
        for i in range(start, start + count)
    ]


@pytest.fixture
def world(kafka_admin, make_topic):
    """Users of two teams, a 2-partition source topic, and the spec of a pipeline reading it (whose
    destination and DLQ topics are deleted afterwards)."""
    team = TeamFactory(name="data-platform")
    source = make_topic("managed-src", partitions=2)
    suffix = uuid.uuid4().hex[:8]
    spec = {
        "source": {"topics": [source]},
        "destinations": [
            {
                "name": "a",
                "topic": f"managed-a-{suffix}",
                "filter": "/kind,==,a",
                "transform": "EXTRACT:/id,id",
            }
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 20_000}},
        "retry": {"max_attempts": 2, "initial_delay_ms": 50, "max_delay_ms": 200},
        "dlq": {"topic": f"managed-dlq-{suffix}", "max_dlq_retries": 1},
    }
    yield {
        "team": team,
        "source": source,
        "spec": spec,
        "admin": member(team, Role.ADMIN, username="ada"),
        "operator": member(team, Role.OPERATOR, username="oti"),
        "viewer": member(team, Role.VIEWER, username="vic"),
        "stranger": member(TeamFactory(name="other-team"), Role.OPERATOR, username="eve"),
    }
    existing = set(kafka_admin.list_topics(timeout=10).topics)
    doomed = [t for t in (spec["destinations"][0]["topic"], spec["dlq"]["topic"]) if t in existing]
    if doomed:
        for future in kafka_admin.delete_topics(doomed).values():
            future.result(timeout=30)


def tick() -> None:
    """What the beat does every few seconds."""
    supervision.reconcile()
    progress.ingest()


def until(predicate, timeout: float, what: str, pause: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tick()
        value = predicate()
        if value:
            return value
        time.sleep(pause)
    runs = list(PipelineRun.objects.values("attempt", "state", "error_type", "error_message"))
    tail = PipelineRun.objects.order_by("-started_at").values_list("log_path", flat=True).first()
    log = Path(tail).read_text(errors="replace")[-3000:] if tail and Path(tail).exists() else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; runs={runs}\n{log}")


def committed_offsets(group: str, topic: str) -> list[int]:
    consumer = Consumer(
        consumer_config(KafkaConnection(django_settings.KAFKA_BOOTSTRAP_SERVERS), group_id=group)
    )
    try:
        return [
            tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
        ]
    finally:
        consumer.close()


def prometheus_lag(pipeline: str, token: str) -> dict[str, float]:
    text = Client(headers={"authorization": f"Bearer {token}"}).get("/metrics").content.decode()
    pattern = re.compile(
        r'streamforge_consumer_lag\{cluster="default",partition="(\d+)",pipeline="'
        + re.escape(pipeline)
        + r'",topic="[^"]+"\} (\S+)'
    )
    return {partition: float(value) for partition, value in pattern.findall(text)}


def test_a_managed_pipeline_runs_recovers_stops_and_halts(
    world, supervised_drivers, kafka_bootstrap, kafka_admin, settings
):
    # supervised_drivers after world: the drivers are killed before the world's topics are deleted
    settings.METRICS_TOKEN = "scrape-secret"  # what Prometheus sends
    settings.DRIVER_NICENESS = 7  # a dense host's: taken by each driver once its first batch is done
    figures: dict[str, float] = {}
    test_started = time.monotonic()
    admin, operator = api_for(world["admin"]), api_for(world["operator"])
    source, spec = world["source"], world["spec"]

    # Given a pipeline created by an admin through the API
    created = admin.post(
        "/api/pipelines/", {"name": "managed", "team": "data-platform", "spec": spec}, format="json"
    )
    assert created.status_code == 201, created.json()

    # a viewer may not start it, and another team's operator does not see it
    assert api_for(world["viewer"]).post("/api/pipelines/managed/start/").status_code == 403
    assert api_for(world["stranger"]).post("/api/pipelines/managed/start/").status_code == 404

    # When an operator starts it, a worker launches a driver
    assert operator.post("/api/pipelines/managed/start/", {"reason": "go"}, format="json").status_code == 202
    first = PipelineRun.objects.get(pipeline__name="managed")
    assert (first.state, first.attempt) == ("starting", 1)
    assert first.pid
    # at the host's niceness from its launch (a start, not a takeover)
    assert psutil.Process(first.pid).nice() == 7

    # and 100,000 records are produced
    started = time.monotonic()
    produce(kafka_bootstrap, source, records(0, RECORDS), partitions=2)
    figures["produce_100k_s"] = time.monotonic() - started

    # Then the lag seen by metrics/ falls to 0 once every record is consumed
    def caught_up(total: int):
        body = operator.get("/api/pipelines/managed/metrics/").json()
        return body if body["lag"] == 0 and body["totals"]["consumed"] >= total else None

    body = until(lambda: caught_up(RECORDS), 300, "100,000 records consumed with lag 0")
    figures["start_to_lag_0_s"] = time.monotonic() - started
    assert PipelineRun.objects.get(pk=first.pk).state == "running"
    assert [p["lag"] for p in body["partitions"]] == [0, 0]
    # the Kafka consumer group says the same (through the endpoint and directly with AdminClient)
    assert body["consumer_group"]["lag"] == 0, body["consumer_group"]
    group = body["consumer_group"]["group"]
    direct = lag.consumer_group_lag(group=group, topics=[source])
    assert [(p.lag, p.committed) for p in direct] == [(0, p.latest) for p in direct]
    assert sum(p.latest for p in direct) == RECORDS
    # and so does /metrics
    assert prometheus_lag("managed", "scrape-secret") == {"0": 0.0, "1": 0.0}
    figures["lag_after_100k"] = body["lag"]
    # ... and so are its JVM and its Python workers, PySpark's worker daemon (a process group of its own)
    # included, and the session's autogroup, once its first batch is done
    driver = psutil.Process(first.pid)
    alive = [p for p in [driver, *driver.children(recursive=True)] if p.status() != psutil.STATUS_ZOMBIE]
    assert {p.nice() for p in alive} == {7}, [(p.pid, p.nice(), p.cmdline()[:3]) for p in alive]
    assert autogroup_niceness(first.pid) in (None, 7)

    # When the driver is killed with SIGKILL, a new run starts by itself
    os.killpg(first.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    second = until(
        lambda: PipelineRun.objects.filter(pipeline__name="managed", attempt=2).first(), 30, "a new run"
    )
    figures["kill_to_new_run_s"] = time.monotonic() - killed_at
    first.refresh_from_db()
    assert (first.state, first.error_type) == ("restarting", "Killed")
    produce(kafka_bootstrap, source, records(RECORDS, 10_000), partitions=2)
    until(lambda: caught_up(RECORDS + 10_000), 240, "the restarted run caught up")
    figures["kill_to_caught_up_s"] = time.monotonic() - killed_at
    assert PipelineRun.objects.get(pk=second.pk).state == "running"

    # When an operator stops it while records flow, it ends STOPPED and the last batch is committed
    produce(kafka_bootstrap, source, records(RECORDS + 10_000, 20_000), partitions=2)
    consumed_before = body["totals"]["consumed"]
    until(
        lambda: (
            operator.get("/api/pipelines/managed/metrics/").json()["totals"]["consumed"] > consumed_before
        ),
        120,
        "a batch of the new records",
    )
    assert operator.post("/api/pipelines/managed/stop/").status_code == 202
    stop_at = time.monotonic()
    until(lambda: Pipeline.objects.get(name="managed").state == PipelineState.STOPPED, 120, "STOPPED")
    figures["stop_s"] = time.monotonic() - stop_at
    second.refresh_from_db()
    assert (second.state, second.exit_code) == ("stopped", 0), second.log_tail
    for _ in range(3):
        tick()
    ends = {
        (p["topic"], p["partition"]): p["end_offset"]
        for p in operator.get("/api/pipelines/managed/metrics/").json()["partitions"]
    }
    assert committed_offsets(group, source) == [ends[(source, 0)], ends[(source, 1)]], (
        "the last batch is committed"
    )
    assert PipelineRun.objects.filter(pipeline__name="managed").count() == 2, (
        "a stopped pipeline stays stopped"
    )
    # While stopped, the lag does not freeze at the last batch's figure: it is the consumer group's, now
    produce(kafka_bootstrap, source, records(RECORDS + 29_000, 40), partitions=2)
    stopped = operator.get("/api/pipelines/managed/metrics/").json()
    assert stopped["lag_source"] == "consumer_group"
    assert stopped["lag"] == stopped["consumer_group"]["lag"] == 40

    # When it is started again, it resumes where it stopped and catches up
    assert operator.post("/api/pipelines/managed/start/").status_code == 202
    third = PipelineRun.objects.filter(pipeline__name="managed").order_by("-started_at").first()
    produce(kafka_bootstrap, source, records(RECORDS + 30_000, 1000), partitions=2)
    until(
        lambda: (
            caught_up(RECORDS + 31_040) and PipelineRun.objects.get(pk=third.pk).last_batch_id is not None
        ),
        240,
        "the third run caught up",
    )

    # When its DLQ topic disappears and a record must be dead-lettered, it ends HALTED and stays so
    for future in kafka_admin.delete_topics([spec["dlq"]["topic"]]).values():
        future.result(timeout=30)
    produce(kafka_bootstrap, source, [(b"bad", b"{not json")] * 10, partitions=2)
    halted_wait = time.monotonic()
    until(lambda: Pipeline.objects.get(name="managed").state == PipelineState.HALTED, 180, "HALTED")
    figures["bad_record_to_halted_s"] = time.monotonic() - halted_wait
    for _ in range(5):
        tick()
        time.sleep(0.5)
    third.refresh_from_db()
    assert PipelineRun.objects.filter(pipeline__name="managed").count() == 3, (
        "a halted pipeline is not restarted"
    )
    assert (third.state, third.exit_code, third.error_type) == ("halted", 3, "DeadLetterQueue")
    detail = operator.get("/api/pipelines/managed/").json()
    assert detail["state"] == "halted"
    assert "DeadLetterQueue" in detail["state_reason"]
    assert spec["dlq"]["topic"] in detail["state_reason"]
    runs = operator.get("/api/pipelines/managed/runs/").json()
    assert [r["state"] for r in runs["results"]] == ["halted", "stopped", "restarting"]

    # And the accounting identity holds for every batch, and no kind-a record was lost across it all
    for sample in MetricSample.objects.filter(pipeline__name="managed"):
        outcome = sample.destinations["a"]
        assert outcome["produced"] + outcome["filtered"] + outcome["dead_lettered"] == sample.consumed
    arrived = {
        int(r.value and json.loads(r.value)["id"])
        for r in consume_all(kafka_bootstrap, spec["destinations"][0]["topic"])
    }
    expected = {i for i in range(RECORDS + 31_000) if i % 2 == 0}
    assert expected <= arrived, f"{len(expected - arrived)} records lost"

    figures["test_s"] = time.monotonic() - test_started
    print("\nmanaged pipeline figures: " + ", ".join(f"{k}={v:.1f}" for k, v in figures.items()))
