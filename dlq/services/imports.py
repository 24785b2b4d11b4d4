"""Import of a JSON Lines export of dead letters (``dlq.services.exports``, maybe from another installation) as
parked dead letters of one chosen pipeline, to reproduce a failure where it can be worked on.

What is checked, line by line as the file streams in (``IMPORT_MAX_BYTES``, ``IMPORT_MAX_ROWS``): every line is
one of ours (``export_format`` is ``exports.EXPORT_FORMAT``, the fields of ``EXPORT_COLUMNS`` with their
types, the payload included), and it fits the chosen pipeline's *current revision*: each destination the row
names is one of the revision's destination names (``*`` or none: a record that failed every destination),
and its source topic is one of the revision's source topics (replays go back there, and an operator may only
replay to the pipeline's own topics). Any bad line refuses the whole import, nothing written, with every bad
line's number and reason (``ImportRefused``, the first ``MAX_REPORTED_ERRORS`` of them).

What an imported dead letter is:

* It belongs to the chosen pipeline and its team, decided here; the file's ``pipeline`` is kept as
  ``claimed_pipeline`` (with an ``ownership_warning`` when it names another pipeline), as ingest keeps a
  record's pipeline header: data to show, never a grant.
* Its bytes are the export's, decoded by ``value_encoding`` / ``key_encoding`` (``exports.shown_text``): JSON
  written compact (equal as JSON to the original, not always byte for byte), text and ``too_deep`` as UTF-8,
  ``base64`` decoded. What the export had masked stays masked: a masked JSON field keeps ``MASK``, a withheld
  key or payload is its ``withheld: ...`` line, a masked header's value is ``MASK``. Nothing is unmasked,
  because nothing can be; the row says it came masked (``H_IMPORTED_MASKED``).
* It is not on a DLQ topic here. Its DLQ coordinates are the chosen pipeline's DLQ topic, partition
  ``IMPORTED_PARTITION`` (-1, which no Kafka record has: the topic browser and the erasure of a delete never
  match a real record) and the exported DLQ offset; ``dlq_topic_id`` is ``import-`` and a digest of where
  the row came from (``provenance_key``), so importing the same rows again finds them (the unique constraint
  on the coordinates is the last word) and creates nothing. Replays work as for any dead letter: the
  record is produced from the stored payload to the source topic, its ``x-streamforge-replay-of`` names the
  pipeline's DLQ topic, so the driver honours its destinations.
* Its source partition and offset are left empty: they are offsets of another installation's topic, and
  would make it a sibling of this installation's dead letters of the same offsets (``replay_with_siblings``
  would copy fixes across them). Where it came from is in headers (``x-streamforge-imported-*``: the
  exported DLQ and source coordinates, its id there, its pipeline, whether it was masked, the import's id);
  a replay drops every ``x-streamforge-*`` header, so they are never sent on. ``revision`` is empty too
  (another installation's revision numbers); fix forward counts it as unknown.

A dry run checks and counts (per destination and error type, new and already imported) without writing.
A real import is one transaction under a lock of the pipeline's row (two imports into one pipeline run one
after the other) and records one ``dlq.import`` audit event on the pipeline with the counts, never a
payload.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import models, transaction
from django.utils.dateparse import parse_datetime

from access import audit
from access.models import Role
from access.permissions import require_role
from dlq import headers as dlq_headers
from dlq.ingest import store_made_rows
from dlq.models import DeadLetter, Status
from dlq.services.errors import InvalidRequest
from dlq.services.exports import EXPORT_COLUMNS, EXPORT_FORMAT
from dlq.services.rendering import MASK
from pipelines.models import Pipeline
from pipelines.spec import SpecError
from streamforge_core import json_depth

#: The largest file accepted, in bytes (a 400 on ``file`` beyond it, before it is read).
IMPORT_MAX_BYTES = 32 * 1024 * 1024
#: At most this many dead letters in one file: an import reproduces a failure, it does not move a backlog.
IMPORT_MAX_ROWS = 10_000
#: Bad lines named in a refusal; the rest are counted.
MAX_REPORTED_ERRORS = 50
#: Rows checked against the table and inserted per round trip.
IMPORT_CHUNK = 500
#: The DLQ partition of an imported dead letter: no Kafka record has it.
IMPORTED_PARTITION = -1
#: ``dlq_topic_id`` of an imported dead letter starts with this (Kafka's topic ids are 22 characters of base64).
IMPORTED_TOPIC_ID_PREFIX = "import-"

#: Provenance headers added to an imported dead letter (UTF-8 text; dropped by a replay, as every
#: ``x-streamforge-*`` header is). Any such header already in the file is replaced.
H_IMPORTED_PREFIX = "x-streamforge-imported-"
H_IMPORTED_FROM = "x-streamforge-imported-from"  # the exported DLQ record: topic/partition/offset
H_IMPORTED_SOURCE = "x-streamforge-imported-source"  # the exported source record: topic/partition/offset
H_IMPORTED_ID = "x-streamforge-imported-id"  # its dead letter id there
H_IMPORTED_PIPELINE = "x-streamforge-imported-pipeline"  # its pipeline there
H_IMPORTED_MASKED = "x-streamforge-imported-masked"  # true: the export was masked, so is this copy
H_IMPORTED_IMPORT = "x-streamforge-imported-import"  # the import's id (its audit event's ``import_id``)

_BYTES_ENCODINGS = frozenset({"json", "text", "base64", "null", "withheld", "too_deep"})
_HEADER_ENCODINGS = frozenset({"text", "hex", "null", "masked"})
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_POSITIVE_INT = (1, 2**31 - 1)


class ImportRefused(InvalidRequest):
    """The file is not one of ours or does not fit the pipeline (HTTP 400 on ``file``): ``problems`` are
    ``"line N: reason"`` texts, the first ``MAX_REPORTED_ERRORS`` of ``bad_lines`` bad lines."""

    def __init__(self, problems: list[str], bad_lines: int) -> None:
        self.problems = problems
        self.bad_lines = bad_lines
        more = bad_lines - len(problems)
        summary = "; ".join(problems) + (f"; and {more} more bad lines" if more > 0 else "")
        super().__init__("file", f"nothing was imported: {summary}")


@dataclass
class ImportResult:
    """What an import did, or (``dry_run``) would do: ``rows`` in the file, ``created`` dead letters (0 in a
    dry run), ``already_imported`` (in the pipeline from an earlier import of the same rows, or twice in the
    file), ``masked`` rows that came masked, and the rows per ``destinations`` and ``error_types``."""

    import_id: str
    pipeline: str
    team: str
    dry_run: bool
    rows: int = 0
    created: int = 0
    already_imported: int = 0
    masked: int = 0
    destinations: dict[str, int] = field(default_factory=dict)
    error_types: dict[str, int] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Target:
    """What the rows are checked against: the pipeline's current destination names, sources, DLQ topic."""

    destinations: frozenset[str]
    sources: frozenset[str]
    dlq_topic: str


class _BadLine(ValueError):
    """One line's reason for refusal."""


def import_dead_letters(
    *,
    actor: User,
    pipeline: Pipeline,
    lines: Iterable[bytes],
    size: int | None = None,
    dry_run: bool = False,
    file_name: str = "",
) -> ImportResult:
    """Import the JSON Lines export ``lines`` (a file's lines as bytes, ``size`` bytes in all when known) as
    parked dead letters of ``pipeline`` and its team (see the module docstring), or with ``dry_run`` only
    check and count them.

    Needs the operator role in the pipeline's team (PermissionDenied). Raises InvalidRequest on ``file`` for
    a file over ``IMPORT_MAX_BYTES`` or ``IMPORT_MAX_ROWS`` or without a row, on ``pipeline`` for one without
    a usable current revision, and ImportRefused naming the bad lines; nothing is written then. A real
    import records one ``dlq.import`` audit event (counts, the file's pipelines, never a payload)."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    if size is not None and size > IMPORT_MAX_BYTES:
        raise InvalidRequest("file", f"is larger than {IMPORT_MAX_BYTES:,} bytes; import fewer dead letters")
    target = _target(pipeline)
    result = ImportResult(
        import_id=str(uuid.uuid4()), pipeline=pipeline.name, team=pipeline.team.name, dry_run=dry_run
    )
    if dry_run:
        _run(pipeline, target, lines, result, write=False)
        return result
    with transaction.atomic():
        # One import into a pipeline at a time: a second import of the same file waits, then finds the rows.
        Pipeline.objects.select_for_update().filter(pk=pipeline.pk).values_list("pk", flat=True).get()
        claimed = _run(pipeline, target, lines, result, write=True)
        audit.record(
            actor=actor,
            action="dlq.import",
            target_type="pipeline",
            target_id=pipeline.name,
            details={
                "import_id": result.import_id,
                "file": file_name[:200],
                "rows": result.rows,
                "created": result.created,
                "already_imported": result.already_imported,
                "masked": result.masked,
                "destinations": result.destinations,
                "error_types": result.error_types,
                "exported_from": sorted(claimed)[:20],
            },
        )
    return result


def provenance_key(row: dict[str, Any]) -> str:
    """``dlq_topic_id`` of the dead letter imported from the export row ``row``: ``import-`` and 25 hex digits
    of a SHA-256 over where the row came from (its pipeline, dead letter id, DLQ and source coordinates and
    destination there). The same row imported again gets the same key; 100 bits keep any two apart."""
    origin = [
        row["pipeline"], row["id"], row["dlq_topic"], row["dlq_partition"], row["dlq_offset"],
        row["source_topic"], row["source_partition"], row["source_offset"], row["destination"],
    ]  # fmt: skip
    digest = hashlib.sha256(json.dumps(origin, ensure_ascii=False).encode()).hexdigest()
    return IMPORTED_TOPIC_ID_PREFIX + digest[:25]


def _target(pipeline: Pipeline) -> _Target:
    revision = pipeline.current_revision
    if revision is None:
        raise InvalidRequest("pipeline", "has no revision to import dead letters into")
    try:
        spec = revision.parsed
    except SpecError as exc:
        raise InvalidRequest("pipeline", f"its current revision no longer validates: {exc}") from exc
    return _Target(
        destinations=frozenset(d.name for d in spec.destinations),
        sources=frozenset(spec.source.topics),
        dlq_topic=spec.dlq.topic,
    )


def _run(
    pipeline: Pipeline, target: _Target, lines: Iterable[bytes], result: ImportResult, *, write: bool
) -> set[str]:
    """Check every line, count into ``result``, and (``write``) insert the new rows a chunk at a time; raise
    ImportRefused at the end when a line was bad (inside the caller's transaction: the rows go with it).
    Returns the pipeline names the file's rows came from."""
    problems: list[str] = []
    bad = 0
    seen: set[str] = set()
    claimed: set[str] = set()
    chunk: list[DeadLetter] = []
    destinations: Counter[str] = Counter()
    error_types: Counter[str] = Counter()
    for number, line in _numbered(lines):
        if not line.strip():
            continue
        result.rows += 1
        if result.rows > IMPORT_MAX_ROWS:
            raise InvalidRequest(
                "file", f"holds more than {IMPORT_MAX_ROWS:,} dead letters; import fewer at a time"
            )
        try:
            row = _parse(line)
            _check_fits(row, target, pipeline)
            made = _dead_letter(row, pipeline, target, result.import_id)
        except _BadLine as exc:
            bad += 1
            if len(problems) < MAX_REPORTED_ERRORS:
                problems.append(f"line {number}: {exc}")
            continue
        if bad:
            continue  # refused anyway: only the remaining lines' problems are still of interest
        claimed.add(row["pipeline"])
        destinations[row["destination"] or "*"] += 1
        error_types[row["error_type"]] += 1
        result.masked += bool(row["masked"])
        if made.dlq_topic_id in seen:
            result.already_imported += 1
            continue
        seen.add(made.dlq_topic_id)
        chunk.append(made)
        if len(chunk) >= IMPORT_CHUNK:
            _flush(chunk, result, write=write)
            chunk = []
    if bad:
        raise ImportRefused(problems, bad)
    if result.rows == 0:
        raise InvalidRequest("file", "holds no dead letters")
    _flush(chunk, result, write=write)
    result.destinations = dict(sorted(destinations.items()))
    result.error_types = dict(sorted(error_types.items()))
    return claimed


def _numbered(pieces: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """The lines of a file read as ``pieces`` (chunks or lines) numbered from 1, split at ``\\n`` only (a
    ``\\r`` before it is whitespace to the JSON parser); memory holds a piece and an unfinished line. More
    than ``IMPORT_MAX_BYTES`` in all is an InvalidRequest on ``file``, whatever the upload said its size was."""
    buffer = bytearray()
    number = total = 0
    for piece in pieces:
        total += len(piece)
        if total > IMPORT_MAX_BYTES:
            raise InvalidRequest(
                "file", f"is larger than {IMPORT_MAX_BYTES:,} bytes; import fewer dead letters"
            )
        buffer += piece
        if b"\n" not in piece:
            continue
        *complete, rest = bytes(buffer).split(b"\n")
        buffer = bytearray(rest)
        for line in complete:
            number += 1
            yield number, line
    if buffer:
        yield number + 1, bytes(buffer)


def _flush(chunk: list[DeadLetter], result: ImportResult, *, write: bool) -> None:
    """Count the rows of ``chunk`` already in the table, and insert the others when ``write``."""
    if not chunk:
        return
    stored = set(
        DeadLetter.objects.filter(
            dlq_topic=chunk[0].dlq_topic,
            dlq_partition=IMPORTED_PARTITION,
            dlq_topic_id__in=[row.dlq_topic_id for row in chunk],
        ).values_list("dlq_topic_id", flat=True)
    )
    new = [row for row in chunk if row.dlq_topic_id not in stored]
    result.already_imported += len(chunk) - len(new)
    if write:
        result.ids += store_made_rows(new)
        result.created += len(new)


def _parse(line: bytes) -> dict[str, Any]:
    """One export row, its fields checked for presence and type; _BadLine says what is wrong."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadLine(f"not UTF-8 text (byte {exc.start})") from exc
    try:
        # The row's object wraps the payload: one level more than a payload may have.
        row = json_depth.loads(text, limit=json_depth.MAX_JSON_DEPTH + 2)
    except json_depth.JsonTooDeep as exc:
        raise _BadLine(f"the row {json_depth.TOO_DEEP}") from exc
    except ValueError as exc:
        raise _BadLine(f"not JSON ({exc})") from exc
    if not isinstance(row, dict):
        raise _BadLine("not a JSON object")
    if row.get("export_format") != EXPORT_FORMAT:
        found = row.get("export_format")
        raise _BadLine(
            f"not a StreamForge dead-letter export (export_format is {str(found)[:60]!r}, "
            f"expected {EXPORT_FORMAT!r})"
            if found is not None
            else "not a StreamForge dead-letter export (no export_format)"
        )
    missing = [name for name in EXPORT_COLUMNS if name not in row]
    if missing:
        hint = " (exported without its payload?)" if "value" in missing else ""
        raise _BadLine(f"missing {', '.join(missing)}{hint}")
    _expect(row, "masked", bool)
    _expect(row, "pipeline", str, limit=249)
    _expect(row, "destination", str, limit=128)
    _expect(row, "error_type", str, limit=128)
    if not row["error_type"]:
        raise _BadLine("error_type is empty")
    _expect(row, "error_message", str)
    _expect(row, "source_topic", str, limit=249)
    _expect(row, "dlq_topic", str, limit=249)
    _expect_int(row, "id", (1, _INT64[1]))
    _expect_int(row, "dlq_partition", _INT32)
    _expect_int(row, "dlq_offset", _INT64)
    _expect_int(row, "source_partition", _INT32, optional=True)
    _expect_int(row, "source_offset", _INT64, optional=True)
    _expect_int(row, "attempts", _POSITIVE_INT)
    for name in ("key_encoding", "value_encoding"):
        if row[name] not in _BYTES_ENCODINGS:
            raise _BadLine(f"{name} is not one of {', '.join(sorted(_BYTES_ENCODINGS))}")
    _expect(row, "key", (str, type(None)))
    if row["value_encoding"] != "json":
        _expect(row, "value", (str, type(None)))
    for name in ("first_failed_at", "last_failed_at"):
        row[name] = _moment(row, name)
    if row["first_failed_at"] > row["last_failed_at"]:
        raise _BadLine("first_failed_at is after last_failed_at")
    row["headers"] = _headers(row["headers"])
    row["key"] = _bytes(row["key"], row["key_encoding"], "key")
    row["value"] = _bytes(row["value"], row["value_encoding"], "value")
    return row


def _expect(row: dict[str, Any], name: str, kind: type | tuple[type, ...], *, limit: int = 0) -> None:
    value = row[name]
    if not isinstance(value, kind):
        raise _BadLine(f"{name} has the wrong type ({type(value).__name__})")
    if limit and isinstance(value, str) and len(value) > limit:
        raise _BadLine(f"{name} is longer than {limit} characters")


def _expect_int(row: dict[str, Any], name: str, within: tuple[int, int], *, optional: bool = False) -> None:
    value = row[name]
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise _BadLine(f"{name} is not a whole number")
    if not within[0] <= value <= within[1]:
        raise _BadLine(f"{name} is out of range ({within[0]} to {within[1]})")


def _moment(row: dict[str, Any], name: str) -> datetime:
    text = row[name]
    when = parse_datetime(text.replace("Z", "+00:00")) if isinstance(text, str) else None
    if when is None or when.tzinfo is None:
        raise _BadLine(f"{name} is not an ISO-8601 time with a zone")
    return when


def _bytes(text: Any, encoding: str, name: str) -> bytes | None:
    """A key or value back to bytes from the export's text and encoding (``exports.shown_text``)."""
    if encoding == "null":
        if text is not None:
            raise _BadLine(f"{name} is not null but its encoding says null")
        return None
    if encoding == "json":
        return json.dumps(text, ensure_ascii=False, separators=(",", ":")).encode()
    if not isinstance(text, str):
        raise _BadLine(f"{name} is not text")
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise _BadLine(f"{name} is not base64") from exc
    return text.encode("utf-8")  # text, too_deep, and withheld: the line the export had instead


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    if not isinstance(raw, list):
        raise _BadLine("headers is not a list")
    out: list[tuple[str, bytes | None]] = []
    for n, header in enumerate(raw):
        if (
            not isinstance(header, dict)
            or not isinstance(header.get("name"), str)
            or header.get("encoding") not in _HEADER_ENCODINGS
            or not isinstance(header.get("value"), str | None)
        ):
            raise _BadLine(f"headers.{n} is not a {{name, value, encoding}} object")
        name, value, encoding = header["name"], header["value"], header["encoding"]
        if name.startswith(H_IMPORTED_PREFIX):
            continue  # an earlier import's provenance: this import writes its own
        if encoding == "null" or value is None:
            out.append((name, None))
        elif encoding == "hex":
            try:
                out.append((name, bytes.fromhex(value)))
            except ValueError as exc:
                raise _BadLine(f"headers.{n} is not hex") from exc
        elif encoding == "masked":
            out.append((name, MASK.encode()))
        else:
            out.append((name, value.encode("utf-8")))
    return out


def _check_fits(row: dict[str, Any], target: _Target, pipeline: Pipeline) -> None:
    """Refuse a row whose destination or source topic the pipeline's current revision does not have."""
    destination = row["destination"]
    if destination not in ("", "*"):
        names = [n.strip() for n in destination.split(",")]
        unknown = [n for n in names if n not in target.destinations]
        if unknown:
            raise _BadLine(
                f"destination {', '.join(unknown)!r} is not a destination of pipeline {pipeline.name!r} "
                f"(its destinations: {', '.join(sorted(target.destinations))})"
            )
    source = row["source_topic"]
    if source and source not in target.sources:
        raise _BadLine(
            f"source topic {source!r} is not a source of pipeline {pipeline.name!r} "
            f"(its sources: {', '.join(sorted(target.sources))})"
        )


def _coordinates(topic: str, partition: Any, offset: Any) -> str:
    return f"{topic}/{'?' if partition is None else partition}/{'?' if offset is None else offset}"


def _dead_letter(row: dict[str, Any], pipeline: Pipeline, target: _Target, import_id: str) -> DeadLetter:
    """The unsaved dead letter an export row becomes in ``pipeline`` (see the module docstring)."""
    kept = row["headers"]
    provenance = [
        (H_IMPORTED_FROM, _coordinates(row["dlq_topic"], row["dlq_partition"], row["dlq_offset"])),
        (H_IMPORTED_SOURCE, _coordinates(row["source_topic"], row["source_partition"], row["source_offset"])),
        (H_IMPORTED_ID, str(row["id"])),
        (H_IMPORTED_PIPELINE, row["pipeline"]),
        (H_IMPORTED_MASKED, "true" if row["masked"] else "false"),
        (H_IMPORTED_IMPORT, import_id),
    ]
    stored_headers = [*kept, *((name, text.encode()) for name, text in provenance)]
    claimed = row["pipeline"]
    warning = ""
    if claimed != pipeline.name:
        warning = (
            f"imported from an export of pipeline {claimed!r} (dead letter #{row['id']} there); it belongs to "
            f"pipeline {pipeline.name!r}, chosen at import, not to the name in the file"
        )
    key, value = row["key"], row["value"]
    return DeadLetter(
        team_id=pipeline.team_id,
        pipeline_id=pipeline.pk,
        pipeline_name=pipeline.name,
        claimed_pipeline=claimed,
        ownership_warning=warning,
        cluster_id=pipeline.cluster_id,
        dlq_topic=target.dlq_topic,
        dlq_topic_id=provenance_key(row),
        dlq_partition=IMPORTED_PARTITION,
        dlq_offset=row["dlq_offset"],
        dlq_timestamp=None,
        source_topic=row["source_topic"],
        source_partition=None,
        source_offset=None,
        key=key,
        value=value,
        headers=[[name, None if v is None else base64.b64encode(v).decode()] for name, v in stored_headers],
        value_size=len(value or b""),
        key_text=_key_text(key),
        convention=dlq_headers.detect(kept),
        error_type=row["error_type"],
        error_message=row["error_message"],
        destination=row["destination"],
        revision=None,
        attempts=row["attempts"],
        first_failed_at=row["first_failed_at"],
        last_failed_at=row["last_failed_at"],
        status=Status.PARKED,
        group_id=None,  # type: ignore[misc]  # set by store_made_rows before the insert
        replay_of_id=None,
    )


def _key_text(key: bytes | None) -> str:
    width = DeadLetter._meta.get_field("key_text")
    assert isinstance(width, models.CharField)
    if not key:
        return ""
    limit = width.max_length or 200
    return key[:limit].decode("utf-8", "replace")[:limit]
