"""The REST API's JSON parser: JSON, with every string checked to be encodable as UTF-8.

JSON can carry a lone UTF-16 surrogate (``"\\ud800"``) and ``json.loads`` accepts it, but no text the API
takes in may hold one: payloads, header names, reasons, runbooks and topics all become UTF-8 bytes later
(Kafka, the database, hashes), where such a string would fail mid-operation. Checking the parsed body once,
here, covers every field of every endpoint, including free-form JSON (a spec, a payload, a filter), and
answers 400 naming the field (``{"value.a": [...]}``), as serializer errors do.

Nesting is bounded the same way: ``json`` decodes recursively, so a body nested a few thousand levels deep
would raise ``RecursionError`` (a 500) inside the decoder. The raw body is scanned first
(``streamforge_core.json_depth``) and one deeper than ``MAX_JSON_DEPTH`` is a 400 naming the field where
the limit is crossed, before anything is decoded.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser

from streamforge_core.json_depth import TOO_DEEP, nesting_path
from streamforge_core.text import UNENCODABLE, unencodable_path


class Utf8JSONParser(JSONParser):
    """``application/json`` bodies nested at most ``MAX_JSON_DEPTH`` levels whose every string (object keys
    too) can be encoded as UTF-8; anything else is a 400 at the first offending field's dotted path."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        """The decoded JSON; raises ValidationError (400) naming the field nested too deep or holding
        unencodable text, ParseError (400) for a body that is not JSON."""
        body = stream.read()
        deep = nesting_path(body)
        if deep is not None:
            raise ValidationError({deep or "non_field_errors": [TOO_DEEP]})
        data = super().parse(io.BytesIO(body), media_type, parser_context)
        bad = unencodable_path(data)
        if bad is not None:
            raise ValidationError({bad: [UNENCODABLE]})
        return data
