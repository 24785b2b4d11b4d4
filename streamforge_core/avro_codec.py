"""Avro record bodies <-> JSON, through fastavro's schemaless reader and writer with the writer schema.

The JSON mapping (``../shared/DSL.md`` "Decoded records"; Avro 1.12 specification for the types):

=====================================  ====================================================================
Avro                                   JSON
=====================================  ====================================================================
null, boolean, string                  themselves
int, long                              number
float, double                          number; NaN and +-infinity as the strings ``"NaN"``,
                                       ``"Infinity"``, ``"-Infinity"`` (JSON has no such numbers; the
                                       strings are Protobuf's JSON mapping for them)
bytes, fixed                           base64 text (RFC 4648 section 4, padded)
enum                                   its symbol
record, map / array                    object / array
union                                  the branch's value, no type wrapper
decimal (bytes or fixed)               its exact decimal text with the schema's scale (``"12.50"``)
timestamp-millis, timestamp-micros     ISO-8601 UTC text, ``Z``-suffixed, with 0, 3 or 6 fractional
                                       digits as the value needs (``"2021-07-21T06:00:00Z"``,
                                       ``"...:00.250Z"``, ``"...:00.000001Z"``: Protobuf's JSON rule)
local-timestamp-millis/-micros         the same without ``Z`` (the schema names no zone, so no zone is
                                       claimed): ``"2021-07-21T06:00:00.250"``
date                                   ``YYYY-MM-DD``
time-millis, time-micros               ``HH:MM:SS`` with 0, 3 or 6 fractional digits as needed
uuid                                   its text, lowercase (``str(uuid.UUID)``)
other logical types (duration ...)     as their underlying type
=====================================  ====================================================================

Encoding is the inverse, with the schema deciding: base64 text -> bytes (strict alphabet, padding and zero
pad bits, so the text decodes back unchanged),
decimal text (or a JSON number) -> ``Decimal`` at the schema's scale (a value that would lose digits or
exceed the precision is refused), ISO text -> datetime / date / time (a timestamp needs a zone, a local one
must have none; digits below the schema's unit are refused), a number is also accepted for a date, time or
timestamp as its raw Avro value (days, ms, us). A union takes **the first branch, in the schema's order,
that the value fits** (``["null", "string"]`` with ``"x"`` is the string; ``["bytes", "string"]`` with
valid base64 is the bytes), written with fastavro's explicit branch notation so fastavro never guesses.
Records refuse unknown fields (they would be dropped silently) and fields missing without a default.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import fastavro
from fastavro.read import LOGICAL_READERS
from fastavro.write import LOGICAL_WRITERS

from streamforge_core.codec_errors import JSON, DecodeError, SchemaValidation, UnusableSchema
from streamforge_core.registered_schema import RegisteredSchema
from streamforge_core.wire_format import HEADER_SIZE

#: One converter of a decoded fastavro value to the JSON mapping (None where the value is JSON already).
_ToJson = Callable[[Any], Any]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_FLOAT32_MAX = 3.4028234663852886e38
#: The key under which a parsed record schema keeps the set of its field names (fastavro ignores it).
_FIELD_NAMES = "__streamforge_field_names"
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class AvroCodec:
    """The codec of one registered Avro schema (``schema_codecs.SchemaCodec``).

    The schema and its references (each a named type the schema uses by its full name; parsed first, in
    the order given) are parsed once, with fastavro. Raises ``UnusableSchema`` for a schema or reference
    that is not JSON or not valid Avro.
    """

    def __init__(self, registered: RegisteredSchema) -> None:
        self.schema_id = registered.schema_id
        named: dict[str, Any] = {}
        try:
            for reference in registered.references:
                fastavro.parse_schema(json.loads(reference.schema_str), named_schemas=named)
            self._schema = fastavro.parse_schema(json.loads(registered.schema_str), named_schemas=named)
        except Exception as exc:  # fastavro raises several types (SchemaParseException, UnknownType...)
            raise UnusableSchema(f"schema {self.schema_id} is not usable Avro: {exc}") from None
        self._named = named
        if _zero_width_array(self._schema, named, set()):
            # fastavro reads an array block's count, then that many items: items of zero bytes let a 6-byte
            # body claim two billion of them, which takes minutes of a worker's time to refuse
            raise UnusableSchema(
                f"schema {self.schema_id} has an array whose items take no bytes (null, an empty record or "
                "fixed): a few bytes of a record could stand for billions of items, so it is refused"
            )
        self._to_json = _decoder(self._schema, named, frozenset())

    def decode(self, body: bytes) -> JSON:
        """The record the body holds, in the JSON mapping above.

        Raises ``DecodeError("not Avro for schema N at byte M: why")``, M counted from the start of the
        framed value (the 5 header bytes included), for a body that ends early, holds an impossible length
        or union branch, invalid UTF-8, a value out of Python's range (a timestamp beyond year 9999) or
        bytes left over after the record.
        """
        stream = io.BytesIO(body)
        try:
            value = fastavro.schemaless_reader(stream, self._schema, None)
        except Exception as exc:  # anything a garbage body makes the reader raise is the body's fault
            position = HEADER_SIZE + stream.tell()
            why = str(exc) or type(exc).__name__
            if isinstance(exc, EOFError | StopIteration) or stream.tell() >= len(body):
                why = "the body ends before the record does"
            elif isinstance(exc, UnicodeDecodeError):
                why = "a string is not valid UTF-8"
            elif isinstance(exc, IndexError):
                why = "a union branch or enum symbol index beyond the schema's"
            raise DecodeError(
                f"not Avro for schema {self.schema_id} at byte {position}: {why}", position
            ) from None
        if stream.tell() != len(body):
            position = HEADER_SIZE + stream.tell()
            raise DecodeError(
                f"not Avro for schema {self.schema_id} at byte {position}: "
                f"{len(body) - stream.tell()} bytes left after the record",
                position,
            )
        return value if self._to_json is None else self._to_json(value)

    def encode(self, value: JSON) -> bytes:
        """``value`` (the JSON mapping) as an Avro body of the schema. Raises ``SchemaValidation`` naming the
        first field (in schema order) that does not fit, e.g. ``$.actor.id: expected long, got "abc"``."""
        datum = _from_json(self._schema, value, "$", self._named)
        stream = io.BytesIO()
        try:
            fastavro.schemaless_writer(stream, self._schema, datum)
        except Exception as exc:  # a value the checks above let through: still the value's fault
            raise SchemaValidation("$", f"does not fit schema {self.schema_id}: {exc}") from None
        return stream.getvalue()


def _zero_width(schema: Any, named: dict[str, Any], seen: set[str]) -> bool:
    """Whether a value of ``schema`` can be written in zero bytes (null, fixed of size 0, a record of only
    such fields; a union, enum, string, array or map always writes at least one byte)."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema == "null"
        if schema in seen:
            return False
        return _zero_width(named[schema], named, seen | {schema})
    if isinstance(schema, list):
        return False
    kind = schema["type"]
    if kind in ("record", "error"):
        inner = seen | {schema["name"]}
        return all(_zero_width(field["type"], named, inner) for field in schema["fields"])
    if kind == "fixed":
        return int(schema["size"]) == 0
    if kind in ("enum", "array", "map"):
        return False
    return _zero_width(kind, named, seen)


def _zero_width_array(schema: Any, named: dict[str, Any], seen: set[str]) -> bool:
    """Whether ``schema`` holds, at any depth, an array whose items can take zero bytes."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES or schema in seen:
            return False
        seen.add(schema)
        return _zero_width_array(named[schema], named, seen)
    if isinstance(schema, list):
        return any(_zero_width_array(branch, named, seen) for branch in schema)
    kind = schema["type"]
    if kind in ("record", "error"):
        seen.add(schema["name"])
        return any(_zero_width_array(field["type"], named, seen) for field in schema["fields"])
    if kind == "array":
        return _zero_width(schema["items"], named, set()) or _zero_width_array(schema["items"], named, seen)
    if kind == "map":
        return _zero_width_array(schema["values"], named, seen)
    if isinstance(kind, str) and kind in _PRIMITIVES | {"enum", "fixed"}:
        return False
    return _zero_width_array(kind, named, seen)


# --- decoding: fastavro's values -> the JSON mapping -------------------------------------------------------


def _decoder(schema: Any, named: dict[str, Any], enclosing: frozenset[str]) -> _ToJson | None:
    """The converter for values of ``schema`` (None: fastavro's value is the JSON mapping already).

    Built once per schema, so a record whose fields are all strings and numbers costs nothing after the
    read, and one with a timestamp costs one conversion. A union with a branch that needs converting, and a
    recursive type, use ``_any_to_json`` (by the value's Python type, which fastavro makes unambiguous)."""
    if isinstance(schema, str):
        if schema in ("float", "double"):
            return _float_to_json
        if schema == "bytes":
            return _bytes_to_json
        if schema in _PRIMITIVES:
            return None
        if schema in enclosing:
            return _any_to_json
        return _decoder(named[schema], named, enclosing)
    if isinstance(schema, list):
        return _any_to_json if any(_decoder(branch, named, enclosing) for branch in schema) else None
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None and f"{kind}-{logical}" in LOGICAL_READERS:
        return _LOGICAL_TO_JSON.get(logical)
    if kind == "record" or kind == "error":
        inner = enclosing | {schema["name"]}
        fields = [
            (field["name"], convert)
            for field in schema["fields"]
            if (convert := _decoder(field["type"], named, inner)) is not None
        ]
        return _record_converter(fields) if fields else None
    if kind == "array":
        items = _decoder(schema["items"], named, enclosing)
        return None if items is None else (lambda value: [items(item) for item in value])
    if kind == "map":
        values = _decoder(schema["values"], named, enclosing)
        return None if values is None else (lambda value: {key: values(item) for key, item in value.items()})
    if kind == "fixed":
        return _bytes_to_json
    if kind == "enum":
        return None
    return _decoder(kind, named, enclosing)


def _record_converter(fields: list[tuple[str, _ToJson]]) -> _ToJson:
    def convert(record: dict[str, Any]) -> dict[str, Any]:
        for name, field_to_json in fields:
            record[name] = field_to_json(record[name])
        return record

    return convert


def _float_to_json(number: float) -> float | str:
    if math.isfinite(number):
        return number
    return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")


def _bytes_to_json(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decimal_to_json(number: Decimal) -> str:
    return format(number, "f")


def _fraction_spec(microsecond: int) -> str:
    """0, 3 or 6 fractional digits, as few as the value needs (Protobuf's JSON rule for Timestamp)."""
    if microsecond == 0:
        return "seconds"
    return "milliseconds" if microsecond % 1000 == 0 else "microseconds"


def _datetime_to_json(moment: datetime) -> str:
    if moment.tzinfo is None:  # local-timestamp-*: no zone was stated, none is claimed
        return moment.isoformat(timespec=_fraction_spec(moment.microsecond))
    utc = moment.astimezone(UTC).replace(tzinfo=None)
    return utc.isoformat(timespec=_fraction_spec(utc.microsecond)) + "Z"


def _date_to_json(day: date) -> str:
    return day.isoformat()


def _time_to_json(clock: time) -> str:
    return clock.isoformat(timespec=_fraction_spec(clock.microsecond))


def _uuid_to_json(value: uuid.UUID | str) -> str:
    return str(value)


_LOGICAL_TO_JSON: dict[str, _ToJson] = {
    "decimal": _decimal_to_json,
    "timestamp-millis": _datetime_to_json,
    "timestamp-micros": _datetime_to_json,
    "local-timestamp-millis": _datetime_to_json,
    "local-timestamp-micros": _datetime_to_json,
    "date": _date_to_json,
    "time-millis": _time_to_json,
    "time-micros": _time_to_json,
    "uuid": _uuid_to_json,
}

_BY_TYPE: dict[type, _ToJson] = {
    float: _float_to_json,
    bytes: _bytes_to_json,
    Decimal: _decimal_to_json,
    datetime: _datetime_to_json,
    date: _date_to_json,
    time: _time_to_json,
    uuid.UUID: _uuid_to_json,
}


def _any_to_json(value: Any) -> Any:
    """Convert by the value's type: used where the schema cannot say in advance (unions, recursion)."""
    kind = type(value)
    if kind is dict:
        return {key: _any_to_json(item) for key, item in value.items()}
    if kind is list:
        return [_any_to_json(item) for item in value]
    convert = _BY_TYPE.get(kind)
    return value if convert is None else convert(value)


# --- encoding: the JSON mapping -> values fastavro writes --------------------------------------------------


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _shown(value: Any) -> str:
    if (
        isinstance(value, dict | list) and value
    ):  # the shape is what the reader needs, not 60 characters of it
        return "{...}" if isinstance(value, dict) else "[...]"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union [" + ", ".join(_type_name(branch) for branch in schema) + "]"
    if "logicalType" in schema:
        return str(schema["logicalType"])
    if "name" in schema:
        return str(schema["name"])
    return _type_name(schema["type"])


def _from_json(schema: Any, value: Any, path: str, named: dict[str, Any]) -> Any:
    """``value`` converted for fastavro's writer under ``schema``; raises ``SchemaValidation`` at ``path``."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _primitive_from_json(schema, value, path)
        return _from_json(named[schema], value, path, named)
    if isinstance(schema, list):
        return _union_from_json(schema, value, path, named)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None and f"{kind}-{logical}" in LOGICAL_WRITERS:
        return _LOGICAL_FROM_JSON[logical](schema, value, path)
    if kind == "record" or kind == "error":
        return _record_from_json(schema, value, path, named)
    if kind == "enum":
        if not isinstance(value, str) or value not in schema["symbols"]:
            symbols = ", ".join(schema["symbols"])
            raise SchemaValidation(
                path, f"expected one of the symbols {symbols} of enum {schema['name']}, got {_shown(value)}"
            )
        return value
    if kind == "fixed":
        data = _base64_from_json(value, path, f"fixed {schema['name']}")
        if len(data) != schema["size"]:
            raise SchemaValidation(
                path, f"fixed {schema['name']} holds {schema['size']} bytes, got {len(data)}"
            )
        return data
    if kind == "array":
        if not isinstance(value, list):
            raise SchemaValidation(path, f"expected array, got {_shown(value)}")
        return [
            _from_json(schema["items"], item, _child(path, index), named) for index, item in enumerate(value)
        ]
    if kind == "map":
        if not isinstance(value, dict):
            raise SchemaValidation(path, f"expected map (an object), got {_shown(value)}")
        return {
            key: _from_json(schema["values"], item, _child(path, key), named) for key, item in value.items()
        }
    return _from_json(kind, value, path, named)


def _record_from_json(schema: dict[str, Any], value: Any, path: str, named: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaValidation(path, f"expected record {schema['name']} (an object), got {_shown(value)}")
    fields = schema["fields"]
    known = schema.get(_FIELD_NAMES)
    if known is None:  # once per record type: kept in the parsed schema, whose other keys fastavro reads
        known = schema[_FIELD_NAMES] = frozenset(field["name"] for field in fields)
    if not known.issuperset(value):
        unknown = next(key for key in value if key not in known)
        raise SchemaValidation(_child(path, unknown), f"is not a field of record {schema['name']}")
    out: dict[str, Any] = {}
    for field in fields:
        name = field["name"]
        if name in value:
            out[name] = _from_json(field["type"], value[name], _child(path, name), named)
        elif "default" not in field:
            raise SchemaValidation(_child(path, name), "missing (the field has no default)")
    return out


def _union_from_json(schema: list[Any], value: Any, path: str, named: dict[str, Any]) -> tuple[str, Any]:
    if value is None and "null" in schema:  # the usual optional field, without trying the other branches
        return "null", None
    failures: list[SchemaValidation] = []
    for branch in schema:
        if branch == "null" and value is not None:
            failures.append(SchemaValidation(path, "not null"))
            continue
        try:
            converted = _from_json(branch, value, path, named)
        except SchemaValidation as exc:
            failures.append(exc)
            continue
        return _branch_name(branch), converted
    # The branch that got furthest into the value says the most (an object that fits a record but for one
    # field); when none got past the union itself, list them.
    deepest = max(failures, key=lambda failure: len(failure.field_path))
    if deepest.field_path != path:
        raise deepest
    raise SchemaValidation(path, f"expected {_type_name(schema)}, got {_shown(value)}")


def _branch_name(branch: Any) -> str:
    """The name fastavro's tuple notation uses for a union branch: a named type's full name, else its type."""
    if isinstance(branch, str):
        return branch
    if branch["type"] in ("record", "error", "enum", "fixed"):
        return str(branch["name"])
    return str(branch["type"])


def _primitive_from_json(kind: str, value: Any, path: str) -> Any:
    if kind == "null":
        if value is not None:
            raise SchemaValidation(path, f"expected null, got {_shown(value)}")
        return None
    if kind == "boolean":
        if type(value) is not bool:
            raise SchemaValidation(path, f"expected boolean, got {_shown(value)}")
        return value
    if kind in _INT_RANGE:
        if type(value) is not int:
            raise SchemaValidation(path, f"expected {kind}, got {_shown(value)}")
        low, high = _INT_RANGE[kind]
        if not low <= value <= high:
            raise SchemaValidation(path, f"{value} is out of the range of {kind} ({low} to {high})")
        return value
    if kind in ("float", "double"):
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        if type(value) not in (int, float):
            raise SchemaValidation(path, f"expected {kind}, got {_shown(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise SchemaValidation(path, f"{value} is out of the range of {kind}") from None
        if kind == "float" and math.isfinite(number) and abs(number) > _FLOAT32_MAX:
            raise SchemaValidation(path, f"{value} is out of the range of float")
        return number
    if kind == "string":
        if not isinstance(value, str):
            raise SchemaValidation(path, f"expected string, got {_shown(value)}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SchemaValidation(path, "text is not valid Unicode (a lone surrogate)") from None
        return value
    return _base64_from_json(value, path, "bytes")


def _base64_from_json(value: Any, path: str, what: str) -> bytes:
    if not isinstance(value, str):
        raise SchemaValidation(path, f"expected {what} as base64 text, got {_shown(value)}")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SchemaValidation(path, f"expected {what} as base64 text, got {_shown(value)}") from None
    if (
        base64.b64encode(data).decode("ascii") != value
    ):  # non-zero pad bits: RFC 4648 section 3.5 lets us refuse
        raise SchemaValidation(
            path, f"{_shown(value)} is not canonical base64 (its padding bits are not zero)"
        )
    return data


def _decimal_from_json(schema: dict[str, Any], value: Any, path: str) -> Decimal:
    precision = int(schema["precision"])
    scale = int(schema.get("scale", 0))
    if isinstance(value, str | int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value)
    else:
        raise SchemaValidation(path, f'expected decimal text like "12.50", got {_shown(value)}')
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        raise SchemaValidation(path, f'expected decimal text like "12.50", got {_shown(value)}') from None
    if not number.is_finite():
        raise SchemaValidation(path, f"a decimal must be finite, got {_shown(value)}")
    with localcontext() as context:
        context.prec = max(precision, len(number.as_tuple().digits)) + scale + 2
        scaled = number.quantize(Decimal(1).scaleb(-scale))
        if scaled != number:
            raise SchemaValidation(path, f"{text} has more than the {scale} decimal places of the schema")
    if len(scaled.as_tuple().digits) > precision and scaled != 0:
        raise SchemaValidation(path, f"{text} has more than the {precision} digits of the schema")
    return scaled


def _timestamp_from_json(schema: dict[str, Any], value: Any, path: str) -> datetime | int:
    logical = schema["logicalType"]
    local = logical.startswith("local-")
    if type(value) is int:
        return value
    if not isinstance(value, str):
        raise SchemaValidation(path, f"expected {logical} as ISO-8601 text, got {_shown(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise SchemaValidation(path, f"expected {logical} as ISO-8601 text, got {_shown(value)}") from None
    if local and moment.tzinfo is not None:
        raise SchemaValidation(path, f"a {logical} has no time zone, got {_shown(value)}")
    if not local and moment.tzinfo is None:
        raise SchemaValidation(path, f"a {logical} needs a time zone (Z or +hh:mm), got {_shown(value)}")
    if logical.endswith("-millis") and moment.microsecond % 1000:
        raise SchemaValidation(path, f"{logical} holds whole milliseconds, got {_shown(value)}")
    if not local:
        try:
            moment = moment.astimezone(UTC)
        except OverflowError:
            raise SchemaValidation(path, f"{_shown(value)} is out of range") from None
    return moment


def _date_from_json(schema: dict[str, Any], value: Any, path: str) -> date | int:
    if type(value) is int:
        return value
    try:
        if not isinstance(value, str):
            raise ValueError
        return date.fromisoformat(value)
    except ValueError:
        raise SchemaValidation(path, f"expected date as YYYY-MM-DD, got {_shown(value)}") from None


def _time_from_json(schema: dict[str, Any], value: Any, path: str) -> time | int:
    logical = schema["logicalType"]
    if type(value) is int:
        return value
    try:
        if not isinstance(value, str):
            raise ValueError
        clock = time.fromisoformat(value)
    except ValueError:
        raise SchemaValidation(
            path, f"expected {logical} as HH:MM:SS[.ffffff], got {_shown(value)}"
        ) from None
    if clock.tzinfo is not None:
        raise SchemaValidation(path, f"a {logical} has no time zone, got {_shown(value)}")
    if logical == "time-millis" and clock.microsecond % 1000:
        raise SchemaValidation(path, f"time-millis holds whole milliseconds, got {_shown(value)}")
    return clock


def _uuid_from_json(schema: dict[str, Any], value: Any, path: str) -> str:
    try:
        if not isinstance(value, str):
            raise ValueError
        return str(uuid.UUID(value))
    except ValueError:
        raise SchemaValidation(path, f"expected uuid text, got {_shown(value)}") from None


_LOGICAL_FROM_JSON: dict[str, Callable[[dict[str, Any], Any, str], Any]] = {
    "decimal": _decimal_from_json,
    "timestamp-millis": _timestamp_from_json,
    "timestamp-micros": _timestamp_from_json,
    "local-timestamp-millis": _timestamp_from_json,
    "local-timestamp-micros": _timestamp_from_json,
    "date": _date_from_json,
    "time-millis": _time_from_json,
    "time-micros": _time_from_json,
    "uuid": _uuid_from_json,
}
