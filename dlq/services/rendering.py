"""How the console decodes and shows a stored record's bytes: keys and values as JSON, text or a hex dump,
header values as text or hex, and what a masked viewer may not see (``Masking``): sensitive JSON paths
masked, payloads that cannot be checked for those paths withheld, named headers masked, keys withheld.
Pure functions of bytes; no database access.

The one hex dump format (``hex_dump``) is used wherever a hex view is shown: the API's rendered values,
the message page's hex tab and the diffs of binary payloads.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from streamforge_core import json_depth

#: What replaces a masked JSON value or header value.
MASK = "•••"
#: At most this many bytes are shown in a hex dump; a last line says how many more there are.
HEX_DUMP_LIMIT = 64 * 1024

BytesEncoding = Literal["json", "text", "hex", "null", "withheld", "too_deep"]
HeaderEncoding = Literal["text", "hex", "null", "masked"]


@dataclass(frozen=True)
class RenderedBytes:
    """A key or value as the console shows it. ``encoding``: ``json`` (``text`` is the pretty-printed JSON,
    2-space indent, masked paths replaced by ``MASK``), ``text`` (valid UTF-8 that is not JSON), ``hex``
    (anything else: ``text`` is a ``hex_dump``), ``null`` (no bytes; ``text`` is empty), ``withheld``
    (hidden from a masked viewer; ``text`` says so, see ``withheld_payload``) or ``too_deep`` (JSON nested
    deeper than ``MAX_JSON_DEPTH``, too deep to decode or display: ``text`` is the stored bytes as UTF-8,
    undecoded). ``size`` is the length of the stored bytes."""

    encoding: BytesEncoding
    text: str
    size: int


@dataclass(frozen=True)
class RenderedHeader:
    """One Kafka header: ``value`` is the UTF-8 text, or the bytes as plain hex digits when they are not
    UTF-8, or ``MASK`` for a masked header (``encoding`` says which), or None for a null header."""

    name: str
    encoding: HeaderEncoding
    value: str | None


def withheld_payload(data: bytes) -> str:
    """What a masked viewer sees instead of a payload that is not JSON: its length and SHA-256, enough to
    tell two payloads apart or match one against a copy, nothing of its content."""
    return f"withheld: not JSON, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def withheld_key(data: bytes) -> str:
    """What a masked viewer sees instead of a key when keys are masked: its length only. No hash: keys are
    short identifiers (an account or card number), and a hash of one is found by trying them all."""
    return f"withheld: key, {len(data)} bytes"


def withheld_value(data: bytes, why: str) -> str:
    """What a masked viewer sees instead of a payload withheld whole for ``why``: its length and the reason.
    No hash: a transform may have reduced the record to one short sensitive value, found by trying them."""
    return f"withheld: {len(data)} bytes; {why}"


@dataclass(frozen=True)
class Masking:
    """What one user may not see of one team's dead letters (``dlq.services.masking_for``).

    ``paths``: JSON paths (``/a/b``, a list index is a number) whose values are replaced by ``MASK``; a
    payload that is not JSON cannot be checked for them, so while any path is set such a payload is
    withheld whole (``withheld_payload``) on every surface: value, fixes, diffs, raw and hex tabs.
    ``headers``: header names (lower case; matched case-insensitively) whose values are replaced by
    ``MASK``. ``keys``: record keys are withheld (``withheld_key``). ``values_withheld``: when not empty,
    why every payload is withheld whole (its length only, ``withheld_value``): records whose shape the paths
    do not describe (a destination topic written by a transform), where masking by path would show the
    sensitive values wherever the transform put them.
    """

    paths: tuple[str, ...] = ()
    headers: frozenset[str] = frozenset()
    keys: bool = False
    values_withheld: str = ""

    @property
    def active(self) -> bool:
        """Whether anything is hidden at all."""
        return bool(self.paths or self.headers or self.keys or self.values_withheld)

    def value(self, data: bytes | None) -> RenderedBytes:
        """A payload as this viewer sees it (``render_bytes`` with the masked paths, or withheld whole)."""
        if self.values_withheld and data is not None:
            return RenderedBytes("withheld", withheld_value(data, self.values_withheld), len(data))
        return render_bytes(data, masked_paths=self.paths)

    def key(self, data: bytes | None) -> RenderedBytes:
        """A record key as this viewer sees it: withheld when keys are masked, else rendered unmasked."""
        if self.keys and data is not None:
            return RenderedBytes("withheld", withheld_key(data), len(data))
        return render_bytes(data)

    def key_text(self, text: str) -> str:
        """The list's searchable key prefix as this viewer sees it."""
        return MASK if self.keys and text else text

    def header_values(self, raw: Sequence[tuple[str, bytes | None]]) -> list[RenderedHeader]:
        """Headers as this viewer sees them (``render_headers`` with the masked names)."""
        return render_headers(raw, masked_names=self.headers)


#: Nothing hidden (operators and above).
UNMASKED = Masking()


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
    written ``/a/b`` (a list index is a number: ``/items/0``); paths that do not exist are ignored. With any
    masked path, bytes that are not JSON, or JSON too deep to decode, are withheld (``withheld_payload``).
    JSON nested deeper than ``MAX_JSON_DEPTH`` is not decoded (Python's decoder is recursive: a stored
    payload 3,000 levels deep would raise RecursionError on every page showing it): it is ``too_deep``."""
    if data is None:
        return RenderedBytes("null", "", 0)
    size = len(data)
    try:
        text = data.decode("utf-8")
        parsed = json_depth.loads(text)
    except json_depth.JsonTooDeep:
        if masked_paths:
            return RenderedBytes("withheld", withheld_payload(data), size)
        return RenderedBytes("too_deep", text, size)
    except ValueError:  # UnicodeDecodeError is one
        if masked_paths:
            # The paths cannot be found in bytes that are not JSON (truncated JSON, another encoding): the
            # sensitive values may be anywhere in them, so none of it is shown.
            return RenderedBytes("withheld", withheld_payload(data), size)
        try:
            return RenderedBytes("text", data.decode("utf-8"), size)
        except UnicodeDecodeError:
            return RenderedBytes("hex", hex_dump(data), size)
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


def render_headers(
    raw: Sequence[tuple[str, bytes | None]], *, masked_names: frozenset[str] = frozenset()
) -> list[RenderedHeader]:
    """Kafka ``(name, bytes)`` header pairs as the console shows them, in order (see ``RenderedHeader``);
    the values of headers named in ``masked_names`` (lower case) are replaced by ``MASK``."""
    out = []
    for name, value in raw:
        if value is None:
            out.append(RenderedHeader(name, "null", None))
            continue
        if name.lower() in masked_names:
            out.append(RenderedHeader(name, "masked", MASK))
            continue
        try:
            out.append(RenderedHeader(name, "text", value.decode("utf-8")))
        except UnicodeDecodeError:
            out.append(RenderedHeader(name, "hex", value.hex()))
    return out
