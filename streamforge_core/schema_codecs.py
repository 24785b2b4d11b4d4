"""Record bodies in a registry schema's format <-> the JSON the DSL and the console work on.

One interface for the three formats a schema registry holds (``SchemaCodec``), one dispatch
(``codec_for``), and the two errors a record can earn: ``DecodeError`` (the body is not what its schema
says: the record is dead-lettered as ``MessageDeserialization``) and ``SchemaValidation`` (a JSON value
does not fit the schema it must be written with: dead-lettered as ``SchemaValidation``, or a console fix
refused, naming the field). The JSON mapping is ``../shared/DSL.md`` "Decoded records".

One module per format behind this one: ``avro_codec`` (fastavro), ``protobuf_codec`` (the Protobuf part of
issue #31) and the JSON Schema codec here (small: the body is JSON already). The formats' libraries are
imported only when a schema of that format is first used, so a JSON-only pipeline never loads them.
Pure logic, no Django: the Spark driver and the console both use it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Protocol

from streamforge_core.codec_errors import JSON, DecodeError, SchemaValidation, UnusableSchema
from streamforge_core.registered_schema import RegisteredSchema
from streamforge_core.wire_format import HEADER_SIZE

__all__ = [
    "JSON",
    "DecodeError",
    "JsonSchemaCodec",
    "SchemaCodec",
    "SchemaValidation",
    "UnusableSchema",
    "codec_for",
]


class SchemaCodec(Protocol):
    """Decodes and encodes record bodies (the bytes after the wire-format header) of one schema."""

    def decode(self, body: bytes) -> JSON:
        """The body as a JSON-compatible value (DSL.md's mapping). Raises ``DecodeError``."""
        ...

    def encode(self, value: JSON) -> bytes:
        """A JSON-compatible value as a body in the schema's format. Raises ``SchemaValidation``."""
        ...


def codec_for(registered: RegisteredSchema, message_indexes: tuple[int, ...] = ()) -> SchemaCodec:
    """The codec of ``registered`` (for Protobuf, of the message ``message_indexes`` names, as
    ``wire_format.unframe`` returns them). Codecs are cached (1,024 at most, least recently used out): a
    schema is parsed once per process however many records use it; the key is the whole
    ``RegisteredSchema`` (id, type, text and references), so two registries that give one id to different
    schemas never share a codec. Raises ``UnusableSchema`` for a schema that does not parse or whose type
    is unknown."""
    return _codec_for(registered, tuple(message_indexes))


@lru_cache(maxsize=1024)
def _codec_for(registered: RegisteredSchema, message_indexes: tuple[int, ...]) -> SchemaCodec:
    if registered.schema_type == "AVRO":
        from streamforge_core.avro_codec import AvroCodec

        return AvroCodec(registered)
    if registered.schema_type == "JSON":
        return JsonSchemaCodec(registered)
    if registered.schema_type == "PROTOBUF":
        from streamforge_core import protobuf_codec

        references = {reference.name: reference.schema_str for reference in registered.references}
        codec: SchemaCodec = protobuf_codec.protobuf_codec(
            registered.schema_id, registered.schema_str, references, message_indexes
        )
        return codec
    raise UnusableSchema(f"schema {registered.schema_id} has unknown type {registered.schema_type!r}")


class JsonSchemaCodec:
    """JSON Schema (Confluent's ``JSON`` schema type): the body is UTF-8 JSON text.

    ``decode`` parses it strictly (no ``NaN``/``Infinity``, UTF-8 only), like a ``json`` source; it does
    not validate (the writer did). ``encode`` validates the value with the ``jsonschema`` library, draft
    from the schema's ``$schema`` and draft 7 without one (what Confluent's serializers default to), the
    schema's references registered under their names for ``$ref``; the body is compact JSON text in UTF-8
    (the same bytes a ``json`` destination writes). ``format`` is not asserted (the drafts make it an
    annotation).
    """

    def __init__(self, registered: RegisteredSchema) -> None:
        import jsonschema
        import referencing
        import referencing.jsonschema

        self.schema_id = registered.schema_id
        try:
            schema = json.loads(registered.schema_str)
            references = [(ref.name, json.loads(ref.schema_str)) for ref in registered.references]
        except ValueError as exc:
            raise UnusableSchema(f"schema {self.schema_id} is not JSON: {exc}") from None
        default = jsonschema.Draft7Validator
        validator_class = jsonschema.validators.validator_for(schema, default=default)
        try:
            validator_class.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise UnusableSchema(
                f"schema {self.schema_id} is not a valid JSON Schema: {exc.message}"
            ) from None
        spec = referencing.jsonschema.specification_with(
            validator_class.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT7
        )
        registry: referencing.Registry[Any] = referencing.Registry().with_resources(
            (name, referencing.Resource.from_contents(contents, default_specification=spec))
            for name, contents in references
        )
        self._validator = validator_class(schema, registry=registry)

    def decode(self, body: bytes) -> JSON:
        """The body parsed as JSON. Raises ``DecodeError`` ("invalid UTF-8 at byte N", "invalid JSON: ...",
        bytes counted from the start of the framed value)."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            position = HEADER_SIZE + exc.start
            raise DecodeError(f"invalid UTF-8 at byte {position}", position) from None
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise DecodeError("invalid JSON: nested too deeply") from None
        except json.JSONDecodeError as exc:
            position = HEADER_SIZE + len(text[: exc.pos].encode("utf-8"))
            raise DecodeError(f"invalid JSON at byte {position}: {exc.msg}", position) from None
        except ValueError as exc:  # NaN, Infinity: refused after the parser accepted them, no byte at hand
            raise DecodeError(f"invalid JSON: {exc}") from None

    def encode(self, value: JSON) -> bytes:
        """``value`` validated against the schema and written as compact UTF-8 JSON. Raises
        ``SchemaValidation`` naming the path of the most relevant failure (``jsonschema.exceptions.
        best_match``: the deepest error of the first failing branch) and its message."""
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(value))
        if error is not None:
            raise SchemaValidation(error.json_path, error.message)
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            return text.encode("utf-8")
        except (ValueError, TypeError) as exc:
            raise SchemaValidation("$", f"not JSON: {exc}") from None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
