"""Dead-letter counts without counting dead letters: the console's counts per status, each failure group's
parked count and the overview's backlog per pipeline are sums over ``StatusCount``, the signed deltas that
database triggers add on every insert, delete and status change of a dead letter (migration
``dlq/0008_status_counts``). At 1,000,000 parked messages a count was a sequential scan of the table
(0.3-0.5 s on PostgreSQL); a sum over a few hundred delta rows takes a millisecond, and the triggers make
it exact whichever code path changed the rows, in the same transaction.

``compact`` (beat, every minute) folds the deltas into one row per key so the sums stay small.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from typing import Any

from django.db import connection, transaction
from django.db.models import IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from dlq.models import DeadLetter, FailureGroup, Status, StatusCount

#: The columns of ``dlq_statuscount`` a delta is keyed by, in the triggers' order.
KEY_COLUMNS = ("group_id", "pipeline_id", "cluster_id", "status")


def per_status(
    groups: QuerySet[FailureGroup], *, cluster_ids: Collection[int | None] | None = None
) -> dict[str, int]:
    """Dead letters per status (every ``Status`` value, 0 when none) in ``groups``, optionally only on
    the clusters ``cluster_ids`` (None in it: the default cluster). One query."""
    deltas = StatusCount.objects.filter(group_id__in=groups.order_by().values("pk"))
    if cluster_ids is not None:
        on_clusters = Q(cluster_id__in=[c for c in cluster_ids if c is not None])
        if None in cluster_ids:
            on_clusters |= Q(cluster_id__isnull=True)
        deltas = deltas.filter(on_clusters)
    counts = dict.fromkeys(Status.values, 0)
    for status, n in deltas.order_by().values_list("status").annotate(n=Sum("n")):
        if status in counts:
            counts[status] = int(n)
    return counts


def parked_per_pipeline(pipeline_ids: Iterable[int]) -> dict[int, int]:
    """Parked dead letters per pipeline id; pipelines with none are left out. One query."""
    rows = (
        StatusCount.objects.filter(pipeline_id__in=list(pipeline_ids), status=Status.PARKED)
        .order_by()
        .values_list("pipeline_id")
        .annotate(n=Sum("n"))
    )
    return {pipeline_id: int(n) for pipeline_id, n in rows if n}


def with_parked(groups: QuerySet[FailureGroup]) -> QuerySet[FailureGroup]:
    """``groups`` annotated with ``parked``: each group's parked dead letters (a correlated sum over its
    few delta rows, served by the (group_id, status) index)."""
    parked = (
        StatusCount.objects.filter(group_id=OuterRef("pk"), status=Status.PARKED)
        .order_by()
        .values("group_id")
        .annotate(n=Sum("n"))
        .values("n")
    )
    return groups.annotate(parked=Coalesce(Subquery(parked, output_field=IntegerField()), 0))


def compact() -> int:
    """Fold every delta row into one row per key (rows summing to zero go). Returns the rows removed.

    Safe beside writers and beside another ``compact``: the rows folded are exactly the rows this
    transaction deleted (``DELETE ... RETURNING``), so a row another compactor deleted first is neither
    lost nor counted twice, and deltas the triggers add meanwhile are left for the next run."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {StatusCount._meta.db_table} RETURNING {', '.join(KEY_COLUMNS)}, n"  # noqa: S608
        )
        gone = cursor.fetchall()
        totals: dict[tuple[int, int | None, int | None, str], int] = defaultdict(int)
        for group_id, pipeline_id, cluster_id, status, n in gone:
            totals[(group_id, pipeline_id, cluster_id, status)] += n
        StatusCount.objects.bulk_create(
            StatusCount(group_id=g, pipeline_id=p, cluster_id=c, status=s, n=n)
            for (g, p, c, s), n in totals.items()
            if n
        )
    return len(gone) - sum(1 for n in totals.values() if n)


def differences() -> list[dict[str, object]]:
    """Keys whose kept count differs from counting the dead letters, as ``{group_id, pipeline_id,
    cluster_id, status, kept, counted}`` (empty when the triggers kept every count). One statement, so both
    sides are read in one snapshot whatever the isolation level. Counts every row: a maintenance check
    (seconds at 10,000,000 rows), not a page's query."""
    columns = ", ".join(KEY_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns}, sum(kept), sum(counted) FROM ("  # noqa: S608  # names are ours
            f" SELECT {columns}, 0 AS kept, count(*) AS counted FROM {DeadLetter._meta.db_table}"
            f" GROUP BY {columns}"
            f" UNION ALL SELECT {columns}, n AS kept, 0 AS counted FROM {StatusCount._meta.db_table}"
            f") AS both_sides GROUP BY {columns} HAVING sum(kept) <> sum(counted) ORDER BY {columns}"
        )
        return [
            dict(zip(KEY_COLUMNS, row[:4], strict=True), kept=int(row[4]), counted=int(row[5]))
            for row in cursor.fetchall()
        ]


def rebuild() -> int:
    """Replace every kept count by counting the dead letters (after ``differences`` found some, e.g. on
    a database restored without the triggers); returns the rows written. Writers to ``dlq_deadletter``
    wait meanwhile (PostgreSQL: SHARE lock; SQLite: its one writer). Callers check permission and audit
    (``dlq.services.admin.recount``)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"LOCK TABLE {DeadLetter._meta.db_table} IN SHARE MODE")
        cursor.execute(f"DELETE FROM {StatusCount._meta.db_table}")  # noqa: S608
        counted = _counted(cursor)
        StatusCount.objects.bulk_create(
            StatusCount(group_id=g, pipeline_id=p, cluster_id=c, status=s, n=n)
            for (g, p, c, s), n in counted.items()
        )
    return len(counted)


def _counted(cursor: Any) -> dict[tuple[int, int | None, int | None, str], int]:
    columns = ", ".join(KEY_COLUMNS)
    cursor.execute(
        f"SELECT {columns}, count(*) FROM {DeadLetter._meta.db_table} GROUP BY {columns}"  # noqa: S608
    )
    return {(g, p, c, s): n for g, p, c, s, n in cursor.fetchall()}
