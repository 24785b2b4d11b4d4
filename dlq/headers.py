"""Reading the error headers of DLQ records written by StreamForge, Kafka Connect and Spring Kafka into one
normalized shape (``Failure``), so one console serves DLQs whichever tool wrote them.

Conventions (../shared/DESIGN.md, "Contracts"):

- StreamForge: ``x-streamforge-*`` UTF-8 text headers (``streamforge_core.contract``).
- Kafka Connect (``errors.deadletterqueue.context.headers.enable=true``): ``__connect.errors.topic``,
  ``.partition``, ``.offset``, ``.connector.name``, ``.task.id``, ``.stage``, ``.class.name``,
  ``.exception.class.name``, ``.exception.message``, ``.exception.stacktrace``, all UTF-8 text
  (Kafka Connect's ``DeadLetterQueueReporter``).
- Spring Kafka (``DeadLetterPublishingRecoverer``): ``kafka_dlt-original-topic`` (text),
  ``kafka_dlt-original-partition`` (4-byte big-endian int), ``kafka_dlt-original-offset`` and
  ``kafka_dlt-original-timestamp`` (8-byte big-endian longs), ``kafka_dlt-exception-fqcn``,
  ``kafka_dlt-exception-message``, ``kafka_dlt-exception-stacktrace`` (text).

A header that is malformed (wrong length, not a number) never fails ingest: the field stays empty and the
problem is listed in ``Failure.warnings``, because the record itself must still be parked.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

from streamforge_core import contract as c

Headers = Sequence[tuple[str, bytes | None]]
Convention = Literal["streamforge", "kafka_connect", "spring", "unknown"]

CONNECT_PREFIX: Final = "__connect.errors."
SPRING_PREFIX: Final = "kafka_dlt-"
STREAMFORGE_PREFIX: Final = "x-streamforge-"
#: Headers that describe the failure or an earlier replay, not the original record: dropped on replay.
_REPLAY_STRIPPED_PREFIXES: Final = (CONNECT_PREFIX, SPRING_PREFIX, STREAMFORGE_PREFIX)
#: The lineage header of produced records is part of the source record's story and stays.
_KEPT_STREAMFORGE = frozenset({c.H_LINEAGE})

UNKNOWN_ERROR_TYPE: Final = "Unknown"


@dataclass
class Failure:
    """Why and where a record failed, whatever wrote it.

    ``source_partition``/``source_offset`` are None when the writer did not say. ``error_type`` is the
    StreamForge error type, or the exception's simple class name for other tools, or ``Unknown``.
    ``failed_at`` is the writer's failure time when it gave one (UTC). ``replay_id`` is set when the record
    is a replayed record that failed again (it carries the replay header the console added).
    """

    convention: Convention
    error_type: str = UNKNOWN_ERROR_TYPE
    error_message: str = ""
    source_topic: str = ""
    source_partition: int | None = None
    source_offset: int | None = None
    pipeline: str = ""
    destination: str = ""
    revision: int | None = None
    attempts: int = 1
    failed_at: datetime | None = None
    stack_trace: str = ""
    replay_id: str = ""
    replay_of: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", "replace")


# What a text header may hold, as Kafka's wire types: partitions are int32, offsets int64; a revision number
# and an attempt count are never negative. Anything else is a malformed header (a warning, no value), not a
# number that a database column refuses later (PostgreSQL's integer is 32 bits, and the batch would fail).
INT32 = range(-(2**31), 2**31)
INT64 = range(-(2**63), 2**63)
COUNT = range(0, 2**31)


def _int_text(value: bytes | None, name: str, warnings: list[str], within: range = INT32) -> int | None:
    text = _text(value).strip()
    if not text:
        return None
    try:
        number = int(text)
    except ValueError:
        warnings.append(f"{name}: {text[:40]!r} is not an integer")
        return None
    if number not in within:
        warnings.append(f"{name}: {text[:40]!r} is out of range")
        return None
    return number


def _big_endian(value: bytes | None, size: int, name: str, warnings: list[str]) -> int | None:
    """Spring writes partitions as 4-byte and offsets/timestamps as 8-byte big-endian signed integers."""
    if value is None:
        return None
    if len(value) != size:
        warnings.append(f"{name}: {len(value)} bytes, expected a {size}-byte big-endian integer")
        return None
    return int(struct.unpack(">i" if size == 4 else ">q", value)[0])


def _iso(text: str, name: str, warnings: list[str]) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        warnings.append(f"{name}: {text[:40]!r} is not an ISO-8601 time")
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _simple_class_name(fqcn: str) -> str:
    return fqcn.rsplit(".", 1)[-1].rsplit("$", 1)[-1] or UNKNOWN_ERROR_TYPE


def detect(headers: Headers) -> Convention:
    """Which tool wrote this DLQ record, judged by its header names (StreamForge first, as ours win)."""
    names = [name for name, _ in headers]
    if any(n == c.H_ERROR_TYPE for n in names):
        return "streamforge"
    if any(n.startswith(CONNECT_PREFIX) for n in names):
        return "kafka_connect"
    if any(n.startswith(SPRING_PREFIX) for n in names):
        return "spring"
    return "unknown"


def parse(headers: Headers) -> Failure:
    """Normalize a DLQ record's headers into a Failure. Never raises; see ``Failure.warnings``.

    When a header repeats, the last value wins (Kafka allows repeats; writers append newer context last).
    """
    convention = detect(headers)
    last: dict[str, bytes | None] = {}
    for name, value in headers:
        last[name] = value
    failure = Failure(convention=convention)
    if convention == "streamforge":
        _parse_streamforge(last, failure)
    elif convention == "kafka_connect":
        _parse_connect(last, failure)
    elif convention == "spring":
        _parse_spring(last, failure)
    # A replayed record carries the console's replay headers whichever tool dead-lettered it again.
    failure.replay_id = _text(last.get(c.H_REPLAY_ID))
    failure.replay_of = _text(last.get(c.H_REPLAY_OF))
    return failure


def _parse_streamforge(h: dict[str, bytes | None], f: Failure) -> None:
    f.error_type = _text(h.get(c.H_ERROR_TYPE)) or UNKNOWN_ERROR_TYPE
    f.error_message = _text(h.get(c.H_ERROR))
    f.source_topic = _text(h.get(c.H_SOURCE_TOPIC))
    f.source_partition = _int_text(h.get(c.H_SOURCE_PARTITION), c.H_SOURCE_PARTITION, f.warnings)
    f.source_offset = _int_text(h.get(c.H_SOURCE_OFFSET), c.H_SOURCE_OFFSET, f.warnings, INT64)
    f.pipeline = _text(h.get(c.H_PIPELINE))
    f.destination = _text(h.get(c.H_DESTINATION))
    f.revision = _int_text(h.get(c.H_REVISION), c.H_REVISION, f.warnings, COUNT)
    f.attempts = _int_text(h.get(c.H_ATTEMPTS), c.H_ATTEMPTS, f.warnings, COUNT) or 1
    f.failed_at = _iso(_text(h.get(c.H_TIMESTAMP)), c.H_TIMESTAMP, f.warnings)
    f.stack_trace = _text(h.get(c.H_STACK_TRACE))
    for name in (c.H_FILTER, c.H_TRANSFORM):
        if h.get(name) is not None:
            f.extra[name.removeprefix(STREAMFORGE_PREFIX)] = _text(h[name])


def _parse_connect(h: dict[str, bytes | None], f: Failure) -> None:
    def get(suffix: str) -> bytes | None:
        return h.get(CONNECT_PREFIX + suffix)

    f.source_topic = _text(get("topic"))
    f.source_partition = _int_text(get("partition"), CONNECT_PREFIX + "partition", f.warnings)
    f.source_offset = _int_text(get("offset"), CONNECT_PREFIX + "offset", f.warnings, INT64)
    fqcn = _text(get("exception.class.name"))
    f.error_type = _simple_class_name(fqcn) if fqcn else UNKNOWN_ERROR_TYPE
    f.error_message = _text(get("exception.message"))
    f.stack_trace = _text(get("exception.stacktrace"))
    for suffix in ("connector.name", "task.id", "stage", "class.name", "exception.class.name"):
        if get(suffix) is not None:
            f.extra[suffix] = _text(get(suffix))


def _parse_spring(h: dict[str, bytes | None], f: Failure) -> None:
    def get(suffix: str) -> bytes | None:
        return h.get(SPRING_PREFIX + suffix)

    f.source_topic = _text(get("original-topic"))
    f.source_partition = _big_endian(
        get("original-partition"), 4, SPRING_PREFIX + "original-partition", f.warnings
    )
    f.source_offset = _big_endian(get("original-offset"), 8, SPRING_PREFIX + "original-offset", f.warnings)
    millis = _big_endian(get("original-timestamp"), 8, SPRING_PREFIX + "original-timestamp", f.warnings)
    if millis is not None:
        f.extra["original-timestamp"] = str(millis)
    fqcn = _text(get("exception-fqcn"))
    f.error_type = _simple_class_name(fqcn) if fqcn else UNKNOWN_ERROR_TYPE
    f.error_message = _text(get("exception-message"))
    f.stack_trace = _text(get("exception-stacktrace"))
    for suffix in ("exception-fqcn", "original-consumer-group", "exception-cause-fqcn"):
        if get(suffix) is not None:
            f.extra[suffix] = _text(get(suffix))


def original_headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    """The headers of the original record: every header except the failure context that a DLQ writer
    (StreamForge, Kafka Connect, Spring) or an earlier replay added. What a replay sends on."""
    return [
        (name, value)
        for name, value in headers
        if name in _KEPT_STREAMFORGE or not name.startswith(_REPLAY_STRIPPED_PREFIXES)
    ]


def spring_int(value: int) -> bytes:
    """A 4-byte big-endian int, as Spring Kafka writes partitions (for tests and tools producing DLQs)."""
    return struct.pack(">i", value)


def spring_long(value: int) -> bytes:
    """An 8-byte big-endian long, as Spring Kafka writes offsets and timestamps."""
    return struct.pack(">q", value)
