"""The Spark compilation of each DSL form, on small DataFrames, checked against the evaluator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from pipelines.dsl import evaluate as ev
from pipelines.dsl import parser

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pipelines.dsl.spark import (  # noqa: E402
    SourceColumns,
    compile_filter,
    parsed_value,
    stage_destinations,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]
NOW_MS = 1_700_000_005_000
EVENTS = Path("/work/shared/data/github-events-2021-07-21.ndjson")
_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, ts_ms long, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)


@pytest.fixture(scope="module")
def spark(spark_session: SparkSession) -> SparkSession:
    """The run's one SparkSession (tests/conftest.py): a JVM keeps the jars of its first session, so every
    Spark test shares the session built with the Kafka connector and the driver's settings."""
    return spark_session


def source_frame(spark: SparkSession, messages: Sequence[ev.Message]):
    """A DataFrame with the Kafka source schema holding ``messages`` in order."""
    rows = [
        (m.key, m.value, "src", 0, i, m.timestamp_ms, 0, [(k, v) for k, v in m.headers])
        for i, m in enumerate(messages)
    ]
    frame = spark.createDataFrame(rows, _SCHEMA).coalesce(1)
    return frame.withColumn("timestamp", F.timestamp_millis("ts_ms")).drop("ts_ms")


def run_destinations(
    spark: SparkSession,
    dests: Sequence[ev.DestinationSpec],
    messages: Sequence[ev.Message],
    handling: ev.ErrorHandling,
    *,
    now_ms: int = NOW_MS,
    store_factory=None,
) -> list[list[ev.Outcome]]:
    """Spark outcomes, ``result[message][destination]``, as evaluator ``Outcome`` objects."""
    source = SourceColumns.kafka()
    frame, finals = stage_destinations(
        source_frame(spark, messages),
        [(dest, handling) for dest in dests],
        source=source,
        now_ms=F.lit(now_ms),
        store_factory=store_factory,
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
        ).alias(f"d{i}")
        for i, out in enumerate(finals)
    ]
    results = []
    for row in frame.select(*columns).collect():
        per_dest = []
        for i in range(len(dests)):
            got = row[f"d{i}"]
            per_dest.append(
                ev.Outcome(
                    kind=got.o,
                    value=None if got.v is None else bytes(got.v),
                    key=None if got.k is None else bytes(got.k),
                    headers=tuple(
                        (h.key, None if h.value is None else bytes(h.value)) for h in (got.h or [])
                    ),
                    timestamp_ms=got.ts,
                    error_type=got.t,
                    error_message=got.m,
                )
            )
        results.append(per_dest)
    return results


def destination(
    *,
    filter: str | None = None,
    transform: str | None = None,
    key: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    header_transforms: tuple[tuple[str, str], ...] = (),
    timestamp: str | None = None,
) -> ev.DestinationSpec:
    return ev.DestinationSpec(
        name="d",
        topic="out",
        filter=None if filter is None else parser.parse_filter(filter),
        transform=None if transform is None else parser.parse_transform(transform),
        key_transform=None if key is None else parser.parse_key_transform(key),
        headers=headers,
        header_transforms=tuple((n, parser.parse_header_transform(t)) for n, t in header_transforms),
        timestamp=None if timestamp is None else parser.parse_timestamp(timestamp),
    )


def same_json(a: object, b: object) -> bool:
    """JSON equality that does not confuse ``true`` with ``1`` (Python's ``True == 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _same_container_json(expected: bytes | None, got: bytes | None) -> bool:
    """Known, reported differences (issue #3's open list): an object/array/number key is JSON text, and
    Spark's VARIANT sorts nested object keys where the evaluator keeps insertion order, and Spark spells
    floats its own way (``1.5E-7`` for ``1.5e-07``); compare those parsed. String keys stay byte-exact."""
    if (
        expected is None
        or got is None
        or expected[:1] not in (b"{", b"[", b"-", *(str(d).encode() for d in range(10)))
    ):
        return False
    try:
        return same_json(json.loads(expected), json.loads(got))
    except ValueError:
        return False


def disagreement(expected: ev.Outcome, got: ev.Outcome) -> str | None:
    """Why the Spark outcome differs from the evaluator's, or None when they agree."""
    if (expected.kind, expected.error_type) != (got.kind, got.error_type):
        return f"kind/error {expected.kind}/{expected.error_type} != {got.kind}/{got.error_type} ({got.error_message})"
    if expected.kind != "produced":
        return None
    assert expected.value is not None
    assert got.value is not None
    if not same_json(json.loads(expected.value), json.loads(got.value)):
        return f"value {expected.value!r} != {got.value!r}"
    if expected.key != got.key and not _same_container_json(expected.key, got.key):
        return f"key {expected.key!r} != {got.key!r}"
    if expected.headers != got.headers:
        return f"headers {expected.headers!r} != {got.headers!r}"
    if expected.timestamp_ms != got.timestamp_ms:
        return f"timestamp {expected.timestamp_ms} != {got.timestamp_ms}"
    return None


def check_agreement(
    spark: SparkSession,
    dests: Sequence[ev.DestinationSpec],
    messages: Sequence[ev.Message],
    handling: ev.ErrorHandling,
    *,
    store_factory=None,
    store: ev.KeyValueStore | None = None,
) -> list[list[ev.Outcome]]:
    """Run on Spark, compare every outcome with the evaluator's; return the Spark outcomes."""
    got = run_destinations(spark, dests, messages, handling, store_factory=store_factory)
    problems = []
    for m_index, message in enumerate(messages):
        for d_index, dest in enumerate(dests):
            expected = ev.evaluate_destination(
                dest, message, error_handling=handling, now_ms=NOW_MS, store=store
            )
            why = disagreement(expected, got[m_index][d_index])
            if why:
                problems.append(f"{message.value!r} through {render(dest)}: {why}")
    assert not problems, "\n".join(problems)
    return got


def render(dest: ev.DestinationSpec) -> str:
    parts = [
        f"{name}={node.render()}"
        for name, node in (
            ("filter", dest.filter),
            ("transform", dest.transform),
            ("key", dest.key_transform),
            ("timestamp", dest.timestamp),
        )
        if node is not None
    ]
    return " ".join(parts) + (f" headers={dest.headers}" if dest.headers else "")


def msg(
    value: object, *, key: bytes | None = b"k-1", headers=(), ts: int | None = NOW_MS - 3_500
) -> ev.Message:
    raw = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
    return ev.Message(value=raw, key=key, headers=tuple(headers), timestamp_ms=ts)


ORDER = {
    "user": {"id": 42, "email": "Ann@Example.com", "name": "  Ann Lee  ", "tags": ["a", "b"]},
    "items": [{"sku": "x1", "qty": 2, "price": 1.5}, {"sku": "y2", "qty": 0, "price": 10}],
    "total": 13.0,
    "count": 7,
    "status": "200",
    "ok": True,
    "none": None,
    "a.b": {"c'd": {'e"f': "deep"}},
    "0": "zero-key",
    "café": "ünïcode ✓",
    "csv": "a,b,,c",
}
MESSAGES = [
    msg(ORDER, headers=[("trace", b"t-1"), ("trace", b"t-2"), ("bin", b"\xff")]),
    msg({"user": {"id": "s"}, "items": [], "count": -3.25, "status": 200}, key=None, ts=None),
    msg({"items": "not-an-array", "user": None, "total": 0}, key=b"\xffbad-key"),
    msg([1, 2, {"x": 1}]),
    msg("just a string"),
]
FILTERS = [
    "/count,>,5",
    "/count,==,7",
    "/count,!=,7",
    "/status,==,200",
    "/status,!=,200",
    "/ok,==,true",
    "/ok,!=,false",
    "/user/email,==,Ann@Example.com",
    "/missing,!=,1",
    "/none,==,null",
    "/count,<=,nan",
    "/count,!=,nan",
    "/count,<,inf",
    "AND:/count,>,5:/ok,==,true",
    "OR:/count,<,0:/user/id,==,42",
    "NOT:OR:/count,<,0:/user/id,==,42",
    "REGEX:/user/email,^ann@",
    "REGEX:/user/email,(?i)^ann@",
    "REGEX:/café,ü.ï",
    "REGEX:/csv,a,b",
    "ARRAY_ANY:/items,/qty,>,1",
    "ARRAY_ALL:/items,/qty,>=,0",
    "ARRAY_ALL:/user/tags,/x,==,1",
    "ARRAY_CONTAINS:/user/tags,b",
    "ARRAY_LENGTH:/items,==,2",
    "ARRAY_LENGTH:/items,>,18446744073709551615",
    "EXISTS:/none",
    "EXISTS:/items/1/sku",
    "EXISTS:/0",
    "EXISTS:/a.b/c'd/e\"f",
    "NOT_EXISTS:/items/5",
    "KEY_EXISTS",
    "KEY_PREFIX:k-",
    "KEY_SUFFIX:key",
    "KEY_CONTAINS:\ufffd",
    "KEY_MATCHES:^k-[0-9]$",
    "HEADER_EXISTS:trace",
    "HEADER:trace,==,t-2",
    "HEADER:trace,!=,t-1",
    "HEADER:bin,!=,x",
    "HEADER:bin,==,x",
    "TIMESTAMP_AGE:>=,3",
    "TIMESTAMP_AGE:<,3",
    "TIMESTAMP_AFTER:1700000000000",
    "TIMESTAMP_BEFORE:1700000000000",
]


@pytest.mark.parametrize("mode", ["error"])
def test_every_filter_form_agrees_with_the_evaluator(spark, mode):
    dests = [destination(filter=f) for f in FILTERS]
    got = check_agreement(spark, dests, MESSAGES, ev.ErrorHandling(mode))
    assert got[0][0].kind == "produced"  # /count,>,5 on the order
    assert got[1][0].kind == "filtered"


def test_compile_filter_is_a_non_null_boolean(spark):
    frame = source_frame(spark, [msg(None), msg({"a": 1})])
    source = SourceColumns.kafka()
    value, _ = parsed_value(source)
    node = parser.parse_filter("NOT:/a,==,1")
    rows = frame.select(
        compile_filter(node, source=source, value_variant=value, now_ms=F.lit(NOW_MS)).alias("f")
    ).collect()
    assert [r.f for r in rows] == [True, False]


TRANSFORMS = [
    "/user/email",
    "EXTRACT:/user/email,userEmail",
    "EXTRACT:/missing,field",
    "EXTRACT:/a.b/c'd/e\"f",
    "EXTRACT:/items/1/sku",
    "EXTRACT:/0",
    "CONSTRUCT:id=/user/id:mail=/user/email:gone=/missing:n=/none",
    "ARRAY_MAP:/items,/sku",
    "ARRAY_MAP:/items,/nope",
    "ARRAY_MAP:/user,/x",
    "ARITHMETIC:ADD,/count,/total",
    "ARITHMETIC:MUL,/count,2.5",
    "ARITHMETIC:DIV,/count,0",
    "ARITHMETIC:DIV,/count,/status",
    "ARITHMETIC:SUB,/none,1",
    "HASH:MD5,/user/email",
    "HASH:SHA256,/count,h",
    "HASH:SHA512,/total",
    "HASH:MURMUR64,/user/email",
    "HASH:MURMUR128,/user/id,h",
    "HASH:MD5,/missing,h",
    "STRING:UPPER,/user/email",
    "STRING:LOWER,/café,low",
    "STRING:TRIM,/user/name",
    "STRING:TRIM_START,/user/name",
    "STRING:TRIM_END,/user/name,t",
    "STRING:LENGTH,/café",
    "STRING:LENGTH,/count,len",
    "STRING:SUBSTRING,/user/email,4,3",
    "STRING:SUBSTRING,/user/email,100",
    "STRING:REPLACE,/user/email,e,E",
    "STRING:REPLACE_ALL,/user/email,e,E",
    "STRING:REGEX_REPLACE,/user/email,([a-z]+)@,$1-at-",
    "STRING:REGEX_REPLACE,/csv,b*,-",
    "STRING:SPLIT,/user/email,.",
    "STRING:SPLIT,/csv,b,parts",
    "STRING:UPPER,/items/0/missing",
    "STRING:UPPER,/items",
    "STRING:UPPER,/none",
    "STRING:CONCAT,full,/user/name,-,/count,-,/missing,/ok",
    "COALESCE:/missing,/none,/user/id",
    "COALESCE:/missing,/none,fallback",
    "COALESCE:/missing,12",
    "COALESCE:/missing,/none",
    "TRY:ARITHMETIC:DIV,/count,0,0",
    'TRY:/missing,{"z":1}',
    "TRY:/missing,'text'",
    "TRY:/user/id,null",
    "CACHE_LOOKUP:/user/id,users,profile",
    "CACHE_PUT:/user/id,users",
]


# Each missing-field mode and each null mode once (20 s a pair on this machine): the generated property
# (test_spark_agreement's ``..._in_every_error_mode``) runs every transform form under all six pairs.
@pytest.mark.parametrize(
    ("mode", "nulls"), [("error", "passthrough"), ("passthrough", "error"), ("null", "error")]
)
def test_every_transform_form_agrees_with_the_evaluator_in_each_error_mode(spark, mode, nulls):
    dests = [destination(transform=t) for t in TRANSFORMS]
    check_agreement(spark, dests, MESSAGES, ev.ErrorHandling(mode, nulls))


def test_a_missing_path_is_json_path_not_found_in_error_mode(spark):
    [[outcome]] = run_destinations(
        spark, [destination(transform="/nope")], [msg({"a": 1})], ev.ErrorHandling("error")
    )
    assert (outcome.kind, outcome.error_type) == ("dead_lettered", "JsonPathNotFound")
    assert outcome.value is None


def test_division_by_zero_is_a_transform_evaluation_error(spark):
    [[outcome]] = run_destinations(
        spark, [destination(transform="ARITHMETIC:DIV,/a,0")], [msg({"a": 1})], ev.ErrorHandling("error")
    )
    assert outcome.error_type == "TransformEvaluation"


def test_passthrough_mode_leaves_the_message_unchanged(spark):
    [[outcome]] = run_destinations(
        spark, [destination(transform="/nope")], [msg({"a": 1})], ev.ErrorHandling("passthrough")
    )
    assert (outcome.kind, json.loads(outcome.value or b"")) == ("produced", {"a": 1})


def test_null_mode_produces_a_null_field(spark):
    [[outcome]] = run_destinations(
        spark, [destination(transform="EXTRACT:/nope,f")], [msg({"a": 1})], ev.ErrorHandling("null")
    )
    assert outcome.value == b'{"f":null}'


def test_null_value_behavior_error_dead_letters_a_present_null(spark):
    [[outcome]] = run_destinations(
        spark, [destination(transform="/a")], [msg({"a": None})], ev.ErrorHandling("error", "error")
    )
    assert outcome.error_type == "TransformEvaluation"


def test_construct_keeps_the_written_field_order_in_the_produced_bytes(spark):
    [[outcome]] = run_destinations(
        spark, [destination(transform="CONSTRUCT:z=/b:a=/a")], [msg({"a": 1, "b": "x"})], ev.ErrorHandling()
    )
    assert outcome.value == b'{"z":"x","a":1}'


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"\xff\xfe",
        b"\xed\xa0\x80",
        b"{",
        b"{}x",
        b"[1] [2]",
        b"1 2",
        b'"\\ud800"',
        b"1e400",
        b'{"a": [1E+0400]}',
        b'{"n": ' + b"2" * 309 + b".5}",
        b"[" + b"9" * 320 + b"]",
        b"NaN",
        b"[1,]",
    ],
)
def test_undecodable_values_are_message_deserialization_errors(spark, raw):
    [[outcome]] = run_destinations(spark, [destination(filter="KEY_EXISTS")], [msg(raw)], ev.ErrorHandling())
    assert (outcome.kind, outcome.error_type) == ("dead_lettered", "MessageDeserialization")
    assert outcome.error_message


def test_values_python_accepts_are_not_refused(spark):
    values = [
        b' {"a": [1, {"b": null}]} ',
        b'"\\ud83d\\ude00"',
        b'{"a":1,"a":2}',
        b"-0",
        b"1E-7",
        b'"a\\"}"',
        b'{"n": 1' + b"0" * 307 + b".5}",
    ]
    check_agreement(
        spark, [destination(), destination(transform="/a")], [msg(v) for v in values], ev.ErrorHandling()
    )


KEYS = [
    "/user/id",
    "/user/email",
    "/user",
    "/none",
    "/missing",
    "CONSTRUCT:id=/user/id:e=/user/email",
    "HASH:SHA256,/user/email",
    "HASH:MURMUR64,/user/id",
    "user-{/user/id}-{/total}-{/user/tags}",
    "constant-key",
]


@pytest.mark.parametrize("mode", ["error", "null", "passthrough"])
def test_key_transforms_agree_with_the_evaluator(spark, mode):
    check_agreement(spark, [destination(key=k) for k in KEYS], MESSAGES[:3], ev.ErrorHandling(mode))


def test_headers_static_then_transforms_in_order(spark):
    dest = destination(
        headers=(("static", "s"), ("trace", "overwritten")),
        header_transforms=(
            ("uid", "FROM:/user/id"),
            ("copy", "COPY:trace"),
            ("bin", "REMOVE"),
            ("x", "COPY:none"),
        ),
    )
    [[outcome], *_] = check_agreement(spark, [dest], MESSAGES[:1], ev.ErrorHandling())
    assert outcome.headers == (
        ("trace", b"overwritten"),
        ("static", b"s"),
        ("uid", b"42"),
        ("copy", b"overwritten"),
    )


@pytest.mark.parametrize("header", ["FROM:/missing", "FROM:/user", "FROM:/none", "FROM:/total"])
def test_header_from_errors_agree_with_the_evaluator(spark, header):
    check_agreement(spark, [destination(header_transforms=(("h", header),))], MESSAGES, ev.ErrorHandling())


@pytest.mark.parametrize(
    "rule", ["PRESERVE", "CURRENT", "FROM:/count", "FROM:/total", "FROM:/missing", "ADD:10", "SUBTRACT:5"]
)
def test_timestamp_rules_agree_with_the_evaluator(spark, rule):
    check_agreement(spark, [destination(timestamp=rule)], MESSAGES, ev.ErrorHandling())


def test_a_real_github_event_extracts_the_login_and_constructs(spark):
    lines = EVENTS.read_text(encoding="utf-8").splitlines()[:20]
    messages = [ev.Message(value=line.encode(), key=None, timestamp_ms=NOW_MS) for line in lines]
    dests = [
        destination(transform="EXTRACT:/actor/login,login"),
        destination(transform="CONSTRUCT:type=/type:repo=/repo/name:actor=/actor/login:ref=/payload/ref"),
    ]
    got = check_agreement(spark, dests, messages, ev.ErrorHandling("null"))
    first = json.loads(lines[0])
    assert json.loads(got[0][0].value or b"") == {"login": first["actor"]["login"]}
    assert got[0][1].kind == "produced"


def _users_store() -> ev.KeyValueStore:
    return ev.DictStore({"users": {"42": {"tier": "gold"}}})


def test_cache_lookup_reads_the_store_the_factory_gives(spark):
    dests = [
        destination(transform="CACHE_LOOKUP:/user/id,users,profile"),
        destination(transform="CACHE_LOOKUP:/user/id,users,MERGE"),
    ]
    got = check_agreement(
        spark, dests, MESSAGES[:2], ev.ErrorHandling(), store_factory=_users_store, store=_users_store()
    )
    assert json.loads(got[0][0].value or b"")["profile"] == {"tier": "gold"}


# Doubles whose Java 17 Double.toString has one or two digits more than the shortest form that reads
# back (JDK-4511638), found by a search over random doubles; the first by the agreement test.
JAVA17_LONG_DOUBLES = [
    6.550648167897426e16,
    2.8321410838618858e17,
    2.681447534367114e18,
    4.512774640366033e16,
    1.0018974447488302e18,
    -9.027226804708337e17,
    0.1,
    1e-7,
    123.456,
]


def test_float_text_is_the_shortest_form_even_where_java_17_prints_more_digits(spark):
    # key and header transforms read the transformed value: the hash goes to a destination of its own
    dests = [
        destination(transform="HASH:MD5,/n"),
        destination(key="n-{/n}", header_transforms=(("n", "FROM:/n"),)),
    ]
    got = check_agreement(spark, dests, [msg({"n": n}) for n in JAVA17_LONG_DOUBLES], ev.ErrorHandling())
    assert [o.key for [_, o] in got][:2] == [b"n-6.550648167897426e16", b"n-2.8321410838618858e17"]


@pytest.mark.parametrize(
    ("field", "expression", "missing"),
    [
        ("transform", "HASH:MURMUR64,/a,h", "error"),
        ("transform", "HASH:MD5,/a,h", "error"),
        ("key_transform", "HASH:MURMUR128,/a", "error"),
        ("key_transform", "HASH:SHA512,/a", "error"),
        ("transform", "CACHE_LOOKUP:/a,users,MERGE", "error"),
        ("transform", "STRING:REGEX_REPLACE,/a,x?,-", "passthrough"),
        ("transform", "STRING:REGEX_REPLACE,/a,x?,-", "null"),
        ("transform", "STRING:REGEX_REPLACE,/a,x+,-", "passthrough"),
        ("transform", "TRY:STRING:REGEX_REPLACE,/a,x?,-,0", "passthrough"),
        ("transform", "TRY:STRING:REGEX_REPLACE,/a,x?,-,0", "error"),
        ("filter", "REGEX:/a,(a+)+$", "passthrough"),
        ("filter", "KEY_MATCHES:^k", "error"),
    ],
)
def test_the_forms_python_forms_names_are_exactly_those_whose_plan_runs_python(
    spark, field, expression, missing
):
    """Spec validation refuses ``python_forms`` for low_latency (Spark real-time mode allows no Python
    operator): it must name a form exactly when the compiled plan evaluates Python."""
    from pipelines.dsl.python_forms import python_forms

    handling = ev.ErrorHandling(missing, "passthrough")
    dest = ev.DestinationSpec(
        name="d",
        topic="t",
        filter=parser.parse_filter(expression) if field == "filter" else None,
        transform=parser.parse_transform(expression) if field == "transform" else None,
        key_transform=parser.parse_key_transform(expression) if field == "key_transform" else None,
    )
    frame, (final,) = stage_destinations(
        source_frame(spark, [ev.Message(value=b'{"a": "xyz"}', key=b"k")]),
        [(dest, handling)],
        source=SourceColumns.kafka(),
        now_ms=F.lit(NOW_MS),
        store_factory=lambda: ev.DictStore({}),
    )
    plan = frame.select(final.outcome, final.value)._jdf.queryExecution().executedPlan().toString()
    runs_python = "EvalPython" in plan
    assert bool(python_forms(dest, handling)) == runs_python, plan
