"""What a notification says: the ``Event`` built from another app's signal (an alert, a failure group, a
halted pipeline, an approval, a finished bulk action), and the receivers that build and publish them.

The receivers are connected in ``NotificationsConfig.ready()``; the apps below send plain signals
(``pipelines.signals``, ``dlq.signals``) and never import this app.
"""

from __future__ import annotations

import logging
from typing import Any

from access import signals as access_signals
from dlq import signals as dlq_signals
from dlq.models import ApprovalKind, ApprovalRequest, BulkAction, FailureGroup, FixForwardScan, RedrivePolicy
from dlq.services.claims import claims_for
from notifications import dispatch
from notifications.dispatch import Event
from notifications.models import Channel, EventType
from pipelines import signals as pipeline_signals
from pipelines.models import Alert, Pipeline, PipelineState

log = logging.getLogger(__name__)


def alert_event(alert: Alert, *, firing: bool) -> Event:
    """The event of an alert that fired or was resolved. One per alert and state: a firing alert whose
    figure changes ("140 records..." -> "230 ...") is not paged again (the UI shows the new figure)."""
    pipeline = alert.pipeline
    state = "firing" if firing else "resolved"
    return Event(
        type=EventType.ALERT_FIRING if firing else EventType.ALERT_RESOLVED,
        key=f"alert:{alert.pk}:{state}",
        team_id=pipeline.team_id,
        title=f"{alert.rule} {state} on {pipeline.name}",
        text=f"{alert.severity}: {alert.summary}",
        data={
            "pipeline": pipeline.name,
            "rule": alert.rule,
            "severity": alert.severity,
            "value": alert.value,
        },
    )


def failure_group_event(group: FailureGroup) -> Event:
    """The event of a new failure group (the first dead letter with this error type and message)."""
    where = group.pipeline_name or group.dlq_topic
    return Event(
        type=EventType.FAILURE_GROUP,
        key=f"failure_group:{group.pk}",
        team_id=group.team_id,
        title=f"New failure group in {where}: {group.error_type}",
        text=f"{group.error_type}: {group.signature[:500]}\nDLQ topic {group.dlq_topic}",
        data={
            "group": group.pk,
            "pipeline": group.pipeline_name,
            "dlq_topic": group.dlq_topic,
            "error_type": group.error_type,
            "signature": group.signature[:500],
        },
    )


def pipeline_event(pipeline: Pipeline, *, run_id: str, state: str, reason: str) -> Event:
    """The event of a pipeline that became HALTED or FAILED."""
    halted = state == PipelineState.HALTED
    return Event(
        type=EventType.PIPELINE_HALTED if halted else EventType.PIPELINE_FAILED,
        key=f"pipeline:{pipeline.pk}:{run_id}:{state}",
        team_id=pipeline.team_id,
        title=f"Pipeline {pipeline.name} is {state}",
        text=reason[:1000] or "no reason recorded",
        data={"pipeline": pipeline.name, "state": state, "run_id": run_id, "reason": reason[:1000]},
    )


def approval_event(approval: ApprovalRequest) -> Event:
    """The event of a delete or bulk action waiting for an approver."""
    if approval.kind == ApprovalKind.DELETE:
        what = f"delete of dead letter {approval.dead_letter_id}"
    elif approval.kind == ApprovalKind.REDRIVE:
        what = f"redrive policy {approval.redrive_policy_id}"
    elif approval.kind == ApprovalKind.OFFSETS and approval.offset_skip is not None:
        skip = approval.offset_skip
        where = f"past offset {skip.past_offset}" if skip.past_offset is not None else f"to {skip.to_time}"
        copied = sum(int(row.get("records", 0)) for row in skip.plan)
        what = f"offset skip {skip.pk} of {skip.pipeline.name} {where} ({copied} records copied to the DLQ first)"
    else:
        what = f"bulk action {approval.bulk_id}"
    requester = approval.requested_by.get_username() if approval.requested_by else "someone"
    claim = None
    if approval.dead_letter is not None:
        claim = claims_for([approval.dead_letter]).get(approval.dead_letter.pk)
    on_it = f"\ninvestigating: {claim.by}" + (f" ({claim.note[:200]})" if claim.note else "") if claim else ""
    return Event(
        type=EventType.APPROVAL_WAITING,
        key=f"approval:{approval.pk}",
        team_id=approval.team_id,
        title=f"Approval waiting: {what}",
        text=f"{requester} asks: {approval.reason[:500]}{on_it}",
        data={
            "approval": approval.pk,
            "kind": approval.kind,
            "requested_by": requester,
            "dead_letter": approval.dead_letter_id,
            "bulk": approval.bulk_id,
        }
        | ({"investigating": claim.as_json()} if claim else {}),
    )


def bulk_event(bulk: BulkAction) -> Event:
    """The event of a bulk action that completed."""
    progress = bulk.progress()
    return Event(
        type=EventType.BULK_FINISHED,
        key=f"bulk:{bulk.pk}:finished",
        team_id=int(bulk.team_id or 0),
        title=f"Bulk {bulk.kind} {bulk.pk} finished",
        text=", ".join(f"{name} {value}" for name, value in progress.items() if name != "fraction"),
        data={"bulk": bulk.pk, "kind": bulk.kind, **progress},
    )


def fix_forward_event(scan: FixForwardScan) -> Event:
    """The event of a fix-forward scan that found dead letters its revision now passes: how many, where,
    and the page that offers their replay."""
    where = "; ".join(
        f"{g['candidates']} at {g['destination'] or 'every destination'} ({g['error_type']})"
        for g in scan.groups
        if g["candidates"]
    )
    return Event(
        type=EventType.FIX_FORWARD,
        key=f"fix_forward:{scan.pk}",
        team_id=scan.team_id,
        title=f"Revision {scan.revision} of {scan.pipeline.name} now passes {scan.candidates} parked dead letters",
        text=f"{where}\nReplay them from /dlq/fix-forward/{scan.pk}/ (a bulk replay, counted first)",
        data={
            "scan": scan.pk,
            "pipeline": scan.pipeline.name,
            "revision": scan.revision,
            "previous_revision": scan.previous_revision,
            "candidates": scan.candidates,
            "still_failing": scan.still_failing,
        },
    )


def redrive_paused_event(policy: RedrivePolicy) -> Event:
    """The event of a redrive policy that paused itself because its replays failed again: which, why, and
    the page that resumes it."""
    return Event(
        type=EventType.REDRIVE_PAUSED,
        key=f"redrive:{policy.pk}:paused:{policy.updated_at.isoformat()}",
        team_id=policy.team_id,
        title=f"Redrive policy {policy.name} of {policy.pipeline.name} paused itself",
        text=f"{policy.paused_reason}\nLook at /dlq/redrive/{policy.pk}/ before resuming it",
        data={"policy": policy.pk, "name": policy.name, "pipeline": policy.pipeline.name,
              "reason": policy.paused_reason},
    )  # fmt: skip


def break_glass_event(*, team_id: int, username: str, ip_address: str, at: str) -> Event:
    """The event, for one team, of the break-glass admin's password sign-in in SSO-only mode: who, from
    which address, when (``at``, ISO-8601 UTC)."""
    return Event(
        type=EventType.BREAK_GLASS,
        key=f"break_glass:{username}:{at}",
        team_id=team_id,
        title=f"Break-glass sign-in: {username}",
        text=f"{username} signed in with a local password from {ip_address or 'an unknown address'} at {at}, "
        "while sign-in through the identity provider is required for everyone else",
        data={"username": username, "ip_address": ip_address, "at": at},
    )


# ------------------------------------------------------------------------------------------------ receivers


def on_alert_changed(sender: Any, *, alert_id: int, firing: bool, **_: Any) -> None:
    """``pipelines.signals.alert_changed``."""
    alert = Alert.objects.select_related("pipeline").filter(pk=alert_id).first()
    if alert is not None:
        dispatch.publish(alert_event(alert, firing=firing))


def on_pipeline_stopped(
    sender: Any, *, pipeline_id: int, run_id: str, state: str, reason: str, **_: Any
) -> None:
    """``pipelines.signals.pipeline_stopped_for_good``."""
    pipeline = Pipeline.objects.filter(pk=pipeline_id).first()
    if pipeline is not None:
        dispatch.publish(pipeline_event(pipeline, run_id=run_id, state=state, reason=reason))


def on_failure_group_created(sender: Any, *, group_id: int, **_: Any) -> None:
    """``dlq.signals.failure_group_created``."""
    group = FailureGroup.objects.filter(pk=group_id).first()
    if group is not None:
        dispatch.publish(failure_group_event(group))


def on_approval_requested(sender: Any, *, approval_id: int, **_: Any) -> None:
    """``dlq.signals.approval_requested``."""
    approval = ApprovalRequest.objects.select_related("requested_by").filter(pk=approval_id).first()
    if approval is not None:
        dispatch.publish(approval_event(approval))


def on_fix_forward_found(sender: Any, *, scan_id: int, **_: Any) -> None:
    """``dlq.signals.fix_forward_found``."""
    scan = FixForwardScan.objects.select_related("pipeline").filter(pk=scan_id).first()
    if scan is not None:
        dispatch.publish(fix_forward_event(scan))


def on_redrive_paused(sender: Any, *, policy_id: int, **_: Any) -> None:
    """``dlq.signals.redrive_paused``."""
    policy = RedrivePolicy.objects.select_related("pipeline").filter(pk=policy_id).first()
    if policy is not None:
        dispatch.publish(redrive_paused_event(policy))


def on_break_glass_sign_in(sender: Any, *, username: str, ip_address: str, at: str, **_: Any) -> None:
    """``access.signals.break_glass_sign_in``: every team with an enabled channel subscribed to it is told
    (the break-glass admin is everyone's admin)."""
    teams = {
        channel.team_id
        for channel in Channel.objects.filter(enabled=True).only("team_id", "events")
        if EventType.BREAK_GLASS in channel.events
    }
    for team_id in sorted(teams):
        dispatch.publish(break_glass_event(team_id=team_id, username=username, ip_address=ip_address, at=at))


def on_bulk_finished(sender: Any, *, bulk_id: int, **_: Any) -> None:
    """``dlq.signals.bulk_finished``."""
    bulk = BulkAction.objects.filter(pk=bulk_id).first()
    if bulk is not None:
        dispatch.publish(bulk_event(bulk))


def connect() -> None:
    """Connect the receivers (idempotent: each has a ``dispatch_uid``)."""
    pipeline_signals.alert_changed.connect(on_alert_changed, dispatch_uid="notifications.alert")
    pipeline_signals.pipeline_stopped_for_good.connect(
        on_pipeline_stopped, dispatch_uid="notifications.pipeline"
    )
    dlq_signals.failure_group_created.connect(on_failure_group_created, dispatch_uid="notifications.group")
    dlq_signals.fix_forward_found.connect(on_fix_forward_found, dispatch_uid="notifications.fix_forward")
    dlq_signals.approval_requested.connect(on_approval_requested, dispatch_uid="notifications.approval")
    dlq_signals.bulk_finished.connect(on_bulk_finished, dispatch_uid="notifications.bulk")
    dlq_signals.redrive_paused.connect(on_redrive_paused, dispatch_uid="notifications.redrive")
    access_signals.break_glass_sign_in.connect(
        on_break_glass_sign_in, dispatch_uid="notifications.break_glass"
    )
