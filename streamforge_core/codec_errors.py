"""The errors of the record codecs (``streamforge_core.schema_codecs`` re-exports them; a module of their own
so each format's codec module can raise them without importing the dispatch that imports it)."""

from __future__ import annotations

from typing import Any

#: A JSON-compatible value: what ``json.loads`` returns.
JSON = Any


class DecodeError(ValueError):
    """A body that its writer schema cannot read. ``reason`` names the schema id and the byte (counted from
    the start of the framed record value, header included, as ``WireFormatError`` does), e.g.
    ``"not Avro for schema 7 at byte 12: string length -3"``; ``position`` is that byte (None when no byte
    is to blame)."""

    def __init__(self, reason: str, position: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position


class SchemaValidation(ValueError):
    """A JSON value that does not fit the schema it is to be written with. ``field_path`` is the JSONPath of
    the offending field (``$`` the whole value, ``$.actor.id``, ``$.commits[2].sha``) and ``reason`` what is
    wrong there; ``str()`` is ``"$.actor.id: expected long, got \\"abc\\""``."""

    def __init__(self, field_path: str, reason: str) -> None:
        super().__init__(f"{field_path}: {reason}")
        self.field_path = field_path
        self.reason = reason


class UnusableSchema(ValueError):
    """A registered schema this product cannot use (it does not parse, or a reference is missing).
    ``reason`` names the schema id. Not the record's fault: a caller treats it as a configuration error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
