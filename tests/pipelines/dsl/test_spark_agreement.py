"""Property: the Spark compilation agrees with the Python evaluator on generated expressions and messages.

Each hypothesis example builds ONE DataFrame of 20-40 generated records and runs a generated
destination under every error-handling combination in the same query, so Spark is called once
per example.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.dsl import evaluate as ev

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.dsl.spark import SourceColumns, stage_destinations
from pipelines.spark import writer
from tests.pipelines.dsl.test_spark_compile import (
    NOW_MS,
    destination,
    disagreement,
    source_frame,
)

pytestmark = pytest.mark.spark

MISSING_MODES: tuple[Literal["error", "passthrough", "null"], ...] = ("error", "passthrough", "null")
NULL_MODES: tuple[Literal["passthrough", "error"], ...] = ("passthrough", "error")
HANDLINGS = [ev.ErrorHandling(mode, nulls) for mode in MISSING_MODES for nulls in NULL_MODES]
SETTINGS = settings(
    max_examples=10,
    deadline=None,
    # CI runs a fixed set of examples, so a red build always names a reproducible change; explore new ones
    # with `pytest --hypothesis-seed=<n>` (and fix or record what they find in the known-differences list).
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(scope="module")
def spark(spark_session: SparkSession) -> SparkSession:
    """The run's one SparkSession (tests/conftest.py): a JVM keeps the jars of its first session, so every
    Spark test shares the session built with the Kafka connector and the driver's settings."""
    return spark_session


# ---- generated data -------------------------------------------------------------------------

KEYS = ["a", "b", "n", "s", "0", "1", "é", "k.d", "x y"]
TEXT = st.text(alphabet="abAB01 .,-_é✓\t\u00a0ß", max_size=8)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-1000, max_value=1000),
    st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda f: abs(f) < 1e300),
    st.sampled_from([0.5, 1.5, -2.25, 100.0, 1e16, 1e-7, 0.1]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
# Inside nested containers only integers: the text of a container (HASH, CONCAT, key templates)
# prints non-integer numbers differently in Spark (``1.0E-7`` vs serde's ``1e-7``), a reported,
# known difference. Floats are still generated as direct values of the top-level object.
INT_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), TEXT)
JSON_VALUES = st.recursive(
    INT_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from(KEYS), children, max_size=5)
    ),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.sampled_from(KEYS), st.one_of(SCALARS, JSON_VALUES), max_size=6)
PATHS = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(lambda segs: "/" + "/".join(segs))
HEADER_NAMES = st.sampled_from(["h1", "h2", "trace"])


# A number with 309 digits before its point and no exponent is beyond the double range too.
OVERFLOWING_DIGITS = b'{"n":' + b"9" * 309 + b".0}"


@st.composite
def messages(draw: st.DrawFn) -> list[ev.Message]:
    out = []
    for _ in range(draw(st.integers(min_value=20, max_value=40))):
        value: object = draw(st.one_of(OBJECTS, OBJECTS, JSON_VALUES))
        raw: bytes | None = json.dumps(value, ensure_ascii=draw(st.booleans())).encode()
        if draw(st.integers(0, 30)) == 0:
            raw = draw(
                st.sampled_from(
                    [None, b"", b"{", b"\xff", b"{}x", b'"\\udc00"', b"[1e999]", OVERFLOWING_DIGITS]
                )
            )
        key = draw(st.one_of(st.none(), st.binary(max_size=4), TEXT.map(str.encode)))
        headers = draw(
            st.lists(st.tuples(HEADER_NAMES, st.one_of(st.none(), st.binary(max_size=3))), max_size=3)
        )
        ts = draw(st.one_of(st.none(), st.integers(min_value=NOW_MS - 20_000, max_value=NOW_MS + 5_000)))
        out.append(ev.Message(value=raw, key=key, headers=tuple(headers), timestamp_ms=ts))
    return out


LITERALS = st.one_of(
    st.sampled_from(["true", "false", "0", "1.5", "-3", "nan", "inf", "abc", "é", "", "200"]),
    st.integers(-5, 5).map(str),
)
OPS = st.sampled_from(["==", "!=", ">", ">=", "<", "<="])
PATTERNS = st.sampled_from(
    ["a", "^a", "b$", "[0-9]+", "\\d", "\\w+", "(?i)AB", "é.", ".", "a|b", "\\s", "^$", "(a+)+$", "\\pL"]
)
#: RE2 syntax both backends now share (review #28, finding 1): named groups, POSIX and Unicode classes,
#: the ungreedy flag, \A \z, empty-matching patterns, the classic catastrophic ones.
RE2_PATTERNS = st.sampled_from(
    [
        "(?P<g>b)",
        "(?<g>é)",
        "[[:alpha:]]+",
        "[^[:space:]]",
        "\\pL+",
        "\\p{Greek}|\\PL",
        "(?U)a+",
        "(?i)ß|é",
        "\\Aa|b\\z",
        "(?m)^.",
        "(?s).$",
        "a$",
        "\\bA",
        "x*",
        "a|",
        "(a|a?)+$",
        "(x+x+)+y",
        "^(\\w+\\s?)*$",
        "\\x{1F600}",
        "[\\x{1F600}-\\x{1F64F}]?",
    ]
)
RE2_REPLACEMENTS = st.sampled_from(["", "<$0>", "${g}", "$g$1", "$$", "${1}x", "[$2]", "$"])
RE2_TEXT = st.text(alphabet="abAB \u0308é\n\tß\U0001f600xy$", max_size=10)


@st.composite
def simple_filters(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 14))
    path = draw(PATHS)
    if kind == 0:
        return f"{path},{draw(OPS)},{draw(LITERALS)}"
    if kind == 1:
        return f"REGEX:{path},{draw(PATTERNS)}"
    if kind == 2:
        return f"ARRAY_ANY:{path},{draw(PATHS)},{draw(OPS)},{draw(LITERALS)}"
    if kind == 3:
        return f"ARRAY_ALL:{path},{draw(PATHS)},{draw(OPS)},{draw(LITERALS)}"
    if kind == 4:
        return f"ARRAY_CONTAINS:{path},{draw(LITERALS)}"
    if kind == 5:
        return f"ARRAY_LENGTH:{path},{draw(OPS)},{draw(st.integers(0, 4))}"
    if kind == 6:
        return f"EXISTS:{path}"
    if kind == 7:
        return f"NOT_EXISTS:{path}"
    if kind == 8:
        return draw(st.sampled_from(["KEY_EXISTS", "KEY_PREFIX:a", "KEY_SUFFIX:b", "KEY_CONTAINS:\ufffd"]))
    if kind == 9:
        return f"KEY_MATCHES:{draw(PATTERNS)}"
    if kind == 10:
        return f"HEADER_EXISTS:{draw(HEADER_NAMES)}"
    if kind == 11:
        return f"HEADER:{draw(HEADER_NAMES)},{draw(st.sampled_from(['==', '!=']))},{draw(st.sampled_from(['', 'a', '0']))}"
    if kind == 12:
        return f"TIMESTAMP_AGE:{draw(st.sampled_from(['>', '>=', '<', '<=']))},{draw(st.integers(-5, 20))}"
    if kind == 13:
        return f"TIMESTAMP_AFTER:{draw(st.integers(NOW_MS - 20_000, NOW_MS))}"
    return f"TIMESTAMP_BEFORE:{draw(st.integers(NOW_MS - 20_000, NOW_MS))}"


@st.composite
def filters(draw: st.DrawFn) -> str:
    shape = draw(st.integers(0, 3))
    if shape == 0:
        return draw(simple_filters())
    if shape == 1:
        return "NOT:" + draw(simple_filters())
    items = [i for i in draw(st.lists(simple_filters(), min_size=1, max_size=3)) if not i.startswith("REGEX")]
    items = items or ["KEY_EXISTS"]
    return ("AND:" if shape == 2 else "OR:") + ":".join(items)


FIELD = st.sampled_from(["", ",f", ",a"])


@st.composite
def transforms(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 12))
    path = draw(PATHS)
    if kind == 0:
        return draw(st.sampled_from([path, f"EXTRACT:{path}", f"EXTRACT:{path},f"]))
    if kind == 1:
        fields = draw(
            st.lists(
                st.tuples(st.sampled_from("xyzw"), PATHS), min_size=1, max_size=3, unique_by=lambda t: t[0]
            )
        )
        return "CONSTRUCT:" + ":".join(f"{n}={p}" for n, p in fields)
    if kind == 2:
        return f"ARRAY_MAP:{path},{draw(PATHS)}"
    if kind == 3:
        right = draw(st.one_of(PATHS, st.sampled_from(["0", "2", "-1.5", "1e300"])))
        return f"ARITHMETIC:{draw(st.sampled_from(['ADD', 'SUB', 'MUL', 'DIV']))},{path},{right}"
    if kind == 4:
        return f"HASH:{draw(st.sampled_from(['MD5', 'SHA256', 'SHA512', 'MURMUR64', 'MURMUR128']))},{path}{draw(FIELD)}"
    if kind == 5:
        op = draw(st.sampled_from(["UPPER", "LOWER", "TRIM", "TRIM_START", "TRIM_END", "LENGTH"]))
        return f"STRING:{op},{path}{draw(FIELD)}"
    if kind == 6:
        length = draw(st.sampled_from(["", ",0", ",2"]))
        return f"STRING:SUBSTRING,{path},{draw(st.integers(0, 3))}{length}{draw(FIELD)}"
    if kind == 7:
        op = draw(st.sampled_from(["REPLACE", "REPLACE_ALL"]))
        return f"STRING:{op},{path},{draw(st.sampled_from(['a', 'é', ' ']))},{draw(st.sampled_from(['', 'X', '$1']))}{draw(FIELD)}"
    if kind == 8:
        replacement = draw(st.sampled_from(["", "<$0>", "$1", "$$", "${1}x", "$2"]))
        pattern = draw(st.sampled_from(["a", "(b)", "[0-9]", "(a)|(b)", "x*", "\\w", "^", "é+"]))
        return f"STRING:REGEX_REPLACE,{path},{pattern},{replacement}{draw(FIELD)}"
    if kind == 9:
        return f"STRING:SPLIT,{path},{draw(st.sampled_from(['a', '.', ' ', 'ab']))}{draw(FIELD)}"
    if kind == 10:
        parts = draw(st.lists(st.one_of(PATHS, st.sampled_from(["-", "x"])), min_size=1, max_size=3))
        return "STRING:CONCAT,c," + ",".join(parts)
    if kind == 11:
        paths = draw(st.lists(PATHS, min_size=1, max_size=3))
        default = draw(st.sampled_from(["", ",7", ",dflt", ",true", ",1.5"]))
        return "COALESCE:" + ",".join(paths) + default
    inner = draw(
        st.sampled_from([path, f"ARITHMETIC:DIV,{path},0", f"STRING:UPPER,{path}", f"EXTRACT:{path},f"])
    )
    fallback = draw(st.sampled_from(["null", "0", '"fb"', '{"k":1}']))  # fallbacks are literals: quoted
    return f"TRY:{inner},{fallback}"


KEY_TRANSFORMS = st.one_of(
    PATHS,
    PATHS.map(lambda p: f"CONSTRUCT:i={p}"),
    st.tuples(st.sampled_from(["MD5", "SHA256", "MURMUR128"]), PATHS).map(lambda t: f"HASH:{t[0]},{t[1]}"),
    st.tuples(PATHS, PATHS).map(lambda t: f"k-{{{t[0]}}}:{{{t[1]}}}"),
    st.just("const"),
)
HEADER_TRANSFORMS = st.lists(
    st.tuples(
        HEADER_NAMES,
        st.one_of(
            PATHS.map(lambda p: "FROM:" + p), HEADER_NAMES.map(lambda h: "COPY:" + h), st.just("REMOVE")
        ),
    ),
    max_size=3,
)
TIMESTAMPS = st.one_of(
    st.sampled_from(["PRESERVE", "CURRENT", "ADD:10", "SUBTRACT:3"]), PATHS.map(lambda p: "FROM:" + p)
)


# ---- running ------------------------------------------------------------------------------


def assert_agreement(
    spark: SparkSession, dest, batch: list[ev.Message], handlings, *, lenient: bool = False
) -> None:
    """Compile ``dest`` (one destination, or a list zipped with ``handlings``) under each handling in
    ONE query over ``batch``; compare with the evaluator. ``lenient``: the plan the micro-batch driver runs
    (Spark's lenient parse) followed by the writer's strict decoder (``writer.deserialization_error``), which
    dead-letters an undecodable value for every destination whatever the plan made of it."""
    dests = dest if isinstance(dest, list) else [dest] * len(handlings)
    source = SourceColumns.kafka()
    frame, finals = stage_destinations(
        source_frame(spark, batch),
        list(zip(dests, handlings, strict=True)),
        source=source,
        now_ms=F.lit(NOW_MS),
        exact_deserialization=not lenient,
    )
    columns = [
        F.struct(
            out.outcome.alias("o"),
            out.value.alias("v"),
            out.key.alias("k"),
            out.headers.alias("h"),
            out.timestamp_ms.alias("ts"),
            out.error_type.alias("t"),
            out.error_message.alias("m"),
        ).alias(f"c{i}")
        for i, out in enumerate(finals)
    ]
    rows = frame.select(*columns, F.col("__de")).collect()
    problems = []
    for message, row in zip(batch, rows, strict=True):
        undecodable = writer.deserialization_error(message.value, row["__de"]) if lenient else None
        for i, handling in enumerate(handlings):
            got = row[f"c{i}"]
            if undecodable is not None:
                got = got.asDict() | {"o": "dead_lettered", "t": "MessageDeserialization", "m": undecodable}
                got = SimpleNamespace(**got)
            outcome = ev.Outcome(
                kind=got.o,
                value=None if got.v is None else bytes(got.v),
                key=None if got.k is None else bytes(got.k),
                headers=tuple((h.key, None if h.value is None else bytes(h.value)) for h in (got.h or [])),
                timestamp_ms=got.ts,
                error_type=got.t,
                error_message=got.m,
            )
            expected = ev.evaluate_destination(dests[i], message, error_handling=handling, now_ms=NOW_MS)
            why = disagreement(expected, outcome)
            if why:
                problems.append(f"{dests[i]} {handling} {message!r}: {why}")
    assert not problems, "\n".join(problems[:10])


def test_every_filter_form_agrees_with_the_evaluator(spark):
    @SETTINGS
    @given(expressions=st.lists(filters(), min_size=4, max_size=4), batch=messages())
    def check(expressions, batch):
        # Four filters per example, all in one query.
        dests = [destination(filter=e) for e in expressions]
        assert_agreement(spark, dests, batch, HANDLINGS[:1] * len(dests))

    check()


def test_every_transform_form_agrees_with_the_evaluator_in_every_error_mode(spark):
    @SETTINGS
    @given(expression=transforms(), batch=messages())
    def check(expression, batch):
        assert_agreement(spark, destination(transform=expression), batch, HANDLINGS)
        assert_agreement(spark, destination(transform=expression), batch, HANDLINGS[:1], lenient=True)

    check()


def test_key_header_and_timestamp_forms_agree_with_the_evaluator(spark):
    @settings(SETTINGS, max_examples=12)
    @given(
        key=st.one_of(st.none(), KEY_TRANSFORMS),
        static=st.lists(st.tuples(HEADER_NAMES, st.sampled_from(["v", "é"])), max_size=2),
        header_ops=HEADER_TRANSFORMS,
        timestamp=st.one_of(st.none(), TIMESTAMPS),
        transform=st.one_of(st.none(), transforms()),
        batch=messages(),
    )
    def check(key, static, header_ops, timestamp, transform, batch):
        dest = destination(
            transform=transform,
            key=key,
            headers=tuple(static),
            header_transforms=tuple(header_ops),
            timestamp=timestamp,
        )
        assert_agreement(spark, dest, batch, HANDLINGS[::2])

    check()


def test_deserialization_agrees_with_the_evaluator_on_arbitrary_bytes(spark):
    fragments = st.sampled_from(
        [
            '{"a":',
            "1",
            "}",
            "[",
            "]",
            ",",
            '"',
            "\\u",
            "d800",
            "dc00",
            " ",
            "1e999",
            "x",
            "null",
            "\\",
            "é",
            "\x01",
        ]
    )
    raw_values = st.one_of(
        st.binary(max_size=12),
        st.lists(fragments, max_size=8).map(lambda parts: "".join(parts).encode("utf-8")),
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    )

    @settings(SETTINGS, max_examples=10)
    @given(values=st.lists(raw_values, min_size=20, max_size=40))
    def check(values):
        batch = [ev.Message(value=v, key=None) for v in values]
        assert_agreement(spark, destination(), batch, HANDLINGS[:1])
        assert_agreement(spark, destination(transform="EXTRACT:/a,a"), batch, HANDLINGS[:1], lenient=True)

    check()


def test_re2_regex_forms_agree_with_the_evaluator_in_every_error_mode(spark):
    """Review #28, finding 1: both backends run RE2 (google-re2 / RE2/J in our Java UDF) with the same
    syntax, matching and replace-all rule, on text with newlines, combining marks and characters beyond
    the BMP (UTF-16 surrogate pairs in the JVM)."""

    @settings(SETTINGS, max_examples=12)
    @given(
        patterns=st.lists(RE2_PATTERNS, min_size=3, max_size=3),
        replacement=RE2_REPLACEMENTS,
        texts=st.lists(RE2_TEXT, min_size=20, max_size=30),
    )
    def check(patterns, replacement, texts):
        batch = [
            ev.Message(value=json.dumps({"a": text}).encode(), key=text.encode(), timestamp_ms=NOW_MS)
            for text in texts
        ]
        first, second, third = patterns
        dests = [
            destination(filter=f"REGEX:/a,{first}"),
            destination(filter=f"KEY_MATCHES:{second}"),
            destination(filter=f"NOT:REGEX:/a,{third}"),
        ]
        transform = destination(transform=f"STRING:REGEX_REPLACE,/a,{first},{replacement}")
        # One query for the filters and the transform in every error mode: a Spark job per example, not two.
        handlings = HANDLINGS[:1] * len(dests) + list(HANDLINGS)
        assert_agreement(spark, dests + [transform] * len(HANDLINGS), batch, handlings)

    check()


def test_a_dollar_sign_replacement_agrees_on_every_empty_match(spark):
    # Found by the transform property in a full run: ``$$`` (a literal ``$``) was dropped by the Spark
    # compilation, so an empty-matching pattern replaced with "" there and with "$" in the evaluator.
    batch = [
        ev.Message(value=b'{"a": true}', key=None, headers=(), timestamp_ms=NOW_MS),
        ev.Message(value=b'{"a": "t$1"}', key=None, headers=(), timestamp_ms=NOW_MS),
    ]
    for transform in ("STRING:REGEX_REPLACE,/a,x*,$$", "STRING:REGEX_REPLACE,/a,(t),$$${1}$$"):
        assert_agreement(spark, destination(transform=transform), batch, HANDLINGS)
