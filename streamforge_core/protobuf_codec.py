"""Protobuf records of a Schema Registry: a ``.proto`` schema text compiled at run time, bodies decoded to the
JSON the DSL sees (``shared/DSL.md``, "Decoded records") and JSON encoded back. No Django: the Spark driver's
Python workers and the console both use it.

**Compiling.** A registry stores a Protobuf schema as ``.proto`` text and each ``import`` as a reference to
another subject's text (``{import name: text}``). ``compile_schema`` writes them into a private temporary
folder under their import names and runs protoc in-process through ``grpcio-tools`` (``--include_imports
--descriptor_set_out``); the resulting ``FileDescriptorSet`` fills a fresh ``DescriptorPool`` (never the
process's default pool: two versions of one schema declare the same names), from which message classes are
made at run time. Why protoc and not a pure-Python parser such as ``proto-schema-parser``: that parser stops
at a syntax tree, and turning it into descriptors (type resolution across imports and packages, map-entry
types, proto3 ``optional``'s synthetic oneofs, json names, proto2 defaults, editions) would be our own
re-implementation of protoc's semantic checks, where protoc is the reference for proto2, proto3, nested
types, enums, oneof, maps, imports and the well-known types (their ``.proto`` files ship with grpcio-tools).
Cost, measured on this machine: protoc 0.5 ms for a schema with an import and a well-known type (20 ms for
the first call of a process), the pure-Python parser 20-100 ms for the same text and no descriptors; a
subprocess protoc 400 ms. It is paid once per schema text (``protobuf_codec`` caches by content). A schema
that does not compile raises ``SchemaCompileError`` with protoc's own messages (``schema.proto:2:26: "Unknown" is not
defined.``), collected in-process (nothing is written to standard error).

**Message indexes.** The Confluent wire format puts, between the schema id and the body, the list of
message indexes that selects the message type: the first index into the file's top-level messages, each
further one into the previous message's nested types (in declaration order, the synthetic map-entry types
included, as Confluent's serializers count them); ``[]`` (written as the single byte 0) means ``[0]``, the
first top-level message. Source: Confluent's "Formats, Serializers, and Deserializers", section "Wire
format" (docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format).
Reading the varints is the wire-format module's job; this module takes the decoded tuple.

**The JSON mapping** (decode; encode is its inverse):

- messages are objects keyed by the field names as written in the ``.proto`` (``created_at``, not protobuf
  JSON's lowerCamelCase ``createdAt``), so DSL paths match the schema; encode also accepts the camelCase
  json names;
- fields without presence (proto3 scalars, enums, repeated fields and maps not marked ``optional``) are
  always present, with their default when unset (``0``, ``""``, ``false``, the enum's first name, ``[]``,
  ``{}``): proto3 cannot tell "unset" from "default" on the wire, and a DSL filter ``/status,==,0`` then sees
  the 0 the producer meant. Fields with presence (messages, oneof members, proto2 fields, proto3
  ``optional``) appear only when set, so ``EXISTS:`` tells them apart;
- integers of every width (int64, uint64, fixed64 ... included) are JSON numbers, exact beyond 2^53 (Python
  ints; protobuf's own JSON writes 64-bit ones as strings); float and double are numbers (a float as the
  shortest text that reads back to the same 32-bit value), NaN and the infinities as the texts ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"`` (as proto3 JSON; JSON has no such numbers);
- enums are their value's name (a number no name has, possible in a proto3 open enum, stays a number);
- ``bytes`` are standard base64 text with padding (RFC 4648 section 4); encode also takes the URL-safe
  alphabet and missing padding;
- repeated fields are arrays, maps objects (keys as text: ``"7"``, ``"true"``), a oneof only its set member;
- ``google.protobuf.Timestamp`` is RFC 3339 / ISO-8601 UTC text, ``2021-07-21T06:00:00Z``, with 0, 3, 6 or
  9 fraction digits (as proto3 JSON);
- ``google.protobuf.Duration`` is proto3 JSON's text, seconds with an ``s``: ``"3600s"``, ``"-0.500s"``
  (exact at nanosecond resolution, which a number of seconds is not);
- the wrappers (``Int64Value``, ``StringValue``, ``BytesValue`` ...) are their value, mapped as above;
- ``Struct``, ``Value`` and ``ListValue`` are the JSON they hold (``Struct`` numbers are doubles);
- ``Any`` is ``{"@type": type_url, ...the packed message's fields}`` when the packed type is in the schema's
  files (a packed well-known type: ``{"@type": url, "value": its JSON}``), else ``{"@type": url, "value":
  base64 of the packed bytes}``;
- fields the schema does not know (written by a newer schema) are left out.

**Errors.** A body that is not a valid message of the type raises ``DecodeError`` with protobuf's reason and
context (type, schema id, size, the byte where the top-level structure breaks when it does); no other
exception escapes ``decode``. A JSON value that does not conform raises ``SchemaValidation`` naming the field
(``$.actor.id: expected int64, got "abc"``); the errors are ``streamforge_core.codec_errors``'s, shared by
every format. A ``DecodeError``'s position here counts from the start of the body (after the message
indexes, whose length varies), not from the framed value's start as Avro's does. A schema that does not
compile raises ``SchemaCompileError``, an ``UnusableSchema``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import message as pb_message
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from grpc_tools import protoc

from streamforge_core.codec_errors import DecodeError, SchemaValidation, UnusableSchema


class SchemaCompileError(UnusableSchema):
    """A schema's ``.proto`` text (or one of its references) does not compile; the text is protoc's messages,
    ``file:line:column: message`` (1-based), one a line."""


#: The name the schema's own text is compiled under (protoc needs a file name; references keep theirs).
ROOT_FILE = "schema.proto"
#: Compiled schemas kept per process (least recently used dropped first).
CACHE_SIZE = 512

_WKT_INCLUDE = str(resources.files("grpc_tools") / "_proto")
_compile_lock = threading.Lock()


def compile_schema(
    schema_str: str, references: Mapping[str, str] | None = None
) -> descriptor_pool.DescriptorPool:
    """Compile a ``.proto`` text and its references (``{import name: .proto text}``, the names exactly as the
    text's ``import`` statements write them) into a new descriptor pool holding every file, the schema's own
    as ``ROOT_FILE``. The well-known types (``google/protobuf/*.proto``) need no reference.

    Raises ``SchemaCompileError`` with protoc's messages when the text or a reference does not compile, and
    when a reference name is not a relative path inside the schema's folder (``../x.proto``, ``/etc/x``) or
    is ``ROOT_FILE`` itself."""
    references = dict(references or {})
    for name in references:
        parts = PurePosixPath(name).parts
        if (
            not name
            or name.startswith("/")
            or "\\" in name
            or "\0" in name
            or ".." in parts
            or name == ROOT_FILE
        ):
            raise SchemaCompileError(f"reference name {name!r} is not a relative .proto path")
    with tempfile.TemporaryDirectory(prefix="sf-proto-") as folder, _compile_lock:
        root = Path(folder) / "src"
        for name, text in [(ROOT_FILE, schema_str), *references.items()]:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        _check_compiles(str(root))
        out = Path(folder) / "set.pb"
        args = [
            "protoc",
            f"-I{root}",
            f"-I{_WKT_INCLUDE}",
            "--include_imports",
            f"--descriptor_set_out={out}",
        ]
        if protoc.main([*args, str(root / ROOT_FILE)]) != 0:
            raise SchemaCompileError("protoc refused the schema (its messages went to standard error)")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for file in files:  # --include_imports lists the imports before the files that import them
        pool.Add(file)
    return pool


def _check_compiles(root: str) -> None:
    """Raise ``SchemaCompileError`` with protoc's messages when ``ROOT_FILE`` under ``root`` does not compile.
    grpcio-tools' ``get_protos`` runs the same compiler and collects its errors in-process, where
    ``protoc.main`` prints them to the process's standard error."""
    from grpc_tools import _protoc_compiler

    get_protos = getattr(_protoc_compiler, "get_protos", None)
    if get_protos is None:  # an older or newer grpcio-tools without it: protoc.main still refuses
        return
    try:
        get_protos(ROOT_FILE.encode(), [root.encode(), _WKT_INCLUDE.encode()])
    except Exception as exc:
        lines = [
            f"{_text(error.filename)}"
            + (f":{error.line + 1}:{error.column + 1}" if error.line >= 0 else "")
            + f": {_text(error.message)}"
            for error in _errors(exc)
        ]
        raise SchemaCompileError("\n".join(lines[:5]) or str(exc)) from None


def _errors(exc: Exception) -> list[Any]:
    """The ``ProtocError`` list of grpcio-tools' ``ProtocErrors`` (a method there; empty for others)."""
    errors = getattr(exc, "errors", None)
    return list(errors() if callable(errors) else errors or [])


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def message_descriptor(
    pool: descriptor_pool.DescriptorPool, message_indexes: tuple[int, ...], schema_id: int = 0
) -> Descriptor:
    """The message type that Confluent's message-index list selects in the schema compiled into ``pool``
    (module docstring): ``()`` and ``(0,)`` the first top-level message, ``(1, 0)`` the first nested type of
    the second. Raises ``DecodeError("message index [3] not in schema 7 (2 messages)")`` when an index is
    out of range (or negative)."""
    root = pool.FindFileByName(ROOT_FILE)
    choices: list[Descriptor] = list(root.message_types_by_name.values())
    where = f"{len(choices)} message" + ("" if len(choices) == 1 else "s")
    descriptor: Descriptor | None = None
    for index in message_indexes or (0,):
        if not 0 <= index < len(choices):
            raise DecodeError(f"message index {list(message_indexes)} not in schema {schema_id} ({where})")
        descriptor = choices[index]
        choices = list(descriptor.nested_types)
        where = f"{descriptor.full_name} has {len(choices)} nested message" + (
            "" if len(choices) == 1 else "s"
        )
    assert descriptor is not None
    return descriptor


# --- decoding: message -> JSON ------------------------------------------------------------------------------

_INTEGERS = {
    FieldDescriptor.TYPE_INT32: ("int32", -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: ("sint32", -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: ("sfixed32", -(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: ("uint32", 0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: ("fixed32", 0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: ("int64", -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: ("sint64", -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: ("sfixed64", -(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: ("uint64", 0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: ("fixed64", 0, 2**64 - 1),
}
_WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
_TIMESTAMP_MIN, _TIMESTAMP_MAX = -62135596800, 253402300799  # 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z
_DURATION_MAX = 315576000000  # 10,000 years of seconds, google/protobuf/duration.proto
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Reader = Callable[[Any], Any]


def _non_finite(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _read_double(value: float) -> float | str:
    return value if math.isfinite(value) else _non_finite(value)


def _read_float(value: float) -> float | str:
    """A 32-bit float as the shortest decimal that reads back to it (0.1f is 0.1, not 0.10000000149011612)."""
    if not math.isfinite(value):
        return _non_finite(value)
    for digits in range(6, 10):
        shorter = float(f"{value:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", shorter))[0] == value:
            return shorter
    return value


def _read_bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _fraction(nanos: int) -> str:
    if nanos == 0:
        return ""
    if nanos % 1_000_000 == 0:
        return f".{nanos // 1_000_000:03d}"
    if nanos % 1_000 == 0:
        return f".{nanos // 1_000:06d}"
    return f".{nanos:09d}"


def timestamp_text(seconds: int, nanos: int) -> str:
    """``google.protobuf.Timestamp`` as RFC 3339 UTC text (``2021-07-21T06:00:00.250Z``). Raises
    ``DecodeError`` outside the type's range (years 0001-9999, nanos 0..999,999,999: timestamp.proto)."""
    if not (_TIMESTAMP_MIN <= seconds <= _TIMESTAMP_MAX and 0 <= nanos <= 999_999_999):
        raise DecodeError(f"Timestamp seconds={seconds} nanos={nanos} is out of range (years 0001-9999)")
    moment = _EPOCH + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + _fraction(nanos) + "Z"


def duration_text(seconds: int, nanos: int) -> str:
    """``google.protobuf.Duration`` as proto3 JSON text (``"3600s"``, ``"-0.500s"``). Raises ``DecodeError``
    beyond +-10,000 years or when seconds and nanos disagree in sign (duration.proto)."""
    if abs(seconds) > _DURATION_MAX or abs(nanos) > 999_999_999 or seconds * nanos < 0:
        raise DecodeError(f"Duration seconds={seconds} nanos={nanos} is out of range")
    sign = "-" if seconds < 0 or nanos < 0 else ""
    return f"{sign}{abs(seconds)}{_fraction(abs(nanos))}s"


class _Decoder:
    """Turns messages of one descriptor pool into the module's JSON mapping. Each message type's fields are
    planned once (name, whether presence is tested, the value's reader) and the plan reused per record."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool
        self._plans: dict[str, list[tuple[str, bool, Reader | None]]] = {}
        self._special: dict[str, Callable[[Any], Any]] = {
            "google.protobuf.Timestamp": lambda m: timestamp_text(m.seconds, m.nanos),
            "google.protobuf.Duration": lambda m: duration_text(m.seconds, m.nanos),
            "google.protobuf.Struct": self._struct,
            "google.protobuf.Value": self._value,
            "google.protobuf.ListValue": self._list_value,
            "google.protobuf.Any": self._any,
            **dict.fromkeys(_WRAPPERS, self._wrapper),
        }

    def message(self, msg: Any) -> Any:
        descriptor = msg.DESCRIPTOR
        special = self._special.get(descriptor.full_name)
        if special is not None:
            return special(msg)
        plan = self._plans.get(descriptor.full_name)
        if plan is None:
            plan = self._plans[descriptor.full_name] = [
                (field.name, field.has_presence, self._reader(field)) for field in descriptor.fields
            ]
        out: dict[str, Any] = {}
        for name, presence, read in plan:
            if presence and not msg.HasField(name):
                continue
            value = getattr(msg, name)
            out[name] = value if read is None else read(value)
        return out

    def _reader(self, field: FieldDescriptor) -> Reader | None:
        """How a field's value (as protobuf's Python API returns it) becomes JSON; None: as it is."""
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = field.message_type.fields_by_name["key"]
            value = self._single(field.message_type.fields_by_name["value"])
            as_text = (lambda k: "true" if k else "false") if key.type == FieldDescriptor.TYPE_BOOL else str
            if value is None:
                return lambda m: {as_text(k): v for k, v in m.items()}
            return lambda m: {as_text(k): value(v) for k, v in m.items()}
        single = self._single(field)
        if field.is_repeated:
            return list if single is None else (lambda items: [single(item) for item in items])
        return single

    def _single(self, field: FieldDescriptor) -> Reader | None:
        kind = field.type
        if kind in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            return self.message
        if kind == FieldDescriptor.TYPE_ENUM:
            assert field.enum_type is not None
            names = {value.number: value.name for value in field.enum_type.values}
            return lambda number: names.get(number, number)
        if kind == FieldDescriptor.TYPE_BYTES:
            return _read_bytes
        if kind == FieldDescriptor.TYPE_FLOAT:
            return _read_float
        if kind == FieldDescriptor.TYPE_DOUBLE:
            return _read_double
        return None  # integers, bool, string: Python's int, bool and str are already the JSON values

    def _wrapper(self, msg: Any) -> Any:
        read = self._single(msg.DESCRIPTOR.fields_by_name["value"])
        return msg.value if read is None else read(msg.value)

    # Struct, ListValue and Value: the hot path of schemaless payloads (a GitHub event's payload is ~60
    # Values), so written for speed: keys then items (no ItemsView), the commonest kinds tested first.
    def _struct(self, msg: Any) -> dict[str, Any]:
        fields = msg.fields
        value = self._value
        return {key: value(fields[key]) for key in fields}

    def _list_value(self, msg: Any) -> list[Any]:
        value = self._value
        return [value(item) for item in msg.values]

    def _value(self, msg: Any) -> Any:
        kind = msg.WhichOneof("kind")
        if kind == "string_value":
            return msg.string_value
        if kind == "number_value":
            number = msg.number_value
            return number if math.isfinite(number) else _non_finite(number)
        if kind == "struct_value":
            return self._struct(msg.struct_value)
        if kind == "bool_value":
            return msg.bool_value
        if kind == "list_value":
            return self._list_value(msg.list_value)
        return None  # null_value, or no kind set

    def _any(self, msg: Any) -> dict[str, Any]:
        type_url = msg.type_url
        try:
            descriptor = self._pool.FindMessageTypeByName(type_url.rpartition("/")[2])
        except KeyError:
            return {"@type": type_url, "value": _read_bytes(msg.value)}
        try:
            packed = message_factory.GetMessageClass(descriptor).FromString(msg.value)
        except pb_message.DecodeError as exc:
            raise DecodeError(
                f"the Any of type {type_url} does not hold a valid {descriptor.full_name}: {exc}"
            ) from None
        if descriptor.full_name in self._special:
            return {"@type": type_url, "value": self.message(packed)}
        return {"@type": type_url, **self.message(packed)}


# --- encoding: JSON -> message --------------------------------------------------------------------------------

_TIMESTAMP_TEXT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)
_DURATION_TEXT = re.compile(r"(-)?(\d+)(?:\.(\d{1,9}))?s")
_INTEGER_TEXT = re.compile(r"-?\d+")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_FLOAT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def _show(value: Any) -> str:
    """A value as a reason quotes it: JSON text, cut at 60 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Encoder:
    """Fills messages of one descriptor pool from the module's JSON mapping, naming the first field that
    does not conform (``SchemaValidation``)."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool
        self._fields: dict[str, dict[str, FieldDescriptor]] = {}
        self._special: dict[str, Callable[[Any, Any, str], None]] = {
            "google.protobuf.Timestamp": self._timestamp,
            "google.protobuf.Duration": self._duration,
            "google.protobuf.Struct": self._struct,
            "google.protobuf.Value": self._value,
            "google.protobuf.ListValue": self._list_value,
            "google.protobuf.Any": self._any,
            **dict.fromkeys(_WRAPPERS, self._wrapper),
        }

    def fill(self, msg: Any, value: Any, path: str) -> None:
        descriptor = msg.DESCRIPTOR
        special = self._special.get(descriptor.full_name)
        if special is not None:
            special(msg, value, path)
            return
        if not isinstance(value, dict):
            raise SchemaValidation(path, f"expected an object ({descriptor.full_name}), got {_show(value)}")
        fields = self._fields.get(descriptor.full_name)
        if fields is None:
            fields = {field.json_name: field for field in descriptor.fields}
            fields.update((field.name, field) for field in descriptor.fields)
            self._fields[descriptor.full_name] = fields
        oneofs: dict[str, str] = {}
        for key, item in value.items():
            where = f"{path}.{key}"
            field = fields.get(key)
            if field is None:
                raise SchemaValidation(where, f"unknown field ({descriptor.full_name} has no field {key!r})")
            if item is None and not _is_value(field):
                continue  # null: the field stays unset (its default), as in proto3 JSON
            oneof = field.containing_oneof
            if oneof is not None:
                if oneof.name in oneofs:
                    raise SchemaValidation(
                        where,
                        f"only one field of oneof {oneof.name} may be set ({oneofs[oneof.name]} is set too)",
                    )
                oneofs[oneof.name] = key
            self._field(msg, field, item, where)

    def _field(self, msg: Any, field: FieldDescriptor, item: Any, where: str) -> None:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            if not isinstance(item, dict):
                raise SchemaValidation(where, f"expected an object (a map), got {_show(item)}")
            container = getattr(msg, field.name)
            key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
            for key, element in item.items():
                at = f"{where}.{key}"
                map_key = self._map_key(key_field, key, at)
                if element is None and not _is_value(value_field):
                    raise SchemaValidation(at, "null is not a map value")
                if value_field.message_type is not None:
                    self.fill(container[map_key], element, at)
                else:
                    container[map_key] = self._scalar(value_field, element, at)
        elif field.is_repeated:
            if not isinstance(item, list):
                raise SchemaValidation(where, f"expected an array, got {_show(item)}")
            container = getattr(msg, field.name)
            for index, element in enumerate(item):
                at = f"{where}[{index}]"
                if element is None and not _is_value(field):
                    raise SchemaValidation(at, "null is not an array element")
                if field.message_type is not None:
                    self.fill(container.add(), element, at)
                else:
                    container.append(self._scalar(field, element, at))
        elif field.message_type is not None:
            child = getattr(msg, field.name)
            child.SetInParent()
            self.fill(child, item, where)
        else:
            setattr(msg, field.name, self._scalar(field, item, where))

    def _map_key(self, field: FieldDescriptor, key: str, path: str) -> Any:
        if field.type == FieldDescriptor.TYPE_BOOL:
            if key not in ("true", "false"):
                raise SchemaValidation(path, f'expected a bool map key ("true" or "false"), got {_show(key)}')
            return key == "true"
        return self._scalar(field, key, path)

    def _scalar(self, field: FieldDescriptor, value: Any, path: str) -> Any:
        kind = field.type
        if kind in _INTEGERS:
            name, low, high = _INTEGERS[kind]
            return _integer(value, name, low, high, path)
        if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return _number(value, "float" if kind == FieldDescriptor.TYPE_FLOAT else "double", path)
        if kind == FieldDescriptor.TYPE_BOOL:
            if not isinstance(value, bool):
                raise SchemaValidation(path, f"expected bool, got {_show(value)}")
            return value
        if kind == FieldDescriptor.TYPE_STRING:
            if not isinstance(value, str):
                raise SchemaValidation(path, f"expected string, got {_show(value)}")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise SchemaValidation(path, "string is not valid Unicode (a lone surrogate)") from None
            return value
        if kind == FieldDescriptor.TYPE_BYTES:
            return _base64(value, path)
        assert kind == FieldDescriptor.TYPE_ENUM, kind  # the rest; groups are messages
        assert field.enum_type is not None
        return _enum(field.enum_type, value, path)

    def _timestamp(self, msg: Any, value: Any, path: str) -> None:
        match = _TIMESTAMP_TEXT.fullmatch(value) if isinstance(value, str) else None
        try:
            if match is None:
                raise ValueError
            year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
            moment = datetime(
                int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC
            )
            if not zulu:
                offset = timedelta(hours=int(off_h), minutes=int(off_m))
                moment -= offset if sign == "+" else -offset
            seconds = (moment - _EPOCH) // timedelta(seconds=1)
            if not _TIMESTAMP_MIN <= seconds <= _TIMESTAMP_MAX:
                raise ValueError
        except (ValueError, OverflowError):
            raise SchemaValidation(
                path, f'expected an RFC 3339 timestamp such as "2021-07-21T06:00:00Z", got {_show(value)}'
            ) from None
        msg.seconds, msg.nanos = seconds, int((fraction or "").ljust(9, "0"))

    def _duration(self, msg: Any, value: Any, path: str) -> None:
        match = _DURATION_TEXT.fullmatch(value) if isinstance(value, str) else None
        if match is None or int(match.group(2)) > _DURATION_MAX:
            raise SchemaValidation(
                path, f'expected a duration such as "3600s" or "-0.5s", got {_show(value)}'
            )
        sign = -1 if match.group(1) else 1
        msg.seconds = sign * int(match.group(2))
        msg.nanos = sign * int((match.group(3) or "").ljust(9, "0"))

    def _wrapper(self, msg: Any, value: Any, path: str) -> None:
        field = msg.DESCRIPTOR.fields_by_name["value"]
        msg.value = self._scalar(field, value, path)

    def _struct(self, msg: Any, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise SchemaValidation(path, f"expected an object (google.protobuf.Struct), got {_show(value)}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise SchemaValidation(path, f"object keys must be text, got {_show(key)}")
            self._value(msg.fields[key], item, f"{path}.{key}")

    def _list_value(self, msg: Any, value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise SchemaValidation(path, f"expected an array (google.protobuf.ListValue), got {_show(value)}")
        for index, item in enumerate(value):
            self._value(msg.values.add(), item, f"{path}[{index}]")

    def _value(self, msg: Any, value: Any, path: str) -> None:
        if value is None:
            msg.null_value = 0
        elif isinstance(value, bool):
            msg.bool_value = value
        elif isinstance(value, int | float):
            msg.number_value = _number(value, "double", path)
        elif isinstance(value, str):
            msg.string_value = value
        elif isinstance(value, dict):
            msg.struct_value.SetInParent()
            self._struct(msg.struct_value, value, path)
        elif isinstance(value, list):
            msg.list_value.SetInParent()
            self._list_value(msg.list_value, value, path)
        else:
            raise SchemaValidation(path, f"expected a JSON value, got {_show(value)}")

    def _any(self, msg: Any, value: Any, path: str) -> None:
        if not isinstance(value, dict) or not isinstance(value.get("@type"), str):
            raise SchemaValidation(
                path, f'expected an object with "@type" (google.protobuf.Any), got {_show(value)}'
            )
        type_url = value["@type"]
        try:
            descriptor = self._pool.FindMessageTypeByName(type_url.rpartition("/")[2])
        except KeyError:
            if set(value) != {"@type", "value"}:
                raise SchemaValidation(
                    f"{path}.@type",
                    f"type {type_url} is not in the schema (give its bytes as base64 in value)",
                ) from None
            msg.type_url, msg.value = type_url, _base64(value["value"], f"{path}.value")
            return
        packed = message_factory.GetMessageClass(descriptor)()
        if descriptor.full_name in self._special:
            self.fill(packed, value.get("value"), f"{path}.value")
        else:
            self.fill(packed, {key: item for key, item in value.items() if key != "@type"}, path)
        msg.type_url, msg.value = type_url, packed.SerializeToString(deterministic=True)


def _is_value(field: FieldDescriptor) -> bool:
    """A ``google.protobuf.Value`` field, where JSON null is a value (``NullValue``) rather than "unset"."""
    return field.message_type is not None and field.message_type.full_name == "google.protobuf.Value"


def _integer(value: Any, name: str, low: int, high: int, path: str) -> int:
    """An integer field's value from a JSON number (an integral float too, as arithmetic gives) or decimal
    text (proto3 JSON writes 64-bit integers as text), within the type's range."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and _INTEGER_TEXT.fullmatch(value)
    ):
        number = int(value)
    if number is None:
        raise SchemaValidation(path, f"expected {name}, got {_show(value)}")
    if not low <= number <= high:
        raise SchemaValidation(path, f"expected {name}, got {_show(value)} (out of range {low}..{high})")
    return number


def _number(value: Any, name: str, path: str) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SchemaValidation(path, f"expected {name}, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise SchemaValidation(path, f"expected {name}, got {_show(value)} (out of range)") from None
    if name == "float" and math.isfinite(number) and abs(number) > _FLOAT_MAX:
        raise SchemaValidation(path, f"expected float, got {_show(value)} (out of range)")
    return number


def _base64(value: Any, path: str) -> bytes:
    """Bytes from base64 text, standard or URL-safe alphabet, padding optional (as proto3 JSON reads it)."""
    if isinstance(value, str):
        text = value + "=" * (-len(value) % 4)
        try:
            if "-" in text or "_" in text:
                return base64.urlsafe_b64decode(text.encode("ascii"))
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            pass
    raise SchemaValidation(path, f"expected bytes as base64 text, got {_show(value)}")


def _enum(enum: EnumDescriptor, value: Any, path: str) -> int:
    """An enum field's number from its value's name, or from a number (any int32 for an open proto3 enum,
    a declared one for a closed proto2 enum)."""
    if isinstance(value, str) and value in enum.values_by_name:
        return int(enum.values_by_name[value].number)
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (value in enum.values_by_number or (not enum.is_closed and -(2**31) <= value < 2**31))
    ):
        return value
    names = ", ".join(list(enum.values_by_name)[:8]) + (", ..." if len(enum.values) > 8 else "")
    raise SchemaValidation(path, f"expected {enum.full_name} ({names}), got {_show(value)}")


# --- the codec -------------------------------------------------------------------------------------------------


def _structure_break(body: bytes) -> tuple[str, int] | None:
    """Where the top-level wire structure of ``body`` breaks (protobuf encoding guide: tags, varints,
    length-delimited fields): ``("a length-delimited field runs past the end at byte 12", 12)``; None when
    the top level reads to the end (the fault is then inside a field)."""
    pos, end = 0, len(body)

    def varint(at: int) -> tuple[int, int] | None:
        value, shift = 0, 0
        while at < end and shift < 70:
            byte = body[at]
            value |= (byte & 0x7F) << shift
            at += 1
            if not byte & 0x80:
                return value, at
            shift += 7
        return None

    while pos < end:
        start = pos
        tag = varint(pos)
        if tag is None:
            return f"a field tag is cut off at byte {start}", start
        key, pos = tag
        wire_type = key & 7
        if key >> 3 == 0:
            return f"field number 0 at byte {start}", start
        if wire_type == 0:
            read = varint(pos)
            if read is None:
                return f"a varint is cut off at byte {pos}", pos
            pos = read[1]
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
            if pos > end:
                return f"a fixed-size field runs past the end at byte {start}", start
        elif wire_type == 2:
            read = varint(pos)
            if read is None or read[1] + read[0] > end:
                return f"a length-delimited field runs past the end at byte {start}", start
            pos = read[1] + read[0]
        elif wire_type in (3, 4):
            return None  # groups (proto2's deprecated form): not scanned
        else:
            return f"wire type {wire_type} (not one protobuf defines) at byte {start}", start
    return None


def _missing(msg: Any) -> str:
    """The dotted path of a message's first unset proto2 required field (``actor.id``, ``lines[0].sku``)."""
    return str(msg.FindInitializationErrors()[0])


class ProtobufCodec:
    """One message type of one compiled schema: ``decode`` a body (the bytes after the Confluent framing and
    message indexes) to the module's JSON mapping, ``encode`` such JSON back to a body. Thread-safe after
    construction except for its plan caches, which only ever grow with equal values."""

    def __init__(
        self, descriptor: Descriptor, pool: descriptor_pool.DescriptorPool, schema_id: int = 0
    ) -> None:
        self.descriptor = descriptor
        self.schema_id = schema_id
        self._cls = message_factory.GetMessageClass(descriptor)
        self._decoder = _Decoder(pool)
        self._encoder = _Encoder(pool)

    @property
    def message_class(self) -> type[pb_message.Message]:
        """The runtime-built protobuf class of the message type (for callers that need protobuf's own API)."""
        return self._cls

    @property
    def message_name(self) -> str:
        """The message type's full name (``github.Event``)."""
        return str(self.descriptor.full_name)

    def decode(self, body: bytes) -> Any:
        """The JSON value (dict) of ``body``. Raises ``DecodeError`` naming the type, the schema id and the
        reason when ``body`` is not a valid message of the type (garbage, truncated, a wrong wire type,
        invalid UTF-8 in a string, a missing proto2 required field, a Timestamp out of range)."""
        try:
            msg = self._cls.FromString(body)
            if not msg.IsInitialized():  # protobuf parses a proto2 message partially; the schema says no
                raise DecodeError(f"required field {_missing(msg)} is missing")
            return self._decoder.message(msg)
        except DecodeError as exc:
            raise DecodeError(f"{self._what(body)}: {exc}") from None
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            at = _structure_break(bytes(body))
            if at is None:
                raise DecodeError(f"{self._what(body)}: {reason}") from None
            raise DecodeError(f"{self._what(body)}: {reason} ({at[0]})", at[1]) from None

    def _what(self, body: bytes) -> str:
        return f"not a valid {self.message_name} (schema {self.schema_id}, {len(body)} bytes)"

    def encode(self, value: Any) -> bytes:
        """The body of ``value`` (the module's JSON mapping) under the message type, deterministic (map
        entries in key order). Raises ``SchemaValidation`` naming the first field that does not conform: an
        unknown field, a wrong type or an out-of-range number, two members of one oneof, a missing proto2
        required field."""
        msg = self._cls()
        try:
            self._encoder.fill(msg, value, "$")
        except SchemaValidation:
            raise
        except (TypeError, ValueError) as exc:  # what protobuf itself refuses that the checks above let by
            raise SchemaValidation("$", str(exc)) from None
        if not msg.IsInitialized():
            raise SchemaValidation(f"$.{_missing(msg)}", "required field is missing")
        return bytes(msg.SerializeToString(deterministic=True))


#: Compiled schemas by content (the ``.proto`` text and its references; protoc's messages for one that did not
#: compile), least recently used dropped first: one text compiles once whatever ids name it, and two
#: registries' schema 7 are never taken for each other.
_compiled: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], descriptor_pool.DescriptorPool | str] = (
    OrderedDict()
)
_cache_lock = threading.Lock()


def protobuf_codec(
    schema_id: int,
    schema_str: str,
    references: Mapping[str, str],
    message_indexes: tuple[int, ...],
) -> ProtobufCodec:
    """The codec of registry schema ``schema_id`` (its ``.proto`` text and references, see
    ``compile_schema``) for the message type ``message_indexes`` select (``message_descriptor``; ``()`` is
    ``(0,)``). The compiled schema is cached by its content, a failure to compile too; the codecs are cached by
    the caller (``schema_codecs.codec_for``, keyed by the whole registered schema). ``schema_id`` only names
    the schema in errors.

    Raises ``SchemaCompileError`` (an ``UnusableSchema``) ``"schema 7 does not compile: <protoc's messages>"``
    and ``DecodeError`` for indexes not in the schema."""
    key = (schema_str, tuple(sorted(references.items())))
    with _cache_lock:
        pool = _compiled.get(key)
        if pool is not None:
            _compiled.move_to_end(key)
    if pool is None:
        try:
            pool = compile_schema(schema_str, references)
        except SchemaCompileError as exc:
            pool = str(exc)
        with _cache_lock:
            _compiled[key] = pool
            while len(_compiled) > CACHE_SIZE:
                _compiled.popitem(last=False)
    if isinstance(pool, str):
        raise SchemaCompileError(f"schema {schema_id} does not compile: {pool}")
    return ProtobufCodec(message_descriptor(pool, tuple(message_indexes), schema_id), pool, schema_id)
