"""Erasing dead letters' payloads once a second person approved it: one message (``approvals``) or every
message a bulk delete selects (``bulk``). Kafka cannot erase one record, so the copy in the DLQ topic stays
until the topic's retention (``retention.ms``) removes it; the console says so where a delete is asked for.

What goes: the key, the value, the headers (a stack trace travels there), the error message (it may quote
the payload) and every fix's value, diff and DSL error messages. What stays: the error type and the
coordinates, so the row still says what failed where.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from dlq.models import DeadLetter, FailureGroup, PayloadRevision, Status

#: What an erased message's failure group shows as its sample when no other message can stand in.
ERASED_SAMPLE = "(erased)"


def without_messages(check: dict[str, Any]) -> dict[str, Any]:
    """A stored DSL check with every destination's error message erased (outcomes and types kept)."""
    if not isinstance(check, dict) or not isinstance(check.get("destinations"), list):
        return check
    destinations = [
        {**d, "error_message": ERASED_SAMPLE if d.get("error_message") else d.get("error_message")}
        if isinstance(d, dict)
        else d
        for d in check["destinations"]
    ]
    return {**check, "destinations": destinations}


def erase_payloads(ids: Sequence[int]) -> None:
    """Erase the payloads of the dead letters ``ids`` and of their fixes, inside the caller's transaction
    (the caller has already moved them to DELETED, or does so in the same transaction)."""
    DeadLetter.objects.filter(pk__in=list(ids)).update(
        key=None, value=None, headers=[], key_text="", error_message=""
    )
    for revision in PayloadRevision.objects.filter(dead_letter_id__in=list(ids)):
        revision.value, revision.diff, revision.dsl_check = b"", "", without_messages(revision.dsl_check)
        revision.save(update_fields=["value", "diff", "dsl_check"])


def replace_group_sample(
    group_id: int, erased_messages: Collection[str], *, erased_ids: Collection[int]
) -> None:
    """When failure group ``group_id`` shows one of ``erased_messages`` as its sample, show another message
    of the group instead (the newest parked one, else the newest not deleted), or ``ERASED_SAMPLE`` when
    none is left. Locks the group row (ingest updates its counts under the same lock)."""
    group = FailureGroup.objects.select_for_update().get(pk=group_id)
    if group.sample_message not in {m[:2000] for m in erased_messages if m}:
        return
    others = (
        group.dead_letters.exclude(pk__in=list(erased_ids))
        .exclude(status=Status.DELETED)
        .exclude(error_message="")
    )
    other = others.filter(status=Status.PARKED).order_by("-id").first() or others.order_by("-id").first()
    group.sample_message = other.error_message[:2000] if other is not None else ERASED_SAMPLE
    group.save(update_fields=["sample_message"])
