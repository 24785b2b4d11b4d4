"""Compile StreamForge DSL trees (:mod:`pipelines.dsl.ast`) into Apache Spark ``Column`` expressions.

The pure-Python evaluator (:mod:`pipelines.dsl.evaluate`) is the reference: every form compiled
here must give the same outcome, error type, key, headers, timestamp and (parsed) value as
``evaluate.evaluate_destination`` on the same record (DSL.md, last paragraph). The agreement is
tested with hypothesis in ``tests/pipelines/dsl/test_spark_agreement.py``.

How values are represented:
- The message value is a ``VARIANT`` column (``parse_json`` of the UTF-8 text). A path that does
  not resolve is SQL ``NULL`` ("missing"); a present JSON ``null`` is a variant null
  (``is_variant_null``). Paths are resolved with ``try_variant_get`` using quoted path segments;
  a numeric segment reads the object key *or* the array element (only one can exist), as
  ``evaluate.resolve_path`` does; keys the Spark path grammar cannot quote go through a
  ``map<string,variant>`` cast.
- A compiled transform is a struct column ``<v: variant, j: string, t: string, m: string>``: the
  new value ``v``, optionally its JSON text ``j`` when the form knows the evaluator's exact bytes
  (``CONSTRUCT`` field order, ``TRY`` fallbacks), and the error type/message ``t``/``m``
  (non-null = the record goes to the DLQ).

Built-in Spark functions only, except the regex forms and ``HASH`` with ``MURMUR64``/``MURMUR128``,
``CACHE_LOOKUP`` / ``CACHE_PUT``. The latter three call the evaluator through Python UDFs
(:mod:`pipelines.dsl.spark_udfs`); which forms those are is decided once, by
:mod:`pipelines.dsl.python_forms` (spec validation refuses them for ``low_latency``). ``REGEX:``,
``KEY_MATCHES:`` and ``STRING:REGEX_REPLACE`` call our JVM functions over RE2/J
(:data:`REGEX_FUNCTIONS`, sources in ``pipelines/spark/jvm``): linear time on any record (Spark's own
``rlike``/``regexp_replace`` use ``java.util.regex``, which backtracks: ``(a+)+$`` on a few dozen
characters stalls a task), the same RE2 syntax and Rust replace-all rule as the evaluator, and no Python
worker, so ``low_latency`` (Spark's real-time mode) may use them.

Session requirements: :data:`REQUIRED_SPARK_CONF` (duplicate JSON object keys: the last one wins,
as in Python's ``json``) and :func:`register_functions`; the driver applies both when it builds the
session (:func:`pipelines.spark.session.build_session`).

No Django here: the Spark driver imports this on cluster nodes.
One long module on purpose: it mirrors the evaluator form by form, and each form's compilation reads
best beside the shared column representation it builds on (split by form, the agreement would be harder
to check).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.dsl import ast
from pipelines.dsl.evaluate import (
    DestinationSpec,
    ErrorHandling,
    KeyValueStore,
    replacement_groups,
)
from pipelines.dsl.python_forms import hash_needs_python

__all__ = [
    "HEADERS_TYPE",
    "REGEX_FUNCTIONS",
    "REQUIRED_SPARK_CONF",
    "CompiledDestination",
    "SourceColumns",
    "StagedPlan",
    "compile_filter",
    "compile_key",
    "compile_stages",
    "compile_timestamp",
    "compile_transform",
    "destination_stages",
    "json_path",
    "lenient_parse_stages",
    "parse_stages",
    "parsed_value",
    "register_functions",
    "stage_destinations",
    "value_text",
]

REQUIRED_SPARK_CONF: dict[str, str] = {
    # Python's json (the evaluator) keeps the last of duplicate object keys; Spark refuses the
    # whole document unless this is on, and then also keeps the last one.
    "spark.sql.variant.allowDuplicateKeys": "true",
}
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
#: The JVM functions the plan calls, SQL name -> (Java class, return type): a Spark ``UDF2``/``UDF3`` over
#: RE2/J each (``pipelines/spark/jvm``; the jar is built by ``devstack.jars.regex_udf_jar``).
REGEX_FUNCTIONS: dict[str, tuple[str, str]] = {
    "streamforge_regex_find": ("dev.streamforge.regex.RegexFind", "boolean"),
    "streamforge_regex_replace": ("dev.streamforge.regex.RegexReplaceAll", "string"),
}

_EPSILON = sys.float_info.epsilon
_I64_MIN, _I64_MAX, _U64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_INT_MAX = 2**31 - 1
_INDEX = re.compile(r"0|[1-9][0-9]*")
_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_JSON_WHITESPACE = " \t\n\r"
# A JSON string literal (possessive, so Java never recurses per character). Never starting at a quote right
# after a backslash: in JSON an opening quote follows a bracket, a comma, a colon or white space, and without
# that rule a value like '"\\"\\"\\"...' (never closed) made every quote a start scanning to the end: 2.5 s
# for 10 KB, 36 s for 40 KB in java.util.regex (review #28, finding 1; tests/pipelines/dsl/test_spark_regex.py).
_JSON_STRING = r'(?<!\\)"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_JSON_SCALAR = (
    r"^(?:" + _JSON_STRING + r"|-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?|true|false|null)$"
)
# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF escape, or a low one not preceded by a high
# one (a real escape: preceded by an even number of backslashes).
_LONE_SURROGATE = (
    r"(?<!\\)(?:\\\\)*+\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})(?<!\\)(?:\\\\)*+\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_INTEGRAL_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_NUMBER_KINDS = (*_INTEGRAL_KINDS, "FLOAT", "DOUBLE")


# --------------------------------------------------------------------------------------------
# Source columns and deserialization
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceColumns:
    """The record columns the DSL reads; defaults are the Kafka source's column names.

    ``value``/``key``: binary; ``headers``: ``array<struct<key:string,value:binary>>``;
    ``timestamp``: timestamp (null = the record has none).
    """

    value: Column
    key: Column
    headers: Column
    timestamp: Column

    @classmethod
    def kafka(cls) -> SourceColumns:
        """Columns of Spark's Kafka source (``value``, ``key``, ``headers``, ``timestamp``)."""
        return cls(
            value=F.col("value"), key=F.col("key"), headers=F.col("headers"), timestamp=F.col("timestamp")
        )


def _str_null() -> Column:
    return F.lit(None).cast("string")


def _variant_null_sql() -> Column:
    return F.lit(None).cast("variant")


def _json_null() -> Column:
    """A present JSON ``null`` (a variant null, not SQL NULL)."""
    return F.parse_json(F.lit("null"))


def _decimal(number: int) -> Column:
    """An integer literal of any size up to 38 digits (py4j cannot pass ints beyond a long)."""
    return F.lit(str(number)).cast("decimal(38,0)")


def _count(text: Column, char: str) -> Column:
    return F.length(text) - F.length(F.replace(text, F.lit(char), F.lit("")))


#: Closes the array a value is parsed inside (see ``parsed_value``); chosen to be absent from real data.
_SENTINEL = "__streamforge:end-of-value:5c1e0d__"


def parsed_value(source: SourceColumns) -> tuple[Column, Column]:
    """``(value VARIANT or null, deserialization error message or null)`` for each record, as two
    self-contained expressions. Pipelines run the same logic as the projections of
    :func:`parse_stages`, which compute each costly piece once per record.

    Implements ``evaluate.decode_value`` (DSL.md "Errors"): invalid JSON or invalid UTF-8 is
    ``MessageDeserialization``.
    """
    escaped = _has_escape(source)
    wrapped = F.when(~escaped, _wrapped_parse(source))
    parsed = F.when(escaped, _exact_parse(source))
    error = _parse_error(source, wrapped, escaped, parsed)
    return _parse_value(wrapped, escaped, parsed, error), error


def parse_stages(source: SourceColumns, *, exact: bool = True) -> list[list[Column]]:
    """The deserialization as projections to add to the row one after the other; the last two add
    ``__de`` (the deserialization error message, or null) and ``__v`` (the value VARIANT, a variant null
    where ``__de`` is set).

    ``exact=False`` (:func:`lenient_parse_stages`) leaves the strict checks to whoever reads the rows:
    the micro-batch writer, which runs the evaluator's own decoder on each value
    (``pipelines.spark.writer.deserialization_error``).

    Before them: ``__pe`` (the text holds a ``\\u`` escape), then ``__pw`` (the fast-path parse, only
    without escapes) and ``__pp`` (the exact-path parse, only with escapes). Written as one expression
    (:func:`parsed_value`), Spark evaluated the parse and the checks several times per record (the
    value's CASE repeats the error's, and subexpression elimination does not share conditional
    branches): about 3x the cost of parsing once. Spark's CollapseProject does not merge a projection
    whose non-trivial columns the next one reads several times, so each stage runs once per row.
    """
    if not exact:
        return lenient_parse_stages(source)
    escaped, wrapped, parsed = F.col("__pe"), F.col("__pw"), F.col("__pp")
    return [
        [_has_escape(source).alias("__pe")],
        [
            F.when(~escaped, _wrapped_parse(source)).alias("__pw"),
            F.when(escaped, _exact_parse(source)).alias("__pp"),
        ],
        [_parse_error(source, wrapped, escaped, parsed).alias("__de")],
        [_parse_value(wrapped, escaped, parsed, F.col("__de")).alias("__v")],
    ]


def lenient_parse_stages(source: SourceColumns) -> list[list[Column]]:
    """Spark's own parse, without the checks that make it refuse exactly what Python refuses: ``__pp`` (the
    parse), then ``__de`` (set for a tombstone, an empty value, or a text Spark cannot parse at all) and
    ``__v``. Spark accepts more than the evaluator (content after the first value, ``1e400`` as Infinity,
    lone ``\\uD800`` escapes, invalid UTF-8 replaced), never less (``tests/pipelines/dsl``): where both
    accept, the value is the one the exact stages give, so the plan computed on it is right, and what only
    Spark accepts is refused afterwards by the writer with the evaluator's own reason. About 30 of the JVM's
    ~74 CPU µs per record were these checks (bench/FINDINGS.md §7); the evaluator's decoder costs ~5 µs in a
    Python worker.
    """
    raw = source.value
    parsed = F.col("__pp")
    return [
        [F.try_parse_json(raw.cast("string")).alias("__pp")],
        [
            F.when(raw.isNull(), F.lit("record has no value (tombstone)"))
            .when(F.length(raw) == 0, F.lit("record value is empty"))
            .when(parsed.isNull(), F.lit("invalid JSON"))
            .alias("__de"),
            F.coalesce(parsed, _variant_null_sql()).alias("__v"),
        ],
    ]


def _has_escape(source: SourceColumns) -> Column:
    return F.contains(source.value.cast("string"), F.lit("\\u"))


def _wrapped_parse(source: SourceColumns) -> Column:
    # Fast path (every record without a \\u escape). Spark's parser stops after the first JSON value and
    # ignores what follows, so the text is parsed inside a two-element array ending in a sentinel string:
    # ``[<text>,"<sentinel>"]``. The record is one valid JSON value exactly when element 1 of the result is
    # the sentinel and the text itself does not contain it: trailing content either breaks the array or
    # becomes another element. Only a \\u-escaped copy of the sentinel could fake it, and texts with \\u
    # escapes take the exact path (it also catches lone surrogates, which only escapes can express).
    return F.try_parse_json(F.concat(F.lit("["), source.value.cast("string"), F.lit(f',"{_SENTINEL}"]')))


def _exact_parse(source: SourceColumns) -> Column:
    return F.try_parse_json(source.value.cast("string"))


def _parse_value(wrapped: Column, escaped: Column, parsed: Column, error: Column) -> Column:
    fast_value = F.try_variant_get(wrapped, "$[0]", "variant")
    return F.when(error.isNull(), F.when(escaped, parsed).otherwise(fast_value)).otherwise(
        _variant_null_sql()
    )


def _parse_error(source: SourceColumns, wrapped: Column, escaped: Column, parsed: Column) -> Column:
    """The deserialization error message (or null) from the escape flag and the parse that applies
    (requires :data:`REQUIRED_SPARK_CONF` for duplicate keys). Spark's ``parse_json`` alone is laxer
    than Python: it ignores content after the first value (``{"a":1}x``), turns ``1e400`` into Infinity
    and lone ``\\uD800`` escapes into ``?``; those are checked here too. Known difference: Python refuses
    nesting deeper than its recursion limit (a little under 1000), Spark accepts up to 1000."""
    raw = source.value
    text = raw.cast("string")
    # (coalesce: a failed parse gives null, and a null condition would count as "not an error")
    fast_ok = F.coalesce(
        (F.try_variant_get(wrapped, "$[1]", "string") == F.lit(_SENTINEL))
        & ~F.contains(text, F.lit(_SENTINEL)),
        F.lit(False),
    )
    fast_value = F.try_variant_get(wrapped, "$[0]", "variant")
    # 1e400 parses to an infinite double in Spark; Python refuses it. A JSON number can only exceed the
    # double range (1.8e308) with a 3+ digit exponent or with 309+ digits before its point (a number
    # of 39+ digits is a double in the variant, not a decimal). One leading class, then the two
    # branches: as cheap as the exponent check alone (bench.micro; a look-behind form cost 4x). Inside a
    # digit run shorter than 309 every start scans to the run's end, so at most ~154 steps per byte.
    may_overflow = text.rlike(r"[0-9](?:[eE][+]?[0-9]{3}|[0-9]{308})")
    fast_infinite = F.coalesce(
        may_overflow & F.contains(F.to_json(fast_value), F.lit("Infinity")), F.lit(False)
    )
    trimmed = F.trim(text, F.lit(_JSON_WHITESPACE))
    first = F.substring(trimmed, 1, 1)
    last = F.substring(trimmed, -1, 1)
    canonical = F.to_json(parsed)

    def same_brackets(left: Column, right: Column) -> Column:
        return (
            (_count(left, "{") == _count(right, "{"))
            & (_count(left, "}") == _count(right, "}"))
            & (_count(left, "[") == _count(right, "["))
            & (_count(left, "]") == _count(right, "]"))
        )

    def strip_strings(col: Column) -> Column:
        return F.regexp_replace(col, F.lit(_JSON_STRING), F.lit('""'))

    container_ok = (((first == "{") & (last == "}")) | ((first == "[") & (last == "]"))) & (
        same_brackets(trimmed, canonical) | same_brackets(strip_strings(trimmed), strip_strings(canonical))
    )
    single_value = F.when(first.isin("{", "["), container_ok).otherwise(trimmed.rlike(_JSON_SCALAR))
    lone_surrogate = text.rlike(_LONE_SURROGATE)
    infinite = F.contains(canonical, F.lit("Infinity")) & F.contains(
        F.regexp_replace(canonical, F.lit(_JSON_STRING), F.lit('""')), F.lit("Infinity")
    )
    return (
        F.when(raw.isNull(), F.lit("record has no value (tombstone)"))
        .when(F.length(raw) == 0, F.lit("record value is empty"))
        .when(~F.is_valid_utf8(text), F.lit("invalid UTF-8"))
        .when(~escaped & ~fast_ok, F.lit("invalid JSON"))
        .when(~escaped & fast_infinite, F.lit("invalid JSON: number out of range"))
        .when(escaped & (parsed.isNull() | ~single_value), F.lit("invalid JSON"))
        .when(escaped & lone_surrogate, F.lit("invalid JSON: lone UTF-16 surrogate in a string"))
        .when(escaped & infinite, F.lit("invalid JSON: number out of range"))
    )


def value_text(value: Column) -> Column:
    """The JSON text (string) Spark writes for a VARIANT value (``to_json``)."""
    return F.to_json(value)


# --------------------------------------------------------------------------------------------
# Paths and kinds
# --------------------------------------------------------------------------------------------


def _quoted_segment(segment: str) -> str | None:
    """One segment in Spark's variant path syntax, or None when the grammar cannot quote it."""
    if "'" not in segment:
        return f"['{segment}']"
    if '"' not in segment:
        return f'["{segment}"]'
    if "." not in segment and "[" not in segment:
        return f".{segment}"
    return None


def json_path(value: Column, segments: Sequence[str]) -> Column:
    """The VARIANT at ``segments`` of ``value``: SQL NULL when missing, a variant null for JSON null.

    DSL.md "Paths" / ``evaluate.resolve_path``: a segment is an object key; a segment
    ``0|[1-9][0-9]*`` also indexes an array; anything applied to a scalar is missing.
    """
    current = value
    pending: list[str] = []

    def flush(col: Column) -> Column:
        if not pending:
            return col
        path = "$" + "".join(pending)
        pending.clear()
        return F.try_variant_get(col, path, "variant")

    for segment in segments:
        quoted = _quoted_segment(segment)
        if _INDEX.fullmatch(segment) and int(segment) < _INT_MAX:
            current = _let(flush(current), _key_or_index(segment, quoted))
        elif quoted is not None:
            pending.append(quoted)
        else:
            current = _map_lookup(flush(current), segment)
    return flush(current)


def _key_or_index(segment: str, quoted: str | None) -> Callable[[Column], Column]:
    """A numeric segment reads the object key or the array element (only one can exist)."""

    def lookup(container: Column) -> Column:
        by_key = (
            F.try_variant_get(container, "$" + quoted, "variant")
            if quoted is not None
            else _map_lookup(container, segment)
        )
        return F.coalesce(by_key, F.try_variant_get(container, f"$[{int(segment)}]", "variant"))

    return lookup


def _map_lookup(value: Column, key: str) -> Column:
    return F.try_element_at(F.try_variant_get(value, "$", "map<string,variant>"), F.lit(key))


def _kind(value: Column) -> Column:
    return F.schema_of_variant(value)


def _is_null(value: Column) -> Column:
    return F.coalesce(F.is_variant_null(value), F.lit(False))


def _is_string(value: Column) -> Column:
    return F.coalesce(_kind(value) == "STRING", F.lit(False))


def _is_bool(value: Column) -> Column:
    return F.coalesce(_kind(value) == "BOOLEAN", F.lit(False))


def _is_number(value: Column) -> Column:
    kind = _kind(value)
    return F.coalesce(kind.isin(*_NUMBER_KINDS) | kind.startswith("DECIMAL"), F.lit(False))


def _is_object(value: Column) -> Column:
    return F.coalesce(_kind(value).startswith("OBJECT"), F.lit(False))


def _is_container(value: Column) -> Column:
    kind = _kind(value)
    return F.coalesce(kind.startswith("OBJECT") | kind.startswith("ARRAY"), F.lit(False))


def _as_array(value: Column) -> Column:
    return F.try_variant_get(value, "$", "array<variant>")


def _as_string(value: Column) -> Column:
    return F.try_variant_get(value, "$", "string")


def _as_double(value: Column) -> Column:
    return F.try_variant_get(value, "$", "double")


def _to_variant(col: Column) -> Column:
    """A scalar/array Spark column as VARIANT (SQL NULL stays NULL)."""
    return col.cast("variant")


# --------------------------------------------------------------------------------------------
# Text of values (StreamForge's value-to-text: hashing, templates, headers, string ops)
# --------------------------------------------------------------------------------------------


def _float_text(number: Column) -> Column:
    """serde_json/ryu spelling of a finite double (``evaluate._rust_float_text``).

    Digits come from Java's ``Double.toString``, which on Java 17 is not always the shortest
    round-trip form (JDK-4511638, fixed in Java 19); up to two surplus digits are dropped again when
    the shorter digits read back as the same double, which gives Python's ``repr`` digits.
    """

    def split(java: Column) -> Column:  # java: "123.45" or "1.2345E-7"
        whole = F.regexp_extract(java, r"^([0-9]+)\.", 1)
        frac = F.regexp_extract(java, r"^[0-9]+\.([0-9]+)", 1)
        exp_text = F.regexp_extract(java, r"E(-?[0-9]+)$", 1)
        exp10 = F.when(exp_text == "", F.lit(0)).otherwise(exp_text.cast("int"))
        all_digits = F.concat(whole, frac)
        stripped = F.regexp_replace(all_digits, r"^0+", "")
        return F.struct(
            F.regexp_replace(stripped, r"0+$", "").alias("digits"),
            # the decimal point sits after `exponent` digits
            (exp10 + F.length(whole) - (F.length(all_digits) - F.length(stripped))).alias("exponent"),
        )

    def layout(parts: Column) -> Column:
        digits = parts["digits"]
        exponent = parts["exponent"]
        length = F.length(digits)
        k = exponent - length
        rest = F.lit(_INT_MAX)
        return (
            F.when((k >= 0) & (exponent <= 16), F.concat(digits, F.repeat(F.lit("0"), k), F.lit(".0")))
            .when(
                (exponent > 0) & (exponent <= 16),
                F.concat(
                    F.substring(digits, F.lit(1), exponent),
                    F.lit("."),
                    F.substring(digits, exponent + 1, rest),
                ),
            )
            .when(
                (exponent > -5) & (exponent <= 0),
                F.concat(F.lit("0."), F.repeat(F.lit("0"), -exponent), digits),
            )
            .when(length == 1, F.concat(digits, F.lit("e"), (exponent - 1).cast("string")))
            .otherwise(
                F.concat(
                    F.substring(digits, F.lit(1), F.lit(1)),
                    F.lit("."),
                    F.substring(digits, F.lit(2), rest),
                    F.lit("e"),
                    (exponent - 1).cast("string"),
                )
            )
        )

    def shorter(parts: Column) -> Column:
        # Java 17 sometimes prints more digits than the shortest form that reads back as the same double
        # (JDK-4511638). Drop the last digit (rounding half up) when the result still reads back as the
        # same double; the carry of 99..9 -> 100..0 moves the decimal point one place. (The double is
        # read back from the parts, so the lambda refers to nothing outside it: a Python UDF such as
        # MURMUR64's over this text could not be extracted otherwise.)
        digits, exponent = parts["digits"], parts["exponent"]

        def value(d: Column, e: Column) -> Column:
            return F.concat(F.lit("0."), d, F.lit("E"), e.cast("string")).cast("double")

        rounded = F.round(digits.cast("decimal(38,0)"), -1).cast("string")
        candidate = F.regexp_replace(rounded, r"0+$", "")
        moved = exponent + F.length(rounded) - F.length(digits)
        reads_back = F.coalesce(value(candidate, moved) == value(digits, exponent), F.lit(False))
        return F.when(
            (F.length(digits) > 1) & reads_back,
            F.struct(candidate.alias("digits"), moved.alias("exponent")),
        ).otherwise(parts)

    def text(n: Column) -> Column:
        sign = F.when(n < 0, F.lit("-")).otherwise(F.lit(""))
        body = _let(_let(_let(_let(F.abs(n).cast("string"), split), shorter), shorter), layout)
        return F.when(n == 0, F.lit("0.0")).otherwise(F.concat(sign, body))

    return _let(number, text)


def _number_text(value: Column) -> Column:
    """``evaluate.number_text`` for a numeric VARIANT.

    Spark reads a JSON integer as BIGINT (or DECIMAL(p,0) beyond the 64-bit range) and ``1.50``
    as DECIMAL(2,1) but ``1.0`` as DECIMAL(1,0): a scale-0 decimal inside the i64 range can only
    come from a fraction, so it is printed as a float, like Python's ``float``.
    """

    def text(v: Column) -> Column:
        kind = _kind(v)
        big = F.try_variant_get(v, "$", "decimal(38,0)")
        integral = kind.isin(*_INTEGRAL_KINDS) | (
            kind.startswith("DECIMAL(")
            & kind.endswith(",0)")
            & (big > _decimal(_I64_MAX))
            & (big <= _decimal(_U64_MAX))
        )
        return F.when(integral, _as_string(v)).otherwise(_float_text(_as_double(v)))

    return _let(value, text)


def _scalar_text(value: Column) -> Column:
    """``evaluate._scalar_text``: a string as is, numbers as number text, other JSON as text.

    Objects/arrays use Spark's ``to_json`` (keys sorted like serde_json); it prints non-integer
    numbers and control-character escapes differently from the evaluator's canonical JSON.
    """
    return _let(
        value,
        lambda v: (
            F.when(_is_string(v), _as_string(v)).when(_is_number(v), _number_text(v)).otherwise(F.to_json(v))
        ),
    )


# --------------------------------------------------------------------------------------------
# Regular expressions
# --------------------------------------------------------------------------------------------


def register_functions(session: SparkSession) -> None:
    """Register :data:`REGEX_FUNCTIONS` in ``session`` (``spark.udf.registerJavaFunction``). The RE2/J and
    UDF jars must be on the session's classpath (``spark.jars``); Spark raises an ``AnalysisException``
    naming the class otherwise."""
    for name, (java_class, return_type) in REGEX_FUNCTIONS.items():
        session.udf.registerJavaFunction(name, java_class, return_type)


def _regex_find(text: Column, pattern: str) -> Column:
    """Does ``pattern`` match anywhere in ``text`` (RE2/J; NULL text gives NULL)?"""
    return F.call_udf("streamforge_regex_find", text, F.lit(pattern))


def _regex_template(pattern: str, replacement: str) -> str:
    """The canonical template :class:`RegexReplaceAll` expands (``$$`` = ``$``, ``${n}`` = group ``n``),
    from the DSL's Rust-syntax replacement with names resolved (``evaluate.replacement_groups``)."""
    return "".join(
        f"${{{part}}}" if isinstance(part, int) else part.replace("$", "$$")
        for part in replacement_groups(pattern, replacement)
    )


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


def _compare(actual: Column, op: str, literal: ast.Literal) -> Column:
    """``evaluate._compare``: DSL.md comparison rules; never null."""
    expected = literal.value
    result: Column
    if isinstance(expected, bool):
        same = _is_bool(actual) & (F.try_variant_get(actual, "$", "boolean") == F.lit(expected))
        result = same if op == "==" else (~same if op == "!=" else F.lit(False))
    elif isinstance(expected, float):
        number = _as_double(actual)
        if math.isnan(expected):
            numeric = F.lit(False)
        else:
            target = F.lit(expected)
            diff = F.abs(number - target)
            numeric = {
                "==": diff < _EPSILON,
                "!=": diff >= _EPSILON,
                ">": number > target,
                ">=": number >= target,
                "<": number < target,
                "<=": number <= target,
            }[op]
        result = F.when(_is_number(actual), numeric).otherwise(F.lit(op == "!="))
    else:
        same = _is_string(actual) & (_as_string(actual) == F.lit(expected))
        result = same if op == "==" else (~same if op == "!=" else F.lit(False))
    return F.when(actual.isNull(), F.lit(False)).otherwise(F.coalesce(result, F.lit(False)))


def _int_compare(left: Column, op: str, right: int) -> Column:
    target = F.lit(right) if _I64_MIN <= right <= _I64_MAX else _decimal(right)
    return {
        "==": left == target,
        "!=": left != target,
        ">": left > target,
        ">=": left >= target,
        "<": left < target,
        "<=": left <= target,
    }[op]


def _key_text(key: Column) -> Column:
    return F.make_valid_utf8(key.cast("string"))


def _last_header(headers: Column, name: str) -> Column:
    """The last header struct named ``name`` (StreamForge keeps the last), or NULL."""
    matching = F.filter(F.coalesce(headers, F.array().cast(HEADERS_TYPE)), lambda h: h["key"] == F.lit(name))
    return F.when(F.size(matching) > 0, F.try_element_at(matching, F.lit(-1)))


def _timestamp_ms(source: SourceColumns) -> Column:
    return F.unix_millis(source.timestamp)


def compile_filter(
    node: ast.Filter, *, source: SourceColumns, value_variant: Column, now_ms: Column
) -> Column:
    """Boolean column (never null): does the record pass ``node``? (DSL.md "Filters").

    Same rules as ``evaluate.evaluate_filter``: a missing path never matches (``!=`` included),
    a type mismatch matches only ``!=``, ``==`` on numbers is within ``f64::EPSILON``; regexes
    search unanchored with Java flags ``(?dU)`` so ``.``/``^``/``$``/``\\w``/``\\d``/``\\s`` mean what
    Python means; the key is its UTF-8 text with invalid bytes replaced; a missing/undecodable
    header fails ``==`` and passes ``!=``; ``now_ms`` (long, epoch ms) drives ``TIMESTAMP_AGE``
    (whole seconds, truncated toward zero).
    """
    return F.coalesce(_filter(node, source, value_variant, now_ms), F.lit(False))


def _filter(node: ast.Filter, source: SourceColumns, value: Column, now_ms: Column) -> Column:
    def sub(child: ast.Filter) -> Column:
        return F.coalesce(_filter(child, source, value, now_ms), F.lit(False))

    match node:
        case ast.Compare(path=path, op=op, literal=literal):
            return _compare(json_path(value, path.segments), op, literal)
        case ast.And(conditions=conditions):
            out = F.lit(True)
            for condition in conditions:
                out = out & sub(condition)
            return out
        case ast.Or(conditions=conditions):
            out = F.lit(False)
            for condition in conditions:
                out = out | sub(condition)
            return out
        case ast.Not(condition=condition):
            return ~sub(condition)
        case ast.Regex(path=path, pattern=pattern):
            found = json_path(value, path.segments)
            return _is_string(found) & F.coalesce(_regex_find(_as_string(found), pattern), F.lit(False))
        case ast.ArrayAny(path=path, element=element) | ast.ArrayAll(path=path, element=element):
            items = _as_array(json_path(value, path.segments))

            def check(item: Column) -> Column:
                return _compare(json_path(item, element.path.segments), element.op, element.literal)

            test = F.exists(items, check) if isinstance(node, ast.ArrayAny) else F.forall(items, check)
            return F.coalesce(test, F.lit(False))
        case ast.ArrayContains(path=path, literal=literal):
            items = _as_array(json_path(value, path.segments))
            return F.coalesce(F.exists(items, lambda item: _compare(item, "==", literal)), F.lit(False))
        case ast.ArrayLength(path=path, op=op, length=length):
            items = _as_array(json_path(value, path.segments))
            return F.coalesce(_int_compare(F.size(items), op, length), F.lit(False))
        case ast.Exists(path=path):
            return json_path(value, path.segments).isNotNull()
        case ast.NotExists(path=path):
            return json_path(value, path.segments).isNull()
        case ast.KeyExists():
            return source.key.isNotNull()
        case ast.KeyPrefix(prefix=prefix):
            return F.coalesce(F.startswith(_key_text(source.key), F.lit(prefix)), F.lit(False))
        case ast.KeySuffix(suffix=suffix):
            return F.coalesce(F.endswith(_key_text(source.key), F.lit(suffix)), F.lit(False))
        case ast.KeyContains(substring=substring):
            return F.coalesce(F.contains(_key_text(source.key), F.lit(substring)), F.lit(False))
        case ast.KeyMatches(pattern=pattern):
            return F.coalesce(_regex_find(_key_text(source.key), pattern), F.lit(False))
        case ast.HeaderExists(name=name):
            return _last_header(source.headers, name).isNotNull()
        case ast.HeaderCompare(name=name, op=op, value=expected):
            header = _last_header(source.headers, name)
            raw = header["value"]
            text = F.when(header.isNotNull(), F.coalesce(raw.cast("string"), F.lit("")))
            decodable = text.isNotNull() & F.coalesce(F.is_valid_utf8(text), F.lit(False))
            same = decodable & (text == F.lit(expected))
            differs = ~decodable | (text != F.lit(expected))
            return F.coalesce(same if op == "==" else differs, F.lit(op == "!="))
        case ast.TimestampAge(op=op, seconds=seconds):
            elapsed = now_ms.cast("long") - _timestamp_ms(source)
            age = (elapsed.cast("decimal(38,0)") / F.lit(1000)).cast("long")
            return F.coalesce(_int_compare(age, op, seconds), F.lit(False))
        case ast.TimestampAfter(epoch_ms=epoch_ms):
            return F.coalesce(_timestamp_ms(source) > F.lit(epoch_ms), F.lit(False))
        case ast.TimestampBefore(epoch_ms=epoch_ms):
            return F.coalesce(_timestamp_ms(source) < F.lit(epoch_ms), F.lit(False))
    raise TypeError(f"not a filter node: {node!r}")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Transform results
# --------------------------------------------------------------------------------------------


def _result(value: Column, text: Column | None = None) -> Column:
    return F.struct(
        value.alias("v"),
        (text if text is not None else _str_null()).alias("j"),
        _str_null().alias("t"),
        _str_null().alias("m"),
    )


def _error(error_type: str, message: str | Column) -> Column:
    return F.struct(
        _variant_null_sql().alias("v"),
        _str_null().alias("j"),
        F.lit(error_type).alias("t"),
        (message if isinstance(message, Column) else F.lit(message)).alias("m"),
    )


def _cases(branches: Sequence[tuple[Column, Column]], default: Column) -> Column:
    if not branches:
        return default
    chain = F.when(branches[0][0], branches[0][1])
    for condition, outcome in branches[1:]:
        chain = chain.when(condition, outcome)
    return chain.otherwise(default)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """Bind ``value`` once and use it in ``body`` (keeps nested expression trees linear)."""
    return F.try_element_at(F.transform(F.array(value), body), F.lit(1))


@dataclass(frozen=True)
class _Ctx:
    handling: ErrorHandling
    store_factory: Callable[[], KeyValueStore] | None

    @property
    def passthrough(self) -> bool:
        return self.handling.missing_field_behavior == "passthrough"

    @property
    def null_mode(self) -> bool:
        return self.handling.missing_field_behavior == "null"

    @property
    def null_is_error(self) -> bool:
        return self.handling.null_value_behavior == "error"

    def fail(self, error_type: str, message: str, *, passthrough: Column, null: Column | None) -> Column:
        """``evaluate._Ctx.fail`` at compile time: ``null=None`` means "cannot": raise."""
        if self.passthrough:
            return passthrough
        if self.null_mode and null is not None:
            return null
        return _error(error_type, message)

    def null_check(self, found: Column, path: ast.JsonPath) -> list[tuple[Column, Column]]:
        """The branch ``check_null`` adds: a present null is an error under ``null_value_behavior=error``."""
        if not self.null_is_error:
            return []
        return [(_is_null(found), _error("TransformEvaluation", f"null value at {path.text}"))]


def _object_from(fields: Sequence[tuple[str, Column]]) -> tuple[Column, Column]:
    """(VARIANT, JSON text in written order) of an object; a SQL NULL field is left out."""
    text = F.to_json(F.struct(*[col.alias(name) for name, col in fields]), {"ignoreNullFields": "true"})
    return F.parse_json(text), text


def _with_field(value: Column, name: str, new: Column) -> Column:
    """``value`` (an object) with top-level ``name`` set to ``new`` (a VARIANT)."""
    entries = F.try_variant_get(value, "$", "map<string,variant>")
    kept = F.map_filter(entries, lambda k, _v: k != F.lit(name))
    merged = F.map_concat(kept, F.create_map(F.lit(name), new))
    return F.to_variant_object(merged)


def _replace_item(items: Column, position: int, new: Column) -> Column:
    return F.transform(items, lambda item, i: F.when(i == F.lit(position), new).otherwise(item))


def _set_child(container: Column, segment: str) -> Callable[[Column], Column]:
    def write(child: Column) -> Column:
        return F.when(_is_object(container), _with_field(container, segment, child)).otherwise(
            _to_variant(_replace_item(_as_array(container), int(segment), child))
        )

    return write


def _set_path(root: Column, segments: tuple[str, ...], new: Column) -> tuple[Column, Column]:
    """``evaluate._set_path``: (can it be set, the new root). The parent must exist; the last
    segment may add an object key or replace an existing array element."""
    parents = [root]
    for segment in segments[:-1]:
        parents.append(json_path(parents[-1], (segment,)))
    last = segments[-1]
    parent = parents[-1]
    index_ok = bool(_INDEX.fullmatch(last)) and int(last) < _INT_MAX
    can_set = parent.isNotNull() & (
        _is_object(parent)
        | (
            F.lit(index_ok)
            & F.coalesce(F.size(_as_array(parent)) > F.lit(int(last) if index_ok else 0), F.lit(False))
        )
    )
    updated = new
    for depth in range(len(segments) - 1, -1, -1):
        container = parents[depth]
        segment = segments[depth]
        if _INDEX.fullmatch(segment) and int(segment) < _INT_MAX:
            updated = _let(updated, _set_child(container, segment))
        else:
            updated = _with_field(container, segment, updated)
    return can_set, updated


# --------------------------------------------------------------------------------------------
# Transforms
# --------------------------------------------------------------------------------------------


def compile_transform(
    node: ast.Transform,
    *,
    value_variant: Column,
    error_handling: ErrorHandling,
    store_factory: Callable[[], KeyValueStore] | None = None,
) -> Column:
    """Struct column ``<v: variant, j: string, t: string, m: string>`` for one transform.

    ``v`` is the new value (DSL.md "Transforms"), ``j`` its exact JSON text when the form fixes
    it (else NULL: use ``to_json(v)``), ``t``/``m`` the error type (``JsonPathNotFound``,
    ``TransformEvaluation``) and message, NULL when the transform succeeded. Semantics, including
    ``missing_field_behavior`` and ``null_value_behavior``, are ``evaluate.apply_transform``'s.
    ``store_factory`` gives the key-value store ``CACHE_*`` use on executors (e.g. Redis); without
    it those forms fail with ``TransformEvaluation``, as the evaluator does without a store.
    """
    return _transform(node, value_variant, _Ctx(error_handling, store_factory))


def _transform(node: ast.Transform, value: Column, ctx: _Ctx) -> Column:
    keep = _result(value)
    match node:
        case ast.Extract(path=path, field=field_name):
            found = json_path(value, path.segments)
            if field_name is None:
                null_result = _result(_json_null())
                success = _result(found)
            else:
                null_v, null_j = _object_from([(field_name, _json_null())])
                null_result = _result(null_v, null_j)
                ok_v, ok_j = _object_from([(field_name, found)])
                success = _result(ok_v, ok_j)
            return _cases(
                [
                    (
                        found.isNull(),
                        ctx.fail(
                            "JsonPathNotFound",
                            f"path {path.text} not found",
                            passthrough=keep,
                            null=null_result,
                        ),
                    ),
                    *ctx.null_check(found, path),
                ],
                success,
            )
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
            branches = []
            for path in paths:
                found = json_path(value, path.segments)
                branches.append((found.isNotNull() & ~_is_null(found), _result(found)))
            if default is not None:
                fallback = _literal_result(_literal_json(default))
            else:
                fallback = ctx.fail(
                    "JsonPathNotFound",
                    "COALESCE: no path has a non-null value",
                    passthrough=keep,
                    null=_result(_json_null()),
                )
            return _cases(branches, fallback)
        case ast.Try(inner=inner, fallback=fallback_value):
            inner_ctx = (
                ctx
                if ctx.passthrough
                else _Ctx(ErrorHandling("error", ctx.handling.null_value_behavior), ctx.store_factory)
            )
            fallback_result = _literal_result(fallback_value)
            return _let(
                _transform(inner, value, inner_ctx),
                lambda r: F.when(r["t"].isNull(), r).otherwise(fallback_result),
            )
        case ast.CacheLookup() | ast.CachePut():
            from pipelines.dsl import spark_udfs

            return spark_udfs.cache_transform(node, value, ctx.handling, ctx.store_factory)
    raise TypeError(f"not a transform node: {node!r}")  # pragma: no cover


def _literal_json(literal: ast.Literal) -> object:
    """``evaluate._literal_json``: a written integer stays an int, other numbers float."""
    if isinstance(literal.value, float):
        text = literal.text.lstrip("+")
        if re.fullmatch(r"-?[0-9]+", text):
            return int(text)
        return literal.value
    return literal.value


def _literal_result(value: object) -> Column:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _result(F.parse_json(F.lit(text)), F.lit(text))


def _construct(fields: tuple[tuple[str, ast.JsonPath], ...], value: Column, ctx: _Ctx) -> Column:
    branches: list[tuple[Column, Column]] = []
    columns: list[tuple[str, Column]] = []
    for name, path in fields:
        found = json_path(value, path.segments)
        if not ctx.passthrough:
            failure = ctx.fail(
                "JsonPathNotFound",
                f"CONSTRUCT field {name!r}: path {path.text} not found",
                passthrough=_result(value),
                null=None,
            )
            if not ctx.null_mode:
                branches.append((found.isNull(), failure))
        branches.extend(ctx.null_check(found, path))
        if ctx.passthrough:
            columns.append((name, found))  # a missing field is left out (SQL NULL)
        else:
            columns.append((name, F.coalesce(found, _json_null())))
    obj, text = _object_from(columns)
    return _cases(branches, _result(obj, text))


def _array_map(node: ast.ArrayMap, value: Column, ctx: _Ctx) -> Column:
    keep = _result(value)
    null_result = _result(_json_null())
    found = json_path(value, node.path.segments)
    items = _as_array(found)
    element_path = node.element_path

    def mapped(element: Column) -> Column:
        item = json_path(element, element_path.segments)
        if ctx.passthrough:
            return F.coalesce(item, element)
        if ctx.null_mode:
            return F.coalesce(item, _json_null())
        return item

    def element_error(element: Column) -> Column:
        item = json_path(element, element_path.segments)
        missing_error = F.lit("JsonPathNotFound") if not (ctx.passthrough or ctx.null_mode) else _str_null()
        null_error = F.lit("TransformEvaluation") if ctx.null_is_error else _str_null()
        return F.when(item.isNull(), missing_error).when(_is_null(item), null_error)

    first_error = F.try_element_at(
        F.filter(F.transform(items, element_error), lambda e: e.isNotNull()), F.lit(1)
    )
    messages = {
        "JsonPathNotFound": f"ARRAY_MAP: element path {element_path.text} not found",
        "TransformEvaluation": f"null value at {element_path.text}",
    }
    error_message = F.when(first_error == "JsonPathNotFound", F.lit(messages["JsonPathNotFound"])).otherwise(
        F.lit(messages["TransformEvaluation"])
    )
    not_array_branch: Column
    if ctx.passthrough:
        not_array_branch = keep
    else:
        not_array_branch = F.when(_is_null(found), null_result).otherwise(
            ctx.fail(
                "TransformEvaluation",
                f"ARRAY_MAP: {node.path.text} is not an array",
                passthrough=keep,
                null=null_result,
            )
        )
    return _cases(
        [
            (
                found.isNull(),
                ctx.fail(
                    "JsonPathNotFound",
                    f"ARRAY_MAP: path {node.path.text} not found",
                    passthrough=keep,
                    null=null_result,
                ),
            ),
            *ctx.null_check(found, node.path),
            (items.isNull(), not_array_branch),
            (
                first_error.isNotNull(),
                F.struct(
                    _variant_null_sql().alias("v"),
                    _str_null().alias("j"),
                    first_error.alias("t"),
                    error_message.alias("m"),
                ),
            ),
        ],
        _result(_to_variant(F.transform(items, mapped))),
    )


def _arithmetic(node: ast.Arithmetic, value: Column, ctx: _Ctx) -> Column:
    keep = _result(value)
    null_result = _result(_json_null())
    paths = [node.left] + ([node.right] if isinstance(node.right, ast.JsonPath) else [])
    branches: list[tuple[Column, Column]] = []
    operands: list[Column] = []
    for path in paths:
        found = json_path(value, path.segments)
        branches.append(
            (
                found.isNull(),
                ctx.fail(
                    "JsonPathNotFound",
                    f"ARITHMETIC: path {path.text} not found",
                    passthrough=keep,
                    null=null_result,
                ),
            )
        )
        branches.extend(ctx.null_check(found, path))
        if not ctx.passthrough:
            branches.append((_is_null(found), null_result))
        branches.append(
            (
                ~_is_number(found),
                ctx.fail(
                    "TransformEvaluation",
                    f"ARITHMETIC: {path.text} is not a number",
                    passthrough=keep,
                    null=null_result,
                ),
            )
        )
        operands.append(_as_double(found))
    left = operands[0]
    right = operands[1] if isinstance(node.right, ast.JsonPath) else F.lit(node.right.value)
    if node.op == "DIV":
        branches.append(
            (
                F.abs(right) < _EPSILON,
                ctx.fail(
                    "TransformEvaluation", "ARITHMETIC: division by zero", passthrough=keep, null=null_result
                ),
            )
        )
        safe_right = F.when(F.abs(right) < _EPSILON, F.lit(1.0)).otherwise(right)
        result = left / safe_right
    elif node.op == "ADD":
        result = left + right
    elif node.op == "SUB":
        result = left - right
    else:
        result = left * right
    finite = ~F.isnan(result) & (F.abs(result) != F.lit(float("inf")))
    branches.append(
        (
            ~finite,
            ctx.fail(
                "TransformEvaluation",
                "ARITHMETIC: result is not a finite number",
                passthrough=null_result,
                null=null_result,
            ),
        )
    )
    return _cases(branches, _result(_to_variant(result)))


def _digest(algorithm: str, data: Column) -> Column:
    """Lowercase hex digest (string) of ``data`` (binary) as ``hashing.hex_digest`` prints it."""
    if algorithm == "MD5":
        return F.md5(data)
    if algorithm == "SHA256":
        return F.sha2(data, 256)
    if algorithm == "SHA512":
        return F.sha2(data, 512)
    assert hash_needs_python(algorithm), algorithm
    from pipelines.dsl import spark_udfs

    return spark_udfs.murmur_hex(algorithm, data)


def _hash_input(found: Column) -> Column:
    return F.encode(_scalar_text(found), "UTF-8")


def _hash(node: ast.Hash, value: Column, ctx: _Ctx) -> Column:
    keep = _result(value)
    found = json_path(value, node.path.segments)
    digest = _to_variant(_digest(node.algorithm, _hash_input(found)))
    if not ctx.passthrough:
        digest = F.when(_is_null(found), _json_null()).otherwise(digest)
    is_object = _is_object(value)
    not_object = _error("TransformEvaluation", "HASH: the message is not a JSON object")
    if node.field is None:
        null_result = _result(_json_null())
        success = _result(digest)
    else:
        null_result = F.when(is_object, _result(_with_field(value, node.field, _json_null()))).otherwise(
            _error("JsonPathNotFound", f"HASH: path {node.path.text} not found")
        )
        wrapped = (
            _result(_object_from([("original", value), (node.field, digest)])[0])
            if node.field != "original"
            else _result(_object_from([("original", digest)])[0])
        )
        success = F.when(is_object, _result(_with_field(value, node.field, digest))).otherwise(
            wrapped if ctx.passthrough else not_object
        )
    return _cases(
        [
            (
                found.isNull(),
                ctx.fail(
                    "JsonPathNotFound",
                    f"HASH: path {node.path.text} not found",
                    passthrough=keep,
                    null=null_result,
                ),
            ),
            *ctx.null_check(found, node.path),
        ],
        success,
    )


_StringNode = (
    ast.StringUnary | ast.StringSubstring | ast.StringReplace | ast.StringRegexReplace | ast.StringSplit
)


def _string_write(node: _StringNode, value: Column, new: Column, error_type: str, form: str) -> Column:
    """``evaluate._string_write`` as a result: the written value, or ``error_type`` when it cannot."""
    if node.field is not None:
        return F.when(_is_object(value), _result(_with_field(value, node.field, new))).otherwise(
            _error(error_type, f"{form}: the message is not a JSON object")
        )
    can_set, updated = _set_path(value, node.path.segments, new)
    return F.when(can_set, _result(updated)).otherwise(
        _error(error_type, f"{form}: the message is not a JSON object")
    )


def _string_op(node: _StringNode, text: Column, ctx: _Ctx) -> Column:
    match node:
        case ast.StringUnary(op=op):
            if op == "UPPER":
                return _to_variant(F.upper(text))
            if op == "LOWER":
                return _to_variant(F.lower(text))
            if op == "TRIM":
                return _to_variant(F.trim(text, F.lit(_RUST_WHITESPACE)))
            if op == "TRIM_START":
                return _to_variant(F.ltrim(text, F.lit(_RUST_WHITESPACE)))
            if op == "TRIM_END":
                return _to_variant(F.rtrim(text, F.lit(_RUST_WHITESPACE)))
            return _to_variant(F.length(text).cast("long"))
        case ast.StringSubstring(start=start, length=length):
            begin = F.least(F.lit(min(start, _INT_MAX)), F.length(text))
            count = F.lit(_INT_MAX) if length is None else F.lit(min(length, _INT_MAX))
            return _to_variant(F.substring(text, begin + 1, count))
        case ast.StringReplace(old=old, new=new, replace_all=replace_all):
            if replace_all:
                return _to_variant(F.replace(text, F.lit(old), F.lit(new)))
            position = F.locate(old, text)
            replaced = F.concat(
                F.substring(text, F.lit(1), position - 1),
                F.lit(new),
                F.substring(text, position + len(old), F.lit(_INT_MAX)),
            )
            return _to_variant(F.when(position == 0, text).otherwise(replaced))
        case ast.StringRegexReplace(pattern=pattern, replacement=replacement):
            template = _regex_template(pattern, replacement)
            return _to_variant(F.call_udf("streamforge_regex_replace", text, F.lit(pattern), F.lit(template)))
        case ast.StringSplit(delimiter=delimiter):
            return _to_variant(F.split(text, re.sub(r"([^A-Za-z0-9])", r"\\\1", delimiter), -1))
    raise TypeError(f"not a string node: {node!r}")  # pragma: no cover


def _string(node: _StringNode, value: Column, ctx: _Ctx) -> Column:
    keep = _result(value)
    found = json_path(value, node.path.segments)
    form = f"STRING at {node.path.text}"
    null_write_missing = _string_write(node, value, _json_null(), "JsonPathNotFound", form)
    null_write = _string_write(node, value, _json_null(), "TransformEvaluation", form)
    text = (
        F.when(_is_string(found), _as_string(found))
        .when(_is_number(found), _number_text(found))
        .otherwise(F.when(_is_bool(found), _as_string(found)))
    )
    result = _string_op(node, text, ctx)
    branches: list[tuple[Column, Column]] = [
        (
            found.isNull(),
            ctx.fail(
                "JsonPathNotFound", f"{form}: path not found", passthrough=keep, null=null_write_missing
            ),
        ),
        *ctx.null_check(found, node.path),
    ]
    if not ctx.passthrough:
        branches.append((_is_null(found), null_write))
    branches.append(
        (
            _is_null(found) | _is_container(found),
            ctx.fail(
                "TransformEvaluation", f"{form}: value is not a string", passthrough=keep, null=null_write
            ),
        )
    )
    return _cases(branches, _string_write(node, value, result, "TransformEvaluation", form))


def _concat(node: ast.StringConcat, value: Column, ctx: _Ctx) -> Column:
    branches: list[tuple[Column, Column]] = []
    pieces: list[Column] = []
    produced_null: Column = F.lit(False)
    for part in node.parts:
        if isinstance(part, str):
            pieces.append(F.lit(part))
            continue
        found = json_path(value, part.segments)
        unusable = found.isNull() | _is_null(found) | _is_container(found)
        if ctx.passthrough:
            branches.extend(ctx.null_check(found, part))
            pieces.append(F.when(unusable, F.lit("")).otherwise(_scalar_text(found)))
            continue
        if not ctx.null_mode:
            branches.append(
                (found.isNull(), _error("JsonPathNotFound", f"CONCAT: path {part.text} not found"))
            )
        branches.extend(ctx.null_check(found, part))
        if not ctx.null_mode:
            branches.append(
                (_is_container(found), _error("TransformEvaluation", f"CONCAT: {part.text} is not a scalar"))
            )
        produced_null = produced_null | unusable
        pieces.append(F.when(unusable, F.lit("")).otherwise(_scalar_text(found)))
    joined = F.concat(*pieces) if pieces else F.lit("")
    result = F.when(produced_null, _json_null()).otherwise(_to_variant(joined))
    not_object = (
        _result(value)
        if ctx.passthrough
        else _error("TransformEvaluation", "STRING:CONCAT: the message is not a JSON object")
    )
    branches.append((~_is_object(value), not_object))
    return _cases(branches, _result(_with_field(value, node.field, result)))


# --------------------------------------------------------------------------------------------
# Key, headers, timestamp
# --------------------------------------------------------------------------------------------


def _staged(value: Column, value_type: str) -> Column:
    return F.struct(value.cast(value_type).alias("v"), _str_null().alias("t"), _str_null().alias("m"))


def _stage_error(error_type: str, message: str, value_type: str) -> Column:
    return F.struct(
        F.lit(None).cast(value_type).alias("v"), F.lit(error_type).alias("t"), F.lit(message).alias("m")
    )


def _key_bytes(found: Column, text: Column | None = None) -> Column:
    """``evaluate._key_bytes``: null -> no key, a string its UTF-8, other JSON its text."""
    json_text = text if text is not None else F.to_json(found)
    return (
        F.when(found.isNull() | _is_null(found), F.lit(None).cast("binary"))
        .when(_is_string(found), F.encode(_as_string(found), "UTF-8"))
        .otherwise(F.encode(json_text, "UTF-8"))
    )


def compile_key(node: ast.KeyTransform, *, value_variant: Column, error_handling: ErrorHandling) -> Column:
    """Struct ``<v: binary, t: string, m: string>``: the new record key (NULL = no key) or an error.

    ``evaluate.evaluate_key`` on the transformed value (DSL.md "Destination-level forms"): a
    string key is its UTF-8 bytes, other JSON its JSON text; a missing path is
    ``JsonPathNotFound`` unless ``missing_field_behavior == "null"`` (then no key).
    """
    ctx = _Ctx(error_handling, None)
    value = value_variant

    def missing(path: ast.JsonPath) -> Column:
        if ctx.null_mode:
            return _staged(F.lit(None), "binary")
        return _stage_error("JsonPathNotFound", f"key path {path.text} not found", "binary")

    def null_checks(found: Column, path: ast.JsonPath) -> list[tuple[Column, Column]]:
        if not ctx.null_is_error:
            return []
        return [
            (_is_null(found), _stage_error("TransformEvaluation", f"null value at {path.text}", "binary"))
        ]

    match node:
        case ast.KeyFromPath(path=path):
            found = json_path(value, path.segments)
            return _cases(
                [(found.isNull(), missing(path)), *null_checks(found, path)],
                _staged(_key_bytes(found), "binary"),
            )
        case ast.KeyConstruct(fields=fields):
            built = _construct(fields, value, ctx)
            return F.when(
                built["t"].isNotNull(),
                F.struct(F.lit(None).cast("binary").alias("v"), built["t"], built["m"]),
            ).otherwise(_staged(F.encode(built["j"], "UTF-8"), "binary"))
        case ast.KeyHash(algorithm=algorithm, path=path):
            found = json_path(value, path.segments)
            digest = F.encode(_digest(algorithm, _hash_input(found)), "UTF-8")
            branches = [(found.isNull(), missing(path)), *null_checks(found, path)]
            if not ctx.passthrough:
                branches.append((_is_null(found), _staged(F.lit(None), "binary")))
            return _cases(branches, _staged(digest, "binary"))
        case ast.KeyTemplate(parts=parts):
            branches = []
            pieces: list[Column] = []
            for part in parts:
                if isinstance(part, str):
                    pieces.append(F.lit(part))
                    continue
                found = json_path(value, part.segments)
                branches.append((found.isNull(), missing(part)))
                branches.extend(null_checks(found, part))
                pieces.append(_scalar_text(found))
            return _cases(branches, _staged(F.encode(F.concat(*pieces), "UTF-8"), "binary"))
        case ast.KeyConstant(value=constant):
            return _staged(F.encode(F.lit(constant), "UTF-8"), "binary")
    raise TypeError(f"not a key transform node: {node!r}")  # pragma: no cover


def _header_set(acc: Column, name: Column, header_value: Column) -> Column:
    """``dict[name] = value`` on a header array: replace in place, else append."""
    entry = F.struct(name.alias("key"), header_value.alias("value"))
    present = F.exists(acc, lambda h: h["key"] == name)
    return F.when(
        present, F.transform(acc, lambda h: F.when(h["key"] == name, entry).otherwise(h))
    ).otherwise(F.concat(acc, F.array(entry)))


def _headers(
    dest: DestinationSpec, source: SourceColumns, value: Column
) -> tuple[Column, list[tuple[Column, Column]]]:
    """(the produced headers, ordered error branches) as ``evaluate._evaluate_decoded`` builds them."""
    empty = F.array().cast(HEADERS_TYPE)
    # One fold over an array of operations, so the header array is referenced once per step.
    op_type = "struct<op:string,key:string,source:string,value:binary>"
    ops: list[Column] = []
    errors: list[tuple[Column, Column]] = []

    def op(kind: str, name: str, src: str | None = None, data: Column | None = None) -> Column:
        return F.struct(
            F.lit(kind).alias("op"),
            F.lit(name).alias("key"),
            F.lit(src).cast("string").alias("source"),
            (data if data is not None else F.lit(None)).cast("binary").alias("value"),
        ).cast(op_type)

    for name, text in dest.headers:
        ops.append(op("set", name, data=F.encode(F.lit(text), "UTF-8")))
    for name, header_node in dest.header_transforms:
        match header_node:
            case ast.HeaderFrom(path=path):
                found = json_path(value, path.segments)
                errors.append(
                    (
                        found.isNull(),
                        _stage_error(
                            "JsonPathNotFound", f"header {name!r}: path {path.text} not found", "binary"
                        ),
                    )
                )
                errors.append(
                    (
                        _is_null(found) | _is_container(found),
                        _stage_error(
                            "TransformEvaluation", f"header {name!r}: {path.text} is not a scalar", "binary"
                        ),
                    )
                )
                ops.append(op("set", name, data=F.encode(_scalar_text(found), "UTF-8")))
            case ast.HeaderCopy(source=src):
                ops.append(op("copy", name, src=src))
            case ast.HeaderRemove():
                ops.append(op("remove", name))

    def step(acc: Column, item: Column) -> Column:
        copied = F.filter(acc, lambda h: h["key"] == item["source"])
        return (
            F.when(item["op"] == "set", _header_set(acc, item["key"], item["value"]))
            .when(
                item["op"] == "copy",
                F.when(
                    F.size(copied) > 0,
                    _header_set(acc, item["key"], F.try_element_at(copied, F.lit(1))["value"]),
                ).otherwise(acc),
            )
            .otherwise(F.filter(acc, lambda h: h["key"] != item["key"]))
        )

    initial = F.aggregate(
        F.coalesce(source.headers, empty),
        empty,
        lambda acc, h: _header_set(acc, h["key"], h["value"]),
    )
    if not ops:
        return initial, errors
    return F.aggregate(F.array(*ops), initial, step), errors


def compile_timestamp(
    node: ast.TimestampRule, *, source: SourceColumns, value_variant: Column, now_ms: Column
) -> Column:
    """Struct ``<v: long, t: string, m: string>``: the output timestamp in epoch ms (NULL = let
    the producer stamp it) or an error, as ``evaluate.evaluate_timestamp`` (seconds in ``ADD``/
    ``SUBTRACT``; ``FROM`` needs a JSON integer in the signed 64-bit range)."""
    record_ms = _timestamp_ms(source)
    match node:
        case ast.TimestampPreserve():
            return _staged(record_ms, "long")
        case ast.TimestampCurrent():
            return _staged(now_ms, "long")
        case ast.TimestampFrom(path=path):
            found = json_path(value_variant, path.segments)
            return _cases(
                [
                    (
                        found.isNull(),
                        _stage_error("JsonPathNotFound", f"timestamp path {path.text} not found", "long"),
                    ),
                    (
                        ~F.coalesce(_kind(found).isin(*_INTEGRAL_KINDS), F.lit(False)),
                        _stage_error(
                            "TransformEvaluation",
                            f"timestamp at {path.text} is not an integer (epoch ms)",
                            "long",
                        ),
                    ),
                ],
                _staged(F.try_variant_get(found, "$", "long"), "long"),
            )
        case ast.TimestampAdd(seconds=seconds) | ast.TimestampSubtract(seconds=seconds):
            delta = seconds * 1000 if isinstance(node, ast.TimestampAdd) else -seconds * 1000
            shifted = record_ms.cast("decimal(38,0)") + _decimal(delta)
            in_range = (shifted >= _decimal(_I64_MIN)) & (shifted <= _decimal(_I64_MAX))
            return _cases(
                [
                    (
                        record_ms.isNull(),
                        _stage_error("TransformEvaluation", "the record has no timestamp", "long"),
                    ),
                    (
                        ~in_range,
                        _stage_error("TransformEvaluation", "timestamp out of the 64-bit range", "long"),
                    ),
                ],
                _staged(shifted.cast("long"), "long"),
            )
    raise TypeError(f"not a timestamp node: {node!r}")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# A whole destination
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledDestination:
    """Columns describing one destination's outcome for each record (DESIGN.md "Data flow").

    ``outcome``: ``"produced"`` | ``"filtered"`` | ``"dead_lettered"``. ``value`` (binary UTF-8
    JSON), ``key`` (binary or NULL), ``headers`` (:data:`HEADERS_TYPE`) and ``timestamp_ms``
    (long epoch ms, NULL = let the producer stamp it) are set only when produced.
    ``error_type``/``error_message`` only when dead-lettered (the DLQ keeps the original record).
    """

    outcome: Column
    value: Column
    key: Column
    headers: Column
    timestamp_ms: Column
    error_type: Column
    error_message: Column


def _after_filter(
    dest: DestinationSpec,
    *,
    error_handling: ErrorHandling,
    source: SourceColumns,
    value_variant: Column,
    now_ms: Column,
    passed: Column,
    transformed: Column | None,
) -> Column:
    """Everything after the filter as one struct: passed, body (JSON text), key, headers, ts, t, m."""
    new_value = transformed["v"] if transformed is not None else value_variant
    body_text = F.to_json(new_value)
    types: list[Column] = []
    messages: list[Column] = []
    if transformed is not None:
        body_text = F.coalesce(transformed["j"], body_text)
        types.append(transformed["t"])
        messages.append(transformed["m"])
    key = source.key.cast("binary")
    if dest.key_transform is not None:
        key_result = compile_key(dest.key_transform, value_variant=new_value, error_handling=error_handling)
        key = key_result["v"]
        types.append(key_result["t"])
        messages.append(key_result["m"])
    headers, header_errors = _headers(dest, source, new_value)
    for condition, failure in header_errors:
        types.append(F.when(condition, failure["t"]))
        messages.append(F.when(condition, failure["m"]))
    timestamp = _timestamp_ms(source)
    if dest.timestamp is not None:
        ts_result = compile_timestamp(dest.timestamp, source=source, value_variant=new_value, now_ms=now_ms)
        timestamp = ts_result["v"]
        types.append(ts_result["t"])
        messages.append(ts_result["m"])
    error_type = F.coalesce(*types, _str_null())
    error_message = _cases([(t.isNotNull(), m) for t, m in zip(types, messages, strict=True)], _str_null())
    return F.struct(
        passed.alias("passed"),
        body_text.alias("body"),
        key.alias("key"),
        headers.alias("headers"),
        timestamp.cast("long").alias("ts"),
        error_type.alias("t"),
        error_message.alias("m"),
    )


def _finish(r: Column, passed: Column, deserialization_error: Column) -> CompiledDestination:
    """The writer's columns from the ``_after_filter`` struct ``r`` (which may be null when not passed)."""
    deser_failed = deserialization_error.isNotNull()
    outcome = (
        F.when(deser_failed, F.lit("dead_lettered"))
        .when(~F.coalesce(passed, F.lit(False)), F.lit("filtered"))
        .when(r["t"].isNotNull(), F.lit("dead_lettered"))
        .otherwise(F.lit("produced"))
    )
    produced = outcome == "produced"
    failed = F.coalesce(passed, F.lit(False)) & r["t"].isNotNull()
    return CompiledDestination(
        outcome=outcome,
        value=F.when(produced, F.encode(r["body"], "UTF-8")),
        key=F.when(produced, r["key"]),
        headers=F.when(produced, r["headers"]),
        timestamp_ms=F.when(produced, r["ts"]),
        error_type=F.when(deser_failed, F.lit("MessageDeserialization")).when(failed, r["t"]),
        error_message=F.when(deser_failed, deserialization_error).when(failed, r["m"]),
    )


@dataclass(frozen=True)
class DestinationStages:
    """A destination compiled as three projections, for plans that must stay small and code-generated.

    ``first`` (add to the row): ``<name>_p`` the filter result and ``<name>_x`` the transform result, the
    transform evaluated only where the filter passed. ``second``: ``<name>_r``, key/headers/timestamp of the
    transformed value, again only where the filter passed. ``final`` reads those columns by name. Binding
    intermediate results as columns instead of lambda variables keeps Spark's whole-stage code generation
    (higher-order functions are interpreted), and each stage is computed once per row because Spark does
    not collapse a projection whose non-trivial columns the next one uses several times.
    """

    first: list[Column]
    second: list[Column]
    final: CompiledDestination


def destination_stages(
    dest: DestinationSpec,
    *,
    name: str,
    error_handling: ErrorHandling,
    source: SourceColumns,
    value_variant: Column,
    deserialization_error: Column,
    now_ms: Column,
    store_factory: Callable[[], KeyValueStore] | None = None,
) -> DestinationStages:
    """Compile one destination (deserialize -> filter -> transform -> key -> headers -> timestamp, as
    ``evaluate.evaluate_destination``) into the three projections of :class:`DestinationStages`.

    ``name`` prefixes the intermediate columns (unique per destination, e.g. ``__d0``). The driver selects
    ``first``, then ``second``, then the ``final`` columns, keeping the source columns in between.
    """
    passed = (
        compile_filter(dest.filter, source=source, value_variant=value_variant, now_ms=now_ms)
        if dest.filter is not None
        else F.lit(True)
    )
    first = [passed.alias(f"{name}_p")]
    passed_col = F.col(f"{name}_p")
    transformed_col: Column | None = None
    if dest.transform is not None:
        transformed = compile_transform(
            dest.transform,
            value_variant=value_variant,
            error_handling=error_handling,
            store_factory=store_factory,
        )
        first.append(F.when(passed, transformed).alias(f"{name}_x"))
        transformed_col = F.col(f"{name}_x")
    record = _after_filter(
        dest,
        error_handling=error_handling,
        source=source,
        value_variant=value_variant,
        now_ms=now_ms,
        passed=passed_col,
        transformed=transformed_col,
    )
    second = [F.when(passed_col, record).alias(f"{name}_r")]
    final = _finish(F.col(f"{name}_r"), passed_col, deserialization_error)
    return DestinationStages(first=first, second=second, final=final)


@dataclass(frozen=True)
class StagedPlan:
    """The projections of :func:`stage_destinations`, built once and applied to any frame with the Kafka
    source's columns (Spark Columns name the columns they read, so one Column serves several frames). Building
    them is thousands of py4j calls (about 0.4 s on a warm JVM for two destinations); a driver builds them
    once for its warm-up rows and its stream."""

    #: The parse (``parse_stages``), each added to the row with ``select("*", ...)``.
    parse: tuple[tuple[Column, ...], ...]
    #: A registry source's decode error, which replaces the parse's ``__de`` (None: a JSON source).
    decode_error: Column | None
    #: Every destination's first, then second, projection (:class:`DestinationStages`).
    first: tuple[Column, ...]
    second: tuple[Column, ...]
    #: Per destination, the final columns to select from the applied frame.
    finals: tuple[CompiledDestination, ...]

    def apply(self, frame: DataFrame) -> DataFrame:
        """``frame`` (Kafka source columns) with the parsed value (``__v``, ``__de``) and every destination's
        intermediate columns added."""
        for stage in self.parse:
            frame = frame.select("*", *stage)
        if self.decode_error is not None:
            frame = frame.withColumn("__de", F.coalesce(self.decode_error, F.col("__de")))
        frame = frame.select("*", *self.first)
        return frame.select("*", *self.second)


def compile_stages(
    destinations: Sequence[tuple[DestinationSpec, ErrorHandling]],
    *,
    source: SourceColumns,
    now_ms: Column,
    store_factory: Callable[[], KeyValueStore] | None = None,
    exact_deserialization: bool = True,
    decode_error: Column | None = None,
) -> StagedPlan:
    """The plan of :func:`stage_destinations` without a frame (see :class:`StagedPlan`); same arguments."""
    value_col, error_col = F.col("__v"), F.col("__de")
    staged = [
        destination_stages(
            dest,
            name=f"__d{i}",
            error_handling=handling,
            source=source,
            value_variant=value_col,
            deserialization_error=error_col,
            now_ms=now_ms,
            store_factory=store_factory,
        )
        for i, (dest, handling) in enumerate(destinations)
    ]
    return StagedPlan(
        parse=tuple(tuple(stage) for stage in parse_stages(source, exact=exact_deserialization)),
        decode_error=decode_error,
        first=tuple(c for stage in staged for c in stage.first),
        second=tuple(c for stage in staged for c in stage.second),
        finals=tuple(stage.final for stage in staged),
    )


def stage_destinations(
    frame: DataFrame,
    destinations: Sequence[tuple[DestinationSpec, ErrorHandling]],
    *,
    source: SourceColumns,
    now_ms: Column,
    store_factory: Callable[[], KeyValueStore] | None = None,
    exact_deserialization: bool = True,
    decode_error: Column | None = None,
) -> tuple[DataFrame, list[CompiledDestination]]:
    """Add to ``frame`` (Kafka source schema) the parsed value (``__v``, ``__de``) and every destination's
    intermediate stages; return the frame and, per destination, the final columns to select from it.

    This is the plan the driver runs (see :class:`DestinationStages`, :func:`compile_stages`); tests use it
    too, so what is property-tested against the evaluator is what runs in pipelines.
    ``exact_deserialization=False``: see :func:`lenient_parse_stages` (the rows then need the writer's check
    before they are final). ``decode_error``: for a registry-format source (``source.value`` is then the
    decoded JSON text, null where the record did not decode), why the record did not decode; it replaces the
    parse's reason.
    """
    plan = compile_stages(
        destinations,
        source=source,
        now_ms=now_ms,
        store_factory=store_factory,
        exact_deserialization=exact_deserialization,
        decode_error=decode_error,
    )
    return plan.apply(frame), list(plan.finals)
