"""Downloads of many rows (the DLQ console's dead letters, the audit log): CSV and JSON Lines text built a
row at a time, one streaming response that sends it as it is made, whatever server runs the app, and the
audit log's export (``export_audit_log``, admins only, itself audited).

Both formats are UTF-8. CSV: one header line, then a line per row, every cell quoted where needed
(``csv.QUOTE_MINIMAL``, ``\\r\\n`` line ends); a text cell starting with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return gets a leading ``'``, so a spreadsheet shows it as text instead of running it as a formula
(numbers are written as numbers and left alone). JSON: JSON Lines, one object per line (``jq``, pandas'
``read_json(lines=True)``), so a reader can start before the end arrives.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone

from access.audit import record
from access.models import AuditEvent
from access.permissions import is_admin
from access.selectors import AuditQuery

ExportFormat = Literal["csv", "json"]
#: The formats offered (``?as=``), with their content type and file extension.
FORMATS: dict[str, tuple[str, str]] = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "json": ("application/x-ndjson; charset=utf-8", "jsonl"),
}
#: Rows per chunk of the response: one write to the client, and (under ASGI) one hop to the database thread.
ROWS_PER_CHUNK = 500
#: First characters a spreadsheet reads as the start of a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text starting like a formula (``FORMULA_STARTS``) gets a
    leading ``'``; None becomes the empty string; numbers and other text are returned as they are."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_lines(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """CSV text: the header line, then one line per row (values in ``columns`` order through ``safe_cell``),
    ``ROWS_PER_CHUNK`` lines per string yielded."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for n, row in enumerate(rows, start=1):
        writer.writerow([safe_cell(row.get(name)) for name in columns])
        if n % ROWS_PER_CHUNK == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def json_lines(rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """JSON Lines text: one compact object per row and line, ``ROWS_PER_CHUNK`` lines per string yielded;
    times must already be text."""
    batch: list[str] = []
    for row in rows:
        batch.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        if len(batch) == ROWS_PER_CHUNK:
            yield "".join(batch)
            batch = []
    yield "".join(batch)


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def encoded(fmt: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """``rows`` as ``fmt`` (``csv`` or ``json``, see the module docstring)."""
    return csv_lines(columns, rows) if fmt == "csv" else json_lines(rows)


def filename(stem: str, fmt: str, now: datetime) -> str:
    """``<stem>-<UTC time, YYYYmmddTHHMMSSZ>.<csv|jsonl>``."""
    return f"{stem}-{now.strftime('%Y%m%dT%H%M%SZ')}.{FORMATS[fmt][1]}"


def streamed(request: HttpRequest, chunks: Iterator[str], *, fmt: str, name: str) -> StreamingHttpResponse:
    """A download of ``chunks`` (text, sent as UTF-8) named ``name``, sent while it is being made.

    Under ASGI (daphne) Django would read a plain iterator to the end before sending anything, so there the
    chunks are pulled one at a time on the request's database thread (``thread_sensitive``: the thread that
    holds the connection and its open server-side cursor)."""
    content: Iterator[bytes] | AsyncIterator[bytes]
    if isinstance(request, ASGIRequest):
        content = _pulled(chunks)
    else:
        content = (chunk.encode() for chunk in chunks if chunk)
    response = StreamingHttpResponse(content, content_type=FORMATS[fmt][0])
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response


async def _pulled(chunks: Iterator[str]) -> AsyncIterator[bytes]:
    pull = sync_to_async(lambda: next(chunks, None), thread_sensitive=True)
    while (chunk := await pull()) is not None:
        if chunk:
            yield chunk.encode()


# ------------------------------------------------------------------------------------------ audit log

#: The audit log export's columns, in order. ``before_digest`` / ``after_digest`` are what the log keeps of
#: the states before and after (digests, never the states); ``details`` is JSON (text in CSV, an object in
#: JSON); ``prev_hash`` and ``hash`` let the reader check the chain; ``scheme`` and ``key_id`` say how.
AUDIT_COLUMNS = (
    "sequence", "created_at", "actor", "action", "target_type", "target_id", "reason",
    "before_digest", "after_digest", "details", "request_id", "prev_hash", "hash", "scheme", "key_id",
)  # fmt: skip
#: Audit events fetched per round trip of the server-side cursor.
AUDIT_CHUNK = 2000


@dataclass(frozen=True)
class AuditExport:
    """An audit log export ready to send: the file ``name``, its format ``fmt`` and the text ``chunks``
    (a generator reading the database as it is consumed)."""

    name: str
    fmt: str
    chunks: Iterator[str]


def export_audit_log(*, actor: User, query: AuditQuery, fmt: str, now: datetime | None = None) -> AuditExport:
    """The audit events ``query`` selects, newest first, as ``fmt`` (``csv`` or ``json``) with the columns
    of ``AUDIT_COLUMNS``; admins only. Records one ``audit.export`` event (the filter and format) first, so
    an export that covers the present includes its own record. Raises PermissionDenied for a non-admin and
    ValueError for an unknown format."""
    if not is_admin(actor):
        raise PermissionDenied("only admins export the audit log")
    if fmt not in FORMATS:
        raise ValueError(f"as: one of {', '.join(FORMATS)}")
    record(
        actor=actor,
        action="audit.export",
        target_type="audit_log",
        target_id="export",
        details={"filter": {k: v for k, v in asdict(query).items() if v}, "format": fmt},
    )
    events = query.apply(AuditEvent.objects.all()).order_by("-sequence")
    rows = (_audit_row(event, fmt) for event in events.iterator(chunk_size=AUDIT_CHUNK))
    return AuditExport(
        name=filename("audit-log", fmt, now or timezone.now()),
        fmt=fmt,
        chunks=encoded(fmt, AUDIT_COLUMNS, rows),
    )


def _audit_row(event: AuditEvent, fmt: str) -> dict[str, Any]:
    return {
        "sequence": event.sequence,
        "created_at": iso_utc(event.created_at),
        "actor": event.actor_name,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "reason": event.reason,
        "before_digest": event.before_digest,
        "after_digest": event.after_digest,
        "details": event.details
        if fmt == "json"
        else json.dumps(event.details, ensure_ascii=False, sort_keys=True),
        "request_id": event.request_id,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "scheme": event.scheme,
        "key_id": event.key_id,
    }


def iso_utc(when: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z`` (``2026-11-21T08:00:00.123456Z``); None stays None."""
    if when is None:
        return None
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
