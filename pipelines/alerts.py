"""The alert rules of the StreamForge spec, evaluated by the beat over the stored metric samples so the UI
can show what is firing without a Prometheus server. ``deploy/prometheus/alerts.yml`` carries the same rules
in PromQL over ``/metrics`` for sites that run Prometheus; keep the two in step.

| rule | fires when (per pipeline) | severity |
|---|---|---|
| HighCommitFailureRate | more than 5% of the commits in the last 5 minutes failed | critical |
| DLQBacklog | more than 100 records went to the DLQ in the last 15 minutes | warning |
| ConsumerLagIncreasing | lag grew over the last 10 minutes (least-squares slope > 0) and is above 1,000 | warning |
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from pipelines import broadcast, signals
from pipelines.models import Alert, AlertSeverity, Pipeline, PipelineRun, PipelineState

COMMIT_FAILURE_RATIO = 0.05
COMMIT_WINDOW_SECONDS = 5 * 60
DLQ_BACKLOG_RECORDS = 100
DLQ_WINDOW_SECONDS = 15 * 60
LAG_MINIMUM = 1000
LAG_WINDOW_SECONDS = 10 * 60


@dataclass(frozen=True)
class Firing:
    """A rule that holds for a pipeline now: the measured ``value`` and a sentence saying what it means."""

    rule: str
    severity: AlertSeverity
    value: float
    summary: str


def commit_failure_rule(*, succeeded: int, failed: int) -> Firing | None:
    """HighCommitFailureRate over one window's commit counts."""
    total = succeeded + failed
    if total == 0 or failed / total <= COMMIT_FAILURE_RATIO:
        return None
    ratio = failed / total
    return Firing(
        "HighCommitFailureRate",
        AlertSeverity.CRITICAL,
        ratio,
        f"{failed} of {total} commits failed in the last {COMMIT_WINDOW_SECONDS // 60} minutes ({ratio:.0%})",
    )


def dlq_backlog_rule(*, dead_lettered: int) -> Firing | None:
    """DLQBacklog over the records dead-lettered in one window."""
    if dead_lettered <= DLQ_BACKLOG_RECORDS:
        return None
    return Firing(
        "DLQBacklog",
        AlertSeverity.WARNING,
        float(dead_lettered),
        f"{dead_lettered} records went to the DLQ in the last {DLQ_WINDOW_SECONDS // 60} minutes",
    )


def lag_slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, lag) points, in records per second; 0 for fewer than 2 points."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def lag_rule(*, points: Sequence[tuple[float, float]]) -> Firing | None:
    """ConsumerLagIncreasing over one window's (seconds, total lag) points, oldest first."""
    if len(points) < 3 or points[-1][1] <= LAG_MINIMUM:
        return None
    slope = lag_slope(points)
    if slope <= 0:
        return None
    return Firing(
        "ConsumerLagIncreasing",
        AlertSeverity.WARNING,
        slope,
        f"lag is {int(points[-1][1])} and growing by {slope:.1f} records/s over the last "
        f"{LAG_WINDOW_SECONDS // 60} minutes",
    )


def firing_for(pipeline: Pipeline, *, now_ms: int) -> list[Firing]:
    """Every rule that holds for ``pipeline`` at ``now_ms`` (epoch ms), from its stored samples and runs."""
    samples = pipeline.metric_samples
    commits = samples.filter(time_ms__gte=now_ms - COMMIT_WINDOW_SECONDS * 1000).aggregate(
        total=Count("id"), failed=Count("id", filter=Q(group_commit_failed=True))
    )
    window_start = datetime.fromtimestamp(
        (now_ms - COMMIT_WINDOW_SECONDS * 1000) / 1000, tz=timezone.get_current_timezone()
    )
    broken_runs = PipelineRun.objects.filter(
        pipeline=pipeline,
        ended_at__gte=window_start,
        state__in=(PipelineState.RESTARTING, PipelineState.FAILED, PipelineState.HALTED),
    ).count()
    failed = int(commits["failed"]) + broken_runs
    succeeded = int(commits["total"]) - int(commits["failed"])
    dead = samples.filter(time_ms__gte=now_ms - DLQ_WINDOW_SECONDS * 1000).aggregate(n=Sum("dlq_records"))
    lag_points = [
        (t / 1000, float(lag or 0))
        for t, lag in samples.filter(time_ms__gte=now_ms - LAG_WINDOW_SECONDS * 1000, lag__isnull=False)
        .order_by("time_ms")
        .values_list("time_ms", "lag")
    ]
    rules = (
        commit_failure_rule(succeeded=succeeded, failed=failed),
        dlq_backlog_rule(dead_lettered=int(dead["n"] or 0)),
        lag_rule(points=lag_points),
    )
    return [rule for rule in rules if rule is not None]


def evaluate(*, now_ms: int | None = None) -> list[Alert]:
    """Evaluate every rule for every pipeline: open an Alert for a rule that starts firing, refresh one that
    keeps firing, resolve one that stopped. Returns the alerts firing now. Changes (a new alert, a new
    summary, a resolution) are pushed to the UI after commit (``broadcast.alert``)."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    now = datetime.fromtimestamp(now_ms / 1000, tz=timezone.get_current_timezone())
    firing_now: list[Alert] = []
    for pipeline in Pipeline.objects.all():
        found = {f.rule: f for f in firing_for(pipeline, now_ms=now_ms)}
        with transaction.atomic():
            open_alerts = {a.rule: a for a in pipeline.alerts.select_for_update().filter(resolved_at=None)}
            for rule, alert in open_alerts.items():
                if rule not in found:
                    alert.resolved_at = now
                    alert.save(update_fields=["resolved_at"])
                    _announce(pipeline, alert, firing=False)
            for rule, firing in found.items():
                alert = open_alerts.get(rule) or Alert(
                    pipeline=pipeline, rule=rule, severity=firing.severity, started_at=now
                )
                # Pushed when it starts firing and whenever its sentence changes ("140 records went to the DLQ"
                # -> "230 ..."), so an open page never shows a figure older than the last evaluation.
                changed = alert.pk is None or alert.summary != firing.summary
                alert.value, alert.summary, alert.last_seen_at = firing.value, firing.summary, now
                alert.save()
                if changed:
                    _announce(pipeline, alert, firing=True)
                firing_now.append(alert)
    return firing_now


def _announce(pipeline: Pipeline, alert: Alert, *, firing: bool) -> None:
    update: broadcast.AlertUpdate = {
        "type": "pipeline.alert",
        "pipeline": pipeline.name,
        "rule": alert.rule,
        "severity": alert.severity,
        "summary": alert.summary,
        "firing": firing,
    }
    transaction.on_commit(lambda: broadcast.alert(update))
    signals.send_on_commit(signals.alert_changed, alert_id=alert.pk, firing=firing)
