"""What the pipeline pages show, read from the models: overview rows, the DSL laid out for reading, revision
history, runs with their driver log tail, dead-lettered records by error type. Views call these and render.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from access.permissions import AnyUser, visible_teams
from pipelines import dsl, progress
from pipelines.broadcast import LiveFigures
from pipelines.dsl import ast
from pipelines.models import ACTIVE_STATES, Alert, MetricSample, Pipeline, PipelineRevision, PipelineRun
from pipelines.supervision import read_log_tail


def visible_pipelines(user: AnyUser) -> Any:
    """The pipelines of the user's teams (every pipeline for admins), by name, with team and revision."""
    return (
        Pipeline.objects.filter(team__in=visible_teams(user))
        .select_related("team", "current_revision")
        .order_by("name")
    )


@dataclass(frozen=True)
class OverviewRow:
    """One pipeline on the overview: its states, ``figures`` (rates, lag, worst partition, dead-lettered
    total, see ``broadcast.LiveFigures``), the alerts firing now (rule, severity, summary) and its DLQ
    backlog: dead letters parked in the console, waiting for an operator."""

    name: str
    team: str
    state: str
    desired_state: str
    state_reason: str
    revision: int | None
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
            "figures": self.figures,
            "alerts": self.alerts,
            "dlq_backlog": self.dlq_backlog,
        }


def overview_rows(user: AnyUser, *, now_ms: int | None = None) -> list[OverviewRow]:
    """Every pipeline the user may see, with its live figures, firing alerts and DLQ backlog, by name."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    pipelines = list(visible_pipelines(user))
    firing: dict[int, list[dict[str, str]]] = {}
    for alert in Alert.objects.filter(pipeline__in=pipelines, resolved_at=None).order_by("rule"):
        firing.setdefault(alert.pipeline_id, []).append(
            {"rule": alert.rule, "severity": alert.severity, "summary": alert.summary}
        )
    # Imported here: the DLQ app builds on the pipelines app, not the other way round.
    from dlq.pages import parked_backlog

    backlog = parked_backlog([p.pk for p in pipelines])
    return [
        OverviewRow(
            name=p.name,
            team=p.team.name,
            state=p.state,
            desired_state=p.desired_state,
            state_reason=p.state_reason,
            revision=p.current_revision.number if p.current_revision else None,
            figures=progress.live_figures(pipeline_id=p.pk, now_ms=now_ms),
            alerts=firing.get(p.pk, []),
            dlq_backlog=backlog.get(p.pk, 0),
        )
        for p in pipelines
    ]


# ------------------------------------------------------------------------------------------ DSL, readably


@dataclass(frozen=True)
class OutlineLine:
    """One line of an expression laid out as a tree: ``depth`` levels of indentation, then ``text``."""

    depth: int
    text: str


_PARSERS: dict[str, Callable[[str], Any]] = {
    "filter": dsl.parse_filter,
    "transform": dsl.parse_transform,
    "key_transform": dsl.parse_key_transform,
    "header_transform": dsl.parse_header_transform,
    "timestamp": dsl.parse_timestamp,
}


def _outline(node: Any, depth: int, out: list[OutlineLine]) -> None:
    if isinstance(node, ast.And | ast.Or):
        out.append(OutlineLine(depth, "all of:" if isinstance(node, ast.And) else "any of:"))
        for condition in node.conditions:
            _outline(condition, depth + 1, out)
    elif isinstance(node, ast.Not):
        out.append(OutlineLine(depth, "not:"))
        _outline(node.condition, depth + 1, out)
    elif isinstance(node, ast.Construct):
        out.append(OutlineLine(depth, "a new object:"))
        for name, path in node.fields:
            out.append(OutlineLine(depth + 1, f"{name} = {path.text}"))
    elif isinstance(node, ast.Try):
        out.append(OutlineLine(depth, "try:"))
        _outline(node.inner, depth + 1, out)
        out.append(OutlineLine(depth, f"else: {node.fallback_text}"))
    else:
        out.append(OutlineLine(depth, node.render()))


def dsl_outline(kind: str, expr: str) -> list[OutlineLine]:
    """``expr`` (a ``kind`` expression: filter, transform, key_transform, header_transform, timestamp) as
    an indented tree: AND/OR/NOT and CONSTRUCT/TRY are broken into one line per part, the rest is shown as
    written. An expression that does not parse (a saved spec never holds one) is shown as written."""
    try:
        node = _PARSERS[kind](expr)
    except dsl.DslParseError:
        return [OutlineLine(0, expr)]
    out: list[OutlineLine] = []
    _outline(node, 0, out)
    return out


@dataclass(frozen=True)
class DestinationView:
    """One destination of a revision, for reading: each expression as an outline (None when not set)."""

    name: str
    topic: str
    filter: list[OutlineLine] | None
    transform: list[OutlineLine] | None
    key_transform: list[OutlineLine] | None
    headers: dict[str, str]
    header_transforms: list[tuple[str, list[OutlineLine]]]
    timestamp: str


def destination_views(spec: dict[str, Any]) -> list[DestinationView]:
    """The destinations of a stored (validated, defaults filled) spec, laid out for reading."""
    views = []
    for d in spec.get("destinations", []):
        views.append(
            DestinationView(
                name=d["name"],
                topic=d["topic"],
                filter=dsl_outline("filter", d["filter"]) if d.get("filter") else None,
                transform=dsl_outline("transform", d["transform"]) if d.get("transform") else None,
                key_transform=dsl_outline("key_transform", d["key_transform"])
                if d.get("key_transform")
                else None,
                headers=dict(d.get("headers") or {}),
                header_transforms=[
                    (name, dsl_outline("header_transform", expr))
                    for name, expr in (d.get("header_transforms") or {}).items()
                ],
                timestamp=d.get("timestamp") or "PRESERVE",
            )
        )
    return views


# ------------------------------------------------------------------------------------------ history


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff and how to colour it: ``add``, ``remove``, ``hunk``, ``file`` or ``same``."""

    kind: str
    text: str


def diff_lines(diff: str) -> list[DiffLine]:
    """A revision's unified diff, line by line, classified for display."""
    lines = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "remove"
        else:
            kind = "same"
        lines.append(DiffLine(kind, line))
    return lines


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
