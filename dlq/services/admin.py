"""Console administration: the extra DLQ topics the ingester reads (Kafka Connect, Spring Kafka...) and the
runbooks attached to failure groups or error types. Admin role."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet

from access import audit
from access.models import Role, Team
from access.permissions import is_admin, require_role
from dlq import counts
from dlq.models import DlqTopic, FailureGroup, Runbook, RunbookAction
from dlq.services.errors import InvalidRequest
from pipelines import dlq_owners
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline
from streamforge_core.kafka import topic_name_problem


def register_topic(
    *,
    actor: User,
    topic: str,
    team: Team,
    pipeline: Pipeline | None = None,
    description: str = "",
    cluster: KafkaCluster | None = None,
) -> DlqTopic:
    """Have the ingester read an extra DLQ topic (e.g. one written by Kafka Connect or Spring Kafka) of
    ``cluster`` (None: the default) for ``team``, optionally for one of its pipelines: the topic's records
    then belong to them, whatever their headers say. Needs the admin role. Raises InvalidRequest for a topic
    name Kafka would refuse, a topic already registered on that cluster, one a pipeline (of any team) there
    writes its dead letters to (a DLQ topic has one owner, ``pipelines.dlq_owners``), a pipeline of another
    team, or a pipeline on another cluster (a replay goes to the pipeline's source, on its cluster)."""
    require_role(actor, team, Role.ADMIN)
    name = topic.strip()
    if (problem := topic_name_problem(name)) is not None:
        raise InvalidRequest("topic", problem)
    if pipeline is not None and pipeline.team_id != team.pk:
        raise InvalidRequest("pipeline", f"pipeline {pipeline.name} belongs to another team")
    if pipeline is not None and pipeline.cluster_id != (cluster.pk if cluster else None):
        raise InvalidRequest("cluster", f"pipeline {pipeline.name} runs on another Kafka cluster")
    with transaction.atomic():
        dlq_owners.serialise_claims()
        if DlqTopic.objects.filter(topic=name, cluster=cluster).exists():
            raise InvalidRequest("topic", f"{name} is already registered on this cluster")
        if (owner := dlq_owners.pipeline_using_dlq_topic(name, cluster=cluster)) is not None:
            raise InvalidRequest(
                "topic", f"{name} is the DLQ topic of pipeline {owner.name}; it is read already"
            )
        row = DlqTopic.objects.create(
            topic=name,
            cluster=cluster,
            team=team,
            pipeline=pipeline,
            description=description,
            created_by=actor,
        )
        audit.record(
            actor=actor,
            action="dlq.topic_register",
            target_type="dlq_topic",
            target_id=name,
            details={
                "team": team.name,
                "pipeline": pipeline.name if pipeline else None,
                "cluster": cluster.name if cluster else DEFAULT_CLUSTER_NAME,
            },
        )
    return row


def registered_topic_owner(topic: str, cluster: KafkaCluster | None) -> str | None:
    """Who reads ``topic`` of ``cluster`` as a registered extra DLQ topic ("the extra DLQ topic registered
    for team X"), or None (``pipelines.dlq_owners`` asks this before a pipeline claims a DLQ topic)."""
    row = DlqTopic.objects.filter(topic=topic, cluster=cluster).select_related("team").first()
    return None if row is None else f"the extra DLQ topic registered for team {row.team.name}"


def save_runbook(
    *,
    actor: User,
    team: Team,
    title: str,
    body: str,
    actions: Sequence[str],
    group: FailureGroup | None = None,
    error_type: str = "",
    runbook: Runbook | None = None,
) -> Runbook:
    """Create (or, with ``runbook``, update) a runbook attached to a failure group or an error type.
    Needs the admin role. Raises InvalidRequest for unknown actions or no attachment."""
    require_role(actor, team, Role.ADMIN)
    unknown = sorted(set(actions) - set(RunbookAction.values))
    if unknown:
        raise InvalidRequest("actions", f"unknown action {unknown[0]}; use {', '.join(RunbookAction.values)}")
    if group is None and not error_type.strip():
        raise InvalidRequest("group", "attach the runbook to a failure group or an error type")
    if group is not None and group.team_id != team.pk:
        raise InvalidRequest("group", "the failure group belongs to another team")
    if not title.strip():
        raise InvalidRequest("title", "a title is required")
    with transaction.atomic():
        before = None
        if runbook is None:
            runbook = Runbook(team=team, created_by=actor)
        else:
            before = {"title": runbook.title, "body": runbook.body, "actions": runbook.actions}
        runbook.title, runbook.body, runbook.actions = title.strip(), body, list(actions)
        runbook.group, runbook.error_type = group, error_type.strip()
        runbook.save()
        audit.record(
            actor=actor,
            action="runbook.update" if before else "runbook.create",
            target_type="runbook",
            target_id=runbook.pk,
            before=before,
            after={"title": runbook.title, "body": runbook.body, "actions": runbook.actions},
        )
    return runbook


def delete_runbook(*, actor: User, runbook: Runbook) -> None:
    """Remove a runbook. Needs the admin role."""
    require_role(actor, runbook.team, Role.ADMIN)
    with transaction.atomic():
        audit.record(
            actor=actor,
            action="runbook.delete",
            target_type="runbook",
            target_id=runbook.pk,
            before={"title": runbook.title, "body": runbook.body, "actions": runbook.actions},
        )
        runbook.delete()


def runbooks_for(group: FailureGroup) -> QuerySet[Runbook]:
    """Runbooks for a failure group: attached to it, or to its error type in its team."""
    return Runbook.objects.filter(
        Q(group=group) | Q(group=None, error_type=group.error_type, team=group.team_id)
    )


@dataclass(frozen=True)
class Recount:
    """What ``recount`` found: the keys whose kept count was wrong (``dlq.counts.differences``), and
    whether they were rebuilt."""

    differences: list[dict[str, object]]
    rebuilt: bool


def recount(*, actor: User, fix: bool = False) -> Recount:
    """Check the console's kept dead-letter counts against the rows (``dlq.counts``) and, with ``fix``,
    rebuild them when they differ (audited as ``dlq.recount``). Installation admins only: the counts
    span every team. Raises PermissionDenied for anyone else."""
    if not is_admin(actor):
        raise PermissionDenied("recounting the dead letters needs an admin")
    found = counts.differences()
    if not (fix and found):
        return Recount(found, rebuilt=False)
    with transaction.atomic():
        written = counts.rebuild()
        audit.record(
            actor=actor,
            action="dlq.recount",
            target_type="dead_letter_counts",
            target_id="all",
            details={"wrong_keys": len(found), "rows_written": written},
        )
    return Recount(found, rebuilt=True)
