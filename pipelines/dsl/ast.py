"""Typed syntax tree of the StreamForge filter / transform DSL (see /work/shared/DSL.md).

Every node is a frozen, slotted dataclass holding plain data, so the Python evaluator and the
Spark compiler can both walk a tree with ``match``. Nodes keep the source spelling they need to be
rendered back (``node.render()`` or :func:`render`), so the UI can show an expression readably.

Guarantee: for any tree produced by :mod:`pipelines.dsl.parser`, parsing ``render(tree)`` gives an
equal tree. A hand-built tree renders to the obvious text, but a few shapes cannot be written in
the DSL (for example a nested ``OR`` group followed, inside an ``AND``, by a plain comparison:
the ``OR`` group would swallow it); :func:`render` does not try to repair those.

Conventions used by the nodes:
- ``JsonPath``: ``/a/b/0``; ``segments`` are the raw segment strings (a numeric segment indexes
  an array, and is an ordinary key on an object).
- ``Literal``: the right side of a comparison. ``value`` is typed like StreamForge does: a
  ``float`` if the text parses as a Rust ``f64`` (this includes ``inf`` and ``nan``), else a
  ``bool`` for exactly ``true`` / ``false``, else the text itself.
- Numbers that StreamForge reads as ``f64`` are kept as ``float``; counts and epoch values that it
  reads as integers are ``int``.

One long module on purpose: it is the whole grammar as data, one small node class per form, each with
the ``render`` that writes it back.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Literal as TypingLiteral
from typing import TypeAlias

__all__ = [
    "AgeOp",
    "And",
    "Arithmetic",
    "ArithmeticOpName",
    "ArrayAll",
    "ArrayAny",
    "ArrayContains",
    "ArrayLength",
    "ArrayMap",
    "CacheLookup",
    "CachePut",
    "Coalesce",
    "Compare",
    "CompareOp",
    "Construct",
    "Exists",
    "Extract",
    "Filter",
    "Hash",
    "HashAlgorithm",
    "HeaderCompare",
    "HeaderCopy",
    "HeaderExists",
    "HeaderFrom",
    "HeaderOp",
    "HeaderRemove",
    "HeaderTransform",
    "JSONValue",
    "JsonPath",
    "KeyConstant",
    "KeyConstruct",
    "KeyContains",
    "KeyExists",
    "KeyFromPath",
    "KeyHash",
    "KeyMatches",
    "KeyPrefix",
    "KeySuffix",
    "KeyTemplate",
    "KeyTransform",
    "Literal",
    "Node",
    "Not",
    "NotExists",
    "NumberLiteral",
    "Or",
    "Regex",
    "StringConcat",
    "StringRegexReplace",
    "StringReplace",
    "StringSplit",
    "StringSubstring",
    "StringUnary",
    "StringUnaryOpName",
    "TimestampAdd",
    "TimestampAfter",
    "TimestampAge",
    "TimestampBefore",
    "TimestampCurrent",
    "TimestampFrom",
    "TimestampPreserve",
    "TimestampRule",
    "TimestampSubtract",
    "Transform",
    "Try",
    "render",
]

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

CompareOp: TypeAlias = TypingLiteral["==", "!=", ">", ">=", "<", "<="]
AgeOp: TypeAlias = TypingLiteral[">", ">=", "<", "<="]
HeaderOp: TypeAlias = TypingLiteral["==", "!="]
HashAlgorithm: TypeAlias = TypingLiteral["MD5", "SHA256", "SHA512", "MURMUR64", "MURMUR128"]
ArithmeticOpName: TypeAlias = TypingLiteral["ADD", "SUB", "MUL", "DIV"]
StringUnaryOpName: TypeAlias = TypingLiteral["UPPER", "LOWER", "TRIM", "TRIM_START", "TRIM_END", "LENGTH"]


# --------------------------------------------------------------------------------------------
# Shared leaves
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonPath:
    """A ``/a/b/c`` path into the message value; ``text`` is the source spelling."""

    text: str
    segments: tuple[str, ...]

    def render(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Literal:
    """A comparison literal: ``text`` as written, ``value`` typed (float, then bool, then str)."""

    text: str
    value: float | bool | str

    def render(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        # NaN literals must compare equal to themselves for AST equality (round trips).
        if not isinstance(other, Literal):
            return NotImplemented
        return self.text == other.text and _same_scalar(self.value, other.value)

    def __hash__(self) -> int:
        return hash(self.text)


@dataclass(frozen=True, slots=True)
class NumberLiteral:
    """A finite number written in an expression (ARITHMETIC right operand); kept as ``float``."""

    text: str
    value: float

    def render(self) -> str:
        return self.text


def _same_scalar(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compare:
    """``/path,OP,literal``."""

    path: JsonPath
    op: CompareOp
    literal: Literal

    def render(self) -> str:
        return f"{self.path.text},{self.op},{self.literal.text}"


@dataclass(frozen=True, slots=True)
class And:
    """``AND:c1:c2:...``: all conditions hold."""

    conditions: tuple[Filter, ...]

    def render(self) -> str:
        return "AND:" + ":".join(_render_list_item(c) for c in self.conditions)


@dataclass(frozen=True, slots=True)
class Or:
    """``OR:c1:c2:...``: at least one condition holds."""

    conditions: tuple[Filter, ...]

    def render(self) -> str:
        return "OR:" + ":".join(_render_list_item(c) for c in self.conditions)


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT:cond``."""

    condition: Filter

    def render(self) -> str:
        return "NOT:" + self.condition.render()


@dataclass(frozen=True, slots=True)
class Regex:
    """``REGEX:/path,pattern``: unanchored search on a string value."""

    path: JsonPath
    pattern: str

    def render(self) -> str:
        return f"REGEX:{self.path.text},{self.pattern}"


@dataclass(frozen=True, slots=True)
class ArrayAny:
    """``ARRAY_ANY:/arr,/elem,OP,value``: some element satisfies ``element`` (path relative to it)."""

    path: JsonPath
    element: Compare

    def render(self) -> str:
        return f"ARRAY_ANY:{self.path.text},{self.element.render()}"


@dataclass(frozen=True, slots=True)
class ArrayAll:
    """``ARRAY_ALL:/arr,/elem,OP,value``: every element satisfies ``element``; true on ``[]``."""

    path: JsonPath
    element: Compare

    def render(self) -> str:
        return f"ARRAY_ALL:{self.path.text},{self.element.render()}"


@dataclass(frozen=True, slots=True)
class ArrayContains:
    """``ARRAY_CONTAINS:/arr,value``: some element ``==`` the literal."""

    path: JsonPath
    literal: Literal

    def render(self) -> str:
        return f"ARRAY_CONTAINS:{self.path.text},{self.literal.text}"


@dataclass(frozen=True, slots=True)
class ArrayLength:
    """``ARRAY_LENGTH:/arr,OP,n``."""

    path: JsonPath
    op: CompareOp
    length: int

    def render(self) -> str:
        return f"ARRAY_LENGTH:{self.path.text},{self.op},{self.length}"


@dataclass(frozen=True, slots=True)
class Exists:
    """``EXISTS:/path`` (a present ``null`` exists)."""

    path: JsonPath

    def render(self) -> str:
        return f"EXISTS:{self.path.text}"


@dataclass(frozen=True, slots=True)
class NotExists:
    """``NOT_EXISTS:/path``."""

    path: JsonPath

    def render(self) -> str:
        return f"NOT_EXISTS:{self.path.text}"


@dataclass(frozen=True, slots=True)
class KeyExists:
    """``KEY_EXISTS``: the record has a key."""

    def render(self) -> str:
        return "KEY_EXISTS"


@dataclass(frozen=True, slots=True)
class KeyPrefix:
    """``KEY_PREFIX:s``."""

    prefix: str

    def render(self) -> str:
        return f"KEY_PREFIX:{self.prefix}"


@dataclass(frozen=True, slots=True)
class KeySuffix:
    """``KEY_SUFFIX:s``."""

    suffix: str

    def render(self) -> str:
        return f"KEY_SUFFIX:{self.suffix}"


@dataclass(frozen=True, slots=True)
class KeyContains:
    """``KEY_CONTAINS:s``."""

    substring: str

    def render(self) -> str:
        return f"KEY_CONTAINS:{self.substring}"


@dataclass(frozen=True, slots=True)
class KeyMatches:
    """``KEY_MATCHES:regex``: unanchored search on the key text."""

    pattern: str

    def render(self) -> str:
        return f"KEY_MATCHES:{self.pattern}"


@dataclass(frozen=True, slots=True)
class HeaderExists:
    """``HEADER_EXISTS:name``."""

    name: str

    def render(self) -> str:
        return f"HEADER_EXISTS:{self.name}"


@dataclass(frozen=True, slots=True)
class HeaderCompare:
    """``HEADER:name,==|!=,value`` (text comparison; a missing header: ``==`` false, ``!=`` true)."""

    name: str
    op: HeaderOp
    value: str

    def render(self) -> str:
        return f"HEADER:{self.name},{self.op},{self.value}"


@dataclass(frozen=True, slots=True)
class TimestampAge:
    """``TIMESTAMP_AGE:OP,seconds``: ``(now_ms - ts_ms) // 1000`` (truncated) OP seconds."""

    op: AgeOp
    seconds: int

    def render(self) -> str:
        return f"TIMESTAMP_AGE:{self.op},{self.seconds}"


@dataclass(frozen=True, slots=True)
class TimestampAfter:
    """``TIMESTAMP_AFTER:epoch_ms``: record timestamp strictly after."""

    epoch_ms: int

    def render(self) -> str:
        return f"TIMESTAMP_AFTER:{self.epoch_ms}"


@dataclass(frozen=True, slots=True)
class TimestampBefore:
    """``TIMESTAMP_BEFORE:epoch_ms``: record timestamp strictly before."""

    epoch_ms: int

    def render(self) -> str:
        return f"TIMESTAMP_BEFORE:{self.epoch_ms}"


Filter: TypeAlias = (
    Compare
    | And
    | Or
    | Not
    | Regex
    | ArrayAny
    | ArrayAll
    | ArrayContains
    | ArrayLength
    | Exists
    | NotExists
    | KeyExists
    | KeyPrefix
    | KeySuffix
    | KeyContains
    | KeyMatches
    | HeaderExists
    | HeaderCompare
    | TimestampAge
    | TimestampAfter
    | TimestampBefore
)


def _render_list_item(node: Filter) -> str:
    """Render a condition as an item of an ``AND:``/``OR:`` list (items are ``:``-separated)."""
    if isinstance(node, Not):
        return "NOT:" + _render_list_item(node.condition)
    return node.render()


# --------------------------------------------------------------------------------------------
# Transforms
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Extract:
    """``/path`` / ``EXTRACT:/path`` (the value) or ``EXTRACT:/path,field`` (``{field: value}``)."""

    path: JsonPath
    field: str | None = None

    def render(self) -> str:
        if self.field is None:
            return self.path.text
        return f"EXTRACT:{self.path.text},{self.field}"


@dataclass(frozen=True, slots=True)
class Construct:
    """``CONSTRUCT:f1=/p1:f2=/p2``; fields in written order."""

    fields: tuple[tuple[str, JsonPath], ...]

    def render(self) -> str:
        return "CONSTRUCT:" + ":".join(f"{name}={path.text}" for name, path in self.fields)


@dataclass(frozen=True, slots=True)
class ArrayMap:
    """``ARRAY_MAP:/arr,/elemPath``."""

    path: JsonPath
    element_path: JsonPath

    def render(self) -> str:
        return f"ARRAY_MAP:{self.path.text},{self.element_path.text}"


@dataclass(frozen=True, slots=True)
class Arithmetic:
    """``ARITHMETIC:OP,/left,/right-or-number``; the result is always a float."""

    op: ArithmeticOpName
    left: JsonPath
    right: JsonPath | NumberLiteral

    def render(self) -> str:
        return f"ARITHMETIC:{self.op},{self.left.text},{self.right.render()}"


@dataclass(frozen=True, slots=True)
class Hash:
    """``HASH:ALG,/path[,field]``; ``algorithm_text`` keeps the spelling (``sha-256`` ...)."""

    algorithm: HashAlgorithm
    path: JsonPath
    field: str | None = None
    algorithm_text: str = ""

    def render(self) -> str:
        alg = self.algorithm_text or self.algorithm
        tail = "" if self.field is None else f",{self.field}"
        return f"HASH:{alg},{self.path.text}{tail}"


def _field_tail(field: str | None) -> str:
    return "" if field is None else f",{field}"


@dataclass(frozen=True, slots=True)
class StringUnary:
    """``STRING:UPPER|LOWER|TRIM|TRIM_START|TRIM_END|LENGTH,/path[,field]``."""

    op: StringUnaryOpName
    path: JsonPath
    field: str | None = None

    def render(self) -> str:
        return f"STRING:{self.op},{self.path.text}{_field_tail(self.field)}"


@dataclass(frozen=True, slots=True)
class StringSubstring:
    """``STRING:SUBSTRING,/path,start[,length][,field]`` (in characters)."""

    path: JsonPath
    start: int
    length: int | None = None
    field: str | None = None

    def render(self) -> str:
        length = "" if self.length is None else f",{self.length}"
        return f"STRING:SUBSTRING,{self.path.text},{self.start}{length}{_field_tail(self.field)}"


@dataclass(frozen=True, slots=True)
class StringReplace:
    """``STRING:REPLACE|REPLACE_ALL,/path,from,to[,field]`` (literal text, first or all)."""

    path: JsonPath
    old: str
    new: str
    replace_all: bool
    field: str | None = None

    def render(self) -> str:
        op = "REPLACE_ALL" if self.replace_all else "REPLACE"
        return f"STRING:{op},{self.path.text},{self.old},{self.new}{_field_tail(self.field)}"


@dataclass(frozen=True, slots=True)
class StringRegexReplace:
    """``STRING:REGEX_REPLACE,/path,pattern,replacement[,field]`` (all matches).

    ``replacement`` is kept as written (Rust ``regex`` syntax: ``$1``, ``${name}``, ``$$``).
    """

    path: JsonPath
    pattern: str
    replacement: str
    field: str | None = None

    def render(self) -> str:
        return (
            f"STRING:REGEX_REPLACE,{self.path.text},{self.pattern},{self.replacement}"
            f"{_field_tail(self.field)}"
        )


@dataclass(frozen=True, slots=True)
class StringSplit:
    """``STRING:SPLIT,/path,delim[,field]``."""

    path: JsonPath
    delimiter: str
    field: str | None = None

    def render(self) -> str:
        return f"STRING:SPLIT,{self.path.text},{self.delimiter}{_field_tail(self.field)}"


@dataclass(frozen=True, slots=True)
class StringConcat:
    """``STRING:CONCAT,field,part,...``: a ``JsonPath`` part is read, a ``str`` part is literal."""

    field: str
    parts: tuple[JsonPath | str, ...]

    def render(self) -> str:
        rendered = [p.text if isinstance(p, JsonPath) else p for p in self.parts]
        return "STRING:CONCAT," + ",".join([self.field, *rendered])


@dataclass(frozen=True, slots=True)
class Coalesce:
    """``COALESCE:/p1,/p2,...[,default]``: the first present non-null value, else ``default``."""

    paths: tuple[JsonPath, ...]
    default: Literal | None = None

    def render(self) -> str:
        items = [p.text for p in self.paths]
        if self.default is not None:
            items.append(self.default.text)
        return "COALESCE:" + ",".join(items)


@dataclass(frozen=True, slots=True)
class Try:
    """``TRY:inner,fallback``: ``fallback_text`` as written, ``fallback`` its JSON value."""

    inner: Transform
    fallback_text: str
    fallback: JSONValue

    def render(self) -> str:
        return f"TRY:{self.inner.render()},{self.fallback_text}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Try):
            return NotImplemented
        return (
            self.inner == other.inner
            and self.fallback_text == other.fallback_text
            and json.dumps(self.fallback, sort_keys=True) == json.dumps(other.fallback, sort_keys=True)
        )

    def __hash__(self) -> int:
        return hash((self.inner, self.fallback_text))


@dataclass(frozen=True, slots=True)
class CacheLookup:
    """``CACHE_LOOKUP:/key,store,field`` or ``...,MERGE`` (``field is None`` means MERGE)."""

    key_path: JsonPath
    store: str
    field: str | None

    def render(self) -> str:
        return f"CACHE_LOOKUP:{self.key_path.text},{self.store},{self.field or 'MERGE'}"


@dataclass(frozen=True, slots=True)
class CachePut:
    """``CACHE_PUT:/key,store[,/valuePath]`` (whole message when ``value_path`` is None)."""

    key_path: JsonPath
    store: str
    value_path: JsonPath | None = None

    def render(self) -> str:
        tail = "" if self.value_path is None else f",{self.value_path.text}"
        return f"CACHE_PUT:{self.key_path.text},{self.store}{tail}"


Transform: TypeAlias = (
    Extract
    | Construct
    | ArrayMap
    | Arithmetic
    | Hash
    | StringUnary
    | StringSubstring
    | StringReplace
    | StringRegexReplace
    | StringSplit
    | StringConcat
    | Coalesce
    | Try
    | CacheLookup
    | CachePut
)


# --------------------------------------------------------------------------------------------
# Destination-level forms
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyFromPath:
    """key_transform ``/path``."""

    path: JsonPath

    def render(self) -> str:
        return self.path.text


@dataclass(frozen=True, slots=True)
class KeyConstruct:
    """key_transform ``CONSTRUCT:f1=/p1:...``: the key is the JSON object."""

    fields: tuple[tuple[str, JsonPath], ...]

    def render(self) -> str:
        return "CONSTRUCT:" + ":".join(f"{name}={path.text}" for name, path in self.fields)


@dataclass(frozen=True, slots=True)
class KeyHash:
    """key_transform ``HASH:ALG,/path``: the key is the hex digest."""

    algorithm: HashAlgorithm
    path: JsonPath
    algorithm_text: str = ""

    def render(self) -> str:
        return f"HASH:{self.algorithm_text or self.algorithm},{self.path.text}"


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """key_transform template such as ``user-{/user/id}``.

    ``parts`` alternates literal text (``str``) and placeholders (``JsonPath``), in order.
    """

    template: str
    parts: tuple[str | JsonPath, ...]

    def render(self) -> str:
        return self.template


@dataclass(frozen=True, slots=True)
class KeyConstant:
    """key_transform constant text."""

    value: str

    def render(self) -> str:
        return self.value


KeyTransform: TypeAlias = KeyFromPath | KeyConstruct | KeyHash | KeyTemplate | KeyConstant


@dataclass(frozen=True, slots=True)
class HeaderFrom:
    """header_transforms ``FROM:/path``: the header becomes the scalar's text."""

    path: JsonPath

    def render(self) -> str:
        return f"FROM:{self.path.text}"


@dataclass(frozen=True, slots=True)
class HeaderCopy:
    """header_transforms ``COPY:other-header``."""

    source: str

    def render(self) -> str:
        return f"COPY:{self.source}"


@dataclass(frozen=True, slots=True)
class HeaderRemove:
    """header_transforms ``REMOVE``."""

    def render(self) -> str:
        return "REMOVE"


HeaderTransform: TypeAlias = HeaderFrom | HeaderCopy | HeaderRemove


@dataclass(frozen=True, slots=True)
class TimestampPreserve:
    """timestamp ``PRESERVE``."""

    def render(self) -> str:
        return "PRESERVE"


@dataclass(frozen=True, slots=True)
class TimestampCurrent:
    """timestamp ``CURRENT`` (processing time, ms)."""

    def render(self) -> str:
        return "CURRENT"


@dataclass(frozen=True, slots=True)
class TimestampFrom:
    """timestamp ``FROM:/path``: an integer epoch-milliseconds value in the message."""

    path: JsonPath

    def render(self) -> str:
        return f"FROM:{self.path.text}"


@dataclass(frozen=True, slots=True)
class TimestampAdd:
    """timestamp ``ADD:seconds``."""

    seconds: int

    def render(self) -> str:
        return f"ADD:{self.seconds}"


@dataclass(frozen=True, slots=True)
class TimestampSubtract:
    """timestamp ``SUBTRACT:seconds``."""

    seconds: int

    def render(self) -> str:
        return f"SUBTRACT:{self.seconds}"


TimestampRule: TypeAlias = (
    TimestampPreserve | TimestampCurrent | TimestampFrom | TimestampAdd | TimestampSubtract
)

Node: TypeAlias = Filter | Transform | KeyTransform | HeaderTransform | TimestampRule | JsonPath


def render(node: Node) -> str:
    """Render any node back to DSL text (same as ``node.render()``)."""
    return node.render()
