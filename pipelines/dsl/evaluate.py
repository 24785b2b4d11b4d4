"""Pure-Python evaluator of the StreamForge DSL (dry runs, the DSL playground, fix-payload checks).

It must give the same results as the Spark compilation of the same AST, and, when
``error_handling.missing_field_behavior == "passthrough"``, the same results as the StreamForge
runtime (rahulbsw/streamforge ``src/filter/`` and ``src/filter_parser.rs``), quirks included.
No Django, no pyspark, no third-party imports: the Spark driver imports this on cluster nodes.
One long module on purpose: it is one concept, the reference semantics of every DSL form, and a
form's evaluation reads best next to the shared path, number-text and error rules it uses.

Units: record timestamps and ``now_ms`` are epoch **milliseconds**; ``TIMESTAMP_AGE``,
``ADD:``/``SUBTRACT:`` arguments are **seconds**.

Shared rules used below:

- *Path lookup*: object key by key; on an array a segment ``0|[1-9][0-9]*`` is an index (our
  extension; StreamForge finds nothing there). Any other case is *missing*; a present ``null``
  is found.
- *Number text* (how a JSON number is turned into text, e.g. when hashed, concatenated, put in a
  header or used as a cache key): serde_json's ``Number::to_string`` -- integers in decimal;
  floats in Rust ``ryu`` shortest form: ``1.0``, ``0.5``, ``1e16``, ``1.5e-7``, ``0.00001``
  (plain notation while the decimal exponent is in [-5, 16], else ``<digits>e<exp>`` with no
  ``+`` and no zero padding). Integers outside the 64-bit range are first read as a float, as
  serde_json does.
- *Error handling* (DSL.md "Errors"): a missing path is ``JsonPathNotFound``, a wrong operand
  type, division by zero or a non-finite result is ``TransformEvaluation``; then
  ``missing_field_behavior`` decides: ``error`` raises, ``null`` makes the produced value null,
  ``passthrough`` does what StreamForge does for that form (usually: the message unchanged).
  ``null_value_behavior="error"`` makes any present ``null`` read by a transform a
  ``TransformEvaluation`` error whatever the mode; with ``"passthrough"`` a present null gives a
  null result (in ``passthrough`` mode: exactly what StreamForge does with it).
"""

from __future__ import annotations

import enum
import functools
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeAlias, TypeGuard, runtime_checkable

import re2

from pipelines.dsl import ast
from pipelines.dsl.errors import EvaluationError
from pipelines.dsl.hashing import hex_digest

__all__ = [
    "JSON",
    "MISSING",
    "DestinationSpec",
    "DictStore",
    "ErrorHandling",
    "KeyValueStore",
    "Message",
    "Outcome",
    "apply_transform",
    "compile_regex",
    "decode_json_text",
    "decode_value",
    "evaluate_destination",
    "evaluate_destinations",
    "evaluate_filter",
    "evaluate_header_transform",
    "evaluate_key",
    "evaluate_timestamp",
    "hash_input_bytes",
    "number_text",
    "regex_replace_all",
    "replacement_groups",
    "resolve_path",
    "rust_replacement_parts",
    "serialize_value",
]

JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

_EPSILON = sys.float_info.epsilon  # == Rust f64::EPSILON, used by StreamForge's == and DIV
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_INDEX = re.compile(r"0|[1-9][0-9]*")
# Rust char::is_whitespace (Unicode White_Space); Python's str.strip() also strips \x1c-\x1f.
_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


class _Missing(enum.Enum):
    """Marker for "the path does not resolve" (distinct from a present JSON null)."""

    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing.MISSING


# --------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One Kafka record as the DSL sees it. ``timestamp_ms`` is epoch milliseconds."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class ErrorHandling:
    """A pipeline's ``error_handling`` block (DSL.md "Errors")."""

    missing_field_behavior: Literal["error", "passthrough", "null"] = "error"
    null_value_behavior: Literal["passthrough", "error"] = "passthrough"


@runtime_checkable
class KeyValueStore(Protocol):
    """Named key-value stores for ``CACHE_LOOKUP`` / ``CACHE_PUT`` (Redis in production)."""

    def get(self, store: str, key: str) -> JSON | None:
        """The stored value, or ``None`` on a miss."""
        ...

    def put(self, store: str, key: str, value: JSON) -> None:
        """Store ``value`` under ``key`` in ``store``."""
        ...


@dataclass
class DictStore:
    """In-memory :class:`KeyValueStore` for tests and dry runs."""

    data: dict[str, dict[str, JSON]] = field(default_factory=dict)

    def get(self, store: str, key: str) -> JSON | None:
        return self.data.get(store, {}).get(key)

    def put(self, store: str, key: str, value: JSON) -> None:
        self.data.setdefault(store, {})[key] = value


@dataclass(frozen=True)
class DestinationSpec:
    """One destination of a pipeline revision, already parsed."""

    name: str
    topic: str
    filter: ast.Filter | None = None
    transform: ast.Transform | None = None
    key_transform: ast.KeyTransform | None = None
    headers: tuple[tuple[str, str], ...] = ()
    header_transforms: tuple[tuple[str, ast.HeaderTransform], ...] = ()
    timestamp: ast.TimestampRule | None = None


@dataclass(frozen=True)
class Outcome:
    """What happened to one record for one destination.

    ``produced``: ``value``/``key``/``headers``/``timestamp_ms`` are what to write.
    ``filtered``: everything ``None``/empty. ``dead_lettered``: the original record's value, key,
    headers and timestamp (the DLQ keeps the original bytes) plus ``error_type``/``error_message``.
    """

    kind: Literal["produced", "filtered", "dead_lettered"]
    value: bytes | None = None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    error_type: str | None = None
    error_message: str | None = None


# --------------------------------------------------------------------------------------------
# JSON in and out
# --------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not valid JSON")


def _checked_float(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"number out of range: {text[:40]}")
    return number


def _checked_int(text: str) -> int:
    number = int(text)
    if abs(number) > _U64_MAX:  # serde_json reads it as f64; refuse what f64 cannot hold
        _checked_float(text)
    return number


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

#: The strict decoder, built once: ``json.loads`` with hooks builds a ``JSONDecoder`` per call, which cost a
#: quarter of a 1 KB value's decode (5.8 -> 4.2 µs; bench/FINDINGS.md "Per-record profile"). The stdlib shares
#: its own default decoder across threads the same way.
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_checked_float, parse_int=_checked_int
)


def _has_lone_surrogate(value: JSON) -> bool:
    stack: list[JSON] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return False


def _as_f64(number: int | float) -> float:
    """``serde_json::Value::as_f64``: an integer too large for a float becomes +-infinity."""
    try:
        return float(number)
    except OverflowError:
        return float("inf") if number > 0 else float("-inf")


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of text; a lone surrogate (never from decoded JSON) is a transform error."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EvaluationError("TransformEvaluation", f"text is not valid Unicode: {exc.reason}") from None


def decode_json_text(text: str) -> JSON:
    """Parse JSON text strictly (as serde_json does); raise ``ValueError`` if it is not JSON.

    Refused: ``NaN``/``Infinity`` literals, numbers beyond the float range, lone UTF-16
    surrogate escapes, nesting deeper than Python's recursion limit. Integers stay ``int``,
    numbers with a fraction or exponent are ``float``.
    """
    if text.startswith("\ufeff"):  # what json.loads refuses before decoding (it takes no BOM in a str)
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    try:
        result: JSON = _STRICT_DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(result):
        raise ValueError("lone UTF-16 surrogate in a string")
    return result


def decode_value(value: bytes | None) -> JSON:
    """Decode a record value: strict UTF-8, then strict JSON (StreamForge ``parse_message_value``).

    Raises ``EvaluationError("MessageDeserialization", reason)`` for a ``None`` (tombstone) or
    empty value, invalid UTF-8, or anything :func:`decode_json_text` refuses.
    """
    if value is None:
        raise EvaluationError("MessageDeserialization", "record has no value (tombstone)")
    if len(value) == 0:
        raise EvaluationError("MessageDeserialization", "record value is empty")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvaluationError("MessageDeserialization", f"invalid UTF-8 at byte {exc.start}") from None
    try:
        return decode_json_text(text)
    except ValueError as exc:
        raise EvaluationError("MessageDeserialization", f"invalid JSON: {exc}") from None


def serialize_value(value: JSON) -> bytes:
    """Encode a value for a destination topic: the byte format the Spark side must match too.

    Exactly ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``
    encoded as UTF-8:
    - no whitespace; object keys in insertion order (the order the transform built them: input
      order for pass-through objects, written order for ``CONSTRUCT``, a new field last);
    - strings: raw UTF-8 (no ``\\uXXXX`` for non-ASCII), escapes only for ``"`` ``\\`` and
      control characters: ``\\n`` ``\\r`` ``\\t`` ``\\b`` ``\\f``, others as ``\\u00xx``
      (lowercase hex); U+007F and U+2028/U+2029 are written raw;
    - ``int`` in decimal (any size); ``float`` as Python ``repr``: shortest round-trip digits,
      always with a ``.`` or an exponent (``3.0``, ``0.1``, ``1e-05``, ``1.5e+16``): scientific
      when the decimal exponent is < -4 or >= 16, exponent with a sign and at least 2 digits;
    - ``true``/``false``/``null``.
    Differences from StreamForge's serde_json output (deliberate, for readability and Spark
    parity): serde sorts object keys and prints floats ``1e16``/``0.00001``/``1e-7``.
    A non-finite float raises ``EvaluationError("TransformEvaluation")``.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise EvaluationError("TransformEvaluation", f"value cannot be written as JSON: {exc}") from None
    return _utf8(text)


def _rust_float_text(number: float) -> str:
    """serde_json / ryu spelling of a finite float."""
    if number == 0.0:
        return "-0.0" if str(number).startswith("-") else "0.0"
    sign = "-" if number < 0 else ""
    mantissa, _, exp_text = repr(abs(number)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    exponent = int(exp_text or "0") + len(whole)  # decimal point sits after `exponent` digits
    leading_zeros = len(whole + frac) - len((whole + frac).lstrip("0"))
    exponent -= leading_zeros
    digits = digits.rstrip("0") or "0"
    length = len(digits)
    k = exponent - length  # value == int(digits) * 10**k
    if k >= 0 and exponent <= 16:
        return f"{sign}{digits}{'0' * k}.0"
    if 0 < exponent <= 16:
        return f"{sign}{digits[:exponent]}.{digits[exponent:]}"
    if -5 < exponent <= 0:
        return f"{sign}0.{'0' * -exponent}{digits}"
    if length == 1:
        return f"{sign}{digits}e{exponent - 1}"
    return f"{sign}{digits[0]}.{digits[1:]}e{exponent - 1}"


def number_text(number: int | float) -> str:
    """serde_json ``Number::to_string`` of a JSON number (see "Number text" in the module doc)."""
    if isinstance(number, int) and not isinstance(number, bool):
        if _I64_MIN <= number <= _U64_MAX:
            return str(number)
        number = _as_f64(number)
    if number != number or number in (float("inf"), float("-inf")):
        return "null"  # serde_json has no text for these; only reachable from hand-built values
    return _rust_float_text(float(number))


def _canonical_json(value: JSON, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(number_text(value))
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _canonical_json(item, out)
        out.append("]")
    else:
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _canonical_json(value[key], out)
        out.append("}")


def _scalar_text(value: JSON) -> str:
    """StreamForge's value-to-text for hashing, templates and key text (``src/hash.rs``).

    A string is itself, a number its number text, ``true``/``false``/``null`` as words, an
    object or array its serde_json text (compact, keys sorted, serde number spelling).
    """
    if isinstance(value, str):
        return value
    out: list[str] = []
    _canonical_json(value, out)
    return "".join(out)


def hash_input_bytes(value: JSON) -> bytes:
    """The bytes ``HASH`` digests for ``value`` (StreamForge ``hash_value``): UTF-8 of its text."""
    return _utf8(_scalar_text(value))


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def resolve_path(value: JSON, segments: Iterable[str]) -> JSON | _Missing:
    """The value at ``segments`` or :data:`MISSING` (see "Path lookup" in the module doc)."""
    current: JSON = value
    for segment in segments:
        if isinstance(current, dict):
            if segment not in current:
                return MISSING
            current = current[segment]
        elif isinstance(current, list) and _INDEX.fullmatch(segment):
            index = int(segment)
            if index >= len(current):
                return MISSING
            current = current[index]
        else:
            return MISSING
    return current


def _set_path(root: JSON, segments: tuple[str, ...], new: JSON) -> JSON | _Missing:
    """Copy of ``root`` with ``new`` at ``segments`` (the parent must exist), else MISSING."""
    if not segments:
        return new
    head, rest = segments[0], segments[1:]
    if isinstance(root, dict):
        if rest and head not in root:
            return MISSING
        child = _set_path(root.get(head), rest, new) if rest else new
        if child is MISSING:
            return MISSING
        updated = dict(root)
        updated[head] = child
        return updated
    if isinstance(root, list) and _INDEX.fullmatch(head) and int(head) < len(root):
        child = _set_path(root[int(head)], rest, new) if rest else new
        if child is MISSING:
            return MISSING
        items = list(root)
        items[int(head)] = child
        return items
    return MISSING


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------
# Regular expressions
# --------------------------------------------------------------------------------------------


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our DslParseError, not a line on stderr
    return options


_RE2_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=512)
def compile_regex(pattern: str) -> re2._Regexp[str]:
    """``pattern`` compiled by RE2 (``google-re2``), the linear-time engine of every DSL regex (DSL.md
    "Regular expressions": the Rust ``regex`` crate's semantics; Spark runs the same syntax on RE2/J).

    RE2's defaults: leftmost-first (Perl) matching, ``\\w \\d \\s \\b`` ASCII, ``.`` anything but
    ``\\n``, ``$`` only at the end of the text unless ``(?m)``; a search takes time linear in the text
    whatever the pattern. Raises ``re2.error`` for a pattern RE2 cannot compile (the parser refuses those
    at save time: :func:`pipelines.dsl.parser.check_regex`), ``UnicodeEncodeError`` for a lone surrogate.
    """
    return re2.compile(pattern, _RE2_OPTIONS)


def rust_replacement_parts(replacement: str, names: Mapping[str, int] | None = None) -> tuple[str | int, ...]:
    """Split a Rust ``regex`` replacement string into literal text (``str``) and groups.

    Rules of Rust's ``Captures::expand``: ``$$`` is ``$``; ``${name}`` and ``$name`` (the longest
    run of ``[0-9A-Za-z_]``) name a group, a number meaning a group index (``int``); a ``$``
    that starts neither is literal. A reference to a group that does not exist expands to the
    empty string: a name found in ``names`` (the pattern's named groups: name -> index) becomes its
    index, any other name is dropped. :func:`replacement_groups` resolves against a pattern.
    """
    parts: list[str | int] = []
    literal: list[str] = []
    i = 0
    n = len(replacement)
    while i < n:
        c = replacement[i]
        if c != "$":
            literal.append(c)
            i += 1
            continue
        if replacement.startswith("$$", i):
            literal.append("$")
            i += 2
            continue
        name: str | None = None
        if replacement.startswith("${", i):
            close = replacement.find("}", i + 2)
            if close >= 0:
                name = replacement[i + 2 : close]
                end = close + 1
        else:
            j = i + 1
            while j < n and (
                replacement[j].isascii() and (replacement[j].isalnum() or replacement[j] == "_")
            ):
                j += 1
            if j > i + 1:
                name = replacement[i + 1 : j]
                end = j
        if name is None:
            literal.append("$")
            i += 1
            continue
        if literal:
            parts.append("".join(literal))
            literal = []
        if name.isascii() and name.isdigit():
            parts.append(int(name))
        elif names is not None and name in names:
            parts.append(names[name])
        i = end
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


@functools.lru_cache(maxsize=512)
def replacement_groups(pattern: str, replacement: str) -> tuple[str | int, ...]:
    """:func:`rust_replacement_parts` of ``replacement`` resolved against ``pattern``'s groups: literal
    text (``str``) and group indexes (``int``) only. A named reference becomes its group's index; a
    reference to a group the pattern lacks is dropped (Rust expands it to ""). Cached per (pattern,
    replacement), like the compiled pattern, so a record costs no parse. Raises ``re2.error`` for a pattern
    RE2 cannot compile."""
    compiled = compile_regex(pattern)
    names = compiled.groupindex
    out: list[str | int] = []
    for part in rust_replacement_parts(replacement, names=names):
        if isinstance(part, int) and part > compiled.groups:
            continue
        out.append(part)
    return tuple(out)


def regex_replace_all(pattern: str, replacement: str, text: str) -> str:
    """``STRING:REGEX_REPLACE``: every match of ``pattern`` in ``text`` replaced by the Rust-syntax
    ``replacement`` (``$1``, ``${name}``, ``$$``), as Rust's ``Regex::replace_all`` does: matches are
    found left to right without overlap, and an empty match right after the previous match is skipped
    (Go and RE2/J's own replace-all do the same; Python's ``re`` and ``java.util.regex`` do not). The
    Spark plan's RE2/J UDF (``pipelines/spark/jvm``) implements the same loop. RE2 finds each match in
    time linear in the rest of the text; a pattern whose every search scans to the end before settling on a
    short match (``.*y|x`` on ``xxx...``) makes the whole loop quadratic, as in Rust's own ``replace_all``
    (about 0.2 s here and 3 s in RE2/J for 10 KB of ``x``)."""
    compiled = compile_regex(pattern)
    parts = replacement_groups(pattern, replacement)
    out: list[str] = []
    pos = 0
    last_end = -1
    for match in compiled.finditer(text):
        start, end = match.span()
        if start == end and start == last_end:
            continue
        out.append(text[pos:start])
        for part in parts:
            out.append((match.group(part) or "") if isinstance(part, int) else part)
        pos = end
        last_end = end
    out.append(text[pos:])
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


def _compare(actual: JSON | _Missing, op: ast.CompareOp, literal: ast.Literal) -> bool:
    """StreamForge ``JsonPathFilter::compare`` (``src/filter/mod.rs``)."""
    if actual is MISSING:
        return False
    expected = literal.value
    if isinstance(expected, bool):
        same = isinstance(actual, bool) and actual == expected
        if op == "==":
            return same
        return not same if op == "!=" else False
    if isinstance(expected, float):
        if not _is_number(actual):
            return op == "!="
        number = _as_f64(actual)
        if op == "==":
            return abs(number - expected) < _EPSILON
        if op == "!=":
            return abs(number - expected) >= _EPSILON
        if op == ">":
            return number > expected
        if op == ">=":
            return number >= expected
        if op == "<":
            return number < expected
        return number <= expected
    same = isinstance(actual, str) and actual == expected
    if op == "==":
        return same
    return not same if op == "!=" else False


def _key_text(key: bytes) -> str:
    return key.decode("utf-8", errors="replace")


def _header_lookup(headers: Iterable[tuple[str, bytes | None]], name: str) -> bytes | _Missing | None:
    found: bytes | _Missing | None = MISSING
    for header_name, header_value in headers:
        if header_name == name:
            found = header_value  # the last one wins, as in StreamForge's HashMap
    return found


def evaluate_filter(node: ast.Filter, message: Message, value: JSON, *, now_ms: int) -> bool:
    """Does ``message`` (with decoded ``value``) pass ``node``? Never raises for missing data.

    Rules (DSL.md "Filters", StreamForge ``src/filter/mod.rs`` and ``envelope_filter.rs``):
    comparisons as ``_compare`` (a number literal needs a JSON number, ``==`` within
    ``f64::EPSILON``; a missing path is false for every operator; a type mismatch is false except
    ``!=``); ``REGEX``/``KEY_MATCHES`` search unanchored; ``ARRAY_ALL`` over ``[]`` is true, a
    non-array is false; the key is its bytes as UTF-8 text (invalid bytes replaced), no key fails
    every key filter; a header value is compared as UTF-8 text (a null header value is ``""``, an
    undecodable one counts as missing: ``==`` false, ``!=`` true); ``TIMESTAMP_AGE`` uses
    ``(now_ms - ts) / 1000`` truncated toward zero; no timestamp fails timestamp filters.
    """
    match node:
        case ast.Compare(path=path, op=op, literal=literal):
            return _compare(resolve_path(value, path.segments), op, literal)
        case ast.And(conditions=conditions):
            return all(evaluate_filter(c, message, value, now_ms=now_ms) for c in conditions)
        case ast.Or(conditions=conditions):
            return any(evaluate_filter(c, message, value, now_ms=now_ms) for c in conditions)
        case ast.Not(condition=condition):
            return not evaluate_filter(condition, message, value, now_ms=now_ms)
        case ast.Regex(path=path, pattern=pattern):
            found = resolve_path(value, path.segments)
            return isinstance(found, str) and compile_regex(pattern).search(found) is not None
        case ast.ArrayAny(path=path, element=element):
            found = resolve_path(value, path.segments)
            if not isinstance(found, list):
                return False
            return any(
                _compare(resolve_path(item, element.path.segments), element.op, element.literal)
                for item in found
            )
        case ast.ArrayAll(path=path, element=element):
            found = resolve_path(value, path.segments)
            if not isinstance(found, list):
                return False
            return all(
                _compare(resolve_path(item, element.path.segments), element.op, element.literal)
                for item in found
            )
        case ast.ArrayContains(path=path, literal=literal):
            found = resolve_path(value, path.segments)
            return isinstance(found, list) and any(_compare(item, "==", literal) for item in found)
        case ast.ArrayLength(path=path, op=op, length=length):
            found = resolve_path(value, path.segments)
            if not isinstance(found, list):
                return False
            return _int_compare(len(found), op, length)
        case ast.Exists(path=path):
            return resolve_path(value, path.segments) is not MISSING
        case ast.NotExists(path=path):
            return resolve_path(value, path.segments) is MISSING
        case ast.KeyExists():
            return message.key is not None
        case ast.KeyPrefix(prefix=prefix):
            return message.key is not None and _key_text(message.key).startswith(prefix)
        case ast.KeySuffix(suffix=suffix):
            return message.key is not None and _key_text(message.key).endswith(suffix)
        case ast.KeyContains(substring=substring):
            return message.key is not None and substring in _key_text(message.key)
        case ast.KeyMatches(pattern=pattern):
            return (
                message.key is not None and compile_regex(pattern).search(_key_text(message.key)) is not None
            )
        case ast.HeaderExists(name=name):
            return _header_lookup(message.headers, name) is not MISSING
        case ast.HeaderCompare(name=name, op=op, value=expected):
            raw = _header_lookup(message.headers, name)
            text: str | None = None
            if raw is not MISSING:
                try:
                    text = (raw or b"").decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            if text is None:
                return op == "!="
            return (text == expected) if op == "==" else (text != expected)
        case ast.TimestampAge(op=op, seconds=seconds):
            if message.timestamp_ms is None:
                return False
            elapsed = now_ms - message.timestamp_ms
            age = elapsed // 1000 if elapsed >= 0 else -((-elapsed) // 1000)
            return _int_compare(age, op, seconds)
        case ast.TimestampAfter(epoch_ms=epoch_ms):
            return message.timestamp_ms is not None and message.timestamp_ms > epoch_ms
        case ast.TimestampBefore(epoch_ms=epoch_ms):
            return message.timestamp_ms is not None and message.timestamp_ms < epoch_ms
    raise TypeError(f"not a filter node: {node!r}")  # pragma: no cover


def _int_compare(left: int, op: str, right: int) -> bool:
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    if op == "<":
        return left < right
    return left <= right


# --------------------------------------------------------------------------------------------
# Transforms
# --------------------------------------------------------------------------------------------


class _Unset:
    pass


_CANNOT = _Unset()  # "this mode cannot produce a value here": raise instead


@dataclass(frozen=True)
class _Ctx:
    handling: ErrorHandling
    store: KeyValueStore | None

    @property
    def passthrough(self) -> bool:
        return self.handling.missing_field_behavior == "passthrough"

    @property
    def null_mode(self) -> bool:
        return self.handling.missing_field_behavior == "null"

    def fail(self, error_type: str, message: str, *, passthrough: JSON, null: JSON | _Unset) -> JSON:
        """Apply missing_field_behavior to a failure of one form."""
        mode = self.handling.missing_field_behavior
        if mode == "passthrough":
            return passthrough
        if mode == "null" and not isinstance(null, _Unset):
            return null
        raise EvaluationError(error_type, message)

    def check_null(self, found: JSON | _Missing, path: ast.JsonPath) -> None:
        if found is None and self.handling.null_value_behavior == "error":
            raise EvaluationError("TransformEvaluation", f"null value at {path.text}")


def _with_field(value: JSON, name: str, new: JSON) -> JSON | _Unset:
    """``value`` plus a top-level field, or _CANNOT when the message is not an object."""
    if not isinstance(value, dict):
        return _CANNOT
    updated = dict(value)
    updated[name] = new
    return updated


def _require_object(result: JSON | _Unset, form: str) -> JSON:
    if isinstance(result, _Unset):
        raise EvaluationError("TransformEvaluation", f"{form}: the message is not a JSON object")
    return result


def apply_transform(
    node: ast.Transform,
    value: JSON,
    *,
    error_handling: ErrorHandling,
    store: KeyValueStore | None = None,
) -> JSON:
    """Apply a transform to a decoded value and return the new value (never mutates ``value``).

    Raises ``EvaluationError`` with ``JsonPathNotFound`` (a path the form needs is missing) or
    ``TransformEvaluation`` (wrong operand type, division by zero -- ``|divisor| < f64::EPSILON``
    as in StreamForge --, a non-finite result, a present null under
    ``null_value_behavior="error"``, a field to add on a non-object message, ``CACHE_*`` without
    a ``store``), subject to ``error_handling`` (module doc). Per form, in ``passthrough`` mode
    (StreamForge, ``src/filter/mod.rs``): ``/path`` missing -> message unchanged; ``CONSTRUCT``
    omits missing fields; ``ARRAY_MAP`` keeps an element whose element path is missing (and
    leaves the message unchanged when the array is missing or not an array); ``ARITHMETIC`` /
    ``HASH`` / ``STRING:*`` / ``CACHE_*`` leave the message unchanged; ``STRING:CONCAT`` uses ``""``
    for a missing/non-scalar part; ``TRY`` uses its fallback only when the inner transform
    raises (a "passed-through" inner result is kept, as in StreamForge). In ``error`` and
    ``null`` modes ``TRY`` runs its inner transform in ``error`` mode, so any failure of the
    inner transform gives the fallback. ``COALESCE`` skips nulls and never fails on them.
    """
    return _transform(node, value, _Ctx(error_handling, store))


def _transform(node: ast.Transform, value: JSON, ctx: _Ctx) -> JSON:
    match node:
        case ast.Extract(path=path, field=field_name):
            found = resolve_path(value, path.segments)
            if found is MISSING:
                null_result: JSON = None if field_name is None else {field_name: None}
                return ctx.fail(
                    "JsonPathNotFound", f"path {path.text} not found", passthrough=value, null=null_result
                )
            ctx.check_null(found, path)
            return found if field_name is None else {field_name: found}
        case ast.Construct(fields=fields):
            return _construct(fields, value, ctx)
        case ast.ArrayMap():
            return _array_map(node, value, ctx)
        case ast.Arithmetic():
            return _arithmetic(node, value, ctx)
        case ast.Hash():
            return _hash(node, value, ctx)
        case ast.StringConcat():
            return _concat(node, value, ctx)
        case (
            ast.StringUnary()
            | ast.StringSubstring()
            | ast.StringReplace()
            | ast.StringRegexReplace()
            | ast.StringSplit()
        ):
            return _string(node, value, ctx)
        case ast.Coalesce(paths=paths, default=default):
            for path in paths:
                found = resolve_path(value, path.segments)
                if found is not MISSING and found is not None:
                    return found
            if default is not None:
                return _literal_json(default)
            return ctx.fail(
                "JsonPathNotFound",
                "COALESCE: no path has a non-null value",
                passthrough=value,
                null=None,
            )
        case ast.Try(inner=inner, fallback=fallback):
            inner_ctx = (
                ctx
                if ctx.passthrough
                else _Ctx(ErrorHandling("error", ctx.handling.null_value_behavior), ctx.store)
            )
            try:
                return _transform(inner, value, inner_ctx)
            except EvaluationError:
                return fallback
        case ast.CacheLookup():
            return _cache_lookup(node, value, ctx)
        case ast.CachePut():
            return _cache_put(node, value, ctx)
    raise TypeError(f"not a transform node: {node!r}")  # pragma: no cover


def _literal_json(literal: ast.Literal) -> JSON:
    """JSON value of a written default: an integer stays ``int``, other numbers ``float``."""
    if isinstance(literal.value, float):
        text = literal.text.lstrip("+")
        if re.fullmatch(r"-?[0-9]+", text):
            return int(text)
        return literal.value
    return literal.value


def _construct(fields: tuple[tuple[str, ast.JsonPath], ...], value: JSON, ctx: _Ctx) -> JSON:
    result: dict[str, JSON] = {}
    for name, path in fields:
        found = resolve_path(value, path.segments)
        if found is MISSING:
            if ctx.passthrough:
                continue  # StreamForge leaves the field out
            ctx.fail(
                "JsonPathNotFound",
                f"CONSTRUCT field {name!r}: path {path.text} not found",
                passthrough=None,
                null=None,
            )
            result[name] = None
            continue
        ctx.check_null(found, path)
        result[name] = found
    return result


def _array_map(node: ast.ArrayMap, value: JSON, ctx: _Ctx) -> JSON:
    found = resolve_path(value, node.path.segments)
    if found is MISSING:
        return ctx.fail(
            "JsonPathNotFound", f"ARRAY_MAP: path {node.path.text} not found", passthrough=value, null=None
        )
    ctx.check_null(found, node.path)
    if not isinstance(found, list):
        if found is None and not ctx.passthrough:
            return None
        return ctx.fail(
            "TransformEvaluation",
            f"ARRAY_MAP: {node.path.text} is not an array",
            passthrough=value,
            null=None,
        )
    result: list[JSON] = []
    for element in found:
        item = resolve_path(element, node.element_path.segments)
        if item is MISSING:
            item = ctx.fail(
                "JsonPathNotFound",
                f"ARRAY_MAP: element path {node.element_path.text} not found",
                passthrough=element,
                null=None,
            )
        else:
            ctx.check_null(item, node.element_path)
        result.append(item)
    return result


def _arithmetic(node: ast.Arithmetic, value: JSON, ctx: _Ctx) -> JSON:
    operands: list[float] = []
    paths = [node.left] + ([node.right] if isinstance(node.right, ast.JsonPath) else [])
    for path in paths:
        found = resolve_path(value, path.segments)
        if found is MISSING:
            return ctx.fail(
                "JsonPathNotFound", f"ARITHMETIC: path {path.text} not found", passthrough=value, null=None
            )
        ctx.check_null(found, path)
        if found is None and not ctx.passthrough:
            return None
        if not _is_number(found):
            return ctx.fail(
                "TransformEvaluation",
                f"ARITHMETIC: {path.text} is not a number",
                passthrough=value,
                null=None,
            )
        operands.append(_as_f64(found))
    left = operands[0]
    right = operands[1] if isinstance(node.right, ast.JsonPath) else node.right.value
    if node.op == "ADD":
        result = left + right
    elif node.op == "SUB":
        result = left - right
    elif node.op == "MUL":
        result = left * right
    else:
        if abs(right) < _EPSILON:
            return ctx.fail(
                "TransformEvaluation", "ARITHMETIC: division by zero", passthrough=value, null=None
            )
        result = left / right
    if result != result or result in (float("inf"), float("-inf")):
        # serde_json's json!(f64) turns a non-finite result into null.
        return ctx.fail(
            "TransformEvaluation", "ARITHMETIC: result is not a finite number", passthrough=None, null=None
        )
    return result


def _hash(node: ast.Hash, value: JSON, ctx: _Ctx) -> JSON:
    found = resolve_path(value, node.path.segments)
    digest: JSON
    if found is MISSING:
        null_result: JSON | _Unset = None if node.field is None else _with_field(value, node.field, None)
        return ctx.fail(
            "JsonPathNotFound", f"HASH: path {node.path.text} not found", passthrough=value, null=null_result
        )
    ctx.check_null(found, node.path)
    if found is None and not ctx.passthrough:
        digest = None
    else:
        digest = hex_digest(node.algorithm, hash_input_bytes(found))
    if node.field is None:
        return digest
    if isinstance(value, dict):
        return _require_object(_with_field(value, node.field, digest), "HASH")
    if ctx.passthrough:
        return {"original": value, node.field: digest}  # StreamForge wraps a non-object message
    raise EvaluationError("TransformEvaluation", "HASH: the message is not a JSON object")


_StringNode: TypeAlias = (
    ast.StringUnary | ast.StringSubstring | ast.StringReplace | ast.StringRegexReplace | ast.StringSplit
)


def _string_write(node: _StringNode, value: JSON, result: JSON) -> JSON | _Unset:
    if node.field is not None:
        return _with_field(value, node.field, result)
    written = _set_path(value, node.path.segments, result)
    return _CANNOT if written is MISSING else written


def _string(node: _StringNode, value: JSON, ctx: _Ctx) -> JSON:
    found = resolve_path(value, node.path.segments)
    form = f"STRING at {node.path.text}"
    if found is MISSING:
        null_write = _string_write(node, value, None)
        return ctx.fail("JsonPathNotFound", f"{form}: path not found", passthrough=value, null=null_write)
    ctx.check_null(found, node.path)
    if found is None or isinstance(found, (list, dict)):
        if found is None and not ctx.passthrough:
            return _require_object(_string_write(node, value, None), form)
        return ctx.fail(
            "TransformEvaluation",
            f"{form}: value is not a string",
            passthrough=value,
            null=_string_write(node, value, None),
        )
    text = found if isinstance(found, str) else _scalar_text(found)
    result: JSON
    match node:
        case ast.StringUnary(op=op):
            if op == "UPPER":
                result = text.upper()
            elif op == "LOWER":
                result = text.lower()
            elif op == "TRIM":
                result = text.strip(_RUST_WHITESPACE)
            elif op == "TRIM_START":
                result = text.lstrip(_RUST_WHITESPACE)
            elif op == "TRIM_END":
                result = text.rstrip(_RUST_WHITESPACE)
            else:
                result = len(text)
        case ast.StringSubstring(start=start, length=length):
            begin = min(start, len(text))
            result = text[begin:] if length is None else text[begin : min(begin + length, len(text))]
        case ast.StringReplace(old=old, new=new, replace_all=replace_all):
            result = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        case ast.StringRegexReplace(pattern=pattern, replacement=replacement):
            result = regex_replace_all(pattern, replacement, text)
        case ast.StringSplit(delimiter=delimiter):
            result = list(text.split(delimiter))
    return _require_object(_string_write(node, value, result), form)


def _concat(node: ast.StringConcat, value: JSON, ctx: _Ctx) -> JSON:
    pieces: list[str] = []
    produced_null = False
    for part in node.parts:
        if isinstance(part, str):
            pieces.append(part)
            continue
        found = resolve_path(value, part.segments)
        if found is MISSING:
            if ctx.passthrough:
                continue  # StreamForge: a missing part contributes ""
            ctx.fail("JsonPathNotFound", f"CONCAT: path {part.text} not found", passthrough=None, null=None)
            produced_null = True
            continue
        ctx.check_null(found, part)
        if found is None or isinstance(found, (list, dict)):
            if ctx.passthrough:
                continue
            if found is not None:
                ctx.fail(
                    "TransformEvaluation", f"CONCAT: {part.text} is not a scalar", passthrough=None, null=None
                )
            produced_null = True
            continue
        pieces.append(found if isinstance(found, str) else _scalar_text(found))
    result: JSON = None if produced_null else "".join(pieces)
    if not isinstance(value, dict):
        if ctx.passthrough:
            return value  # StreamForge: a non-object message passes through
        raise EvaluationError("TransformEvaluation", "STRING:CONCAT: the message is not a JSON object")
    return _require_object(_with_field(value, node.field, result), "STRING:CONCAT")


def _cache_key(path: ast.JsonPath, value: JSON, ctx: _Ctx, form: str) -> str | _Unset:
    """Key text for a cache form, or _CANNOT when the form should leave the message as is."""
    found = resolve_path(value, path.segments)
    if found is MISSING:
        ctx.fail("JsonPathNotFound", f"{form}: key path {path.text} not found", passthrough=None, null=None)
        return _CANNOT
    ctx.check_null(found, path)
    if isinstance(found, str):
        return found
    if _is_number(found):
        return number_text(found)
    if found is not None:
        ctx.fail(
            "TransformEvaluation",
            f"{form}: key at {path.text} is not a string or number",
            passthrough=None,
            null=None,
        )
    return _CANNOT


def _need_store(ctx: _Ctx, form: str) -> KeyValueStore:
    if ctx.store is None:
        raise EvaluationError("TransformEvaluation", f"{form} needs a key-value store and none is configured")
    return ctx.store


def _cache_lookup(node: ast.CacheLookup, value: JSON, ctx: _Ctx) -> JSON:
    store = _need_store(ctx, "CACHE_LOOKUP")
    key = _cache_key(node.key_path, value, ctx, "CACHE_LOOKUP")
    if isinstance(key, _Unset):
        if ctx.null_mode and node.field is not None and isinstance(value, dict):
            return _require_object(_with_field(value, node.field, None), "CACHE_LOOKUP")
        return value
    cached = store.get(node.store, key)
    if cached is None:
        return value  # a miss is not an error
    if node.field is not None:
        if isinstance(value, dict):
            return _require_object(_with_field(value, node.field, cached), "CACHE_LOOKUP")
        if ctx.passthrough:
            return {"original": value, node.field: cached}
        raise EvaluationError("TransformEvaluation", "CACHE_LOOKUP: the message is not a JSON object")
    if isinstance(value, dict) and isinstance(cached, dict):
        merged = dict(value)
        merged.update(cached)
        return merged
    return ctx.fail(
        "TransformEvaluation",
        "CACHE_LOOKUP MERGE: the message or the cached value is not a JSON object",
        passthrough=value,
        null=value,
    )


def _cache_put(node: ast.CachePut, value: JSON, ctx: _Ctx) -> JSON:
    store = _need_store(ctx, "CACHE_PUT")
    key = _cache_key(node.key_path, value, ctx, "CACHE_PUT")
    if isinstance(key, _Unset):
        return value
    to_store: JSON | _Missing = value
    if node.value_path is not None:
        to_store = resolve_path(value, node.value_path.segments)
        if to_store is MISSING:
            ctx.fail(
                "JsonPathNotFound",
                f"CACHE_PUT: value path {node.value_path.text} not found",
                passthrough=None,
                null=None,
            )
            return value
        ctx.check_null(to_store, node.value_path)
    store.put(node.store, key, to_store)  # type: ignore[arg-type]
    return value


# --------------------------------------------------------------------------------------------
# Key, headers, timestamp
# --------------------------------------------------------------------------------------------


def _key_bytes(key: JSON) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        return _utf8(key)
    return serialize_value(key)


def evaluate_key(
    node: ast.KeyTransform,
    message: Message,
    value: JSON,
    *,
    error_handling: ErrorHandling,
) -> bytes | None:
    """The new record key (``None`` = no key) from a ``key_transform``.

    Encoding: a string key is its UTF-8 bytes; any other JSON key is :func:`serialize_value`
    bytes (StreamForge JSON-encodes every key, so its string keys carry quotes: deliberately not
    reproduced). ``/path``: the value there. ``CONSTRUCT``: the object (missing fields follow
    ``missing_field_behavior``; passthrough omits them). ``HASH:ALG,/path``: the hex digest.
    Template: each ``{/path}`` replaced by the value's text (objects/arrays/null as JSON).
    Constant: the text. A missing path raises ``JsonPathNotFound`` (StreamForge fails the record
    too) unless ``missing_field_behavior == "null"``, which gives no key. A present null follows
    ``null_value_behavior``.
    """
    ctx = _Ctx(error_handling, None)

    def missing(path: ast.JsonPath) -> None:
        if not ctx.null_mode:
            raise EvaluationError("JsonPathNotFound", f"key path {path.text} not found")

    match node:
        case ast.KeyFromPath(path=path):
            found = resolve_path(value, path.segments)
            if found is MISSING:
                missing(path)
                return None
            ctx.check_null(found, path)
            return _key_bytes(found)
        case ast.KeyConstruct(fields=fields):
            return _key_bytes(_construct(fields, value, ctx))
        case ast.KeyHash(algorithm=algorithm, path=path):
            found = resolve_path(value, path.segments)
            if found is MISSING:
                missing(path)
                return None
            ctx.check_null(found, path)
            if found is None and not ctx.passthrough:
                return None
            return hex_digest(algorithm, hash_input_bytes(found)).encode("ascii")
        case ast.KeyTemplate(parts=parts):
            out: list[str] = []
            for part in parts:
                if isinstance(part, str):
                    out.append(part)
                    continue
                found = resolve_path(value, part.segments)
                if found is MISSING:
                    missing(part)
                    return None
                ctx.check_null(found, part)
                out.append(_scalar_text(found))
            return _utf8("".join(out))
        case ast.KeyConstant(value=constant):
            return _utf8(constant)
    raise TypeError(f"not a key transform node: {node!r}")  # pragma: no cover


def evaluate_header_transform(
    name: str,
    node: ast.HeaderTransform,
    message: Message,
    value: JSON,
    out_headers: dict[str, bytes | None],
) -> None:
    """Apply one ``header_transforms`` entry for header ``name`` to ``out_headers`` in place.

    ``FROM:/path``: the header becomes the UTF-8 text of the scalar there (string as is, number
    as number text, ``true``/``false``); a missing path raises ``JsonPathNotFound``, a null,
    object or array ``TransformEvaluation`` (StreamForge fails the record in both cases).
    ``COPY:src``: copies ``src`` as currently in ``out_headers``; nothing happens if it is absent.
    ``REMOVE``: deletes ``name`` if present.
    """
    match node:
        case ast.HeaderFrom(path=path):
            found = resolve_path(value, path.segments)
            if found is MISSING:
                raise EvaluationError("JsonPathNotFound", f"header {name!r}: path {path.text} not found")
            if found is None or isinstance(found, (list, dict)):
                raise EvaluationError("TransformEvaluation", f"header {name!r}: {path.text} is not a scalar")
            out_headers[name] = _utf8(_scalar_text(found))
        case ast.HeaderCopy(source=source):
            if source in out_headers:
                out_headers[name] = out_headers[source]
        case ast.HeaderRemove():
            out_headers.pop(name, None)
        case _:  # pragma: no cover
            raise TypeError(f"not a header transform node: {node!r}")


def evaluate_timestamp(node: ast.TimestampRule, message: Message, value: JSON, *, now_ms: int) -> int | None:
    """The output record timestamp in epoch milliseconds (``None`` = let the producer decide).

    ``PRESERVE``: the record's. ``CURRENT``: ``now_ms``. ``FROM:/path``: a JSON integer in the
    signed 64-bit range (a float does not count, as serde's ``as_i64``); missing ->
    ``JsonPathNotFound``, other -> ``TransformEvaluation``. ``ADD:s``/``SUBTRACT:s``: the record's
    timestamp plus/minus ``s * 1000``; a record without a timestamp -> ``TransformEvaluation``.
    """
    match node:
        case ast.TimestampPreserve():
            return message.timestamp_ms
        case ast.TimestampCurrent():
            return now_ms
        case ast.TimestampFrom(path=path):
            found = resolve_path(value, path.segments)
            if found is MISSING:
                raise EvaluationError("JsonPathNotFound", f"timestamp path {path.text} not found")
            if isinstance(found, int) and not isinstance(found, bool) and _I64_MIN <= found < 2**63:
                return found
            raise EvaluationError(
                "TransformEvaluation", f"timestamp at {path.text} is not an integer (epoch ms)"
            )
        case ast.TimestampAdd(seconds=seconds) | ast.TimestampSubtract(seconds=seconds):
            if message.timestamp_ms is None:
                raise EvaluationError("TransformEvaluation", "the record has no timestamp")
            delta = seconds * 1000
            return message.timestamp_ms + (delta if isinstance(node, ast.TimestampAdd) else -delta)
    raise TypeError(f"not a timestamp node: {node!r}")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# A whole destination
# --------------------------------------------------------------------------------------------


def _dead(message: Message, error: EvaluationError) -> Outcome:
    return Outcome(
        kind="dead_lettered",
        value=message.value,
        key=message.key,
        headers=message.headers,
        timestamp_ms=message.timestamp_ms,
        error_type=error.error_type,
        error_message=error.message,
    )


def _initial_headers(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for name, header_value in headers:
        out[name] = header_value
    return out


def _evaluate_decoded(
    dest: DestinationSpec,
    message: Message,
    value: JSON,
    *,
    error_handling: ErrorHandling,
    now_ms: int,
    store: KeyValueStore | None,
) -> Outcome:
    if dest.filter is not None and not evaluate_filter(dest.filter, message, value, now_ms=now_ms):
        return Outcome(kind="filtered")
    try:
        new_value = value
        if dest.transform is not None:
            new_value = apply_transform(dest.transform, value, error_handling=error_handling, store=store)
        key = message.key
        if dest.key_transform is not None:
            key = evaluate_key(dest.key_transform, message, new_value, error_handling=error_handling)
        headers = _initial_headers(message.headers)
        for name, text in dest.headers:
            headers[name] = _utf8(text)
        for name, header_node in dest.header_transforms:
            evaluate_header_transform(name, header_node, message, new_value, headers)
        timestamp = message.timestamp_ms
        if dest.timestamp is not None:
            timestamp = evaluate_timestamp(dest.timestamp, message, new_value, now_ms=now_ms)
        body = serialize_value(new_value)
    except EvaluationError as error:
        return _dead(message, error)
    return Outcome(
        kind="produced", value=body, key=key, headers=tuple(headers.items()), timestamp_ms=timestamp
    )


def evaluate_destination(
    dest: DestinationSpec,
    message: Message,
    *,
    error_handling: ErrorHandling,
    now_ms: int,
    store: KeyValueStore | None = None,
) -> Outcome:
    """Run one record through one destination: deserialize -> filter -> transform -> key ->
    headers (original, then static ``headers``, then ``header_transforms`` in order) ->
    timestamp -> serialize. Key, header and timestamp forms read the *transformed* value.

    Never raises ``EvaluationError``: failures become ``dead_lettered`` outcomes (a record that
    does not decode is ``MessageDeserialization`` for every destination). ``now_ms`` is epoch ms.
    """
    try:
        value = decode_value(message.value)
    except EvaluationError as error:
        return _dead(message, error)
    return _evaluate_decoded(dest, message, value, error_handling=error_handling, now_ms=now_ms, store=store)


def evaluate_destinations(
    dests: Iterable[DestinationSpec],
    message: Message,
    *,
    error_handling: ErrorHandling,
    now_ms: int,
    store: KeyValueStore | None = None,
) -> tuple[Outcome, ...]:
    """:func:`evaluate_destination` for each destination (fan-out), decoding the value once."""
    dest_list = list(dests)
    try:
        value = decode_value(message.value)
    except EvaluationError as error:
        return tuple(_dead(message, error) for _ in dest_list)
    return tuple(
        _evaluate_decoded(d, message, value, error_handling=error_handling, now_ms=now_ms, store=store)
        for d in dest_list
    )
