"""Progress ingestion through a Redis consumer group, downsampling, retention, /metrics and the alert rules,
over synthetic driver events on the real Redis."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import redis
from django.conf import settings as django_settings
from django.db import OperationalError, connection

from pipelines import alerts, progress
from pipelines.models import (
    Alert,
    MetricSample,
    PartitionProgress,
    PipelineRun,
    PipelineState,
    PipelineTotals,
)
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.redis


@pytest.fixture
def group(settings):
    """A consumer group of this test only, created before any event is added (it reads new events)."""
    settings.PROGRESS_CONSUMER_GROUP = f"test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    progress.ensure_group(client, settings.PROGRESS_CONSUMER_GROUP)
    yield settings.PROGRESS_CONSUMER_GROUP
    client.xgroup_destroy(c.PROGRESS_STREAM, settings.PROGRESS_CONSUMER_GROUP)


@pytest.fixture
def run(admin_user, team):
    pipeline = create_pipeline(
        actor=admin_user, name=f"p-{uuid.uuid4().hex[:6]}", team=team, spec=github_spec()
    )
    return PipelineRun.objects.create(
        pipeline=pipeline,
        revision=pipeline.current_revision,
        run_id=uuid.uuid4(),
        attempt=1,
        state=PipelineState.RUNNING,
        host="h",
    )


def event(run, batch_id, *, consumed=100, end=100, latest=150, time_ms=None, dlq=0, commit_failed=False):
    body = {
        "type": "progress",
        "pipeline": run.pipeline.name,
        "run_id": str(run.run_id),
        "batch_id": batch_id,
        "time_ms": time_ms or int(time.time() * 1000),
        "duration_ms": 12.5,
        "consumed": consumed,
        "destinations": {
            "pushes": {"produced": consumed - 10 - dlq, "filtered": 10, "dead_lettered": dlq},
            "pull-requests": {"produced": 5, "filtered": consumed - 5 - dlq, "dead_lettered": dlq},
        },
        "dead_lettered": {"MessageDeserialization": dlq} if dlq else {},
        "dlq_records": dlq,
        "retries": 2,
        "offsets": {"github.events": {"0": {"start": end - consumed, "end": end, "latest": latest}}},
    }
    if commit_failed:
        body["group_commit_failed"] = True
    return body


def publish(*events):
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    for body in events:
        client.xadd(c.PROGRESS_STREAM, {"event": json.dumps(body)})


@pytest.mark.django_db
def test_each_progress_event_becomes_one_sample_with_totals_and_partition_lag(group, run):
    publish(event(run, 0, end=100, latest=150), event(run, 1, end=150, latest=150))
    report = progress.ingest()
    assert (report.events, report.stored) == (2, 2)
    assert progress.ingest().events == 0, "acknowledged events are not read again"
    sample = MetricSample.objects.get(run=run, batch_id=0)
    assert (sample.consumed, sample.produced, sample.filtered, sample.dead_lettered, sample.lag) == (
        100, 95, 105, 0, 50,
    )  # fmt: skip
    totals = PipelineTotals.objects.get(pipeline=run.pipeline)
    assert (totals.consumed, totals.batches, totals.commits_succeeded) == (200, 2, 2)
    row = PartitionProgress.objects.get(pipeline=run.pipeline)
    assert (row.topic, row.partition, row.end_offset, row.lag) == ("github.events", 0, 150, 0)
    run.refresh_from_db()
    assert run.last_batch_id == 1


@pytest.mark.django_db
def test_a_batch_delivered_twice_is_stored_once(group, run):
    publish(event(run, 7), event(run, 7))
    assert progress.ingest().stored == 1
    assert PipelineTotals.objects.get(pipeline=run.pipeline).consumed == 100


@pytest.mark.django_db(transaction=True)
def test_two_beats_ingesting_at_once_store_every_event_once(group, run):
    publish(*(event(run, i) for i in range(300)))
    reports = []

    def beat(name):
        try:
            for _ in range(50):  # a beat that fails half-way runs again next tick, with its pending events
                try:
                    reports.append(progress.ingest(consumer=name))
                    return
                except OperationalError:
                    time.sleep(0.05)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat, args=(f"beat-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reports) == 2, "both beats finished"
    assert MetricSample.objects.filter(run=run).count() == 300
    assert PipelineTotals.objects.get(pipeline=run.pipeline).batches == 300


@pytest.mark.django_db
def test_events_of_runs_we_did_not_launch_are_skipped(group, run):
    stranger = event(run, 0)
    stranger["run_id"] = str(uuid.uuid4())
    publish(stranger)
    assert (progress.ingest().skipped, MetricSample.objects.count()) == (1, 0)


@pytest.mark.django_db
def test_samples_older_than_the_retention_are_deleted_but_totals_stay(group, run, settings):
    settings.METRICS_RETENTION_DAYS = 1
    old = int(time.time() * 1000) - 2 * 24 * 3600 * 1000
    publish(event(run, 0, time_ms=old), event(run, 1))
    assert progress.ingest().deleted == 1
    assert list(MetricSample.objects.values_list("batch_id", flat=True)) == [1]
    assert PipelineTotals.objects.get(pipeline=run.pipeline).consumed == 200


@pytest.mark.django_db
def test_a_long_range_is_downsampled_into_buckets(group, run):
    start = (int(time.time()) // 60 - 10) * 60_000  # minute-aligned, within the retention
    publish(*(event(run, i, time_ms=start + i * 1000, latest=100 + i) for i in range(120)))
    progress.ingest()
    series = progress.metric_series(
        pipeline=run.pipeline, since_ms=start, until_ms=start + 120_000, bucket_seconds=60
    )
    assert [(p["batches"], p["consumed"]) for p in series] == [(60, 6000), (60, 6000)]
    assert series[1]["lag"] == 119
    assert progress.bucket_seconds_for(7 * 24 * 3600) == 3600


@pytest.mark.django_db
def test_metrics_exposes_the_spec_names_labelled_by_pipeline(group, run, admin_client):
    publish(event(run, 0, dlq=3), event(run, 1, commit_failed=True))
    progress.ingest()
    text = admin_client.get("/metrics").content.decode()
    name = run.pipeline.name
    for line in (
        f'streamforge_messages_consumed_total{{cluster="default",pipeline="{name}"}} 200.0',
        f'streamforge_messages_produced_total{{cluster="default",pipeline="{name}"}} 187.0',
        f'streamforge_commits_total{{cluster="default",pipeline="{name}",result="success"}} 1.0',
        f'streamforge_commits_total{{cluster="default",pipeline="{name}",result="failure"}} 1.0',
        f'streamforge_retries_total{{cluster="default",pipeline="{name}"}} 4.0',
        f'streamforge_dlq_messages_total{{cluster="default",pipeline="{name}"}} 3.0',
        f'streamforge_consumer_lag{{cluster="default",partition="0",pipeline="{name}",topic="github.events"}} 50.0',
    ):
        assert line in text, line


@pytest.mark.django_db
def test_the_alert_rules_fire_and_resolve(group, run):
    now = int(time.time() * 1000)
    publish(
        *(
            event(
                run,
                i,
                time_ms=now - (60 - i) * 1000,
                end=100 * (i + 1),
                latest=100 * (i + 1) + 500 * i,
                dlq=30,
            )
            for i in range(5)
        ),
        event(run, 5, time_ms=now, commit_failed=True, end=600, latest=3100),
    )
    progress.ingest()
    firing = {a.rule for a in alerts.evaluate(now_ms=now)}
    assert firing == {"HighCommitFailureRate", "DLQBacklog", "ConsumerLagIncreasing"}
    assert alerts.evaluate(now_ms=now + 3600_000) == []
    assert Alert.objects.filter(resolved_at=None).count() == 0
    assert Alert.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_firing_alert_whose_figure_changed_is_pushed_again(group, run, monkeypatch):
    """The DLQBacklog text on an open page followed the first evaluation only ("stale for a minute"): every
    evaluation that changes an alert's sentence pushes it, and one that changes nothing pushes nothing."""
    pushed: list[str] = []
    monkeypatch.setattr(alerts.broadcast, "alert", lambda update: pushed.append(update["summary"]))
    now = int(time.time() * 1000)
    publish(event(run, 0, time_ms=now - 2000, dlq=150))
    progress.ingest()
    alerts.evaluate(now_ms=now)
    alerts.evaluate(now_ms=now + 1)
    publish(event(run, 1, time_ms=now - 1000, dlq=80))
    progress.ingest()
    alerts.evaluate(now_ms=now + 2)
    assert pushed == [
        "150 records went to the DLQ in the last 15 minutes",
        "230 records went to the DLQ in the last 15 minutes",
    ]


def test_the_rules_file_names_the_same_alerts():
    text = (django_settings.BASE_DIR / "deploy" / "prometheus" / "alerts.yml").read_text()
    for rule in ("HighCommitFailureRate", "DLQBacklog", "ConsumerLagIncreasing"):
        assert f"alert: {rule}" in text
