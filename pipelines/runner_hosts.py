"""Runner hosts as people see them (the Hosts API and page): state, heartbeat age, capacity used and free,
and the pipelines on each, the pipelines' names limited to the viewer's teams.

Read only; draining is ``pipelines.supervision.drain``'s. State and heartbeat age are judged on the
database's clock (``RunnerHost.objects.with_state``), as placement judges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import ExpressionWrapper, F
from django.db.models.functions import Now

from access.permissions import AnyUser, visible_teams
from pipelines.models import ACTIVE_STATES, PipelineRun, RunnerHost


@dataclass(frozen=True)
class Capacity:
    """``total`` offered by the host, ``used`` by its open runs, ``free`` = total - used (never below 0)."""

    total: int
    used: int
    free: int


@dataclass(frozen=True)
class HostedPipeline:
    """A pipeline whose open run is on the host: its name, the run's state, lease epoch and run id."""

    name: str
    state: str
    epoch: int | None
    run_id: str


@dataclass(frozen=True)
class HostView:
    """One runner host: ``state`` up/draining/lost, ``heartbeat_age_s`` (seconds, database clock), ``slots``
    (driver slots), ``memory_mb`` (each open run charged ``DRIVER_MEMORY_MB``), ``labels``, ``draining``,
    ``queue``, ``started_at`` (its agent's start) and the ``pipelines`` on it the viewer may see."""

    name: str
    state: str
    heartbeat_age_s: float
    slots: Capacity
    memory_mb: Capacity
    labels: list[str]
    draining: bool
    queue: str
    started_at: datetime
    drain_requested_at: datetime | None
    pipelines: list[HostedPipeline] = field(default_factory=list)


def _capacity(total: int, used: int) -> Capacity:
    return Capacity(total=total, used=used, free=max(0, total - used))


def describe_hosts(user: AnyUser, *, name: str | None = None) -> list[HostView]:
    """Every runner host (or the one called ``name``; [] when there is none), by name. Capacity counts every
    open run (STARTING, RUNNING, STOPPING) on the host; ``pipelines`` lists only those of ``user``'s visible
    teams (``access.permissions.visible_teams``)."""
    hosts = RunnerHost.objects.with_state().annotate(
        heartbeat_age=ExpressionWrapper(Now() - F("last_heartbeat_at"), output_field=models.DurationField())
    )
    if name is not None:
        hosts = hosts.filter(name=name)
    rows = list(hosts.order_by("name"))
    names = [host.name for host in rows]
    runs = PipelineRun.objects.filter(host__in=names, state__in=ACTIVE_STATES)
    used: dict[str, int] = {}
    for host_name in runs.values_list("host", flat=True):
        used[host_name] = used.get(host_name, 0) + 1
    shown: dict[str, list[HostedPipeline]] = {}
    visible = runs.filter(pipeline__team__in=visible_teams(user)).select_related("pipeline")
    for run in visible.order_by("pipeline__name"):
        shown.setdefault(run.host, []).append(
            HostedPipeline(name=run.pipeline.name, state=run.state, epoch=run.epoch, run_id=str(run.run_id))
        )
    views = []
    for host in rows:
        count = used.get(host.name, 0)
        age = host.heartbeat_age  # type: ignore[attr-defined]  # annotated above
        views.append(
            HostView(
                name=host.name,
                state=host.state,  # type: ignore[attr-defined]  # annotated by with_state
                heartbeat_age_s=round(max(0.0, age.total_seconds()), 1),
                slots=_capacity(host.slots, count),
                memory_mb=_capacity(host.memory_mb, count * settings.DRIVER_MEMORY_MB),
                labels=[str(label) for label in host.labels],
                draining=host.draining,
                queue=host.queue,
                started_at=host.started_at,
                drain_requested_at=host.drain_requested_at,
                pipelines=shown.get(host.name, []),
            )
        )
    return views
