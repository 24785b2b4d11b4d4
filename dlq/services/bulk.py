"""Bulk actions: a replay or skip of every parked message a filter selects. Preview (a dry-run count),
create (queued at once, or waiting for an approver when large), pause / resume / cancel, and the runner a
Celery worker calls (``run_bulk``: chunk by chunk at the action's rate limit, taking over an action whose
worker stopped beating).

The runner is enqueued by task name (``RUN_BULK_TASK``), so this module never imports ``dlq.tasks``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from access import audit
from access.models import Role, Team
from access.permissions import AnyUser, is_admin, require_role
from dlq.filters import MessageFilter
from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    BulkAction,
    BulkKind,
    BulkState,
    DeadLetter,
    PayloadRevision,
    Replay,
    Status,
)
from dlq.services import kafka_io, notify
from dlq.services.errors import Conflict, InvalidRequest
from dlq.services.inspection import visible_dead_letters
from dlq.services.kafka_io import OutgoingRecord
from dlq.services.replays import Answered, finish_replays, replay_record, resolve_in_doubt

#: The Celery task that runs a bulk action (``dlq.tasks.run_bulk``), called by name.
RUN_BULK_TASK = "dlq.run_bulk"
#: States in which a worker runs (or is about to run) the action.
BULK_RUNNABLE = (BulkState.QUEUED, BulkState.RUNNING)


@dataclass(frozen=True)
class BulkPreview:
    """The dry-run count of a bulk action: parked messages the filter selects (``count``, and per team
    name in ``teams``), and whether creating it would wait for an approver (more than
    ``approval_threshold`` messages)."""

    count: int
    teams: Mapping[str, int]
    needs_approval: bool
    approval_threshold: int


def _bulk_queryset(actor: AnyUser, selection: MessageFilter) -> QuerySet[DeadLetter]:
    return selection.apply(visible_dead_letters(actor)).filter(status=Status.PARKED)


def _counts_by_team(qs: QuerySet[DeadLetter]) -> list[tuple[str, int]]:
    grouped = qs.order_by().values("team__name").annotate(n=Count("id"))  # no ordering: it would split groups
    return [(row["team__name"], row["n"]) for row in grouped]


def preview_bulk(*, actor: User, selection: MessageFilter) -> BulkPreview:
    """What a bulk action with this filter would select now, among the parked messages the actor sees."""
    per_team = dict(_counts_by_team(_bulk_queryset(actor, selection)))
    total = sum(per_team.values())
    return BulkPreview(
        count=total,
        teams=per_team,
        needs_approval=total > settings.DLQ_BULK_APPROVAL_THRESHOLD,
        approval_threshold=settings.DLQ_BULK_APPROVAL_THRESHOLD,
    )


def create_bulk(
    *,
    actor: User,
    kind: str,
    selection: MessageFilter,
    reason: str,
    rate_limit: int = 100,
    target_topic: str = "",
) -> BulkAction:
    """Create a bulk replay or skip of every parked message the filter selects now (ids up to the current
    newest). It is queued at once, or waits for an approver when it selects more than
    ``STREAMFORGE_DLQ_BULK_APPROVAL_THRESHOLD`` messages. The selection must lie in one team, where the
    actor needs the operator role. ``rate_limit`` is messages per second (1..10000; 0: unlimited).
    Raises InvalidRequest, PermissionDenied.
    """
    if kind not in BulkKind.values:
        raise InvalidRequest("kind", f"must be one of {', '.join(BulkKind.values)}")
    if not reason.strip():
        raise InvalidRequest("reason", "a bulk action needs a reason")
    if rate_limit < 0 or rate_limit > 10_000:
        raise InvalidRequest("rate_limit", "messages per second, 0 (unlimited) to 10000")
    qs = _bulk_queryset(actor, selection)
    teams = list(qs.order_by().values_list("team", flat=True).distinct()[:2])
    if not teams:
        raise InvalidRequest("filters", "no parked message matches this filter")
    if len(teams) > 1:
        raise InvalidRequest(
            "filters", "the filter selects messages of several teams; narrow it to one pipeline"
        )
    team = Team.objects.get(pk=teams[0])
    require_role(actor, team, Role.OPERATOR)
    if target_topic and not is_admin(actor):
        raise InvalidRequest(
            "target_topic", "a bulk replay to another topic than each message's source needs an admin"
        )
    with transaction.atomic():
        max_id = qs.order_by("-id").values_list("id", flat=True).first() or 0
        total = qs.filter(id__lte=max_id).count()
        needs_approval = total > settings.DLQ_BULK_APPROVAL_THRESHOLD
        bulk = BulkAction.objects.create(
            kind=kind,
            team=team,
            filters=selection.to_json(),
            max_id=max_id,
            target_topic=target_topic.strip(),
            reason=reason.strip(),
            rate_limit=rate_limit,
            state=BulkState.AWAITING_APPROVAL if needs_approval else BulkState.QUEUED,
            total=total,
            created_by=actor,
        )
        audit.record(
            actor=actor,
            action="dlq.bulk_create",
            target_type="bulk",
            target_id=bulk.pk,
            reason=reason,
            details={"kind": kind, "filters": bulk.filters, "total": total, "rate_limit": rate_limit},
        )
        if needs_approval:
            ApprovalRequest.objects.create(
                kind=ApprovalKind.BULK,
                team=team,
                bulk=bulk,
                reason=f"bulk {kind} of {total} messages: {reason.strip()}",
                requested_by=actor,
            )
        else:
            enqueue_bulk(bulk)
    return bulk


def enqueue_bulk(bulk: BulkAction) -> None:
    """Send the bulk action to a Celery worker (``RUN_BULK_TASK``) once the current transaction commits.
    Tests replace this to run the action themselves."""
    pk = bulk.pk
    transaction.on_commit(lambda: current_app.send_task(RUN_BULK_TASK, args=(pk,)))


def approval_decided(*, bulk: BulkAction, approved: bool) -> None:
    """An approver decided the bulk action's request: queue it, or mark it REJECTED (it never runs).
    Called inside the decision's transaction; an action no longer awaiting approval is left alone."""
    state = BulkState.QUEUED if approved else BulkState.REJECTED
    changed = BulkAction.objects.filter(pk=bulk.pk, state=BulkState.AWAITING_APPROVAL).update(state=state)
    if changed and approved:
        enqueue_bulk(bulk)


def _bulk_transition(
    *, actor: User, bulk: BulkAction, allowed: Sequence[str], to: str, action: str, reason: str
) -> BulkAction:
    if bulk.team is None:
        raise PermissionDenied("this bulk action has no team")
    require_role(actor, bulk.team, Role.OPERATOR)
    with transaction.atomic():
        changed = BulkAction.objects.filter(pk=bulk.pk, state__in=allowed).update(state=to)
        if changed != 1:
            bulk.refresh_from_db()
            raise Conflict(f"bulk action {bulk.pk} is {bulk.state}; cannot {action.split('_')[-1]} it")
        audit.record(actor=actor, action=action, target_type="bulk", target_id=bulk.pk, reason=reason)
        if to == BulkState.QUEUED:
            enqueue_bulk(bulk)
    bulk.refresh_from_db()
    notify.bulk_changed_on_commit(bulk)
    return bulk


def pause_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Stop after the chunk in flight; ``resume_bulk`` continues where it stopped. Raises Conflict."""
    return _bulk_transition(
        actor=actor,
        bulk=bulk,
        allowed=BULK_RUNNABLE,
        to=BulkState.PAUSED,
        action="dlq.bulk_pause",
        reason=reason,
    )


def cancel_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Stop after the chunk in flight (or never start). Messages not yet reached stay parked. An operator
    who cancelled by mistake may still ``resume_bulk``; nothing already done is done again."""
    return _bulk_transition(
        actor=actor,
        bulk=bulk,
        allowed=(*BULK_RUNNABLE, BulkState.PAUSED, BulkState.AWAITING_APPROVAL),
        to=BulkState.CANCELLED,
        action="dlq.bulk_cancel",
        reason=reason,
    )


def resume_bulk(*, actor: User, bulk: BulkAction, reason: str = "") -> BulkAction:
    """Queue a paused or cancelled bulk action again; it continues after its cursor."""
    return _bulk_transition(
        actor=actor,
        bulk=bulk,
        allowed=(BulkState.PAUSED, BulkState.CANCELLED),
        to=BulkState.QUEUED,
        action="dlq.bulk_resume",
        reason=reason,
    )


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def run_bulk(*, bulk_id: int, chunk_size: int | None = None) -> BulkAction:
    """Carry out a queued bulk action, or take over one whose worker stopped beating, chunk by chunk at its
    rate limit, until done, paused or cancelled. Safe to call twice: only one caller claims it.

    Each chunk claims its messages (PARKED -> REPLAYING / SKIPPED) before acting, so a message is
    replayed at most once whatever crashes; replays left in doubt by a crashed worker are settled from
    the target topic (``resolve_in_doubt``) before the takeover continues.
    """
    me = _worker_name()
    now = timezone.now()
    stale = now - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS)
    claimed = BulkAction.objects.filter(
        Q(state=BulkState.QUEUED) | Q(state=BulkState.RUNNING, heartbeat_at__lt=stale), pk=bulk_id
    ).update(
        state=BulkState.RUNNING,
        worker=me,
        heartbeat_at=now,
        runs=F("runs") + 1,
        started_at=Coalesce(F("started_at"), now),
    )
    bulk = BulkAction.objects.select_related("created_by", "team").get(pk=bulk_id)
    if claimed != 1:
        return bulk
    if bulk.kind == BulkKind.REPLAY:
        # A previous worker's in-flight produces ended at least DLQ_BULK_STALE_SECONDS ago (> delivery timeout).
        resolve_in_doubt(older_than_seconds=0, bulk=bulk)
    selection = MessageFilter.from_mapping(bulk.filters)
    rate = bulk.rate_limit
    size = chunk_size or (max(1, min(200, rate // 5)) if rate else 200)
    started, done_this_run = time.monotonic(), 0
    while True:
        current = BulkAction.objects.filter(pk=bulk.pk).values_list("state", "worker").get()
        if current != (BulkState.RUNNING, me):
            break
        ids = list(
            selection.apply(DeadLetter.objects.filter(team=bulk.team))
            .filter(status=Status.PARKED, id__gt=bulk.cursor, id__lte=bulk.max_id)
            .order_by("id")
            .values_list("id", flat=True)[:size]
        )
        if not ids:
            BulkAction.objects.filter(pk=bulk.pk, state=BulkState.RUNNING, worker=me).update(
                state=BulkState.COMPLETED, finished_at=timezone.now(), heartbeat_at=timezone.now()
            )
            with transaction.atomic():
                audit.record(
                    actor=None,
                    action="dlq.bulk_complete",
                    target_type="bulk",
                    target_id=bulk.pk,
                    details=bulk.progress(),
                )
            break
        if bulk.kind == BulkKind.REPLAY:
            handled, ok, failed = _bulk_replay_chunk(bulk, ids)
        else:
            handled, ok, failed = _bulk_skip_chunk(bulk, ids)
        BulkAction.objects.filter(pk=bulk.pk).update(
            cursor=max(ids),
            processed=F("processed") + handled,
            succeeded=F("succeeded") + ok,
            failed=F("failed") + failed,
            heartbeat_at=timezone.now(),
        )
        bulk.refresh_from_db()
        notify.bulk_changed_now(bulk)
        done_this_run += handled
        if rate:
            ahead = done_this_run / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    bulk.refresh_from_db()
    notify.bulk_changed_now(bulk)
    return bulk


def _claim(ids: Sequence[int], to: str) -> list[DeadLetter]:
    """Move the still-parked ones of ``ids`` to ``to``; returns those (locked rows on PostgreSQL; SQLite
    serialises writers, so the select and the update see the same rows)."""
    rows = list(
        # of=self: lock the dead letters, not the pipelines joined in for the check (a nullable outer join,
        # on which PostgreSQL refuses FOR UPDATE; and other chunks must not queue behind a pipeline row).
        DeadLetter.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(pk__in=ids, status=Status.PARKED)
        .select_related("pipeline__current_revision")
    )
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows], status=Status.PARKED).update(
        status=to, status_changed_at=timezone.now()
    )
    return rows


def _latest_payloads(ids: Sequence[int]) -> dict[int, PayloadRevision]:
    """The newest payload revision of each of these dead letters that has one (one query)."""
    latest: dict[int, PayloadRevision] = {}
    for rev in PayloadRevision.objects.filter(dead_letter_id__in=ids).order_by("dead_letter_id", "number"):
        latest[rev.dead_letter_id] = rev
    return latest


def _bulk_replay_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    actor = bulk.created_by
    with transaction.atomic():
        rows = _claim(ids, Status.REPLAYING)
        latest = _latest_payloads([r.pk for r in rows])
        attempts = Replay.objects.bulk_create(
            [
                Replay(
                    dead_letter=row,
                    payload_revision=latest.get(row.pk),
                    bulk=bulk,
                    target_topic=bulk.target_topic or row.source_topic,
                    requested_by=actor,
                )
                for row in rows
            ]
        )
    outs = []
    done: list[Answered] = []
    for row, attempt in zip(rows, attempts, strict=True):
        revision = latest.get(row.pk)
        value = (
            bytes(revision.value)
            if revision is not None
            else (bytes(row.value) if row.value is not None else None)
        )
        if not attempt.target_topic:
            out = OutgoingRecord(
                topic="", key=None, value=None, headers=[], done=True, error="no source topic to replay to"
            )
        else:
            out = replay_record(row, attempt, value, actor.get_username())
            outs.append(out)
        done.append((row, attempt, out))
    kafka_io.produce(outs)
    ok, failed = finish_replays(
        done, actor=actor, reason=f"bulk #{bulk.pk}: {bulk.reason}", notify_console=False
    )
    return len(rows), ok, failed


def _bulk_skip_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    with transaction.atomic():
        rows = _claim(ids, Status.SKIPPED)
        audit.record_many(
            actor=bulk.created_by,
            entries=[
                audit.Entry(
                    action="dlq.skip",
                    target_type="dead_letter",
                    target_id=row.pk,
                    reason=f"bulk #{bulk.pk}: {bulk.reason}",
                    details={"bulk": bulk.pk},
                )
                for row in rows
            ],
        )
    return len(rows), len(rows), 0


def stale_bulk_ids() -> list[int]:
    """RUNNING bulk actions whose worker stopped beating (crashed): the beat resumes them."""
    stale = timezone.now() - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS)
    return list(
        BulkAction.objects.filter(
            Q(heartbeat_at__lt=stale) | Q(heartbeat_at=None), state=BulkState.RUNNING
        ).values_list("pk", flat=True)
    )
