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

from django.db import connection, transaction
from django.db.models import IntegerField, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from dlq.models import FailureGroup, Status, StatusCount

#: The columns of ``dlq_statuscount`` a delta is keyed by, in the triggers' order.
KEY_COLUMNS = ("group_id", "pipeline_id", "cluster_id", "status")


def per_status(
    groups: QuerySet[FailureGroup], *, cluster_ids: Collection[int | None] | None = None
) -> dict[str, int]:
    """Dead letters per status (every ``Status`` value, 0 when none) in ``groups``, optionally only on
    the clusters ``cluster_ids`` (None in it: the default cluster). One query."""
    deltas = StatusCount.objects.filter(group_id__in=groups.order_by().values("pk"))
    if cluster_ids is not None:
        named = [c for c in cluster_ids if c is not None]
        on_default = None in cluster_ids
        if on_default and named:
            deltas = deltas.filter(cluster_id__in=named) | deltas.filter(cluster_id__isnull=True)
        elif on_default:
            deltas = deltas.filter(cluster_id__isnull=True)
        else:
            deltas = deltas.filter(cluster_id__in=named)
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
