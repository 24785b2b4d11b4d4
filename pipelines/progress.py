"""Progress ingestion: the drivers' per-batch events become metric samples, running totals and per-partition
positions, pushed live to the browser; and the figures read back for the API (series, rates, the last batch,
with the consumer-group lag from ``pipelines.lag``).

The drivers append JSON events to the Redis stream ``streamforge:progress``. ``ingest`` reads it through a
Redis consumer group (XREADGROUP, then XACK once stored), so with two beats each event is read by one of
them; the unique (run, batch) constraint makes a redelivered event (a reader that died between storing and
acknowledging) a no-op. Entries left pending by a dead reader are claimed back after a minute.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, TypedDict

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Avg, BigIntegerField, Count, ExpressionWrapper, F, Max, Sum
from django.utils import timezone

from pipelines import broadcast
from pipelines.backlog import parked_backlog
from pipelines.clusters import connection_for
from pipelines.lag import consumer_group_lag
from pipelines.lifecycle import available_actions, revision_numbers
from pipelines.models import (
    ACTIVE_STATES,
    MetricSample,
    PartitionProgress,
    Pipeline,
    PipelineRun,
    PipelineTotals,
)
from streamforge_core import contract as c
from streamforge_core import redis_client

log = logging.getLogger(__name__)

READ_COUNT = 500
CLAIM_IDLE_MS = 60_000


@dataclass(frozen=True)
class IngestReport:
    """One ingest pass: events read from the stream, samples stored (new batches), events of unknown runs
    or types skipped, samples deleted by retention."""

    events: int
    stored: int
    skipped: int
    deleted: int


def _client() -> redis.Redis:
    return redis_client.connect(settings.REDIS_URL, timeout=10, connect_timeout=5)


def ensure_group(client: redis.Redis, group: str) -> None:
    """Create the consumer group at the stream's end (new events only), creating the stream if needed."""
    try:
        client.xgroup_create(c.PROGRESS_STREAM, group, id="$", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def ingest(
    *,
    client: redis.Redis | None = None,
    group: str | None = None,
    consumer: str | None = None,
    max_events: int = 20_000,
) -> IngestReport:
    """Read new progress events (at most ``max_events``), store them, acknowledge them, then delete samples
    older than ``METRICS_RETENTION_DAYS``. Raises redis.RedisError when Redis is unreachable (the next beat
    tick tries again; unacknowledged events are not lost)."""
    client = client or _client()
    group = group or settings.PROGRESS_CONSUMER_GROUP
    consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
    ensure_group(client, group)
    events = stored = skipped = 0
    # First what this consumer read and did not acknowledge (it failed half-way), then what a dead consumer
    # left pending for a minute, then new events.
    own: Any = client.xreadgroup(group, consumer, {c.PROGRESS_STREAM: "0"}, count=READ_COUNT)
    claimed: Any = client.xautoclaim(
        c.PROGRESS_STREAM, group, consumer, CLAIM_IDLE_MS, "0-0", count=READ_COUNT
    )
    batches: list[list[tuple[bytes, dict[bytes, bytes]]]] = []
    if own and own[0][1]:
        batches.append(list(own[0][1]))
    if claimed[1]:
        batches.append(list(claimed[1]))
    while events < max_events:
        if batches:
            entries = batches.pop()
        else:
            response: Any = client.xreadgroup(group, consumer, {c.PROGRESS_STREAM: ">"}, count=READ_COUNT)
            if not response:
                break
            entries = list(response[0][1])
            if not entries:
                break
        ids: list[bytes] = []
        for entry_id, fields in entries:
            ids.append(entry_id)
            if not fields:  # trimmed away while pending
                continue
            events += 1
            try:
                event = json.loads(fields[b"event"])
            except (KeyError, ValueError):
                skipped += 1
                continue
            if record_event(event):
                stored += 1
            else:
                skipped += 1
        if ids:
            client.xack(c.PROGRESS_STREAM, group, *ids)
    deleted = apply_retention()
    return IngestReport(events=events, stored=stored, skipped=skipped, deleted=deleted)


def apply_retention(*, now_ms: int | None = None) -> int:
    """Delete metric samples older than ``METRICS_RETENTION_DAYS``; the number deleted."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    cutoff = now_ms - settings.METRICS_RETENTION_DAYS * 24 * 3600 * 1000
    deleted, _ = MetricSample.objects.filter(time_ms__lt=cutoff).delete()
    return deleted


def _run_for(event: dict[str, Any]) -> PipelineRun | None:
    try:
        run_id = uuid.UUID(str(event.get("run_id")))
    except ValueError:
        return None
    return PipelineRun.objects.select_related("pipeline").filter(run_id=run_id).first()


def record_event(event: dict[str, Any]) -> bool:
    """Store one driver event: ``progress`` becomes a MetricSample (plus totals and partition positions),
    ``started`` records the Spark application id. False for events of runs this control plane did not
    launch, unknown types, and batches already stored."""
    run = _run_for(event)
    if run is None:
        return False
    if event.get("type") == "started":
        PipelineRun.objects.filter(pk=run.pk).update(spark_app_id=str(event.get("app_id") or ""))
        return True
    if event.get("type") != "progress":
        return False
    try:
        with transaction.atomic():
            sample = _store_sample(run, event)
            update = _progress_update(run.pipeline.name, sample)
    except IntegrityError:
        return False  # this batch was stored already (an event delivered twice)
    transaction.on_commit(lambda: broadcast.progress(update))
    return True


def _store_sample(run: PipelineRun, event: dict[str, Any]) -> MetricSample:
    destinations: dict[str, dict[str, int]] = event.get("destinations") or {}
    offsets: dict[str, dict[str, dict[str, Any]]] = event.get("offsets") or {}
    lags = [
        int(pos["latest"]) - int(pos["end"] or 0)
        for partitions in offsets.values()
        for pos in partitions.values()
        if pos.get("latest") is not None
    ]
    time_ms = int(event.get("time_ms") or time.time() * 1000)
    group_commit_failed = bool(event.get("group_commit_failed"))
    sample = MetricSample.objects.create(
        pipeline_id=run.pipeline_id,
        run=run,
        batch_id=int(event["batch_id"]),
        time_ms=time_ms,
        duration_ms=float(event.get("duration_ms") or 0),
        consumed=int(event.get("consumed") or 0),
        already_committed=int(event.get("already_committed") or 0),
        lost=int(event.get("lost") or 0),
        produced=sum(int(d.get("produced", 0)) for d in destinations.values()),
        filtered=sum(int(d.get("filtered", 0)) for d in destinations.values()),
        dead_lettered=sum(int(d.get("dead_lettered", 0)) for d in destinations.values()),
        dlq_records=int(event.get("dlq_records") or 0),
        retries=int(event.get("retries") or 0),
        dlq_retries=int(event.get("dlq_retries") or 0),
        group_commit_failed=group_commit_failed,
        lag=sum(lags) if lags else None,
        destinations=destinations,
        dead_lettered_by_type=event.get("dead_lettered") or {},
        offsets=offsets,
    )
    totals, _ = PipelineTotals.objects.get_or_create(pipeline_id=run.pipeline_id)
    PipelineTotals.objects.filter(pk=totals.pk).update(
        batches=F("batches") + 1,
        consumed=F("consumed") + sample.consumed,
        produced=F("produced") + sample.produced,
        filtered=F("filtered") + sample.filtered,
        dead_lettered=F("dead_lettered") + sample.dead_lettered,
        dlq_records=F("dlq_records") + sample.dlq_records,
        retries=F("retries") + sample.retries + sample.dlq_retries,
        lost=F("lost") + sample.lost,
        commits_succeeded=F("commits_succeeded") + (0 if group_commit_failed else 1),
        commits_failed=F("commits_failed") + (1 if group_commit_failed else 0),
    )
    at = datetime.fromtimestamp(time_ms / 1000, tz=timezone.get_current_timezone())
    for topic, partitions in offsets.items():
        for partition, pos in partitions.items():
            if pos.get("latest") is None or pos.get("end") is None:
                continue
            end, latest = int(pos["end"] or 0), int(pos["latest"] or 0)
            row, created = PartitionProgress.objects.get_or_create(
                pipeline_id=run.pipeline_id,
                topic=topic,
                partition=int(partition),
                defaults={"end_offset": end, "latest_offset": latest, "lag": latest - end, "updated_at": at},
            )
            if not created and row.updated_at <= at:
                PartitionProgress.objects.filter(pk=row.pk).update(
                    end_offset=end, latest_offset=latest, lag=latest - end, updated_at=at
                )
    PipelineRun.objects.filter(pk=run.pk).update(last_progress_at=at, last_batch_id=sample.batch_id)
    if sample.consumed > 0:
        # A run that gets batches through is healthy: the next failure starts the backoff from the beginning.
        Pipeline.objects.filter(pk=run.pipeline_id).update(consecutive_failures=0)
    return sample


def count_failed_commit(*, pipeline_id: int) -> None:
    """Count a batch whose offsets were not committed because its run ended (crash, halt, kill)."""
    totals, _ = PipelineTotals.objects.get_or_create(pipeline_id=pipeline_id)
    PipelineTotals.objects.filter(pk=totals.pk).update(commits_failed=F("commits_failed") + 1)


def _progress_update(pipeline: str, sample: MetricSample) -> broadcast.ProgressUpdate:
    partitions: list[broadcast.PartitionLagUpdate] = [
        {
            "topic": topic,
            "partition": int(partition),
            "end": int(pos["end"] or 0),
            "latest": int(pos["latest"] or 0),
            "lag": int(pos["latest"] or 0) - int(pos["end"] or 0),
        }
        for topic, parts in sample.offsets.items()
        for partition, pos in parts.items()
        if pos.get("latest") is not None
    ]
    return {
        "type": "pipeline.progress",
        "pipeline": pipeline,
        "run_id": str(sample.run.run_id),
        "batch_id": sample.batch_id,
        "time_ms": sample.time_ms,
        "duration_ms": sample.duration_ms,
        "consumed": sample.consumed,
        "produced": sample.produced,
        "filtered": sample.filtered,
        "dead_lettered": sample.dead_lettered,
        "retries": sample.retries,
        "dlq_records": sample.dlq_records,
        "dead_lettered_by_type": {str(k): int(v) for k, v in sample.dead_lettered_by_type.items()},
        "lag": sample.lag,
        "partitions": partitions,
        "figures": live_figures(pipeline_id=sample.pipeline_id, now_ms=sample.time_ms),
    }


def live_figures(*, pipeline_id: int, now_ms: int | None = None) -> broadcast.LiveFigures:
    """The pipeline's rates over the last ``RATE_WINDOW_SECONDS`` before ``now_ms`` (default: now), its lag
    over every source partition it has read and the worst of them, and its dead-lettered totals: what the
    overview shows at first and what each progress update refreshes (``live_figures_many`` of one)."""
    return live_figures_many(pipeline_ids=[pipeline_id], now_ms=now_ms)[pipeline_id]


def live_figures_many(
    *, pipeline_ids: Collection[int], now_ms: int | None = None
) -> dict[int, broadcast.LiveFigures]:
    """``live_figures`` of each of ``pipeline_ids``, {pipeline id: figures}, in three queries whatever their
    number (the window's sums grouped by pipeline along the ``(pipeline, time_ms)`` index, the partition
    rows, the totals rows): the overview lists every pipeline a user sees, and a query or three per row made
    it the console's slowest page (bench/FINDINGS.md §11, "Console under load"). Figures come from what the
    progress ingest stored; no Kafka call. A pipeline with nothing stored gets zero rates, lag None."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    ids = list(pipeline_ids)
    if not ids:
        return {}
    windows = {
        row["pipeline_id"]: row
        for row in MetricSample.objects.filter(
            pipeline_id__in=ids, time_ms__gte=now_ms - RATE_WINDOW_SECONDS * 1000, time_ms__lte=now_ms
        )
        .order_by()
        .values("pipeline_id")
        .annotate(consumed=Sum("consumed"), produced=Sum("produced"))
    }
    partitions: dict[int, list[Any]] = {}
    for row in PartitionProgress.objects.filter(pipeline_id__in=ids).values(
        "pipeline_id", "topic", "partition", "lag"
    ):
        partitions.setdefault(row["pipeline_id"], []).append(row)
    totals = {
        pipeline_id: (dead_lettered, dlq_records)
        for pipeline_id, dead_lettered, dlq_records in PipelineTotals.objects.filter(
            pipeline_id__in=ids
        ).values_list("pipeline_id", "dead_lettered", "dlq_records")
    }
    figures: dict[int, broadcast.LiveFigures] = {}
    for pipeline_id in ids:
        window = windows.get(pipeline_id, {})
        rows = partitions.get(pipeline_id, [])
        worst = max(rows, key=lambda row: (row["lag"], row["topic"], -row["partition"]), default=None)
        dead_lettered, dlq_records = totals.get(pipeline_id, (0, 0))
        figures[pipeline_id] = {
            "consumed_per_second": float(window.get("consumed") or 0) / RATE_WINDOW_SECONDS,
            "produced_per_second": float(window.get("produced") or 0) / RATE_WINDOW_SECONDS,
            "lag": sum(row["lag"] for row in rows) if rows else None,
            "worst_partition": (
                {"topic": worst["topic"], "partition": worst["partition"], "lag": worst["lag"]}
                if worst is not None
                else None
            ),
            "dead_lettered": int(dead_lettered or 0),
            "dlq_records": int(dlq_records or 0),
        }
    return figures


# ------------------------------------------------------------------------------------------ reading back


class SeriesPoint(TypedDict):
    """One time bucket of a pipeline's samples: ``time_ms`` is the bucket's start (epoch ms); counts are
    sums over the bucket's batches, ``lag`` the largest lag seen, ``duration_ms`` the mean batch time."""

    time_ms: int
    batches: int
    consumed: int
    produced: int
    filtered: int
    dead_lettered: int
    retries: int
    lag: int | None
    duration_ms: float | None


#: A chart window this long or longer draws one point per hour (a week: 168 points), whatever ``points`` says.
HOURLY_FROM_SECONDS = 2 * 24 * 3600


def bucket_seconds_for(range_seconds: float, *, points: int = 300) -> int:
    """A bucket width giving about ``points`` points over the range, rounded up to a friendly width."""
    for width in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 24 * 3600):
        if range_seconds / width <= points:
            return width
    return 24 * 3600


def metric_series(
    *, pipeline: Pipeline, since_ms: int, until_ms: int, bucket_seconds: int
) -> list[SeriesPoint]:
    """The pipeline's samples between ``since_ms`` and ``until_ms``, aggregated in the database into
    buckets of ``bucket_seconds`` (downsampling: a week at 10-minute buckets is ~1,000 rows)."""
    bucket_ms = max(1, bucket_seconds) * 1000
    bucket = ExpressionWrapper(F("time_ms") / bucket_ms * bucket_ms, output_field=BigIntegerField())
    rows = (
        MetricSample.objects.filter(pipeline=pipeline, time_ms__gte=since_ms, time_ms__lt=until_ms)
        .annotate(bucket=bucket)
        .values("bucket")
        .annotate(
            batches=Count("id"),
            consumed_sum=Sum("consumed"),
            produced_sum=Sum("produced"),
            filtered_sum=Sum("filtered"),
            dead_lettered_sum=Sum("dead_lettered"),
            retries_sum=Sum("retries"),
            lag_max=Max("lag"),
            duration_avg=Avg("duration_ms"),
        )
        .order_by("bucket")
    )
    return [
        {
            "time_ms": int(row["bucket"]),
            "batches": int(row["batches"]),
            "consumed": int(row["consumed_sum"] or 0),
            "produced": int(row["produced_sum"] or 0),
            "filtered": int(row["filtered_sum"] or 0),
            "dead_lettered": int(row["dead_lettered_sum"] or 0),
            "retries": int(row["retries_sum"] or 0),
            "lag": row["lag_max"],
            "duration_ms": row["duration_avg"],
        }
        for row in rows
    ]


RATE_WINDOW_SECONDS = 60


class PartitionLag(TypedDict):
    """One source partition: the offset processed up to (exclusive; the group's committed offset in
    ``ConsumerGroupLag``, None without a commit), the partition's latest offset and their difference."""

    topic: str
    partition: int
    end_offset: int | None
    latest_offset: int
    lag: int


class ConsumerGroupLag(TypedDict, total=False):
    """The pipeline's Kafka consumer group as Kafka sees it: its name, total lag and lag per partition, or
    ``error`` when Kafka did not answer (empty when the pipeline has no revision)."""

    group: str
    lag: int
    partitions: list[PartitionLag]
    error: str


class MetricRates(TypedDict):
    """Records per second over the last ``RATE_WINDOW_SECONDS``."""

    consumed_per_second: float
    produced_per_second: float
    dead_lettered_per_second: float


class MetricTotals(TypedDict):
    """Counts since the pipeline was created (``PipelineTotals``)."""

    batches: int
    consumed: int
    produced: int
    filtered: int
    dead_lettered: int
    dlq_records: int
    retries: int
    lost: int
    commits_succeeded: int
    commits_failed: int


class BatchFigures(TypedDict):
    """One micro-batch as the driver reported it (``MetricSample``): counts are records, ``time_ms`` epoch
    ms, ``duration_ms`` the batch time; ``destinations``, ``dead_lettered_by_type`` and ``offsets`` as the
    sample stores them."""

    run_id: str
    batch_id: int
    time_ms: int
    duration_ms: float
    consumed: int
    produced: int
    filtered: int
    dead_lettered: int
    dlq_records: int
    retries: int
    lost: int
    lag: int | None
    destinations: dict[str, dict[str, int]]
    dead_lettered_by_type: dict[str, int]
    offsets: dict[str, dict[str, dict[str, int | None]]]


class FiringAlert(TypedDict):
    """An alert firing now: its rule, severity, summary and since when (ISO 8601)."""

    rule: str
    severity: str
    summary: str
    since: str


class PipelineMetrics(TypedDict):
    """What the metrics endpoint shows (see ``pipeline_metrics``); ``bucket_seconds`` and ``series`` only
    when a range was asked for."""

    pipeline: str
    state: str
    desired_state: str
    actions: list[str]
    revision: int | None
    running_revision: int | None
    lag: int | None
    lag_source: str
    partitions: list[PartitionLag]
    consumer_group: ConsumerGroupLag
    rate_window_seconds: int
    rates: MetricRates
    totals: MetricTotals
    last_batch: BatchFigures | None
    alerts: list[FiringAlert]
    dlq_backlog: int
    bucket_seconds: NotRequired[int]
    series: NotRequired[list[SeriesPoint]]


def _sample_json(sample: MetricSample) -> BatchFigures:
    return {
        "run_id": str(sample.run.run_id),
        "batch_id": sample.batch_id,
        "time_ms": sample.time_ms,
        "duration_ms": sample.duration_ms,
        "consumed": sample.consumed,
        "produced": sample.produced,
        "filtered": sample.filtered,
        "dead_lettered": sample.dead_lettered,
        "dlq_records": sample.dlq_records,
        "retries": sample.retries,
        "lost": sample.lost,
        "lag": sample.lag,
        "destinations": sample.destinations,
        "dead_lettered_by_type": sample.dead_lettered_by_type,
        "offsets": sample.offsets,
    }


def pipeline_metrics(
    *, pipeline: Pipeline, range_seconds: int | None = None, now_ms: int | None = None
) -> PipelineMetrics:
    """What the metrics endpoint shows (shape: ``pipelines.api.serializers.MetricsSerializer``).

    ``actions``: ``lifecycle.available_actions``; ``revision`` / ``running_revision``: the current
    revision's number and the one the active driver runs (``lifecycle.revision_numbers``).
    ``partitions``/``lag``: each source partition's lag after the last batch that read it while a driver
    runs; when none does (stopped, halted, failed), the consumer group's, read from Kafka now
    (``lag_source`` says which: "batches" or "consumer_group").
    ``consumer_group``: the same as Kafka's consumer group sees it, live (``error`` when Kafka does not
    answer). ``rates``: records per second over the last ``RATE_WINDOW_SECONDS``. ``totals``: since creation.
    ``dlq_backlog``: dead letters parked now, waiting for a person (``pipelines.backlog``), unlike the
    cumulative ``totals.dlq_records``.
    ``series``: with ``range_seconds``, samples of that range downsampled by ``metric_series`` into
    buckets of ``bucket_seconds`` (one hour from ``HOURLY_FROM_SECONDS``: the 7-day window's hourly points).
    """
    from pipelines.models import Alert
    from pipelines.spec import parse_spec

    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    partitions: list[PartitionLag] = [
        {
            "topic": row.topic,
            "partition": row.partition,
            "end_offset": row.end_offset,
            "latest_offset": row.latest_offset,
            "lag": row.lag,
        }
        for row in pipeline.partitions.all()
    ]
    group: ConsumerGroupLag = {}
    if pipeline.current_revision is not None:
        spec = parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)
        group["group"] = spec.source.consumer_group
        try:
            lags = consumer_group_lag(
                group=spec.source.consumer_group,
                topics=list(spec.source.topics),
                kafka=connection_for(pipeline.cluster),
                timeout=5,
            )
            group["lag"] = sum(p.lag for p in lags)
            group["partitions"] = [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "end_offset": p.committed,
                    "latest_offset": p.latest,
                    "lag": p.lag,
                }
                for p in lags
            ]
        except Exception as exc:  # Kafka down must not break the page; say so instead
            group["error"] = str(exc)
    # No driver runs: the last batch's figures stand still while producers go on, so the lag is Kafka's.
    lag_source = "batches"
    if pipeline.state not in ACTIVE_STATES and "partitions" in group:
        partitions, lag_source = list(group["partitions"]), "consumer_group"
    window = pipeline.metric_samples.filter(time_ms__gte=now_ms - RATE_WINDOW_SECONDS * 1000).aggregate(
        consumed=Sum("consumed"), produced=Sum("produced"), dead_lettered=Sum("dead_lettered")
    )
    rates: MetricRates = {
        "consumed_per_second": float(window["consumed"] or 0) / RATE_WINDOW_SECONDS,
        "produced_per_second": float(window["produced"] or 0) / RATE_WINDOW_SECONDS,
        "dead_lettered_per_second": float(window["dead_lettered"] or 0) / RATE_WINDOW_SECONDS,
    }
    t = PipelineTotals.objects.filter(pipeline=pipeline).first() or PipelineTotals(pipeline=pipeline)
    totals: MetricTotals = {
        "batches": int(t.batches),
        "consumed": int(t.consumed),
        "produced": int(t.produced),
        "filtered": int(t.filtered),
        "dead_lettered": int(t.dead_lettered),
        "dlq_records": int(t.dlq_records),
        "retries": int(t.retries),
        "lost": int(t.lost),
        "commits_succeeded": int(t.commits_succeeded),
        "commits_failed": int(t.commits_failed),
    }
    last = pipeline.metric_samples.select_related("run").order_by("-time_ms", "-id").first()
    current_revision, running_revision = revision_numbers(pipeline)
    result: PipelineMetrics = {
        "pipeline": pipeline.name,
        "state": pipeline.state,
        "desired_state": pipeline.desired_state,
        "actions": available_actions(pipeline.state, pipeline.desired_state),
        "revision": current_revision,
        "running_revision": running_revision,
        "lag": sum(p["lag"] for p in partitions) if partitions else None,
        "lag_source": lag_source,
        "partitions": partitions,
        "consumer_group": group,
        "rate_window_seconds": RATE_WINDOW_SECONDS,
        "rates": rates,
        "totals": totals,
        "last_batch": _sample_json(last) if last is not None else None,
        "alerts": [
            {"rule": a.rule, "severity": a.severity, "summary": a.summary, "since": a.started_at.isoformat()}
            for a in Alert.objects.filter(pipeline=pipeline, resolved_at=None)
        ],
        "dlq_backlog": parked_backlog([pipeline.pk]).get(pipeline.pk, 0),
    }
    if range_seconds is not None:
        bucket_seconds = bucket_seconds_for(range_seconds)
        if range_seconds >= HOURLY_FROM_SECONDS:
            bucket_seconds = 3600
        result["bucket_seconds"] = bucket_seconds
        result["series"] = metric_series(
            pipeline=pipeline,
            since_ms=now_ms - range_seconds * 1000,
            until_ms=now_ms + 1,
            bucket_seconds=bucket_seconds,
        )
    return result
