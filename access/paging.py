"""Keyset pagination of querysets, newest first, for every app's pages (the DLQ message list, the audit
log). It lives on the ground floor so that any app may use it without importing another app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)


def parse_cursor(value: str | None) -> int | None:
    """A keyset cursor from the query string (a positive id), None when absent or malformed."""
    if value and value.isdigit():
        return int(value)
    return None


@dataclass(frozen=True)
class KeysetPage:
    """One page of rows, newest first, and the cursors to the pages beside it (None at either end):
    ``?after=<newer>`` shows newer rows, ``?before=<older>`` older ones. Keyset, not OFFSET: stable while
    new rows keep arriving and as fast on page 1,000 as on page 1."""

    rows: list[Any]
    newer: int | None
    older: int | None

    @property
    def newest(self) -> bool:
        """Whether this page starts at the newest row (where live arrivals belong)."""
        return self.newer is None


def keyset_page(qs: QuerySet[M], *, key: str, before: int | None, after: int | None, size: int) -> KeysetPage:
    """A page of ``qs`` ordered by ``key`` descending, before or after a cursor value of ``key``."""
    if after is not None:
        rows = list(qs.filter(**{f"{key}__gt": after}).order_by(key)[: size + 1])
        has_newer = len(rows) > size
        rows = rows[:size]
        rows.reverse()
        has_older = qs.filter(**{f"{key}__lte": after}).exists()
    else:
        narrowed = qs.filter(**{f"{key}__lt": before}) if before is not None else qs
        rows = list(narrowed.order_by(f"-{key}")[: size + 1])
        has_older = len(rows) > size
        rows = rows[:size]
        has_newer = before is not None and qs.filter(**{f"{key}__gte": before}).exists()
    return KeysetPage(
        rows,
        newer=getattr(rows[0], key) if rows and has_newer else None,
        older=getattr(rows[-1], key) if rows and has_older else None,
    )
