"""How the console decodes and shows a stored record's bytes: keys and values as JSON, text or a hex dump,
header values as text or hex, sensitive JSON paths masked. Pure functions of bytes; no database access.

The one hex dump format (``hex_dump``) is used wherever a hex view is shown: the API's rendered values,
the message page's hex tab and the diffs of binary payloads.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

#: What replaces a masked JSON value.
MASK = "•••"
#: At most this many bytes are shown in a hex dump; a last line says how many more there are.
HEX_DUMP_LIMIT = 64 * 1024

BytesEncoding = Literal["json", "text", "hex", "null"]
HeaderEncoding = Literal["text", "hex", "null"]


@dataclass(frozen=True)
class RenderedBytes:
    """A key or value as the console shows it. ``encoding``: ``json`` (``text`` is the pretty-printed JSON,
    2-space indent, masked paths replaced by ``MASK``), ``text`` (valid UTF-8 that is not JSON), ``hex``
    (anything else: ``text`` is a ``hex_dump``) or ``null`` (no bytes; ``text`` is empty). ``size`` is the
    length of the stored bytes."""

    encoding: BytesEncoding
    text: str
    size: int


@dataclass(frozen=True)
class RenderedHeader:
    """One Kafka header: ``value`` is the UTF-8 text, or the bytes as plain hex digits when they are not
    UTF-8 (``encoding`` says which), or None for a null header."""

    name: str
    encoding: HeaderEncoding
    value: str | None


def decode_headers(stored: Sequence[Sequence[str | None]]) -> list[tuple[str, bytes | None]]:
    """``DeadLetter.headers`` (``[name, base64-or-null]`` pairs) back to Kafka's ``(name, bytes)`` pairs."""
    return [(str(name), None if b64 is None else base64.b64decode(b64)) for name, b64 in stored]


def hex_dump(data: bytes, *, limit: int = HEX_DUMP_LIMIT) -> str:
    """Offset, 16 bytes in hex, and their printable ASCII, a line per 16 bytes (at most ``limit`` bytes;
    a last line counts the bytes left out)."""
    lines = []
    for i in range(0, min(len(data), limit), 16):
        chunk = data[i : i + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {chunk.hex(' '):<47}  |{text}|")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit:,} more bytes")
    return "\n".join(lines)


def render_bytes(data: bytes | None, *, masked_paths: Sequence[str] = ()) -> RenderedBytes:
    """How the console shows a key or value (see ``RenderedBytes``). ``masked_paths`` are JSON paths
    written ``/a/b`` (a list index is a number: ``/items/0``); paths that do not exist are ignored."""
    if data is None:
        return RenderedBytes("null", "", 0)
    size = len(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return RenderedBytes("hex", hex_dump(data), size)
    try:
        parsed = json.loads(text)
    except ValueError:
        return RenderedBytes("text", text, size)
    for path in masked_paths:
        parsed = _mask(parsed, [p for p in path.split("/") if p])
    return RenderedBytes("json", json.dumps(parsed, indent=2, ensure_ascii=False), size)


def _mask(value: Any, parts: list[str]) -> Any:
    if not parts:
        return MASK
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict) and head in value:
        return {**value, head: _mask(value[head], rest)}
    if isinstance(value, list) and head.isdigit() and int(head) < len(value):
        copy = list(value)
        copy[int(head)] = _mask(copy[int(head)], rest)
        return copy
    return value


def render_headers(raw: Sequence[tuple[str, bytes | None]]) -> list[RenderedHeader]:
    """Kafka ``(name, bytes)`` header pairs as the console shows them, in order (see ``RenderedHeader``)."""
    out = []
    for name, value in raw:
        if value is None:
            out.append(RenderedHeader(name, "null", None))
            continue
        try:
            out.append(RenderedHeader(name, "text", value.decode("utf-8")))
        except UnicodeDecodeError:
            out.append(RenderedHeader(name, "hex", value.hex()))
    return out
