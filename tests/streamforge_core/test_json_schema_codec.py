"""``streamforge_core.schema_codecs.JsonSchemaCodec`` (issue #31): JSON Schema bodies are JSON text; a value
to write is validated with the ``jsonschema`` library, the draft chosen by ``$schema`` (draft 7 without),
``$ref`` to a schema reference resolved, the first failing field named. Pure logic."""

from __future__ import annotations

import json

import pytest

from streamforge_core.registered_schema import Reference, RegisteredSchema
from streamforge_core.schema_codecs import DecodeError, SchemaValidation, UnusableSchema, codec_for

ACTOR = {
    "$id": "https://example.com/actor.json",
    "type": "object",
    "properties": {"id": {"type": "integer"}, "login": {"type": "string"}},
    "required": ["id", "login"],
}
EVENT = {
    "type": "object",
    "properties": {
        "actor": {"$ref": "https://example.com/actor.json"},
        "commits": {"type": "array", "items": {"type": "object", "properties": {"sha": {"type": "string"}}}},
    },
    "required": ["actor"],
}


def event_codec():
    reference = Reference("https://example.com/actor.json", "actor-value", 1, json.dumps(ACTOR))
    return codec_for(RegisteredSchema(9, "JSON", json.dumps(EVENT), (reference,), "event-value", 1))


def test_a_valid_value_is_written_as_compact_utf8_json_and_reads_back():
    value = {"actor": {"id": 1, "login": "zoë"}, "commits": [{"sha": "abc"}]}
    body = event_codec().encode(value)
    assert body == '{"actor":{"id":1,"login":"zoë"},"commits":[{"sha":"abc"}]}'.encode()
    assert event_codec().decode(body) == value


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"actor": {"id": "abc", "login": "x"}}, "$.actor.id", "'abc' is not of type 'integer'"),
        ({"actor": {"id": 1}}, "$.actor", "'login' is a required property"),
        (
            {"actor": {"id": 1, "login": "x"}, "commits": [{"sha": "a"}, {"sha": 5}]},
            "$.commits[1].sha",
            "5 is not of type 'string'",
        ),
        ({}, "$", "'actor' is a required property"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_naming_the_field(value, path, reason):
    with pytest.raises(SchemaValidation) as caught:
        event_codec().encode(value)
    assert (caught.value.field_path, caught.value.reason) == (path, reason)


def test_the_draft_comes_from_dollar_schema_and_is_draft_7_without_it():
    tuple_2020 = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "prefixItems": [{"type": "string"}],
    }
    codec_2020 = codec_for(RegisteredSchema(10, "JSON", json.dumps(tuple_2020), (), None, None))
    with pytest.raises(SchemaValidation, match=r"^\$\[0\]: 1 is not of type 'string'"):
        codec_2020.encode([1])
    draft7 = {"prefixItems": [{"type": "string"}]}  # not a draft-7 keyword: ignored
    assert codec_for(RegisteredSchema(11, "JSON", json.dumps(draft7), (), None, None)).encode([1]) == b"[1]"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"a": \xff}', "invalid UTF-8 at byte 11"),
        (b'{"a": NaN}', "invalid JSON: NaN is not JSON"),
        (b'{"a": 1', "invalid JSON at byte 12: Expecting ',' delimiter"),
        (b"", "invalid JSON at byte 5: Expecting value"),
    ],
)
def test_a_body_that_is_not_json_is_a_decode_error_naming_the_byte_of_the_framed_value(body, reason):
    with pytest.raises(DecodeError) as caught:
        event_codec().decode(body)
    assert caught.value.reason == reason


def test_a_schema_that_is_not_a_json_schema_is_unusable():
    with pytest.raises(UnusableSchema, match="schema 12 is not a valid JSON Schema"):
        codec_for(RegisteredSchema(12, "JSON", '{"type": 5}', (), None, None))
