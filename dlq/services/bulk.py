"""Bulk actions: a replay or skip of every parked message a filter selects. Preview (a dry-run count),
create (queued at once, or waiting for an approver when large), approve / reject (through the approval
request, ``dlq.services.approvals``), pause / resume / cancel, and the runner a Celery worker calls
(``run_bulk``: chunk by chunk at the action's rate limit, taking over an action whose worker stopped
beating).

The life cycle is one table, ``BULK_TRANSITIONS``: each row is an action, the states it may start from,
the state it leads to, who may do it and what it does. Every function that changes a bulk action's state
looks its row up and moves the row with a conditional UPDATE (``WHERE state IN sources``), so two requests
cannot both win and anything not in the table is refused with Conflict naming the state. A move into a
state that runs messages also carries the approval condition in that UPDATE: an action that needed an
approval runs only once an approver other than its creator approved it, whatever path leads there.

The runner is enqueued by task name (``RUN_BULK_TASK``), so this module never imports ``dlq.tasks``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import connection, connections, transaction
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from access import audit, bulk_insert
from access.id_lists import among
from access.models import Role, Team
from access.permissions import AnyUser, is_admin, require_role
from dlq import signals
from dlq.filters import MAX_IDS, MessageFilter
from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    BulkKind,
    BulkState,
    DeadLetter,
    PayloadRevision,
    Replay,
    ReplayState,
    Status,
)
from dlq.services import erasure, holds, kafka_io, notify
from dlq.services.errors import Conflict, InvalidRequest
from dlq.services.fix_patch import BulkFix, fix_chunk
from dlq.services.inspection import visible_dead_letters
from dlq.services.kafka_io import OutgoingRecord
from dlq.services.replays import (
    Answered,
    PipelineTopics,
    pipeline_topics,
    record_answers,
    replay_record,
    resolve_in_doubt,
    would_fail_again,
)
from streamforge_core.kafka import topic_name_problem

#: The Celery task that runs a bulk action (``dlq.tasks.run_bulk``), called by name.
RUN_BULK_TASK = "dlq.run_bulk"
#: States in which a worker runs (or is about to run) the action.
BULK_RUNNABLE = (BulkState.QUEUED, BulkState.RUNNING)


@dataclass(frozen=True)
class BulkTransition:
    """One row of the bulk life cycle: ``action`` moves a bulk action from one of ``sources`` (empty: it
    is being created) to ``target``.

    ``role``: the role the actor needs in the action's team; ``None`` means no person may do it, only a
    worker (or the beat's takeover). ``not_requester``: the actor must not be the action's creator (four
    eyes), whatever their role. ``runs``: the target state runs messages, so the move also requires that
    the action needs no approval or has one by another person. ``event``: the audit action recorded, or
    ``""`` when the caller records it. ``effect``: what it does, in words."""

    action: str
    sources: tuple[BulkState, ...]
    target: BulkState
    role: Role | None
    not_requester: bool
    runs: bool
    event: str
    effect: str


_S = BulkState
#: The bulk life cycle. Nothing else changes ``BulkAction.state``; a move not listed here is a Conflict.
BULK_TRANSITIONS: Mapping[str, BulkTransition] = {
    row.action: row
    for row in (
        # action, from, to, who (role in the team; None: a worker), not the requester, runs messages,
        # audit event, what it does
        BulkTransition(
            "create", (), _S.QUEUED, Role.OPERATOR, False, True, "dlq.bulk_create",
            "at most the approval threshold selected (with the creator's others in the window): sent to a worker",
        ),
        BulkTransition(
            "request", (), _S.AWAITING_APPROVAL, Role.OPERATOR, False, False, "dlq.bulk_create",
            "more than the approval threshold selected (with the creator's others in the window): opens an approval request for the team's approvers",
        ),
        BulkTransition(
            "approve", (_S.AWAITING_APPROVAL,), _S.QUEUED, Role.APPROVER, True, True, "",
            "through its approval request (audited as approval.approve): sent to a worker",
        ),
        BulkTransition(
            "reject", (_S.AWAITING_APPROVAL,), _S.REJECTED, Role.APPROVER, True, False, "",
            "through its approval request (audited as approval.reject): it never runs",
        ),
        BulkTransition(
            "withdraw", (_S.AWAITING_APPROVAL,), _S.CANCELLED, Role.OPERATOR, False, False, "dlq.bulk_cancel",
            "cancel before approval: the approval request is closed as cancelled; it never runs",
        ),
        BulkTransition(
            "pause", (_S.QUEUED, _S.RUNNING), _S.PAUSED, Role.OPERATOR, False, False, "dlq.bulk_pause",
            "stops after the chunk in flight; resume continues after its cursor",
        ),
        BulkTransition(
            "resume", (_S.PAUSED,), _S.QUEUED, Role.OPERATOR, False, True, "dlq.bulk_resume",
            "sent to a worker again; it continues after its cursor",
        ),
        BulkTransition(
            "cancel", (_S.QUEUED, _S.RUNNING, _S.PAUSED), _S.CANCELLED, Role.OPERATOR, False, False,
            "dlq.bulk_cancel",
            "stops after the chunk in flight, for good; messages not reached stay parked",
        ),
        BulkTransition(
            "run", (_S.QUEUED,), _S.RUNNING, None, False, True, "",
            "a worker claims it and processes it chunk by chunk",
        ),
        BulkTransition(
            "take_over", (_S.RUNNING,), _S.RUNNING, None, False, True, "",
            "its worker stopped beating: another worker claims it, settles replays in doubt, continues",
        ),
        BulkTransition(
            "complete", (_S.RUNNING,), _S.COMPLETED, None, False, False, "dlq.bulk_complete",
            "the worker holding it found nothing left to do",
        ),
        BulkTransition(
            "fail", (_S.QUEUED, _S.RUNNING), _S.FAILED, None, False, False, "dlq.bulk_fail",
            "a worker refused it: it needed an approval by a person other than its creator and has none",
        ),
    )
}  # fmt: skip


def approval_granted() -> Q:
    """The condition (on ``BulkAction`` rows) that an action may run: it needs no approval (neither marked
    ``approval_required`` nor having any bulk approval request), or a request of it was approved by a user
    other than its creator. Part of every UPDATE into a state that runs messages."""
    requests = ApprovalRequest.objects.filter(bulk=OuterRef("pk"), kind=ApprovalKind.BULK)
    by_another = requests.filter(state=ApprovalState.APPROVED, decided_by__isnull=False).exclude(
        decided_by=OuterRef("created_by")
    )
    return (Q(approval_required=False) & ~Exists(requests)) | Exists(by_another)


def _check_actor(row: BulkTransition, actor: User | None, *, team: Team | None, requester_id: int) -> None:
    """The table's "who" of ``row``: PermissionDenied unless ``actor`` may make this move."""
    if row.role is None:
        if actor is not None:
            raise PermissionDenied(f"only a worker may {row.action} a bulk action")
        return
    if actor is None:
        raise PermissionDenied(f"{row.action} needs a person with the {row.role.label.lower()} role")
    if team is None:
        raise PermissionDenied("this bulk action has no team")
    require_role(actor, team, row.role)
    if row.not_requester and actor.pk == requester_id:
        raise PermissionDenied(
            f"a large bulk action needs a second person: you cannot {row.action} your own bulk action"
        )


def _refused(row: BulkTransition, bulk_pk: int) -> Conflict:
    """The Conflict for a move whose conditional UPDATE changed nothing, naming the state it found."""
    state = BulkAction.objects.filter(pk=bulk_pk).values_list("state", flat=True).first()
    if state in row.sources and row.runs:
        return Conflict(
            f"bulk action {bulk_pk} needs an approval by a person other than its creator before it runs"
        )
    verb, sources = row.action, row.sources
    if row.action in ("cancel", "withdraw"):  # one verb for people: cancel_bulk picks the row by state
        verb = "cancel"
        sources = BULK_TRANSITIONS["withdraw"].sources + BULK_TRANSITIONS["cancel"].sources
    allowed = ", ".join(s.label.lower() for s in sources)
    return Conflict(
        f"bulk action {bulk_pk} is {BulkState(state).label.lower() if state else 'gone'}; "
        f"{verb} is only for {allowed} bulk actions"
    )


def _move(row: BulkTransition, bulk_pk: int, *, when: Q | None = None, **fields: Any) -> bool:
    """Make ``row``'s move with one conditional UPDATE (state in the row's sources, the approval condition
    when the target runs messages, and ``when``); True when this caller made it, False when the row was
    in another state (or someone else moved it first)."""
    condition = Q(pk=bulk_pk, state__in=row.sources)
    if row.runs:
        condition &= approval_granted()
    if when is not None:
        condition &= when
    return BulkAction.objects.filter(condition).update(state=row.target, **fields) == 1


@dataclass(frozen=True)
class BulkPreview:
    """The dry-run count of a bulk action: parked messages the filter selects (``count``, and per team
    name in ``teams``), and whether creating it would wait for an approver (more than
    ``approval_threshold`` messages)."""

    count: int
    teams: Mapping[str, int]
    needs_approval: bool
    approval_threshold: int
    # A replay's dry run: how many of the first ``checked`` selected messages would fail again, where and
    # why (``FailingReason``, most first), and their ids (at most ``MAX_IDS``), to open, skip or leave out.
    checked: int = 0
    would_fail: int = 0
    failing: tuple[FailingReason, ...] = ()
    failing_ids: tuple[int, ...] = ()
    # The ids that would pass, when every selected message was checked and they are at most ``MAX_IDS``.
    passing_ids: tuple[int, ...] = ()
    # Selected messages a pending delete request holds (``holds``): counted in ``count``, left out when it
    # runs, never checked; their ids (at most ``MAX_IDS``).
    held: int = 0
    held_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class FailingReason:
    """``count`` selected messages would be dead-lettered again at ``destination`` (or refused at the
    replay's target topic of that name) with ``error_type``; ``error_message`` is the first one's."""

    destination: str
    error_type: str
    error_message: str
    count: int


def _bulk_queryset(actor: AnyUser, selection: MessageFilter) -> QuerySet[DeadLetter]:
    return selection.apply(visible_dead_letters(actor)).filter(status=Status.PARKED)


def _counts_by_team(qs: QuerySet[DeadLetter]) -> list[tuple[str, int]]:
    grouped = qs.order_by().values("team__name").annotate(n=Count("id"))  # no ordering: it would split groups
    return [(row["team__name"], row["n"]) for row in grouped]


def recent_volume(*, actor_id: int, now: datetime | None = None) -> int:
    """Messages the person ``actor_id`` selected in bulk actions created within the last
    ``DLQ_BULK_APPROVAL_WINDOW_SECONDS`` (3600 by default) that needed no second person
    (``approval_required`` false), whatever their state: a selection cut into pieces under the threshold
    adds up. Selections an approver let through are not counted (their four eyes were had), and neither
    are the runs of the redrive policies they created (an approver let the policy through)."""
    since = (now or timezone.now()) - timedelta(seconds=settings.DLQ_BULK_APPROVAL_WINDOW_SECONDS)
    selected = BulkAction.objects.filter(
        created_by_id=actor_id, created_at__gte=since, approval_required=False, redrive_policy__isnull=True
    ).aggregate(n=Coalesce(Sum("total"), 0))
    return int(selected["n"])


def needs_approval(kind: str, total: int, *, recent: int = 0) -> bool:
    """Whether a bulk action of ``kind`` selecting ``total`` messages waits for an approver: a delete
    always (as a single delete does); a replay or skip when ``total`` plus what the same person selected
    without an approver within the window (``recent``, from ``recent_volume``) is above
    ``DLQ_BULK_APPROVAL_THRESHOLD`` messages."""
    return kind == BulkKind.DELETE or total + recent > settings.DLQ_BULK_APPROVAL_THRESHOLD


def preview_bulk(*, actor: User, selection: MessageFilter, kind: str = BulkKind.REPLAY) -> BulkPreview:
    """What a bulk action of ``kind`` with this filter would select now, among the parked messages the
    actor sees, and whether it would wait for an approver given what the actor selected within the
    window. A replay, skip or fix counts the selected messages a pending delete request holds (``held``:
    the run leaves them out, ``holds``); a replay checks the others against the pipeline."""
    per_team = dict(_counts_by_team(_bulk_queryset(actor, selection)))
    total = sum(per_team.values())
    preview = BulkPreview(
        count=total,
        teams=per_team,
        needs_approval=needs_approval(kind, total, recent=recent_volume(actor_id=actor.pk)),
        approval_threshold=settings.DLQ_BULK_APPROVAL_THRESHOLD,
    )
    if kind == BulkKind.DELETE or not total:
        return preview
    held_ids = list(
        holds.pending_delete_held(_bulk_queryset(actor, selection))
        .order_by("id")
        .values_list("id", flat=True)
    )
    preview = dataclasses.replace(preview, held=len(held_ids), held_ids=tuple(held_ids[:MAX_IDS]))
    if kind != BulkKind.REPLAY or len(held_ids) == total:
        return preview
    unheld = (
        _bulk_queryset(actor, selection).exclude(pk__in=among(held_ids))
        if held_ids
        else _bulk_queryset(actor, selection)
    )
    checked, failing, ids = _would_fail_again_in(unheld)
    if not ids:
        return dataclasses.replace(preview, checked=len(checked))
    passing = [pk for pk in checked if pk not in set(ids)]
    return dataclasses.replace(
        preview,
        checked=len(checked),
        would_fail=len(ids),
        failing=failing,
        failing_ids=tuple(ids[:MAX_IDS]),
        passing_ids=(
            tuple(passing) if len(checked) == total - len(held_ids) and len(passing) <= MAX_IDS else ()
        ),
    )


#: A replay's dry run checks at most this many of the selected messages (oldest first) against the pipeline.
DRY_RUN_CHECK_LIMIT = 2000


def _would_fail_again_in(qs: QuerySet[DeadLetter]) -> tuple[list[int], tuple[FailingReason, ...], list[int]]:
    """(the ids checked, why they would fail grouped by destination and error type, most first, the
    failing ids) for the first ``DRY_RUN_CHECK_LIMIT`` messages of ``qs``, each with the payload a replay
    sends (its latest fix, else the original) to its source topic (``replays.would_fail_again``)."""
    rows = list(qs.select_related("pipeline__current_revision").order_by("id")[:DRY_RUN_CHECK_LIMIT])
    fixes = latest_payloads([r.pk for r in rows])
    topics: dict[int | None, PipelineTopics] = {}
    reasons: dict[tuple[str, str], list[Any]] = {}
    failing_ids: list[int] = []
    for row in rows:
        value = fixes[row.pk][1] if row.pk in fixes else (bytes(row.value) if row.value is not None else None)
        if row.pipeline_id not in topics:
            topics[row.pipeline_id] = pipeline_topics(row.pipeline_id)
        failing = would_fail_again(row, value, topics=topics[row.pipeline_id])
        if not failing:
            continue
        failing_ids.append(row.pk)
        for outcome in failing:
            entry = reasons.setdefault(
                (outcome.destination, outcome.error_type or ""), [outcome.error_message or "", 0]
            )
            entry[1] += 1
    grouped = sorted(
        (FailingReason(dest, error_type, message, n) for (dest, error_type), (message, n) in reasons.items()),
        key=lambda r: (-r.count, r.destination, r.error_type),
    )
    return [r.pk for r in rows], tuple(grouped), failing_ids


def create_bulk(
    *,
    actor: User,
    kind: str,
    selection: MessageFilter,
    reason: str,
    rate_limit: int = 100,
    target_topic: str = "",
    fix: BulkFix | None = None,
) -> BulkAction:
    """Create a bulk replay, skip or delete of every parked message the filter selects now (ids up to the
    current newest). It is queued at once, or waits for an approver (``needs_approval``: a delete always,
    otherwise when this selection plus what the actor selected without an approver within
    ``STREAMFORGE_DLQ_BULK_APPROVAL_WINDOW`` seconds is above ``STREAMFORGE_DLQ_BULK_APPROVAL_THRESHOLD``
    messages). The selection must lie in one team, where the
    actor needs the operator role. ``rate_limit`` is messages per second (1..10000; 0: unlimited).
    A ``fix`` (kind ``fix`` only, and required by it) is applied to each message by the runner
    (``fix_patch.fix_chunk``). Raises InvalidRequest, PermissionDenied.
    """
    if kind not in BulkKind.values:
        raise InvalidRequest("kind", f"must be one of {', '.join(BulkKind.values)}")
    if (kind == BulkKind.FIX) != (fix is not None):
        raise InvalidRequest(
            "fix", "a bulk fix needs its fix (POST /api/dlq/bulk/fix/); other kinds take none"
        )
    if not reason.strip():
        raise InvalidRequest("reason", "a bulk action needs a reason")
    if rate_limit < 0 or rate_limit > 10_000:
        raise InvalidRequest("rate_limit", "messages per second, 0 (unlimited) to 10000")
    if target_topic.strip() and (problem := topic_name_problem(target_topic.strip())) is not None:
        raise InvalidRequest("target_topic", problem)
    qs = _bulk_queryset(actor, selection)
    teams = list(qs.order_by().values_list("team", flat=True).distinct()[:2])
    if not teams:
        raise InvalidRequest("filters", "no parked message matches this filter")
    if len(teams) > 1:
        raise InvalidRequest(
            "filters", "the filter selects messages of several teams; narrow it to one pipeline"
        )
    team = Team.objects.get(pk=teams[0])
    with transaction.atomic():
        # One person's bulk actions are created one at a time: the actor's user row stays locked until
        # this transaction commits, so two concurrent requests cannot both count the window before either
        # is stored and both slip under the threshold.
        User.objects.select_for_update().filter(pk=actor.pk).values_list("pk", flat=True).first()
        max_id = qs.order_by("-id").values_list("id", flat=True).first() or 0
        total = qs.filter(id__lte=max_id).count()
        recent = recent_volume(actor_id=actor.pk)
        approval = needs_approval(kind, total, recent=recent)
        row = BULK_TRANSITIONS["request" if approval else "create"]
        _check_actor(row, actor, team=team, requester_id=actor.pk)
        if target_topic and not is_admin(actor):
            raise InvalidRequest(
                "target_topic", "a bulk replay to another topic than each message's source needs an admin"
            )
        bulk = BulkAction.objects.create(
            kind=kind,
            team=team,
            filters=selection.to_json(),
            max_id=max_id,
            target_topic=target_topic.strip(),
            reason=reason.strip(),
            rate_limit=rate_limit,
            state=row.target,
            approval_required=approval,
            total=total,
            created_by=actor,
            fix=fix.to_json() if fix is not None else {},
        )
        audit.record(
            actor=actor,
            action=row.event,
            target_type="bulk",
            target_id=bulk.pk,
            reason=reason,
            details={"kind": kind, "filters": bulk.filters, "total": total, "rate_limit": rate_limit}
            | ({"fix": bulk.fix} if fix is not None else {}),
        )
        if approval:
            bulk_approval = ApprovalRequest.objects.create(
                kind=ApprovalKind.BULK,
                team=team,
                bulk=bulk,
                reason=(
                    f"bulk {kind} of {total} messages"
                    + (f" ({recent} more selected by them within the window)" if recent else "")
                    + f": {reason.strip()}"
                ),
                requested_by=actor,
            )
            signals.send_on_commit(signals.approval_requested, approval_id=bulk_approval.pk)
        else:
            enqueue_bulk(bulk)
    return bulk


def enqueue_bulk(bulk: BulkAction) -> None:
    """Send the bulk action to a Celery worker (``RUN_BULK_TASK``) once the current transaction commits.
    Tests replace this to run the action themselves."""
    pk = bulk.pk
    transaction.on_commit(lambda: current_app.send_task(RUN_BULK_TASK, args=(pk,)))


def approval_decided(*, actor: User, approval: ApprovalRequest, approved: bool) -> None:
    """The ``approve`` / ``reject`` move of the bulk action of ``approval``, which ``actor`` has just
    decided in the current transaction (``dlq.services.approvals``, which records the audit event and
    calls this after marking the request, so the approval condition of ``approve`` sees it).
    Raises PermissionDenied (not an approver, or the action's creator), Conflict naming the action's state
    when it no longer awaits approval; either rolls the decision back."""
    bulk = approval.bulk
    if bulk is None:
        raise Conflict(f"request {approval.pk} has no bulk action")
    row = BULK_TRANSITIONS["approve" if approved else "reject"]
    _check_actor(row, actor, team=bulk.team, requester_id=bulk.created_by_id)
    if not _move(row, bulk.pk):
        raise _refused(row, bulk.pk)
    if row.target == BulkState.QUEUED:
        enqueue_bulk(bulk)
    bulk.refresh_from_db()
    notify.bulk_changed_on_commit(bulk)


def _operator_move(*, action: str, actor: User, bulk: BulkAction, reason: str) -> BulkAction:
    """An operator's move of ``BULK_TRANSITIONS`` (pause, resume, cancel, withdraw): the table's role
    check, the conditional UPDATE, its audit event and effect, in one transaction."""
    row = BULK_TRANSITIONS[action]
    _check_actor(row, actor, team=bulk.team, requester_id=bulk.created_by_id)
    with transaction.atomic():
        if action == "withdraw":
            # The approval request first, as a decision does (approvals._decide): one lock order, and a
            # request an approver decided meanwhile makes this move find the action no longer awaiting.
            ApprovalRequest.objects.filter(
                bulk=bulk.pk, kind=ApprovalKind.BULK, state=ApprovalState.PENDING
            ).update(
                state=ApprovalState.CANCELLED,
                decided_at=timezone.now(),
                decision_reason=f"withdrawn: {actor.get_username()} cancelled the bulk action",
            )
        if not _move(row, bulk.pk):
            raise _refused(row, bulk.pk)
        audit.record(
            actor=actor,
            action=row.event,
            target_type="bulk",
            target_id=bulk.pk,
            reason=reason,
            details={"transition": row.action, "to": row.target.value},
        )
        if row.target == BulkState.QUEUED:
            enqueue_bulk(bulk)
    bulk.refresh_from_db()
    notify.bulk_changed_on_commit(bulk)
    return bulk


def pause_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Stop a queued or running action after the chunk in flight; ``resume_bulk`` continues where it
    stopped. Needs the operator role. Raises PermissionDenied, Conflict naming the state."""
    return _operator_move(action="pause", actor=actor, bulk=bulk, reason=reason)


def cancel_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """End the action for good: a queued, running or paused one stops after the chunk in flight (messages
    not yet reached stay parked; nothing done is undone); one awaiting approval is withdrawn, its approval
    request closed as cancelled. A cancelled action is never resumed. Needs the operator role.
    Raises PermissionDenied, Conflict naming the state."""
    current = BulkAction.objects.filter(pk=bulk.pk).values_list("state", flat=True).first()
    action = "withdraw" if current == BulkState.AWAITING_APPROVAL else "cancel"
    return _operator_move(action=action, actor=actor, bulk=bulk, reason=reason)


def resume_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Queue a paused bulk action again (only a paused one); it continues after its cursor. Needs the
    operator role. Raises PermissionDenied, Conflict naming the state (or the approval it lacks)."""
    return _operator_move(action="resume", actor=actor, bulk=bulk, reason=reason)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def run_bulk(*, bulk_id: int, chunk_size: int | None = None) -> BulkAction:
    """Carry out a queued bulk action, or take over one whose worker stopped beating, chunk by chunk at its
    rate limit, until done, paused or cancelled. Safe to call twice: only one caller claims it.

    Each chunk claims its messages (PARKED -> REPLAYING / SKIPPED) before acting, so a message is
    replayed at most once whatever crashes; replays left in doubt by a crashed worker are settled from
    the target topic (``resolve_in_doubt``) before the takeover continues.

    An action that needed an approval and has none by a person other than its creator is never claimed:
    it is moved to FAILED (``fail``) with the reason in ``last_error``, whatever state it was left in.
    """
    me = _worker_name()
    now = timezone.now()
    stale = now - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS)
    run, take_over = BULK_TRANSITIONS["run"], BULK_TRANSITIONS["take_over"]
    # "run" or "take_over" (both lead to RUNNING and carry the approval condition) in one conditional
    # UPDATE: one caller wins.
    claimed = BulkAction.objects.filter(
        Q(state__in=run.sources) | Q(state__in=take_over.sources, heartbeat_at__lt=stale),
        approval_granted(),
        pk=bulk_id,
    ).update(
        state=run.target,
        worker=me,
        heartbeat_at=now,
        runs=F("runs") + 1,
        started_at=Coalesce(F("started_at"), now),
    )
    if claimed != 1:
        _refuse_unapproved(bulk_id)
        return BulkAction.objects.select_related("created_by", "team").get(pk=bulk_id)
    bulk = BulkAction.objects.select_related("created_by", "team").get(pk=bulk_id)
    if bulk.kind == BulkKind.REPLAY:
        # A previous worker's in-flight produces ended at least DLQ_BULK_STALE_SECONDS ago (> delivery timeout).
        resolve_in_doubt(older_than_seconds=0, bulk=bulk)
    selection = MessageFilter.from_mapping(bulk.filters)
    rate = bulk.rate_limit
    size = chunk_size or (max(1, min(200, rate // 5)) if rate else 1000)
    started, sent_this_run = time.monotonic(), 0  # messages handed on (the rate limit counts these)
    after = bulk.cursor
    stopped_as = ""  # PAUSED or CANCELLED when a person stopped it

    def record(ids: Sequence[int], handled: int, ok: int, failed: int) -> None:
        BulkAction.objects.filter(pk=bulk.pk).update(
            cursor=max(ids),
            processed=F("processed") + handled,
            succeeded=F("succeeded") + ok,
            failed=F("failed") + failed,
            heartbeat_at=timezone.now(),
        )
        notify.bulk_changed_now(BulkAction.objects.get(pk=bulk.pk))

    # Replays are pipelined: chunk N+1 is claimed and sent while the broker answers chunk N, which is then
    # recorded (on another thread when it may, see _Settler); every chunk sent is settled before the loop
    # ends for any reason.
    settler = _Settler(
        lambda chunk: record(chunk.ids, *_settle_replay_chunk(bulk, chunk)),
        threaded=connection.vendor == "postgresql" and not connection.in_atomic_block,
    )
    try:
        while True:
            current = BulkAction.objects.filter(pk=bulk.pk).values_list("state", "worker").get()
            if current != (BulkState.RUNNING, me):
                stopped_as = current[0] if current[0] in (BulkState.PAUSED, BulkState.CANCELLED) else ""
                break
            ids = list(
                selection.apply(DeadLetter.objects.filter(team=bulk.team))
                .filter(status=Status.PARKED, id__gt=after, id__lte=bulk.max_id)
                .order_by("id")
                .values_list("id", flat=True)[:size]
            )
            if not ids:
                settler.drain()
                bulk.refresh_from_db()
                complete = BULK_TRANSITIONS["complete"]
                with transaction.atomic():
                    finished = timezone.now()
                    if _move(
                        complete, bulk.pk, when=Q(worker=me), finished_at=finished, heartbeat_at=finished
                    ):
                        audit.record(
                            actor=None,
                            action=complete.event,
                            target_type="bulk",
                            target_id=bulk.pk,
                            details=bulk.progress(),
                        )
                        signals.send_on_commit(signals.bulk_finished, bulk_id=bulk.pk)
                break
            after = max(ids)
            if bulk.kind == BulkKind.REPLAY:
                settler.submit(_send_replay_chunk(bulk, ids))
            elif bulk.kind == BulkKind.DELETE:
                record(ids, *_bulk_delete_chunk(bulk, ids))
            elif bulk.kind == BulkKind.FIX:
                record(ids, *fix_chunk(bulk, ids))
            else:
                record(ids, *_bulk_skip_chunk(bulk, ids))
            sent_this_run += len(ids)
            if rate:
                # Paced by what was sent, not what was recorded: the settler may be a chunk or two behind.
                ahead = sent_this_run / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
                elif ahead < -1:  # after a stall (a slow broker), go on at the rate: no burst to catch up
                    started -= ahead + 1
    finally:
        settler.drain()
    bulk.refresh_from_db()
    if stopped_as:
        # The pause or cancel was audited when asked for; this is what the run had done when it stopped.
        audit.record(
            actor=None,
            action="dlq.bulk_stopped",
            target_type="bulk",
            target_id=bulk.pk,
            details={"state": stopped_as, **bulk.progress()},
        )
    notify.bulk_changed_now(bulk)
    return bulk


class _Settler:
    """Settles a bulk replay's sent chunks in the order sent (``settle`` waits for the broker's answers and
    records them). Threaded on PostgreSQL outside a transaction: a thread with its own database connection
    settles chunk N while the runner claims and sends chunk N+1, so PostgreSQL's work for one overlaps
    Python's for the other (2 cores, 20,000 records, four runs each in one session: 5,038-5,936 records/s,
    inline 3,144-4,472; bench.dlq_measure); at most one chunk waits in its queue. Inline instead, one chunk
    behind: inside a transaction (a test's; another connection could not see its rows), and on SQLite
    (its writers take turns, so a thread gains nothing).

    A settle that raises leaves its chunk's replays PENDING, and those of the chunks sent after it
    (``resolve_in_doubt`` settles them from the topic when the action is taken over); the error is raised
    by the next ``submit`` or by ``drain``."""

    def __init__(self, settle: Callable[[_ReplayChunk], None], *, threaded: bool) -> None:
        self._settle = settle
        self._held: _ReplayChunk | None = None
        self._failed = False  # after a failed settle the later chunks are left in doubt too
        self._error: BaseException | None = None  # not yet raised in the runner's thread
        self._queue: queue.Queue[_ReplayChunk | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._run, name="bulk-settler", daemon=True)
            self._thread.start()

    def _settle_one(self, chunk: _ReplayChunk) -> None:
        if self._failed:
            return
        try:
            self._settle(chunk)
        except BaseException as exc:  # raised in the runner's thread by _raise
            self._failed, self._error = True, exc

    def _run(self) -> None:
        try:
            while (chunk := self._queue.get()) is not None:
                self._settle_one(chunk)
        finally:
            connections.close_all()  # this thread's own connection

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def submit(self, chunk: _ReplayChunk) -> None:
        """Queue a sent chunk (inline: settle the one before it and hold this one)."""
        self._raise()
        if self._thread is not None:
            self._queue.put(chunk)
            return
        held, self._held = self._held, chunk
        if held is not None:
            self._settle_one(held)
        self._raise()

    def drain(self) -> None:
        """Settle every chunk submitted so far, then raise a settle's error if there was one. Idempotent."""
        if self._thread is not None:
            if self._thread.is_alive():
                self._queue.put(None)
                self._thread.join()
        elif self._held is not None:
            held, self._held = self._held, None
            self._settle_one(held)
        self._raise()


def _refuse_unapproved(bulk_id: int) -> None:
    """The ``fail`` move, for a queued or running action a worker may not run because it needed an
    approval by a person other than its creator and has none (no path should lead there; this keeps a
    future one from running it). Recorded on the action (``last_error``) and in the audit log."""
    fail = BULK_TRANSITIONS["fail"]
    error = "refused: it needs an approval by a person other than its creator, and has none"
    with transaction.atomic():
        if _move(fail, bulk_id, when=~approval_granted(), last_error=error, finished_at=timezone.now()):
            audit.record(
                actor=None,
                action=fail.event,
                target_type="bulk",
                target_id=bulk_id,
                reason=error,
                details={"transition": fail.action, "to": fail.target.value},
            )
            notify.bulk_changed_on_commit(BulkAction.objects.get(pk=bulk_id))


@dataclass(frozen=True, slots=True)
class ClaimedRecord:
    """A dead letter a bulk replay claimed: the columns its replayed record needs, as the claim's own
    ``UPDATE ... RETURNING`` gave them (``headers`` in the stored ``[name, base64-or-null]`` form). Not a
    model instance: building a thousand of those per chunk was a third of the runner's Python time
    (profiled with bench.dlq_measure)."""

    pk: int
    pipeline_id: int | None
    source_topic: str
    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    key: bytes | None
    value: bytes | None
    headers: list[list[str | None]]
    cluster_id: int | None
    destination: str

    @property
    def coordinates(self) -> str:
        """``topic/partition/offset`` of the DLQ record, as ``DeadLetter.coordinates``."""
        return f"{self.dlq_topic}/{self.dlq_partition}/{self.dlq_offset}"


_CLAIMED_COLUMNS = (
    "id, pipeline_id, source_topic, dlq_topic, dlq_partition, dlq_offset, key, value, headers, cluster_id, "
    "destination"
)


def _claim(ids: Sequence[int], to: str, bulk: BulkAction, *, returning: str = "id") -> list[tuple[Any, ...]]:
    """Move the still-parked ones of ``ids`` to ``to`` and mark them closed by ``bulk``, in one statement
    that returns the ``returning`` columns of the rows it moved (sorted by id). On PostgreSQL the rows are
    locked first with ``FOR UPDATE SKIP LOCKED``: a row another worker (or a single replay) holds is left
    to it, and two claimers never wait on each other, so they cannot deadlock. SQLite serialises writers,
    so its conditional UPDATE alone is the guard."""
    table = DeadLetter._meta.db_table
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"UPDATE {table} AS d SET status = %s, status_changed_at = %s, closed_by_bulk_id = %s "  # noqa: S608  # names are ours
                f"FROM (SELECT id FROM {table} WHERE id = ANY(%s::bigint[]) AND status = %s "
                "ORDER BY id FOR UPDATE SKIP LOCKED) AS c "
                f"WHERE d.id = c.id AND d.status = %s RETURNING "
                + ", ".join(f"d.{name.strip()}" for name in returning.split(",")),
                [to, now, bulk.pk, [int(i) for i in ids], Status.PARKED, Status.PARKED],
            )
        else:
            marks = ", ".join(["%s"] * len(ids))
            cursor.execute(
                f"UPDATE {table} SET status = %s, status_changed_at = %s, closed_by_bulk_id = %s "  # noqa: S608  # names are ours
                f"WHERE id IN ({marks}) AND status = %s RETURNING {returning}",
                [to, now, bulk.pk, *ids, Status.PARKED],
            )
        return sorted(cursor.fetchall(), key=lambda row: int(row[0]))


def _claim_unheld(
    ids: Sequence[int], to: str, bulk: BulkAction, *, returning: str = "id"
) -> tuple[list[tuple[Any, ...]], int]:
    """``_claim`` of those of ``ids`` no pending delete request holds (``holds.held_by_pending_delete``, the
    rule a single replay or skip refuses with), in the caller's transaction; the held ones stay parked and
    are recorded in ``bulk.left_out`` with the reason. Checked before the claim, and again after it for a
    request asked for in between (put back to PARKED: a delete request asked after the claim waits for its
    row locks and then finds the message claimed). Returns (the claimed rows, how many were held)."""
    held = holds.held_by_pending_delete(ids)
    rows = (
        _claim([i for i in ids if i not in held], to, bulk, returning=returning)
        if len(held) < len(ids)
        else []
    )
    late = holds.held_by_pending_delete(int(row[0]) for row in rows)
    if late:
        DeadLetter.objects.filter(pk__in=among(late)).update(status=Status.PARKED, closed_by_bulk=None)
        rows = [row for row in rows if int(row[0]) not in late]
        held |= late
    holds.record_left_out(bulk.pk, held)
    return rows, len(held)


def _claim_records(ids: Sequence[int], bulk: BulkAction) -> tuple[list[ClaimedRecord], int]:
    """``_claim_unheld`` for a replay: the still-parked, unheld of ``ids`` moved to REPLAYING, as
    ``ClaimedRecord``, and how many were held."""
    claimed = []
    rows, held = _claim_unheld(ids, Status.REPLAYING, bulk, returning=_CLAIMED_COLUMNS)
    for pk, pipeline_id, source, topic, partition, offset, key, value, stored, cluster_id, dest in rows:
        claimed.append(
            ClaimedRecord(
                pk=pk,
                pipeline_id=pipeline_id,
                source_topic=source,
                dlq_topic=topic,
                dlq_partition=partition,
                dlq_offset=offset,
                key=None if key is None else bytes(key),
                value=None if value is None else bytes(value),
                headers=json.loads(stored) if isinstance(stored, str) else stored,
                cluster_id=cluster_id,
                destination=dest,
            )
        )
    return claimed, held


def latest_payloads(ids: Sequence[int]) -> dict[int, tuple[int, bytes]]:
    """The newest payload revision of each of these dead letters that has one, as (revision id, value)
    (one query)."""
    latest: dict[int, tuple[int, bytes]] = {}
    for dead_letter_id, revision_id, value in (
        PayloadRevision.objects.filter(dead_letter_id__in=among(ids))
        .order_by("dead_letter_id", "number")
        .values_list("dead_letter_id", "id", "value")
    ):
        latest[dead_letter_id] = (revision_id, bytes(value))
    return latest


@dataclass
class _ReplayChunk:
    """A bulk replay chunk whose records are on their way to the broker (``_send_replay_chunk``)."""

    ids: Sequence[int]
    done: list[Answered]
    sending: kafka_io.Sending
    held: int = 0  # left out: a pending delete request holds them


@dataclass(slots=True)
class BulkAttempt:
    """A bulk replay's ``Replay`` row, written with ``bulk_insert.insert_values`` and recorded with
    ``replays.record_answers`` (no model instance; the fields those read)."""

    pk: int
    replay_id: uuid.UUID
    target_topic: str
    destinations: str
    state: str = ReplayState.PENDING
    error: str = ""
    finished_at: datetime | None = None
    produced_partition: int | None = None
    produced_offset: int | None = None


_ATTEMPT_COLUMNS = (
    "replay_id", "dead_letter_id", "payload_revision_id", "bulk_id", "target_topic", "destinations", "state",
    "requested_by_id", "requested_at", "idempotency_key", "error",
)  # fmt: skip


def _send_replay_chunk(bulk: BulkAction, ids: Sequence[int]) -> _ReplayChunk:
    """Claim the still-parked of ``ids`` (REPLAYING, one PENDING attempt each, committed) and hand their
    records to the producer without waiting for the broker."""
    actor = bulk.created_by
    now = timezone.now()
    pipelines: dict[int | None, PipelineTopics] = {}  # per pipeline: parsed once per chunk, not per message
    with transaction.atomic():
        rows, held = _claim_records(ids, bulk)
        latest = latest_payloads([r.pk for r in rows])
        values = []
        for row in rows:
            revision = latest.get(row.pk)
            target = bulk.target_topic or row.source_topic
            if row.pipeline_id not in pipelines:
                pipelines[row.pipeline_id] = pipeline_topics(row.pipeline_id)
            scope = pipelines[row.pipeline_id].scope(row.destination, target)
            values.append(
                (uuid.uuid4(), row.pk, revision[0] if revision else None, bulk.pk, target, scope,
                 ReplayState.PENDING.value, actor.pk, now, "", "")
            )  # fmt: skip
        new_ids = bulk_insert.insert_values(Replay, _ATTEMPT_COLUMNS, values)
    attempts = [
        BulkAttempt(pk=pk, replay_id=value[0], target_topic=value[4], destinations=value[5])
        for pk, value in zip(new_ids, values, strict=True)
    ]
    outs = []
    done: list[Answered] = []
    admin = is_admin(actor)
    actor_name = actor.get_username()
    for row, attempt in zip(rows, attempts, strict=True):
        revision = latest.get(row.pk)
        value = revision[1] if revision is not None else row.value
        refused = _refused_target(bulk, attempt.target_topic, pipelines[row.pipeline_id], admin=admin)
        if refused:
            out = OutgoingRecord(topic="", key=None, value=None, headers=[], done=True, error=refused)
        else:
            out = replay_record(row, attempt, value, actor_name)
            outs.append(out)
        done.append((row, attempt, out))
    return _ReplayChunk(ids, done, kafka_io.send(outs), held)


def _settle_replay_chunk(bulk: BulkAction, chunk: _ReplayChunk) -> tuple[int, int, int]:
    """Wait for the broker's answers to a sent chunk and record them (no audit event per message: the
    bulk action's own events carry the counts, and each message keeps its Replay row and its
    ``closed_by_bulk``); returns (handled, succeeded, failed), the held ones handled and failed."""
    chunk.sending.wait()
    with transaction.atomic():
        ok, failed = record_answers(chunk.done)
    return len(chunk.done) + chunk.held, ok, failed + chunk.held


def _refused_target(bulk: BulkAction, target: str, pipeline: PipelineTopics, *, admin: bool) -> str:
    """Why a bulk replay may not send a message of ``pipeline`` to ``target`` (empty: it may). The default
    target is the record's source-topic header, which whoever wrote the DLQ record chose: a non-admin's
    bulk replays only to the owning pipeline's topics, as a single replay does
    (``replays.allowed_targets``)."""
    if not target:
        return "no source topic to replay to"
    if bulk.target_topic or admin or target in pipeline.targets:
        return ""
    return f"{target} is not a source or destination topic of the owning pipeline; replaying there needs an admin"


def _bulk_skip_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    """Skip the still-parked of ``ids`` no pending delete request holds (``_claim_unheld``; the held ones
    count as failed): one statement, no audit event per message (the bulk action's
    events carry the reason and counts; each message's ``closed_by_bulk`` points to it)."""
    with transaction.atomic():
        rows, held = _claim_unheld(ids, Status.SKIPPED, bulk)
    return len(rows) + held, len(rows), held


def _bulk_delete_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    """Delete (erase) the still-parked of ``ids`` in one transaction: claimed to DELETED, payloads erased
    (``erasure``), failure groups' samples replaced where they quoted an erased message. No audit event per
    message: the approved bulk action's events carry the reason, the approver and the counts; each
    message's ``closed_by_bulk`` points to it."""
    with transaction.atomic():
        claimed = _claim(ids, Status.DELETED, bulk, returning="id, group_id, error_message")
        erased = [int(row[0]) for row in claimed]
        if erased:
            erasure.erase_payloads(erased)
            messages: dict[int, set[str]] = {}
            for _pk, group_id, message in claimed:
                messages.setdefault(int(group_id), set()).add(message or "")
            for group_id in sorted(messages):  # one lock order for every worker
                erasure.replace_group_sample(group_id, messages[group_id], erased_ids=erased)
    return len(erased), len(erased), 0


def stale_bulk_ids() -> list[int]:
    """RUNNING bulk actions whose worker stopped beating (crashed): the beat resumes them."""
    stale = timezone.now() - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS)
    return list(
        BulkAction.objects.filter(
            Q(heartbeat_at__lt=stale) | Q(heartbeat_at=None), state=BulkState.RUNNING
        ).values_list("pk", flat=True)
    )
