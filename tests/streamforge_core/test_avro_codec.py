"""``streamforge_core.avro_codec`` (issue #31): Avro bodies decode to DSL.md's JSON mapping ("Decoded
records") and encode back; a value that does not fit names the field; garbage bodies only ever raise
``DecodeError`` with the byte. Pure logic: bytes written by fastavro itself are the reference."""

from __future__ import annotations

import base64
import io
import json
import random
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from streamforge_core.registered_schema import Reference, RegisteredSchema
from streamforge_core.schema_codecs import DecodeError, SchemaValidation, UnusableSchema, codec_for

_ids = iter(range(1000, 10**9))


def avro(schema: Any, *references: Reference, schema_id: int | None = None) -> RegisteredSchema:
    return RegisteredSchema(
        next(_ids) if schema_id is None else schema_id,
        "AVRO",
        json.dumps(schema),
        tuple(references),
        None,
        None,
    )


def written_by_fastavro(schema: Any, datum: Any) -> bytes:
    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, fastavro.parse_schema(schema), datum)
    return stream.getvalue()


def _logical(base: Any, logical: str, **extra: Any) -> dict[str, Any]:
    return {"type": base, "logicalType": logical, **extra}


LOGICAL_CASES = [
    # (schema, what fastavro is given to write, the JSON mapping)
    (
        _logical("long", "timestamp-millis"),
        datetime(2021, 7, 21, 6, 0, 0, 250_000, tzinfo=UTC),
        "2021-07-21T06:00:00.250Z",
    ),
    (_logical("long", "timestamp-millis"), datetime(2021, 7, 21, 6, tzinfo=UTC), "2021-07-21T06:00:00Z"),
    (
        _logical("long", "timestamp-micros"),
        datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        "1969-12-31T23:59:59.999999Z",
    ),
    (
        _logical("long", "local-timestamp-millis"),
        datetime(2021, 7, 21, 6, 0, 0, 5000),
        "2021-07-21T06:00:00.005",
    ),
    (
        _logical("long", "local-timestamp-micros"),
        datetime(2021, 7, 21, 6, 0, 0, 1),
        "2021-07-21T06:00:00.000001",
    ),
    (_logical("int", "date"), date(2021, 7, 21), "2021-07-21"),
    (_logical("int", "date"), date(1, 1, 1), "0001-01-01"),
    (_logical("int", "time-millis"), time(6, 0, 0, 123_000), "06:00:00.123"),
    (_logical("long", "time-micros"), time(23, 59, 59, 999_999), "23:59:59.999999"),
    (_logical("long", "time-micros"), time(0, 0), "00:00:00"),
    (_logical("bytes", "decimal", precision=9, scale=2), Decimal("-1234567.50"), "-1234567.50"),
    (_logical("bytes", "decimal", precision=4, scale=4), Decimal("0.0001"), "0.0001"),
    (_logical("bytes", "decimal", precision=5, scale=0), Decimal("12345"), "12345"),
    (
        {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 3},
        Decimal("123456789012345.678"),
        "123456789012345.678",
    ),
    (
        _logical("string", "uuid"),
        uuid.UUID("72408e23-798d-42ca-b0a6-852550994dd9"),
        "72408e23-798d-42ca-b0a6-852550994dd9",
    ),
    ("bytes", b"\x00\xffhi", "AP9oaQ=="),
    ({"type": "fixed", "name": "Hash", "size": 3}, b"abc", "YWJj"),
    ({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}, "GREEN", "GREEN"),
    (["null", "string", "long"], 42, 42),
    (["null", "string", "long"], None, None),
    ("long", -(2**63), -(2**63)),
    ("double", float("nan"), "NaN"),
    ("float", float("-inf"), "-Infinity"),
    ("double", 0.1, 0.1),
    ({"type": "map", "values": "bytes"}, {"k": b"\x01"}, {"k": "AQ=="}),
    (
        {"type": "array", "items": ["null", _logical("int", "date")]},
        [None, date(2000, 2, 29)],
        [None, "2000-02-29"],
    ),
    # a logical type fastavro does not know is its underlying type
    (
        {"type": "fixed", "name": "Span", "size": 12, "logicalType": "duration"},
        b"\x01" * 12,
        "AQEBAQEBAQEBAQEB",
    ),
    (_logical("string", "made-up"), "text", "text"),
]


@pytest.mark.parametrize(("schema", "datum", "mapped"), LOGICAL_CASES)
def test_each_type_decodes_from_fastavros_own_bytes_to_the_dsl_mapping_and_encodes_back_to_them(
    schema, datum, mapped
):
    body = written_by_fastavro(schema, datum)
    codec = codec_for(avro(schema))
    assert codec.decode(body) == mapped
    assert json.loads(json.dumps(codec.decode(body))) == mapped  # plain JSON: nothing left to convert
    assert codec.encode(mapped) == body


ACTOR = {
    "type": "record",
    "name": "Actor",
    "namespace": "github",
    "fields": [{"name": "id", "type": "long"}, {"name": "login", "type": "string"}],
}
EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "github",
    "fields": [
        {"name": "actor", "type": "Actor"},  # from the reference, by its name in this namespace
        {"name": "created_at", "type": _logical("long", "timestamp-millis")},
        {"name": "payload", "type": ["null", {"type": "map", "values": ["null", "string", "long"]}]},
        {"name": "amount", "type": _logical("bytes", "decimal", precision=6, scale=2)},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["PUSH", "FORK"]}},
        {"name": "checksum", "type": ["null", "bytes"], "default": None},
    ],
}
EVENT_VALUE = {
    "actor": {"id": 71354125, "login": "octo"},
    "created_at": "2021-07-21T06:00:00Z",
    "payload": {"ref": "main", "size": 3, "note": None},
    "amount": "12.50",
    "tags": ["a", "b"],
    "kind": "PUSH",
    "checksum": "3q2+7w==",
}


def event_codec():
    return codec_for(avro(EVENT, Reference("github.Actor", "actor-value", 1, json.dumps(ACTOR)), schema_id=7))


def test_a_record_with_a_referenced_named_type_round_trips_and_defaults_fill_missing_fields():
    codec = event_codec()
    assert codec.decode(codec.encode(EVENT_VALUE)) == EVENT_VALUE
    sparse = {key: value for key, value in EVENT_VALUE.items() if key not in ("tags", "checksum")}
    assert codec.decode(codec.encode(sparse)) == {**sparse, "tags": [], "checksum": None}
    assert (
        codec_for(avro(EVENT, Reference("github.Actor", "actor-value", 1, json.dumps(ACTOR)), schema_id=7))
        is codec
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"actor": {"id": "abc", "login": "octo"}}, '$.actor.id: expected long, got "abc"'),
        ({"actor": {"id": True, "login": "octo"}}, "$.actor.id: expected long, got true"),
        (
            {"actor": {"id": 2**63, "login": "octo"}},
            f"$.actor.id: {2**63} is out of the range of long ({-(2**63)} to {2**63 - 1})",
        ),
        ({"actor": {"login": "octo"}}, "$.actor.id: missing (the field has no default)"),
        (
            {"actor": {"id": 1, "login": "octo", "extra": 1}},
            "$.actor.extra: is not a field of record github.Actor",
        ),
        ({"payload": {"size": 1.5}}, "$.payload.size: expected union [null, string, long], got 1.5"),
        ({"payload": {"odd key": []}}, '$.payload["odd key"]: expected union [null, string, long], got []'),
        ({"amount": "12.345"}, "$.amount: 12.345 has more than the 2 decimal places of the schema"),
        ({"amount": "12345.6"}, "$.amount: 12345.6 has more than the 6 digits of the schema"),
        ({"amount": "twelve"}, '$.amount: expected decimal text like "12.50", got "twelve"'),
        (
            {"created_at": "2021-07-21T06:00:00"},
            '$.created_at: a timestamp-millis needs a time zone (Z or +hh:mm), got "2021-07-21T06:00:00"',
        ),
        (
            {"created_at": "2021-07-21T06:00:00.0001Z"},
            '$.created_at: timestamp-millis holds whole milliseconds, got "2021-07-21T06:00:00.0001Z"',
        ),
        (
            {"created_at": "yesterday"},
            '$.created_at: expected timestamp-millis as ISO-8601 text, got "yesterday"',
        ),
        ({"tags": ["a", 1]}, "$.tags[1]: expected string, got 1"),
        ({"kind": "PULL"}, '$.kind: expected one of the symbols PUSH, FORK of enum github.Kind, got "PULL"'),
        ({"checksum": "not base64!"}, '$.checksum: expected union [null, bytes], got "not base64!"'),
    ],
)
def test_a_value_that_does_not_fit_is_refused_naming_the_field_and_why(change, message):
    with pytest.raises(SchemaValidation) as caught:
        event_codec().encode({**EVENT_VALUE, **change})
    assert str(caught.value) == message
    assert caught.value.field_path == message.split(": ", 1)[0]


def test_encoding_is_exact_where_the_text_allows_and_refuses_lossy_or_non_canonical_input():
    codec = codec_for(avro({"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}))
    assert codec.decode(codec.encode("1.5")) == "1.50"
    assert codec.decode(codec.encode("1.500")) == "1.50"  # trailing zeros lose nothing
    assert codec.decode(codec.encode(3)) == "3.00"
    bytes_codec = codec_for(avro("bytes"))
    with pytest.raises(SchemaValidation, match="not canonical base64"):
        bytes_codec.encode("QR==")  # decodes to the same byte as "QQ==": the text would not come back
    # a union takes the first branch the value fits: valid base64 is the bytes, other text the string
    union = codec_for(avro(["null", "bytes", "string"]))
    assert union.encode("QQ==") == b"\x02\x02A"
    assert union.encode("QR==") == b"\x04\x08QR=="


@st.composite
def schema_and_value(draw: st.DrawFn) -> tuple[Any, Any]:
    names = iter(range(10**6))
    schema = draw(_schemas(names, depth=0))
    return schema, draw(_values(schema))


def _schemas(names: Any, depth: int) -> st.SearchStrategy[Any]:
    leaves = st.sampled_from(
        [
            "null",
            "boolean",
            "int",
            "long",
            "float",
            "double",
            "string",
            "bytes",
            _logical("long", "timestamp-millis"),
            _logical("long", "timestamp-micros"),
            _logical("long", "local-timestamp-millis"),
            _logical("int", "date"),
            _logical("int", "time-millis"),
            _logical("long", "time-micros"),
            _logical("string", "uuid"),
            _logical("bytes", "decimal", precision=12, scale=3),
            "fixed",
            "enum",
        ]
    ).map(lambda leaf: _named(leaf, names))
    if depth >= 3:
        return leaves
    inner = st.deferred(lambda: _schemas(names, depth + 1))
    return st.one_of(
        leaves,
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        st.builds(lambda values: {"type": "map", "values": values}, inner),
        st.lists(inner, min_size=0, max_size=4).map(
            lambda types: {
                "type": "record",
                "name": f"R{next(names)}",
                "fields": [{"name": f"f{index}", "type": kind} for index, kind in enumerate(types)],
            }
        ),
        st.sampled_from(["boolean", "long", "double", "string", "bytes", _logical("int", "date")]).map(
            lambda other: ["null", other]
        ),
    )


def _named(leaf: Any, names: Any) -> Any:
    if leaf == "fixed":
        return {"type": "fixed", "name": f"F{next(names)}", "size": 4}
    if leaf == "enum":
        return {"type": "enum", "name": f"E{next(names)}", "symbols": ["A", "B", "C"]}
    return leaf


def _text_of(moment: datetime | time, *, zone: bool) -> str:
    fraction = moment.microsecond
    spec = "seconds" if fraction == 0 else ("milliseconds" if fraction % 1000 == 0 else "microseconds")
    return moment.isoformat(timespec=spec) + ("Z" if zone else "")


_NON_FINITE = st.sampled_from(["NaN", "Infinity", "-Infinity"])
_MOMENTS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30))
_B64 = st.binary(max_size=12).map(lambda data: base64.b64encode(data).decode("ascii"))


def _values(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(*[_values(branch) for branch in schema])
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = None if isinstance(schema, str) else schema.get("logicalType")
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        moments = _MOMENTS.map(lambda moment: moment.replace(microsecond=moment.microsecond // 1000 * 1000))
        return moments.map(lambda moment: _text_of(moment, zone=logical == "timestamp-millis"))
    if logical == "timestamp-micros":
        return _MOMENTS.map(lambda moment: _text_of(moment, zone=True))
    if logical == "date":
        return st.dates().map(date.isoformat)
    if logical == "time-millis":
        return st.times().map(
            lambda clock: _text_of(clock.replace(microsecond=clock.microsecond // 1000 * 1000), zone=False)
        )
    if logical == "time-micros":
        return st.times().map(lambda clock: _text_of(clock, zone=False))
    if logical == "uuid":
        return st.uuids().map(str)
    if logical == "decimal":
        return st.integers(-(10**12) + 1, 10**12 - 1).map(
            lambda unscaled: format(Decimal(unscaled).scaleb(-3), "f")
        )
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "int":
        return st.integers(-(2**31), 2**31 - 1)
    if kind == "long":
        return st.integers(-(2**63), 2**63 - 1)
    if kind == "float":
        return st.floats(width=32, allow_nan=False, allow_infinity=False) | _NON_FINITE
    if kind == "double":
        return st.floats(allow_nan=False, allow_infinity=False) | _NON_FINITE
    if kind == "string":
        return st.text(max_size=12)
    if kind == "bytes":
        return _B64
    if kind == "fixed":
        return st.binary(min_size=4, max_size=4).map(lambda data: base64.b64encode(data).decode("ascii"))
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(_values(schema["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=5), _values(schema["values"]), max_size=3)
    return st.fixed_dictionaries({field["name"]: _values(field["type"]) for field in schema["fields"]})


@settings(max_examples=150)
@given(schema_and_value())
def test_any_value_of_any_schema_decodes_back_to_itself_and_reads_with_fastavro(case):
    schema, value = case
    try:
        codec = codec_for(avro(schema))
    except UnusableSchema as exc:  # an array of zero-byte items (refused, see the test on unusable schemas)
        if "an array whose items take no bytes" not in exc.reason:
            raise
        reject()
    body = codec.encode(value)
    assert codec.decode(body) == value
    fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(schema), None)  # plain Avro to others


def test_garbage_and_damaged_bodies_only_ever_raise_decode_error_naming_schema_and_byte():
    codec = event_codec()
    good = codec.encode(EVENT_VALUE)
    rnd = random.Random(31)
    reasons: set[str] = set()
    for attempt in range(4000):
        if attempt % 2:
            body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(64)))
        else:
            damaged = bytearray(good)
            for _ in range(rnd.randrange(1, 4)):
                damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
            body = bytes(damaged[: rnd.randrange(len(damaged) + 1)])
        failure = None
        try:
            codec.decode(body)
        except DecodeError as exc:  # anything else fails the test
            failure = exc
        if failure is not None:
            assert failure.reason.startswith(f"not Avro for schema 7 at byte {failure.position}: ")
            assert failure.position is not None
            assert 5 <= failure.position <= 5 + len(body)
            reasons.add(failure.reason.split(": ", 1)[1])
    assert "the body ends before the record does" in reasons
    assert "a string is not valid UTF-8" in reasons
    with pytest.raises(DecodeError) as caught:
        codec.decode(good + b"\x00\x00")
    assert (
        caught.value.reason == f"not Avro for schema 7 at byte {5 + len(good)}: 2 bytes left after the record"
    )


def test_a_schema_that_is_not_avro_or_misses_a_reference_is_unusable():
    with pytest.raises(UnusableSchema, match="schema 3 is not usable Avro"):
        codec_for(
            RegisteredSchema(
                3,
                "AVRO",
                '{"type": "record", "name": "E", "fields": [{"name": "a", "type": "Nope"}]}',
                (),
                None,
                None,
            )
        )
    empty = {"type": "record", "name": "Empty", "fields": [{"name": "nothing", "type": "null"}]}
    for items in ("null", empty, {"type": "fixed", "name": "None0", "size": 0}):
        with pytest.raises(UnusableSchema, match="an array whose items take no bytes"):
            codec_for(avro({"type": "map", "values": {"type": "array", "items": items}}))
    # the reason: with such a schema fastavro spends minutes on a 6-byte body claiming 2**31 - 1 items
    assert codec_for(avro({"type": "array", "items": ["null", "long"]})).decode(b"\x02\x00\x00") == [None]
    with pytest.raises(UnusableSchema, match="schema 4 is not usable Avro"):
        codec_for(RegisteredSchema(4, "AVRO", "{not json", (), None, None))
    with pytest.raises(UnusableSchema, match="unknown type 'XML'"):
        codec_for(RegisteredSchema(5, "XML", "<a/>", (), None, None))


def test_a_recursive_type_and_a_union_of_converted_branches_convert_at_every_depth():
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "data", "type": ["null", "bytes", {"type": "long", "logicalType": "timestamp-micros"}]},
            {"name": "next", "type": ["null", "Node"]},
        ],
    }
    chain = {
        "data": "AQI=",
        "next": {"data": "2021-07-21T06:00:00.000001Z", "next": {"data": None, "next": None}},
    }
    datum = {
        "data": b"\x01\x02",
        "next": {"data": datetime(2021, 7, 21, 6, 0, 0, 1, tzinfo=UTC), "next": {"data": None, "next": None}},
    }
    codec = codec_for(avro(node))
    assert codec.decode(written_by_fastavro(node, datum)) == chain
    assert codec.decode(codec.encode(chain)) == chain
