"""Long lists of ids in a query: ``filter(pk__in=among(ids))``.

Django writes ``id IN (%s, %s, ...)`` with one placeholder per id, and with psycopg's client-side binding
the driver then re-parses that query text for every execution (queries over 4 KB are not cached): at bulk
sizes, a thousand ids per statement, parsing and binding cost more than PostgreSQL's work (profiled in
``bench/dlq_measure.py``'s bulk replay). On PostgreSQL ``among`` sends the ids as one array parameter,
``id IN (SELECT unnest(%s::bigint[]))``, which PostgreSQL plans as a hashed semi-join on the index; on
other databases it returns the list unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models.expressions import RawSQL


def among(ids: Iterable[int]) -> Any:
    """The right-hand side of an ``__in`` lookup on an integer column for ``ids`` (any iterable of ints):
    one ``bigint[]`` parameter on PostgreSQL, the list elsewhere."""
    values = [int(i) for i in ids]
    if connection.vendor == "postgresql":
        return RawSQL("SELECT unnest(%s::bigint[])", [values])
    return values
