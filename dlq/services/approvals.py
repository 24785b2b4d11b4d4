"""Four-eyes decisions: a delete request for a dead letter's payload, and approving or rejecting a request
(a delete, which then erases the payload, or a large bulk action, which is then queued or never runs).
The approver must be a different person from the requester."""

from __future__ import annotations

import base64

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from access import audit
from access.models import Role
from access.permissions import require_role
from dlq import signals
from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalState,
    DeadLetter,
    Status,
)
from dlq.services import bulk as bulk_actions
from dlq.services import erasure, notify, redrive
from dlq.services.errors import Conflict, InvalidRequest
from dlq.services.offset_skips import approval_decided as offset_skip_decided


def request_delete(*, actor: User, dead_letter: DeadLetter, reason: str) -> ApprovalRequest:
    """Ask for a dead letter's payload to be erased; a different user with the approver role must approve.
    Needs the operator role and a reason. Raises InvalidRequest, Conflict (already deleted, being
    replayed, or a request is pending), PermissionDenied."""
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "a delete request needs a reason")
    with transaction.atomic():
        locked = DeadLetter.objects.select_for_update().get(pk=dead_letter.pk)
        if locked.status in (Status.DELETED, Status.REPLAYING):
            raise Conflict(f"dead letter {locked.pk} is {locked.status}")
        if locked.approvals.filter(kind=ApprovalKind.DELETE, state=ApprovalState.PENDING).exists():
            raise Conflict(f"a delete request for dead letter {locked.pk} is already waiting for approval")
        request = ApprovalRequest.objects.create(
            kind=ApprovalKind.DELETE,
            team=locked.team,
            dead_letter=locked,
            reason=reason.strip(),
            requested_by=actor,
        )
        audit.record(
            actor=actor,
            action="dlq.delete_requested",
            target_type="dead_letter",
            target_id=locked.pk,
            reason=reason,
            details={"approval": request.pk},
        )
        signals.send_on_commit(signals.approval_requested, approval_id=request.pk)
        # Its page, open elsewhere, shows the pending delete (Replay and Skip disabled) without a reload.
        notify.message_changed_on_commit(
            locked, status=locked.status, action="delete_requested", actor=actor.get_username()
        )
    return request


def _decide(*, actor: User, approval: ApprovalRequest, approve: bool, reason: str) -> ApprovalRequest:
    require_role(actor, approval.team, Role.APPROVER)
    if approval.requested_by_id == actor.pk:
        raise PermissionDenied("a request needs a second person: you cannot decide your own request")
    now = timezone.now()
    with transaction.atomic():
        # The request row first, then (for a bulk request) the bulk action's row: the order a withdrawal
        # (bulk.cancel_bulk) takes too, so the two never wait on each other.
        decided = ApprovalRequest.objects.filter(pk=approval.pk, state=ApprovalState.PENDING).update(
            state=ApprovalState.APPROVED if approve else ApprovalState.REJECTED,
            decided_by=actor,
            decided_at=now,
            decision_reason=reason.strip(),
        )
        if decided != 1:
            approval.refresh_from_db()
            raise Conflict(f"request {approval.pk} is {approval.state}; only a pending request is decided")
        approval.refresh_from_db()
        audit.record(
            actor=actor,
            action="approval.approve" if approve else "approval.reject",
            target_type="approval",
            target_id=approval.pk,
            reason=reason,
            details={"kind": approval.kind, "dead_letter": approval.dead_letter_id, "bulk": approval.bulk_id}
            | ({"redrive_policy": approval.redrive_policy_id} if approval.redrive_policy_id else {}),
        )
        if approval.kind == ApprovalKind.DELETE and approval.dead_letter is not None and approve:
            _erase(actor=actor, dead_letter=approval.dead_letter, approval=approval)
        elif approval.kind == ApprovalKind.DELETE and approval.dead_letter is not None:
            # Rejected: its page offers Replay and Skip again.
            notify.message_changed_on_commit(
                approval.dead_letter,
                status=approval.dead_letter.status,
                action="delete_rejected",
                actor=actor.get_username(),
            )
        elif approval.kind == ApprovalKind.BULK:
            # The bulk life cycle's approve / reject move; Conflict (naming the action's state) when the
            # action no longer awaits approval, which rolls this decision back.
            bulk_actions.approval_decided(actor=actor, approval=approval, approved=approve)
        elif approval.kind == ApprovalKind.REDRIVE:
            # A redrive policy's creation or widening; Conflict when the policy was deleted meanwhile.
            redrive.approval_decided(actor=actor, approval=approval, approved=approve)
        elif approval.kind == ApprovalKind.OFFSETS:
            # APPROVED and queued on a worker, or REJECTED; Conflict when no longer requested (rolls back).
            offset_skip_decided(actor=actor, approval=approval, approved=approve)
    return approval


def approve(*, actor: User, approval: ApprovalRequest, reason: str = "") -> ApprovalRequest:
    """Approve a pending request and carry it out (erase the dead letter, or queue the bulk action).
    Needs the approver role in the request's team and must not be the requester.
    Raises PermissionDenied, Conflict (already decided, or the bulk action no longer awaits approval)."""
    return _decide(actor=actor, approval=approval, approve=True, reason=reason)


def reject(*, actor: User, approval: ApprovalRequest, reason: str = "") -> ApprovalRequest:
    """Reject a pending request (a rejected bulk action never runs). Same rules as ``approve``."""
    return _decide(actor=actor, approval=approval, approve=False, reason=reason)


def _erase(*, actor: User, dead_letter: DeadLetter, approval: ApprovalRequest) -> None:
    locked = DeadLetter.objects.select_for_update().get(pk=dead_letter.pk)
    if locked.status == Status.REPLAYING:
        raise Conflict(f"dead letter {locked.pk} is being replayed; decide again when it is done")
    before = {
        "key": base64.b64encode(bytes(locked.key or b"")).decode(),
        "value": base64.b64encode(bytes(locked.value or b"")).decode(),
        "headers": locked.headers,
    }
    DeadLetter.objects.filter(pk=locked.pk).update(status=Status.DELETED, status_changed_at=timezone.now())
    erasure.erase_payloads([locked.pk])
    erasure.replace_group_sample(locked.group_id, [locked.error_message], erased_ids=[locked.pk])
    audit.record(
        actor=actor,
        action="dlq.delete",
        target_type="dead_letter",
        target_id=locked.pk,
        reason=approval.reason,
        before=before,
        details={"approval": approval.pk, "requested_by": approval.requested_by.get_username()},
    )
    notify.message_changed_on_commit(
        locked, status=Status.DELETED, action="dlq.delete", actor=actor.get_username()
    )
