"""Read queries behind the pipeline pages: the pipelines a user may see, the overview's rows, revision
history, runs with their driver log tail, dead-lettered records by error type. Views call these and render.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from access.permissions import AnyUser, visible_teams
from access.shared_reads import SharedRead, shared_read
from pipelines import progress
from pipelines.backlog import parked_backlog
from pipelines.broadcast import LiveFigures
from pipelines.models import ACTIVE_STATES, Alert, MetricSample, Pipeline, PipelineRevision, PipelineRun
from pipelines.supervision import read_log_tail


def visible_pipelines(user: AnyUser) -> QuerySet[Pipeline]:
    """The pipelines of the user's teams (every pipeline for admins), by name, with team and revision."""
    return (
        Pipeline.objects.filter(team__in=visible_teams(user))
        .select_related("team", "current_revision")
        .order_by("name")
    )


def with_latest_runs(pipelines: QuerySet[Pipeline]) -> QuerySet[Pipeline]:
    """``pipelines`` with what a list of them shows per row read in a constant number of queries: the lease
    holder joined (``lease_host``), ``running_revision_number`` annotated (the revision number of the newest
    active run, None when none is active: ``lifecycle.revision_numbers``'s second half) and ``latest_runs``
    prefetched (a list holding the newest run with its revision, empty for a pipeline never run; newest by
    ``(-started_at, -id)``, one query for the page through Django's sliced prefetch, a window function). The
    list API serialises these without a query per pipeline (``PipelineSerializer``)."""
    running = (
        PipelineRun.objects.filter(pipeline=OuterRef("pk"), state__in=ACTIVE_STATES)
        .order_by("-started_at", "-id")
        .values("revision__number")[:1]
    )
    newest = PipelineRun.objects.select_related("revision").order_by("-started_at", "-id")
    return (
        pipelines.select_related("lease_host")
        .annotate(running_revision_number=Subquery(running))
        .prefetch_related(Prefetch("runs", queryset=newest[:1], to_attr="latest_runs"))
    )


@dataclass(frozen=True)
class OverviewRow:
    """One pipeline on the overview: its states, its current revision and the one its driver runs (None when
    none runs), ``figures`` (rates, lag, worst partition, dead-lettered
    total, see ``broadcast.LiveFigures``), the alerts firing now (rule, severity, summary) and its DLQ
    backlog: dead letters parked in the console, waiting for an operator (``pipelines.backlog``)."""

    name: str
    team: str
    state: str
    desired_state: str
    state_reason: str
    revision: int | None
    running_revision: int | None
    figures: LiveFigures
    alerts: list[dict[str, str]]
    dlq_backlog: int

    def as_json(self) -> dict[str, Any]:
        """The row as JSON (what ``/pipelines/overview.json`` returns after a reconnect)."""
        return {
            "name": self.name,
            "team": self.team,
            "state": self.state,
            "desired_state": self.desired_state,
            "state_reason": self.state_reason,
            "revision": self.revision,
            "running_revision": self.running_revision,
            "figures": self.figures,
            "alerts": self.alerts,
            "dlq_backlog": self.dlq_backlog,
        }


def overview_rows(user: AnyUser, *, now_ms: int | None = None) -> list[OverviewRow]:
    """Every pipeline the user may see, with its live figures, firing alerts and DLQ backlog, by name: a
    constant number of queries whatever the number of pipelines (figures by ``live_figures_many``, the rest
    one query per kind), no Kafka call."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    pipelines = list(visible_pipelines(user))
    firing: dict[int, list[dict[str, str]]] = {}
    for alert in Alert.objects.filter(pipeline__in=pipelines, resolved_at=None).order_by("rule"):
        firing.setdefault(alert.pipeline_id, []).append(
            {"rule": alert.rule, "severity": alert.severity, "summary": alert.summary}
        )
    backlog = parked_backlog([p.pk for p in pipelines])
    figures = progress.live_figures_many(pipeline_ids=[p.pk for p in pipelines], now_ms=now_ms)
    running = dict(
        PipelineRun.objects.filter(pipeline__in=pipelines, state__in=ACTIVE_STATES).values_list(
            "pipeline_id", "revision__number"
        )
    )
    return [
        OverviewRow(
            name=p.name,
            team=p.team.name,
            state=p.state,
            desired_state=p.desired_state,
            state_reason=p.state_reason,
            revision=p.current_revision.number if p.current_revision else None,
            running_revision=running.get(p.pk),
            figures=figures[p.pk],
            alerts=firing.get(p.pk, []),
            dlq_backlog=backlog.get(p.pk, 0),
        )
        for p in pipelines
    ]


def shared_overview_rows(user: AnyUser) -> SharedRead[list[OverviewRow]]:
    """``overview_rows`` computed once for everyone who sees the same teams and shared for
    ``SHARED_READ_SECONDS`` (``access.shared_reads``: at most that old, fresh for one who has just written)."""
    return shared_read(user, "overview-rows", lambda: overview_rows(user))


def revisions(pipeline: Pipeline, *, limit: int = 50) -> Sequence[PipelineRevision]:
    """The pipeline's newest revisions first, with their authors."""
    return list(pipeline.revisions.select_related("author").order_by("-number")[:limit])


def run_log_tail(run: PipelineRun) -> str:
    """The end of a run's driver log: kept on the row once the run has ended; read from the log file
    while it is active (when this process can see that file, i.e. on the worker's host)."""
    if run.log_tail or run.state not in ACTIVE_STATES:
        return run.log_tail
    return read_log_tail(run.log_path)


def recent_runs(pipeline: Pipeline, *, limit: int = 20) -> list[tuple[PipelineRun, str]]:
    """The pipeline's newest runs with each one's log tail."""
    runs = pipeline.runs.select_related("revision").order_by("-started_at", "-id")[:limit]
    return [(run, run_log_tail(run)) for run in runs]


def dead_lettered_by_type(pipeline: Pipeline, *, since_ms: int) -> dict[str, int]:
    """Records dead-lettered since ``since_ms`` (epoch ms), by StreamForge error type, largest first."""
    counts: Counter[str] = Counter()
    rows = MetricSample.objects.filter(pipeline=pipeline, time_ms__gte=since_ms, dead_lettered__gt=0)
    for by_type in rows.values_list("dead_lettered_by_type", flat=True):
        for error_type, count in (by_type or {}).items():
            counts[str(error_type)] += int(count)
    return dict(counts.most_common())
