"""How deep JSON may nest before the product refuses to decode it.

Python's ``json`` module decodes and encodes recursively: a document nested a few thousand levels deep
(``[[[[...]]]]``, 6 KB of brackets) raises ``RecursionError``, which no caller expects and every view turns
into a 500. ``nesting_path`` finds such a document without decoding it (a scan of its brackets, outside
strings, at the speed of a regular expression), so a request body is refused with a 400 naming the field
and a stored payload is shown as "too deep to display" instead of failing the page.

The limit, ``MAX_JSON_DEPTH`` (128), is the recursion limit of ``serde_json``, the JSON library of
StreamForge's own engine (Rust): a document the engine refuses to decode is refused here too, and real
records (GitHub events nest about 6 levels) are far below it.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: Containers (objects and arrays) one JSON document may nest, the outermost counted as 1.
MAX_JSON_DEPTH = 128

#: What callers say about a document beyond the limit (a 400's reason, the console's note).
TOO_DEEP = f"is nested deeper than {MAX_JSON_DEPTH} levels of JSON objects and arrays"

#: A JSON string (escapes included) or one structural character: everything the scan needs to see.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonTooDeep(ValueError):
    """A JSON document nests deeper than the limit. A ``ValueError``, as ``json.loads`` raises for any other
    document it refuses, so callers that already answer "not valid JSON" answer this too. ``path`` is the
    dotted path (``messages.0.value.a``) of the container that crosses the limit, ``""`` for the top."""

    def __init__(self, path: str, limit: int = MAX_JSON_DEPTH) -> None:
        super().__init__(f"JSON {TOO_DEEP}" + (f" (at {path})" if path else ""))
        self.path = path
        self.limit = limit


def nesting_path(text: str | bytes, *, limit: int = MAX_JSON_DEPTH, prefix: str = "") -> str | None:
    """The dotted path (below ``prefix``) of the first object or array of the JSON ``text`` that opens
    deeper than ``limit`` levels, or None when the document stays within it. The path names object keys as
    they are written and array items by index, as ``streamforge_core.text.unencodable_path`` does.

    Only brackets outside strings count; ``text`` need not be valid JSON (what is not is for the decoder to
    refuse). Linear in the length of ``text``; a document with at most ``limit`` brackets is not scanned."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") <= limit:
        return None
    # The depth first, in C loops (strings and all but brackets removed, a running sum); the path, a
    # Python loop over every token, only for a document that is too deep.
    brackets = _NOT_A_BRACKET.sub("", _STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= limit:
        return None
    # One frame per open container: [is_object, current key or index, whether a key is expected next].
    frames: list[list[Any]] = []
    for match in _TOKEN.finditer(text):
        lexeme = match.group()
        if lexeme[0] == '"':
            if frames and frames[-1][0] and frames[-1][2]:
                frames[-1][1], frames[-1][2] = _key(lexeme), False
            continue
        if lexeme in "[{":
            if len(frames) >= limit:
                return ".".join([*([prefix] if prefix else []), *(str(frame[1]) for frame in frames)])
            frames.append([lexeme == "{", 0 if lexeme == "[" else "", lexeme == "{"])
        elif lexeme in "]}":
            if frames:
                frames.pop()
        elif frames:  # a comma: the next array item, or the next object key
            if frames[-1][0]:
                frames[-1][2] = True
            else:
                frames[-1][1] += 1
    return None


def _key(lexeme: str) -> str:
    try:
        return str(json.loads(lexeme))
    except ValueError:
        return lexeme[1:-1]


def check_depth(text: str | bytes, *, limit: int = MAX_JSON_DEPTH, prefix: str = "") -> None:
    """Raise ``JsonTooDeep`` when the JSON ``text`` nests deeper than ``limit`` (see ``nesting_path``)."""
    path = nesting_path(text, limit=limit, prefix=prefix)
    if path is not None:
        raise JsonTooDeep(path, limit)


def loads(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for text from outside: raises ``JsonTooDeep`` (a ValueError) instead of decoding a
    document nested deeper than ``limit``, and ValueError, as ``json.loads`` does, for invalid JSON."""
    check_depth(text, limit=limit)
    return json.loads(text)
