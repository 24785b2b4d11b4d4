"""``streamforge_core.wire_format`` (issue #31): the Confluent framing, byte for byte as Confluent's
serializers write it, and every way a value can fail to be framed, with the byte to blame. Pure logic."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamforge_core.wire_format import Framed, WireFormatError, frame, unframe


def test_an_avro_or_json_schema_value_is_magic_byte_schema_id_big_endian_then_body():
    value = frame(7, b"\x02hi")
    assert value == b"\x00\x00\x00\x00\x07\x02hi"
    assert unframe(value, protobuf=False) == Framed(7, (), b"\x02hi")
    assert unframe(frame(0x01020304, b""), protobuf=False) == Framed(0x01020304, (), b"")


def test_protobuf_message_indexes_are_a_zigzag_count_then_zigzag_indexes_and_first_message_is_one_zero():
    # Confluent's example: [1, 2] is written as count 2, then 1 and 2, each zig-zag (2 -> 4, 1 -> 2, 2 -> 4).
    assert frame(1, b"B", [1, 2]) == b"\x00\x00\x00\x00\x01" + b"\x04\x02\x04" + b"B"
    assert frame(1, b"B", [0]) == b"\x00\x00\x00\x00\x01\x00B"
    assert unframe(b"\x00\x00\x00\x00\x01\x00B", protobuf=True) == Framed(1, (0,), b"B")
    assert unframe(b"\x00\x00\x00\x00\x01\x04\x02\x04B", protobuf=True) == Framed(1, (1, 2), b"B")
    # the long form of [0] (count 1, index 0) reads the same as the short one
    assert unframe(b"\x00\x00\x00\x00\x01\x02\x00B", protobuf=True) == Framed(1, (0,), b"B")
    # a multi-byte varint: index 100 is zig-zag 200 = 0xc8 0x01
    assert frame(1, b"", [100]) == b"\x00\x00\x00\x00\x01\x02\xc8\x01"


@given(
    schema_id=st.integers(0, 2**31 - 1),
    indexes=st.lists(st.integers(0, 2**40), min_size=1, max_size=8) | st.none(),
    body=st.binary(max_size=40),
)
def test_frame_then_unframe_gives_back_what_went_in(schema_id, indexes, body):
    framed = unframe(frame(schema_id, body, indexes), protobuf=indexes is not None)
    assert framed == Framed(schema_id, tuple(indexes) if indexes is not None else (), body)


@pytest.mark.parametrize(
    ("value", "protobuf", "reason"),
    [
        (b'{"id": 1}', False, "no magic byte 0 at byte 0 (found 0x7b): not Confluent-framed"),
        (b"", False, "value is empty: not Confluent-framed"),
        (b"\x00\x00\x00", False, "4-byte schema id cut short at byte 3"),
        (
            b"\x00\x80\x00\x00\x01",
            False,
            "schema id 2147483649 at byte 1 is beyond the 31-bit ids registries assign",
        ),
        (b"\x00\x00\x00\x00\x01", True, "message index count varint runs past the end at byte 5"),
        (b"\x00\x00\x00\x00\x01\x04\x02", True, "message index varint runs past the end at byte 7"),
        (b"\x00\x00\x00\x00\x01\x02\x80", True, "message index varint runs past the end at byte 7"),
        (b"\x00\x00\x00\x00\x01\x01", True, "message index count -1 at byte 5 is not between 0 and 64"),
        (b"\x00\x00\x00\x00\x01\x02\x03", True, "message index -2 at byte 6 is negative"),
        (
            b"\x00\x00\x00\x00\x01" + b"\xff" * 11,
            True,
            "message index count varint at byte 5 is longer than 10 bytes",
        ),
    ],
)
def test_a_value_that_is_not_framed_is_refused_with_the_reason_and_the_byte(value, protobuf, reason):
    with pytest.raises(WireFormatError) as caught:
        unframe(value, protobuf=protobuf)
    assert caught.value.reason == reason


def test_random_bytes_only_ever_raise_wire_format_error():
    rnd = random.Random(31)
    for _ in range(5000):
        value = bytes([0]) + bytes(rnd.randrange(256) for _ in range(rnd.randrange(12)))
        with contextlib.suppress(WireFormatError):  # anything else fails the test
            unframe(value, protobuf=rnd.random() < 0.7)


def test_frame_refuses_what_it_cannot_write():
    for schema_id, indexes in [(-1, None), (2**31, None), (1, []), (1, [-1])]:
        with pytest.raises(ValueError, match=r"schema id|message"):
            frame(schema_id, b"", indexes)
