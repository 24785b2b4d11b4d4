"""The Confluent wire format: how a record value names the registry schema it was written with.

Source: Confluent Schema Registry documentation, "Formats, Serializers, and Deserializers" > "Wire format"
(docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format):

========  ==============  ==================================================================================
bytes     field           meaning
========  ==============  ==================================================================================
0         magic byte      the serialization format version, always ``0``
1-4       schema id       the id the registry gave the schema, 4 bytes big-endian
5-...     (Protobuf only) the message indexes: which message of the ``.proto`` file the body is, as a path
                          of indexes from the file's top-level messages into nested ones; a zig-zag varint
                          count then that many zig-zag varints; the common ``[0]`` (the first top-level
                          message) is written as the single byte ``0`` (a count of 0)
...       body            the record in the schema's format (Avro binary, Protobuf binary, JSON text)
========  ==============  ==================================================================================

Varints are Protobuf's base-128 varints (least significant group first, high bit set on every byte but the
last) and zig-zag maps signed to unsigned (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...), as Confluent's Java and
Python serializers write them. Pure logic: the driver, the DLQ console and the topic browser all use it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The one version of the format there is (byte 0 of every framed value).
MAGIC_BYTE = 0
#: Magic byte and schema id: the bytes before a body (or before Protobuf's message indexes).
HEADER_SIZE = 5
#: The largest schema id the 4 bytes hold (registries assign positive ids; Java reads them signed).
MAX_SCHEMA_ID = 2**31 - 1
#: A 64-bit varint never takes more than 10 bytes; a longer run is garbage, not a bigger number.
_MAX_VARINT_BYTES = 10
#: More message indexes than any real ``.proto`` nests (a count beyond it is garbage, not a deep path).
MAX_MESSAGE_INDEXES = 64


class WireFormatError(ValueError):
    """A value that is not in the Confluent wire format. ``reason`` says what is wrong and at which byte
    (0-based offset in the value), e.g. ``"no magic byte 0 at byte 0 (found 0x7b): not Confluent-framed"``.
    A pipeline dead-letters such a record as ``MessageDeserialization`` with the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Framed:
    """A framed value taken apart: ``schema_id`` (registry id), ``message_indexes`` (Protobuf's path to the
    message, ``()`` for Avro and JSON Schema, ``(0,)`` for the first top-level message) and ``body`` (the
    record's bytes in the schema's format)."""

    schema_id: int
    message_indexes: tuple[int, ...]
    body: bytes


def unframe(value: bytes, *, protobuf: bool) -> Framed:
    """Split a Confluent-framed record value into schema id, message indexes and body.

    ``protobuf`` says whether message indexes follow the schema id (they do only for Protobuf schemas: the
    reader knows the format from the pipeline's ``source.format``). The body may be empty (an Avro record
    with no fields is zero bytes). Raises ``WireFormatError`` naming the byte for a value that is empty,
    lacks the magic byte, has fewer than 4 schema-id bytes, or whose message indexes are cut short,
    overlong or negative.
    """
    if not value:
        raise WireFormatError("value is empty: not Confluent-framed")
    if value[0] != MAGIC_BYTE:
        raise WireFormatError(f"no magic byte 0 at byte 0 (found 0x{value[0]:02x}): not Confluent-framed")
    if len(value) < HEADER_SIZE:
        raise WireFormatError(f"4-byte schema id cut short at byte {len(value)}")
    schema_id = int.from_bytes(value[1:HEADER_SIZE], "big")
    if schema_id > MAX_SCHEMA_ID:
        raise WireFormatError(f"schema id {schema_id} at byte 1 is beyond the 31-bit ids registries assign")
    if not protobuf:
        return Framed(schema_id, (), bytes(value[HEADER_SIZE:]))
    count, position = _read_zigzag(value, HEADER_SIZE, "message index count")
    if count == 0:
        return Framed(schema_id, (0,), bytes(value[position:]))
    if count < 0 or count > MAX_MESSAGE_INDEXES:
        raise WireFormatError(
            f"message index count {count} at byte {HEADER_SIZE} is not between 0 and {MAX_MESSAGE_INDEXES}"
        )
    indexes: list[int] = []
    for _ in range(count):
        start = position
        index, position = _read_zigzag(value, position, "message index")
        if index < 0:
            raise WireFormatError(f"message index {index} at byte {start} is negative")
        indexes.append(index)
    return Framed(schema_id, tuple(indexes), bytes(value[position:]))


def frame(schema_id: int, body: bytes, message_indexes: tuple[int, ...] | list[int] | None = None) -> bytes:
    """The Confluent-framed value: magic byte, ``schema_id`` (4 bytes big-endian), then for Protobuf
    (``message_indexes`` not None) the indexes, then ``body``. ``[0]`` is written as the single byte 0, as
    Confluent's serializers do; ``()`` is refused (a Protobuf value always names a message). Raises
    ``ValueError`` for a schema id outside 0..2**31-1 or a negative index."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} is not between 0 and {MAX_SCHEMA_ID}")
    head = bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big")
    if message_indexes is None:
        return head + body
    indexes = tuple(message_indexes)
    if not indexes:
        raise ValueError("a Protobuf value names its message: message_indexes must not be empty")
    if any(index < 0 for index in indexes):
        raise ValueError(f"message indexes must not be negative: {list(indexes)}")
    if indexes == (0,):
        return head + b"\x00" + body
    encoded = _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(index) for index in indexes)
    return head + encoded + body


def _read_zigzag(value: bytes, position: int, what: str) -> tuple[int, int]:
    """Read one zig-zag varint at ``position``: (the signed number, the position after it)."""
    start = position
    result = 0
    shift = 0
    while True:
        if position >= len(value):
            raise WireFormatError(f"{what} varint runs past the end at byte {position}")
        if position - start >= _MAX_VARINT_BYTES:
            raise WireFormatError(f"{what} varint at byte {start} is longer than {_MAX_VARINT_BYTES} bytes")
        byte = value[position]
        result |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), position


def _zigzag_varint(number: int) -> bytes:
    """``number`` (a non-negative index or count) as a zig-zag varint."""
    unsigned = (number << 1) ^ (number >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)
