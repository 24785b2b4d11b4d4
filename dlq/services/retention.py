"""Retention: closed dead letters do not pile up forever. A beat task (``dlq.apply_retention``, hourly) purges
REPLAYED and SKIPPED rows older than their policy's ``closed_days`` and DELETED rows (payload erased by an
approved delete) where the policy says so; PARKED and REPLAYING rows are never touched. The most specific
policy wins: the pipeline's, else its team's, else ``STREAMFORGE_DLQ_RETENTION_DAYS`` (purging approved
deletes). Rows go in chunks of ``CHUNK`` ids, each chunk its own transaction, so a run never holds long locks
and a crash mid-run loses nothing but the rest of that run. Each run is one ``RetentionRun`` row with its
figures and one audit event (``dlq.retention``); the audit log keeps every event of the purged rows.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access import audit
from access.models import Role, Team
from access.permissions import require_role
from dlq.models import DeadLetter, RetentionPolicy, RetentionRun, Status
from dlq.services.errors import InvalidRequest
from pipelines.models import Pipeline

#: Rows purged per transaction.
CHUNK = 2000
#: The statuses a closed_days policy purges.
CLOSED = (Status.REPLAYED, Status.SKIPPED)


def set_policy(
    *,
    actor: User,
    team: Team,
    pipeline: Pipeline | None = None,
    closed_days: int,
    purge_deleted: bool = True,
) -> RetentionPolicy:
    """Create or change the retention policy of ``team`` (``pipeline`` None) or of one of its pipelines.
    Needs the admin role in the team; audited (``dlq.retention_policy``, with the old and new values).
    Raises InvalidRequest for a pipeline of another team or a negative or absurd ``closed_days`` (at most
    3650)."""
    require_role(actor, team, Role.ADMIN)
    if pipeline is not None and pipeline.team_id != team.pk:
        raise InvalidRequest("pipeline", f"pipeline {pipeline.name} belongs to another team")
    if not 0 <= closed_days <= 3650:
        raise InvalidRequest("closed_days", "between 0 (keep forever) and 3650 days")
    with transaction.atomic():
        policy = RetentionPolicy.objects.select_for_update().filter(team=team, pipeline=pipeline).first()
        before = (
            None
            if policy is None
            else {"closed_days": policy.closed_days, "purge_deleted": policy.purge_deleted}
        )
        if policy is None:
            policy = RetentionPolicy(team=team, pipeline=pipeline)
        policy.closed_days, policy.purge_deleted, policy.updated_by = closed_days, purge_deleted, actor
        policy.save()
        audit.record(
            actor=actor,
            action="dlq.retention_policy",
            target_type="team" if pipeline is None else "pipeline",
            target_id=team.name if pipeline is None else pipeline.name,
            before=before,
            after={"closed_days": closed_days, "purge_deleted": purge_deleted},
            details={"closed_days": closed_days, "purge_deleted": purge_deleted, "before": before},
        )
    return policy


@dataclass(frozen=True)
class Rule:
    """Which rows one policy governs (``scope``), the newest close time it purges (``closed_before``; None:
    keep forever) and whether it purges approved deletes."""

    scope: Q
    closed_before: datetime | None
    purge_deleted: bool


def rules(now: datetime) -> list[Rule]:
    """One rule per policy, each scope excluding the rows a more specific policy governs, and the default
    rule for everything else."""
    policies = list(RetentionPolicy.objects.all())
    own_pipelines = [p.pipeline_id for p in policies if p.pipeline_id is not None]
    own_teams = [p.team_id for p in policies if p.pipeline_id is None]

    def before(days: int) -> datetime | None:
        return now - timedelta(days=days) if days else None

    made = []
    for policy in policies:
        if policy.pipeline_id is not None:
            scope = Q(pipeline_id=policy.pipeline_id)
        else:
            scope = Q(team_id=policy.team_id) & ~Q(pipeline_id__in=own_pipelines)
        made.append(Rule(scope, before(policy.closed_days), policy.purge_deleted))
    default = ~Q(team_id__in=own_teams) & ~Q(pipeline_id__in=own_pipelines)
    made.append(Rule(default, before(settings.DLQ_RETENTION_DAYS), True))
    return made


def _purge(selection: Q) -> int:
    """Delete every row of ``selection``, ``CHUNK`` ids per transaction; the number deleted."""
    total = 0
    while True:
        with transaction.atomic():
            ids = list(DeadLetter.objects.filter(selection).order_by().values_list("pk", flat=True)[:CHUNK])
            if not ids:
                return total
            DeadLetter.objects.filter(selection, pk__in=ids).delete()  # still in the selection now
        total += len(ids)


def apply_retention(*, now: datetime | None = None) -> RetentionRun:
    """Purge what the policies say may go (see the module docstring); returns the run with its figures
    (``purged``: rows per status). Safe to run concurrently with the console: a row is purged only while its
    status is still one the rule names, in the same statement that selects it."""
    started = timezone.now()
    clock = time.monotonic()
    now = now or started
    purged: Counter[str] = Counter()
    for rule in rules(now):
        if rule.closed_before is not None:
            for status in CLOSED:
                selection = rule.scope & Q(status=status, status_changed_at__lt=rule.closed_before)
                purged[status] += _purge(selection)
        if rule.purge_deleted:
            purged[Status.DELETED] += _purge(rule.scope & Q(status=Status.DELETED))
    figures = {str(status): count for status, count in purged.items() if count}
    with transaction.atomic():
        run = RetentionRun.objects.create(
            started_at=started,
            finished_at=timezone.now(),
            purged=figures,
            total=sum(figures.values()),
        )
        audit.record(
            actor=None,
            action="dlq.retention",
            target_type="retention_run",
            target_id=run.pk,
            details={"purged": figures, "seconds": round(time.monotonic() - clock, 3)},
        )
    return run
