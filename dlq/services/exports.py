"""Export of the dead letters a filter selects, as CSV or JSON Lines (``access.exports``), masked for the
caller exactly as the message page masks them, and audited once.

In JSON Lines numbers stay numbers, a payload that is JSON is the JSON itself (an object, list, number...,
not a string holding it; ``value_encoding`` says ``json``), and ``headers`` is a list of
``{"name", "value", "encoding"}`` objects (``RenderedHeader``); in CSV both are JSON text in their cell. So
``json.loads`` of a line gives back the record as the message page shows it (the round trip the tests make).

A registry-format pipeline's payload (Avro, Protobuf, JSON Schema) is exported as its decoded record, masked
on the decoded fields, as the page shows it; one that does not decode, as its bytes.

Each JSON Lines row also says what it is: ``export_format`` (``EXPORT_FORMAT``, what an import checks to
know the file is ours) and ``masked`` (whether it was exported under the exporter's masking: masked JSON
paths, withheld keys or payloads, masked headers; ``dlq.services.imports`` keeps such a row masked). A field
on every row rather than a first header line: each line stays one record for ``jq``, pandas and
``json.loads`` alone, and a file cut, filtered or concatenated line by line still says what each line is.
CSV, read by people and spreadsheets rather than imported, is left as it was.

Rows come newest first (the list's keyset order) through a server-side cursor, ``EXPORT_CHUNK`` at a
time, so memory stays flat at any size. A selection larger than ``EXPORT_MAX_ROWS`` is refused up front
(InvalidRequest on ``filter``, a 400 telling the user to narrow it) rather than cut off silently: a file that
looks complete but is not would be worse than none.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from access import audit
from access.exports import FORMATS, encoded, filename, iso_utc
from dlq.filters import SEARCH_ORDER, MessageFilter
from dlq.models import DeadLetter
from dlq.services.decoded import decode_with, pipeline_formats
from dlq.services.errors import InvalidRequest, RegistryUnavailable
from dlq.services.inspection import key_masked_teams, masking_for, visible_dead_letters
from dlq.services.rendering import Masking, RenderedBytes, decode_headers
from pipelines.formats import PipelineFormats

#: At most this many dead letters in one export; more is a 400 asking for a narrower filter.
EXPORT_MAX_ROWS = 100_000
#: Rows fetched per round trip of the server-side cursor.
EXPORT_CHUNK = 1000
#: The columns, in order (CSV header; the keys of each JSON object, after ``JSON_ONLY_COLUMNS``). ``key`` and ``value`` are text as the
#: caller may see them; ``key_encoding`` / ``value_encoding`` say how (see ``shown_text``). Without the
#: payload (``include_payload=False``) the ``value`` and ``value_encoding`` columns are left out.
EXPORT_COLUMNS = (
    "id", "status", "pipeline", "destination", "error_type", "error_message", "key", "key_encoding",
    "source_topic", "source_partition", "source_offset", "dlq_topic", "dlq_partition", "dlq_offset",
    "first_failed_at", "last_failed_at", "attempts", "group_id", "value", "value_encoding", "headers",
)  # fmt: skip
PAYLOAD_COLUMNS = ("value", "value_encoding", "headers")
#: Marks a JSON Lines row as one of ours, in this layout (``dlq.services.imports`` refuses any other).
EXPORT_FORMAT = "streamforge.dlq.v1"
#: The JSON Lines rows' extra fields, first in each object: the format marker and whether it was masked.
JSON_ONLY_COLUMNS = ("export_format", "masked")


@dataclass(frozen=True)
class DeadLetterExport:
    """An export ready to send: ``rows`` dead letters matched when it was made (rows arriving meanwhile
    may be missing, never beyond ``EXPORT_MAX_ROWS``), the file ``name``, its format ``fmt`` (``csv`` or
    ``json``) and the text ``chunks`` (a generator reading the database as it is consumed)."""

    rows: int
    name: str
    fmt: str
    chunks: Iterator[str]


def shown_text(data: bytes | None, rendered: RenderedBytes, *, masked_json: bool) -> tuple[str | None, str]:
    """A key or value as one cell of text, and its encoding, matching the message page's raw tab: ``json``
    and ``text`` are the stored bytes as UTF-8 (with ``masked_json``: the masked JSON, compact), ``withheld``
    the line the page shows instead (``rendering.withheld_payload`` / ``withheld_key``), ``base64`` bytes
    that are not UTF-8 (the page's hex tab, lossless), ``too_deep`` JSON nested too deep to decode (the
    stored bytes as UTF-8, as the page's raw tab shows them), and ``null`` (text None) for no bytes."""
    if data is None:
        return None, "null"
    if rendered.encoding == "withheld":
        return rendered.text, "withheld"
    if rendered.encoding == "hex":
        return base64.b64encode(data).decode(), "base64"
    if masked_json:
        return json.dumps(json.loads(rendered.text), separators=(",", ":"), ensure_ascii=False), "json"
    return data.decode("utf-8"), rendered.encoding


def export_dead_letters(
    *,
    actor: User,
    selection: MessageFilter,
    fmt: str,
    include_payload: bool = True,
    now: datetime | None = None,
) -> DeadLetterExport:
    """Export the dead letters of ``actor``'s teams that ``selection`` matches as ``fmt`` (``csv`` or
    ``json``, see ``access.exports``), with the columns of ``EXPORT_COLUMNS`` (a JSON payload and the
    headers as JSON values in ``json``, as JSON text in ``csv``: see the module docstring).

    Keys and payloads are masked per team with ``masking_for`` (the message page's rule: viewers get the
    configured paths masked, non-JSON payloads and keys withheld; operators and above see them whole), and
    a search does not match keys the actor may not see. Records one ``dlq.export`` audit event with the
    filter, format and row count (never a payload). Raises InvalidRequest naming ``as`` for an unknown
    format and ``filter`` when more than ``EXPORT_MAX_ROWS`` match."""
    if fmt not in FORMATS:
        raise InvalidRequest("as", f"one of {', '.join(FORMATS)}")
    hidden = key_masked_teams(actor)
    qs = selection.apply(visible_dead_letters(actor), key_masked_teams=hidden)
    rows = qs.order_by()[: EXPORT_MAX_ROWS + 1].count()
    if rows > EXPORT_MAX_ROWS:
        raise InvalidRequest(
            "filter", f"matches more than {EXPORT_MAX_ROWS:,} dead letters; narrow the filter to export it"
        )
    audit.record(
        actor=actor,
        action="dlq.export",
        target_type="dead_letters",
        target_id="export",
        details={
            "filter": selection.to_json(),
            "format": fmt,
            "include_payload": include_payload,
            "rows": rows,
        },
    )
    order = SEARCH_ORDER if SEARCH_ORDER in qs.query.annotations else "id"
    qs = qs.select_related("team").order_by(f"-{order}")
    qs = qs if include_payload else qs.defer("value", "headers")
    columns = [c for c in EXPORT_COLUMNS if include_payload or c not in PAYLOAD_COLUMNS]
    when = now or timezone.now()
    return DeadLetterExport(
        rows=rows,
        name=filename("dead-letters", fmt, when),
        fmt=fmt,
        chunks=encoded(
            fmt, columns, _rows(actor, qs[:EXPORT_MAX_ROWS], include_payload=include_payload, fmt=fmt)
        ),
    )


def _registry_formats(
    dl: DeadLetter, known: dict[int | None, PipelineFormats | None]
) -> PipelineFormats | None:
    """The registry formats of the dead letter's pipeline (None: it reads JSON, or its registry cannot be
    used now: the bytes are exported as they are), looked up once per pipeline and export."""
    if dl.pipeline_id not in known:
        try:
            known[dl.pipeline_id] = pipeline_formats(dl)
        except RegistryUnavailable:
            known[dl.pipeline_id] = None
    return known[dl.pipeline_id]


def _rows(actor: User, qs: Any, *, include_payload: bool, fmt: str) -> Iterator[dict[str, Any]]:
    maskings: dict[int, Masking] = {}
    formats: dict[int | None, PipelineFormats | None] = {}
    for dl in qs.iterator(chunk_size=EXPORT_CHUNK):
        if dl.team_id not in maskings:
            maskings[dl.team_id] = masking_for(actor, dl.team)
        masking = maskings[dl.team_id]
        key = bytes(dl.key) if dl.key is not None else None
        key_text, key_encoding = shown_text(key, masking.key(key), masked_json=False)
        row: dict[str, Any] = (
            {"export_format": EXPORT_FORMAT, "masked": masking.active} if fmt == "json" else {}
        )
        row |= {
            "id": dl.pk,
            "status": dl.status,
            "pipeline": dl.pipeline_name,
            "destination": dl.destination,
            "error_type": dl.error_type,
            "error_message": dl.error_message,
            "key": key_text,
            "key_encoding": key_encoding,
            "source_topic": dl.source_topic,
            "source_partition": dl.source_partition,
            "source_offset": dl.source_offset,
            "dlq_topic": dl.dlq_topic,
            "dlq_partition": dl.dlq_partition,
            "dlq_offset": dl.dlq_offset,
            "first_failed_at": iso_utc(dl.first_failed_at),
            "last_failed_at": iso_utc(dl.last_failed_at),
            "attempts": dl.attempts,
            "group_id": dl.group_id,
        }
        if include_payload:
            value = bytes(dl.value) if dl.value is not None else None
            registry_formats = _registry_formats(dl, formats) if value is not None else None
            if registry_formats is not None and registry_formats.decoder is not None:
                # exported (and masked) as its decoded record when it decodes
                decoded = decode_with(registry_formats.decoder, value)
                value = decoded.text if decoded.text is not None else value
            rendered = masking.value(value)
            row["value"], row["value_encoding"] = shown_text(
                value, rendered, masked_json=bool(masking.paths) and rendered.encoding == "json"
            )
            if fmt == "json" and row["value_encoding"] == "json":
                # Already decoded once by ``render_bytes`` (within its depth limit), so this cannot recurse deep.
                row["value"] = json.loads(row["value"])
            headers = [asdict(h) for h in masking.header_values(decode_headers(dl.headers or []))]
            row["headers"] = headers if fmt == "json" else json.dumps(headers, ensure_ascii=False)
        yield row
