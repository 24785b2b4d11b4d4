"""Inserting many rows of one model fast: on PostgreSQL one ``COPY ... FROM STDIN`` instead of a multi-row
INSERT, whose SQL text Django compiles value by value and psycopg then escapes client-side; for batches of
hundreds of rows with kilobyte payloads that text was most of the time spent (profiled in the DLQ ingest,
``bench/dlq_measure.py``). Elsewhere (SQLite) ``bulk_create``.

Used by the paths that insert in bulk: DLQ ingest, bulk replay's attempts, the audit chain's events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection, models
from django.utils import timezone

M = TypeVar("M", bound=models.Model)


def copy_rows(model: type[M], rows: Sequence[M]) -> None:
    """Insert ``rows`` (unsaved instances of ``model``) with COPY on PostgreSQL; ids are NOT set (read them
    back by a unique key: ``set_ids_by``). Values go as an INSERT would send them: ``auto_now``/
    ``auto_now_add`` fields stamped with now, JSON fields as ``jsonb``, everything else as the instance
    holds it (psycopg adapts it; model defaults were applied when the instance was made). A unique or
    foreign-key violation raises Django's IntegrityError, as ``bulk_create`` would. Raises ValueError on
    another database (use ``insert``)."""
    if connection.vendor != "postgresql":
        raise ValueError("COPY is PostgreSQL's; use insert()")
    from psycopg.types.json import Jsonb

    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    now = timezone.now()
    stamped = [
        f.attname for f in fields if getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False)
    ]
    as_json = {f.attname for f in fields if isinstance(f, models.JSONField)}
    names = [f.attname for f in fields]
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor  # psycopg's own cursor: COPY
        with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:  # names from the model, not input
            for row in rows:
                for name in stamped:
                    setattr(row, name, now)
                values = row.__dict__
                copy.write_row([Jsonb(values[n]) if n in as_json else values[n] for n in names])


def set_ids_by(model: type[M], rows: Sequence[M], key: str) -> None:
    """Set each inserted row's id (and mark it saved) from the database, matching on ``key``, a unique field
    of ``model`` (one query)."""
    values: list[Any] = [getattr(row, key) for row in rows]
    ids = dict(model._default_manager.filter(**{f"{key}__in": values}).values_list(key, "pk"))
    for row in rows:
        row.pk = ids[getattr(row, key)]
        row._state.adding = False


def insert(model: type[M], rows: Sequence[M], *, key: str) -> None:
    """Insert ``rows`` and set their ids: COPY and one read by the unique field ``key`` on PostgreSQL,
    ``bulk_create`` elsewhere. Raises IntegrityError like ``bulk_create``."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(rows)
        return
    copy_rows(model, rows)
    set_ids_by(model, rows, key)
