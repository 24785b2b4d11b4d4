"""Erasing dead letters' payloads once a second person approved it: one message (``approvals``) or every
message a bulk delete selects (``bulk``). Kafka cannot erase one record, so the copy in the DLQ topic stays
until the topic's retention (``retention.ms``) removes it; the console says so where a delete is asked for.

What goes: the key, the value, the headers (a stack trace travels there), the error message (it may quote
the payload) and every fix's value, diff and DSL error messages. What stays: the error type and the
coordinates, so the row still says what failed where.

What the topic browser must not show: the coordinates of the records that still hold the erased content on
Kafka (the DLQ record, the source record it names, the records its replays produced) are written as
``ErasedRecord`` rows in the same transaction, and the browser withholds those records.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from django.db.models import Q

from dlq.models import (
    DeadLetter,
    ErasedKind,
    ErasedRecord,
    FailureGroup,
    PayloadRevision,
    Replay,
    Status,
)

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
    (the caller has already moved them to DELETED, or does so in the same transaction), and record where their
    content is still on Kafka (``record_erased``)."""
    record_erased(ids)
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


def record_erased(ids: Sequence[int]) -> list[ErasedRecord]:
    """Write an ``ErasedRecord`` for each Kafka record holding the content of the dead letters ``ids``: its
    DLQ record, the source record its headers name (when they name one), and each record a replay of it
    produced (when the broker said where). Returns the rows written, inside the caller's transaction."""
    rows: list[ErasedRecord] = []

    def erased(cluster_id: int | None, at: tuple[str, int, int], kind: ErasedKind, pk: int) -> None:
        topic, partition, offset = at
        rows.append(
            ErasedRecord(
                cluster_id=cluster_id,
                topic=topic,
                partition=partition,
                offset=offset,
                kind=kind,
                dead_letter_id=pk,
            )
        )

    letters = DeadLetter.objects.filter(pk__in=list(ids)).values_list(
        "pk", "cluster_id", "dlq_topic", "dlq_partition", "dlq_offset", "source_topic", "source_partition",
        "source_offset",
    )  # fmt: skip
    for pk, cluster_id, topic, partition, offset, src_topic, src_partition, src_offset in letters:
        erased(cluster_id, (topic, partition, offset), ErasedKind.DLQ, pk)
        if src_topic and src_partition is not None and src_offset is not None:
            erased(cluster_id, (src_topic, src_partition, src_offset), ErasedKind.SOURCE, pk)
    replays = Replay.objects.filter(dead_letter_id__in=list(ids), produced_offset__isnull=False).values_list(
        "dead_letter_id", "dead_letter__cluster_id", "target_topic", "produced_partition", "produced_offset"
    )
    for dl_id, dl_cluster, target, produced_partition, produced_offset in replays:
        erased(dl_cluster, (target, produced_partition or 0, produced_offset or 0), ErasedKind.REPLAY, dl_id)
    return ErasedRecord.objects.bulk_create(rows, batch_size=500)


def erased_coordinates(
    *, cluster_id: int | None, coordinates: Iterable[tuple[str, int, int]]
) -> set[tuple[str, int, int]]:
    """Those of ``coordinates`` ((topic, partition, offset) on the cluster ``cluster_id``, None: the default)
    that an approved delete erased (``ErasedRecord``). One query: an offset range per topic partition, which
    the coordinates index serves (a list of offsets made PostgreSQL scan the table); exact match here."""
    wanted = set(coordinates)
    spans: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in wanted:
        spans.setdefault((topic, partition), []).append(offset)
    if not spans:
        return set()
    where = Q()
    for (topic, partition), offsets in spans.items():
        where |= Q(topic=topic, partition=partition, offset__gte=min(offsets), offset__lte=max(offsets))
    rows = ErasedRecord.objects.filter(where, cluster_id=cluster_id).values_list(
        "topic", "partition", "offset"
    )
    return {row for row in rows if row in wanted}
