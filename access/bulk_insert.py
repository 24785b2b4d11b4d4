"""Inserting many rows of one model fast: on PostgreSQL one ``COPY ... FROM STDIN`` instead of a multi-row
INSERT, whose SQL text Django compiles value by value and psycopg then escapes client-side; for batches of
hundreds of rows with kilobyte payloads that text was most of the time spent (profiled in the DLQ ingest,
``bench/dlq_measure.py``). Elsewhere (SQLite) ``bulk_create``.

Used by the paths that insert in bulk: DLQ ingest, bulk replay's attempts, the audit chain's events.
``insert_values`` takes plain value tuples instead of model instances, for the hottest of them (a bulk
replay's attempts), where making the instances cost more than the COPY.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection, models
from django.utils import timezone

M = TypeVar("M", bound=models.Model)


def copy_rows(model: type[M], rows: Sequence[M], *, with_ids: bool = False) -> None:
    """Insert ``rows`` (unsaved instances of ``model``) with COPY on PostgreSQL. ``with_ids``: take the ids
    from the table's sequence first (one query for all) and set them on the rows; otherwise ids are NOT
    set. Values go as an INSERT would send them:
    ``auto_now``/``auto_now_add`` fields stamped with now, JSON fields as ``jsonb``, everything else as
    the instance holds it (psycopg adapts it; model defaults were applied when the instance was made). A
    unique or foreign-key violation raises Django's IntegrityError, as ``bulk_create`` would. Raises
    ValueError on another database (use ``insert``)."""
    if connection.vendor != "postgresql":
        raise ValueError("COPY is PostgreSQL's; use insert()")
    from psycopg.types.json import Jsonb

    fields = [f for f in model._meta.concrete_fields if with_ids or not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    now = timezone.now()
    stamped = [
        f.attname for f in fields if getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False)
    ]
    as_json = {f.attname for f in fields if isinstance(f, models.JSONField)}
    names = [f.attname for f in fields]
    with connection.cursor() as cursor, connection.wrap_database_errors:
        if with_ids:
            pk = model._meta.pk
            assert pk is not None
            # The identity column's own sequence: ids that no concurrent INSERT can also take.
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [model._meta.db_table, pk.column, len(rows)],
            )
            for row, (new_id,) in zip(rows, cursor.fetchall(), strict=True):
                row.pk = new_id
        raw = cursor.cursor  # psycopg's own cursor: COPY
        with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:  # names from the model, not input
            for row in rows:
                for name in stamped:
                    setattr(row, name, now)
                values = row.__dict__
                copy.write_row([Jsonb(values[n]) if n in as_json else values[n] for n in names])
    if with_ids:
        for row in rows:
            row._state.adding = False


def insert(model: type[M], rows: Sequence[M]) -> None:
    """Insert ``rows`` and set their ids: COPY with ids taken from the sequence first on PostgreSQL,
    ``bulk_create`` elsewhere. Raises IntegrityError like ``bulk_create``."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(rows)
        return
    copy_rows(model, rows, with_ids=True)


def insert_values(
    model: type[models.Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> list[int]:
    """Insert ``rows``, each a tuple of values for the fields named (by attname) in ``columns``, and return
    their new ids in order. Columns not named get what the database would give them (so name every field
    without a database default). PostgreSQL: ids from the table's sequence and one COPY; elsewhere
    ``bulk_create`` of instances made from the tuples. Raises IntegrityError like ``bulk_create``."""
    if not rows:
        return []
    if connection.vendor != "postgresql":
        instances = [model(**dict(zip(columns, row, strict=True))) for row in rows]
        model._default_manager.bulk_create(instances)
        return [int(i.pk) for i in instances]
    pk = model._meta.pk
    assert pk is not None
    by_name = {f.attname: f for f in model._meta.concrete_fields}
    names = ", ".join(connection.ops.quote_name(by_name[c].column) for c in (pk.attname, *columns))
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor, connection.wrap_database_errors:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [model._meta.db_table, pk.column, len(rows)],
        )
        ids = [int(new_id) for (new_id,) in cursor.fetchall()]
        with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:  # names from the model
            for new_id, row in zip(ids, rows, strict=True):
                copy.write_row((new_id, *row))
    return ids
