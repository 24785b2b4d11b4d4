"""``streamforge_core.protobuf_codec`` (issue #31): a registry's ``.proto`` text with references compiled at run
time, bodies decoded to DSL.md's JSON mapping ("Decoded records"), JSON encoded back naming the field that
does not conform. Pure logic: the bodies are made by protobuf's own runtime-built message classes."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

import pytest
from google.protobuf import message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from streamforge_core.codec_errors import DecodeError, SchemaValidation, UnusableSchema
from streamforge_core.protobuf_codec import (
    SchemaCompileError,
    compile_schema,
    message_descriptor,
    protobuf_codec,
)

ROOT = Path(__file__).resolve().parent.parent.parent

ACTOR_PROTO = """
syntax = "proto3";
package common;
message Actor { int64 id = 1; string login = 2; }
"""

ORDER_PROTO = """
syntax = "proto3";
package shop;
import "common/actor.proto";
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  enum Status { STATUS_UNSPECIFIED = 0; PAID = 1; SHIPPED = 2; }
  message Line { string sku = 1; uint32 quantity = 2; }
  int64 id = 1;
  uint64 big = 2;
  Status status = 3;
  common.Actor actor = 4;
  repeated Line lines = 5;
  map<string, int64> totals = 6;
  bytes signature = 7;
  oneof payment { string card = 8; string iban = 9; }
  google.protobuf.Timestamp created_at = 10;
  google.protobuf.Int64Value discount = 11;
  google.protobuf.StringValue note = 12;
  optional int32 priority = 13;
  float weight = 14;
  google.protobuf.Duration ttl = 15;
  google.protobuf.Struct extra = 16;
  google.protobuf.Any attachment = 17;
  fixed64 checksum = 18;
  sint64 delta = 19;
  map<int32, Line> by_slot = 20;
  repeated string tags = 21;
}

message Refund {
  message Reason { string text = 1; }
  int64 order_id = 1;
  Reason reason = 2;
}
"""

LEGACY_PROTO = """
syntax = "proto2";
package legacy;
message Ping {
  enum Kind { ECHO = 1; TRACE = 2; }
  required int64 id = 1;
  optional Kind kind = 2 [default = TRACE];
  optional int32 hops = 3 [default = 5];
  repeated sint32 rtts = 4 [packed = true];
}
"""

REFS = {"common/actor.proto": ACTOR_PROTO}
_ids = iter(range(9000, 10000))


def codec(proto=ORDER_PROTO, refs=REFS, indexes=()):
    """A codec under a schema id no other test uses."""
    return protobuf_codec(next(_ids), proto, refs, indexes)


def runtime_order():
    """A shop.Order filled through protobuf's own API on a runtime-built class, and its class's pool."""
    pool = compile_schema(ORDER_PROTO, REFS)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    refund_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Refund"))
    order = cls()
    order.id = 2**62 + 1  # beyond 2^53: a float would lose it
    order.big = 2**64 - 1
    order.status = 2
    order.actor.id = 9_007_199_254_740_993
    order.actor.login = "octocat"
    order.lines.add(sku="A-1", quantity=3)
    order.lines.add(sku="B-2")
    order.totals["eur"] = -(2**63)
    order.signature = b"\x00\xffsig"
    order.iban = "DE89"
    order.created_at.seconds = 1626847200
    order.created_at.nanos = 250_000_000
    order.discount.value = 2**60
    order.weight = 0.1
    order.ttl.seconds = -1
    order.ttl.nanos = -500_000_000
    order.extra.update({"source": "web", "score": 1.5, "flags": [True, None], "nested": {"a": "b"}})
    order.attachment.Pack(refund_cls(order_id=7, reason={"text": "late"}))
    order.checksum = 2**64 - 2
    order.by_slot[4].sku = "C-3"
    return order


def test_a_runtime_built_message_decodes_to_the_dsl_json_mapping():
    order = runtime_order()
    value = codec().decode(order.SerializeToString())
    assert value == {
        "id": 2**62 + 1,
        "big": 2**64 - 1,
        "status": "SHIPPED",
        "actor": {"id": 9_007_199_254_740_993, "login": "octocat"},
        "lines": [{"sku": "A-1", "quantity": 3}, {"sku": "B-2", "quantity": 0}],
        "totals": {"eur": -(2**63)},
        "signature": "AP9zaWc=",
        "iban": "DE89",
        "created_at": "2021-07-21T06:00:00.250Z",
        "discount": 2**60,
        "weight": 0.1,
        "ttl": "-1.500s",
        "extra": {"source": "web", "score": 1.5, "flags": [True, None], "nested": {"a": "b"}},
        "attachment": {"@type": "type.googleapis.com/shop.Refund", "order_id": 7, "reason": {"text": "late"}},
        "checksum": 2**64 - 2,
        "delta": 0,
        "by_slot": {"4": {"sku": "C-3", "quantity": 0}},
        "tags": [],
    }
    # Exact integers (numbers, not protobuf JSON's strings), the field names as in the .proto, valid JSON.
    assert type(value["id"]) is int
    assert "created_at" in value
    assert "createdAt" not in value
    json.dumps(value, allow_nan=False)
    # Fields with presence appear only when set: the other oneof member, the unset wrapper, proto3 optional.
    assert not {"card", "note", "priority"} & set(value)


def test_unset_proto3_scalars_are_their_defaults_so_a_filter_sees_zero():
    value = codec().decode(b"")
    assert value == {
        "id": 0,
        "big": 0,
        "status": "STATUS_UNSPECIFIED",
        "lines": [],
        "totals": {},
        "signature": "",
        "weight": 0.0,
        "checksum": 0,
        "delta": 0,
        "by_slot": {},
        "tags": [],
    }
    priority_zero = codec().decode(codec().encode({"priority": 0}))
    assert priority_zero["priority"] == 0  # proto3 optional: set to 0 is present, unset is absent


def test_encode_is_the_inverse_and_matches_protobufs_own_bytes():
    order = runtime_order()
    subject = codec()
    value = subject.decode(order.SerializeToString())
    body = subject.encode(value)
    assert body == order.SerializeToString(deterministic=True)
    assert subject.decode(body) == value
    # proto3 JSON's spellings are read too: camelCase names, 64-bit integers as text, URL-safe base64.
    assert subject.decode(subject.encode({"createdAt": "2021-07-21T08:00:00+02:00", "id": "-12"})) == {
        **subject.decode(b""),
        "created_at": "2021-07-21T06:00:00Z",
        "id": -12,
    }
    assert subject.decode(subject.encode({"signature": "AP9zaWc"}))["signature"] == "AP9zaWc="
    # A packed type the schema does not know stays its bytes, both ways.
    unknown = {"@type": "type.googleapis.com/other.Thing", "value": "CAE="}
    assert subject.decode(subject.encode({"attachment": unknown}))["attachment"] == unknown


def test_proto2_presence_defaults_required_and_closed_enums():
    ping = codec(LEGACY_PROTO, {})
    assert ping.decode(ping.encode({"id": 1, "rtts": [-3, 4]})) == {"id": 1, "rtts": [-3, 4]}
    assert ping.decode(ping.encode({"id": 1, "kind": "ECHO", "hops": 5})) == {
        "id": 1,
        "kind": "ECHO",
        "hops": 5,
        "rtts": [],
    }
    with pytest.raises(SchemaValidation) as missing:
        ping.encode({"kind": "ECHO"})
    assert str(missing.value) == "$.id: required field is missing"
    with pytest.raises(
        SchemaValidation, match=r"^\$\.kind: expected legacy\.Ping\.Kind \(ECHO, TRACE\), got 7$"
    ):
        ping.encode({"id": 1, "kind": 7})  # a closed enum takes only its declared numbers
    with pytest.raises(DecodeError, match=r"^not a valid legacy\.Ping \(schema \d+, 2 bytes\): "):
        ping.decode(b"\x10\x01")  # kind set, the required id missing


def test_message_indexes_select_top_level_and_nested_types():
    pool = compile_schema(ORDER_PROTO, REFS)
    assert message_descriptor(pool, ()).full_name == "shop.Order"
    assert message_descriptor(pool, (0,)).full_name == "shop.Order"
    assert message_descriptor(pool, (1,)).full_name == "shop.Refund"
    assert message_descriptor(pool, (1, 0)).full_name == "shop.Refund.Reason"
    # Nested types in declaration order, the synthetic map entries counted (as Confluent's serializers do).
    assert [message_descriptor(pool, (0, i)).name for i in range(3)] == ["Line", "TotalsEntry", "BySlotEntry"]
    with pytest.raises(DecodeError, match=r"^message index \[3\] not in schema 7 \(2 messages\)$"):
        protobuf_codec(7, ORDER_PROTO, REFS, (3,))
    with pytest.raises(
        DecodeError, match=r"^message index \[1, 1\] not in schema 7 \(shop\.Refund has 1 nested message\)$"
    ):
        protobuf_codec(7, ORDER_PROTO, REFS, (1, 1))
    reason = protobuf_codec(7, ORDER_PROTO, REFS, (1, 0))
    assert reason.message_name == "shop.Refund.Reason"
    # One text compiles once whatever id names it: the same pool, so the same message class.
    assert protobuf_codec(12, ORDER_PROTO, REFS, (1, 0)).message_class is reason.message_class
    assert protobuf_codec(7, ORDER_PROTO, REFS, ()).message_name == "shop.Order"
    assert protobuf_codec(7, ORDER_PROTO, REFS, (0,)).message_name == "shop.Order"
    # Another registry's schema 7 is another schema.
    assert protobuf_codec(7, ACTOR_PROTO, {}, ()).message_name == "common.Actor"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"actor": {"id": "abc"}}, '$.actor.id: expected int64, got "abc"'),
        ({"actor": {"nick": "x"}}, "$.actor.nick: unknown field (common.Actor has no field 'nick')"),
        (
            {"lines": [{}, {"quantity": -1}]},
            "$.lines[1].quantity: expected uint32, got -1 (out of range 0..4294967295)",
        ),
        ({"id": 1.5}, "$.id: expected int64, got 1.5"),
        ({"id": True}, "$.id: expected int64, got true"),
        (
            {"status": "LOST"},
            '$.status: expected shop.Order.Status (STATUS_UNSPECIFIED, PAID, SHIPPED), got "LOST"',
        ),
        (
            {"card": "4111", "iban": "DE89"},
            "$.iban: only one field of oneof payment may be set (card is set too)",
        ),
        (
            {"created_at": "yesterday"},
            '$.created_at: expected an RFC 3339 timestamp such as "2021-07-21T06:00:00Z", got "yesterday"',
        ),
        ({"ttl": 5}, '$.ttl: expected a duration such as "3600s" or "-0.5s", got 5'),
        ({"signature": "not base64!"}, '$.signature: expected bytes as base64 text, got "not base64!"'),
        ({"by_slot": {"x": {}}}, '$.by_slot.x: expected int32, got "x"'),
        ({"totals": {"eur": None}}, "$.totals.eur: null is not a map value"),
        ({"tags": "a"}, '$.tags: expected an array, got "a"'),
        ({"weight": 1e39}, "$.weight: expected float, got 1e+39 (out of range)"),
        ({"discount": "x"}, '$.discount: expected int64, got "x"'),
        (
            {"attachment": {"@type": "type.googleapis.com/shop.Refund", "order_id": []}},
            "$.attachment.order_id: expected int64, got []",
        ),
        ([1], "$: expected an object (shop.Order), got [1]"),
    ],
)
def test_a_value_that_does_not_conform_names_the_field(value, message):
    with pytest.raises(SchemaValidation) as refused:
        codec().encode(value)
    assert str(refused.value) == message
    assert refused.value.field_path == message.split(": ")[0]


def test_a_schema_that_does_not_compile_gives_protocs_message():
    with pytest.raises(SchemaCompileError) as refused:
        protobuf_codec(8, 'syntax = "proto3";\nmessage B { int64 x = 1; Unknown y = 2; }\n', {}, ())
    assert str(refused.value) == 'schema 8 does not compile: schema.proto:2:26: "Unknown" is not defined.'
    assert isinstance(refused.value, UnusableSchema)  # the schema's fault, not the record's
    # Remembered, not compiled again, whatever id names it.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "streamforge_core.protobuf_codec.compile_schema", lambda *_: pytest.fail("compiled again")
        )
        with pytest.raises(SchemaCompileError, match=r"^schema 9 does not compile: schema\.proto:2:26"):
            protobuf_codec(9, 'syntax = "proto3";\nmessage B { int64 x = 1; Unknown y = 2; }\n', {}, ())
    with pytest.raises(
        SchemaCompileError,
        match=r'^common/actor\.proto: File not found\.\nschema\.proto:4:1: Import "common/actor\.proto" was not found',
    ):
        compile_schema(ORDER_PROTO, {})
    with pytest.raises(SchemaCompileError, match=r"not a relative \.proto path"):
        compile_schema(ORDER_PROTO, {"../common/actor.proto": ACTOR_PROTO})


def test_garbage_and_truncated_bodies_raise_decode_error_only():
    subject = codec()
    body = runtime_order().SerializeToString()
    reasons = []
    for cut in range(1, len(body)):
        try:
            subject.decode(body[:cut])
        except DecodeError as exc:
            reasons.append(str(exc))
    assert reasons
    assert all(reason.startswith("not a valid shop.Order (schema ") for reason in reasons)
    with pytest.raises(
        DecodeError, match=r"\(schema \d+, 3 bytes\): .*length-delimited field runs past the end at byte 0"
    ) as cut_off:
        subject.decode(b"\x22\x05\x08")  # actor: 5 bytes announced, 1 there
    assert cut_off.value.position == 0
    with pytest.raises(DecodeError, match=r"\(schema \d+, 3 bytes\): "):
        subject.decode(b"\x42\x01\xff")  # card: a string that is not UTF-8
    rng = random.Random(31)
    for _ in range(300):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        with contextlib.suppress(DecodeError):
            json.dumps(subject.decode(bytes(mutated)), allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_decode_or_raise_decode_error(body):
    with contextlib.suppress(DecodeError):
        json.dumps(_FUZZED.decode(body), allow_nan=False)


_FUZZED = protobuf_codec(8999, ORDER_PROTO, REFS, ())


def test_the_demo_github_events_round_trip_unchanged():
    schema = (ROOT / "demo" / "schemas" / "github_event.proto").read_text()
    subject = codec(schema, {})
    lines = (ROOT / "demo" / "data" / "github-events-2021-07-21.ndjson").read_text().splitlines()
    for line in lines:
        event = json.loads(line)
        assert subject.decode(subject.encode(event)) == event
