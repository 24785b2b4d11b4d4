"""The one rule that holds a parked message while a delete request about it waits for an approver: the
approver decides on the message as it was requested, so nothing replays, skips or fixes it meanwhile.

A single replay or skip refuses such a message with Conflict (``replays._refuse_under_pending_delete``); a
bulk replay, skip or fix (a selection, a failure group) counts them in its dry run (``pending_delete_held``)
and leaves them out when it runs, each with the reason, in ``BulkAction.left_out`` (``record_left_out``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from access.id_lists import among
from dlq.models import ApprovalKind, ApprovalRequest, ApprovalState, BulkAction, DeadLetter


def pending_deletes() -> QuerySet[ApprovalRequest]:
    """Every delete request still waiting for an approver (kind DELETE, state PENDING): what holds a message."""
    return ApprovalRequest.objects.filter(kind=ApprovalKind.DELETE, state=ApprovalState.PENDING)


def held_reason(pk: int, request_pk: int, requested_by: str) -> str:
    """Why dead letter ``pk`` is held: its pending delete request ``request_pk`` by ``requested_by``."""
    return (
        f"dead letter #{pk} has a pending delete request #{request_pk} by {requested_by}: an approver decides "
        "it first (reject it to replay or skip this message)"
    )


def held_by_pending_delete(ids: Iterable[int]) -> dict[int, str]:
    """The dead letters among ``ids`` that a pending delete request holds, each with the reason
    (``held_reason``); empty when none is (one query)."""
    wanted = [int(i) for i in ids]
    if not wanted:
        return {}
    rows = (
        pending_deletes()
        .filter(dead_letter_id__in=among(wanted))
        .order_by("dead_letter_id", "pk")
        .values_list("dead_letter_id", "pk", "requested_by__username")
    )
    held: dict[int, str] = {}
    for dead_letter_id, request_pk, who in rows:
        held.setdefault(int(dead_letter_id), held_reason(int(dead_letter_id), int(request_pk), who))
    return held


def pending_delete_held(qs: QuerySet[DeadLetter]) -> QuerySet[DeadLetter]:
    """Those dead letters of ``qs`` that a pending delete request holds (for a dry run's count)."""
    return qs.filter(Exists(pending_deletes().filter(dead_letter=OuterRef("pk"))))


#: At most this many held messages are listed per bulk action (the count in ``failed`` covers them all).
LEFT_OUT_LISTED = 1000


def record_left_out(bulk_pk: int, held: Mapping[int, str]) -> None:
    """Add ``held`` (dead-letter id -> reason) to bulk action ``bulk_pk``'s ``left_out`` (``{"<id>":
    reason}``, at most ``LEFT_OUT_LISTED`` entries), in the caller's transaction (or its own)."""
    if not held:
        return
    with transaction.atomic():
        stored = BulkAction.objects.select_for_update().values_list("left_out", flat=True).get(pk=bulk_pk)
        merged = dict(stored or {})
        for pk, reason in sorted(held.items()):
            if len(merged) >= LEFT_OUT_LISTED:
                break
            merged[str(pk)] = reason
        BulkAction.objects.filter(pk=bulk_pk).update(left_out=merged)
