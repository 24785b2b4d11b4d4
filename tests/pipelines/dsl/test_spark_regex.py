"""Security review #28, finding 1: the Spark plan's regexes on hostile record values.

The DSL's own regex forms run on RE2/J (our Java UDF); the plan still applies a few fixed patterns of its own
with Spark's ``rlike`` / ``regexp_replace`` / ``regexp_extract``, i.e. ``java.util.regex``, to record values
and headers anyone who can produce to the source topic writes. Each must take time linear in the input:
proven here by running each through ``java.util.regex`` in the session's JVM on hostile 10 KB and 40 KB
inputs: the time grows with the input, not its square (printed). ``_JSON_STRING`` did not (2.5 s at 10 KB,
36 s at 40 KB before the fix: a never-closed value full of escaped quotes) and now may not start at a quote
right after a backslash.

Also: the Java UDFs are registered in every session ``build_session`` makes, and a quick micro-benchmark
prints what the UDF costs against ``rlike`` on ordinary values.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.dsl import spark as compiled
from pipelines.spark import routing

pytestmark = pytest.mark.spark

#: routing._replay_columns: the DLQ topic of an ``x-streamforge-replay-of`` header (Python's rsplit("/", 2)).
REPLAY_OF = r"(?s)^(.*?)(?:/[^/]*)?(?:/[^/]*)?$"
#: spark._parse_error: a number beyond the double range.
MAY_OVERFLOW = r"[0-9](?:[eE][+]?[0-9]{3}|[0-9]{308})"


def _hostile(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


#: (name, pattern, how Spark applies it, hostile inputs as functions of the size in characters)
CASES: list[tuple[str, str, str, list[Callable[[int], str]]]] = [
    (
        "_JSON_STRING",
        compiled._JSON_STRING,
        "replace",
        [
            lambda n: '"' + _hostile('\\"', n),  # never closed, an escaped quote every other character
            lambda n: _hostile('"', n),
            lambda n: '"' + _hostile("\\", n),
            lambda n: _hostile('"\\', n),
        ],
    ),
    (
        "_JSON_SCALAR",
        compiled._JSON_SCALAR,
        "find",
        [
            lambda n: "-" + _hostile("0", n) + "x",
            lambda n: _hostile("1", n) + ".",
            lambda n: "1." + _hostile("5", n) + "e+",
            lambda n: '"' + _hostile('\\"', n),
        ],
    ),
    (
        "_LONE_SURROGATE",
        compiled._LONE_SURROGATE,
        "find",
        [
            lambda n: _hostile("\\", n),
            lambda n: _hostile("\\u", n),
            lambda n: _hostile("\\uD800", n),
            lambda n: _hostile("\\", n) + "uDC00",
            lambda n: _hostile("\\\\uDBFF", n),
        ],
    ),
    (
        "overflowing number",
        MAY_OVERFLOW,
        "find",
        [lambda n: _hostile("9" * 307 + "x", n), lambda n: _hostile("1e1", n), lambda n: _hostile("9", n)],
    ),
    (
        "replay-of header",
        REPLAY_OF,
        "find",
        [
            lambda n: _hostile("/", n),
            lambda n: _hostile("a/", n),
            lambda n: "/" + _hostile("a", n) + "/b/c/d",
            lambda n: _hostile("\n/", n),
        ],
    ),
]


def test_the_patterns_checked_here_are_the_ones_the_plan_uses() -> None:
    assert REPLAY_OF in inspect.getsource(routing)
    assert MAY_OVERFLOW in inspect.getsource(compiled)


@pytest.mark.parametrize(("name", "pattern", "how", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_each_regex_of_the_plan_is_linear_on_hostile_values_in_java_util_regex(
    spark_session: SparkSession, name: str, pattern: str, how: str, inputs: list[Callable[[int], str]]
) -> None:
    jvm = spark_session.sparkContext._jvm
    assert jvm is not None
    java = jvm.java.util.regex.Pattern.compile(pattern)
    for index, make in enumerate(inputs):
        times = []
        for size in (10_000, 40_000):
            text = make(size)
            began = time.perf_counter()
            matcher = java.matcher(text)
            if how == "replace":
                matcher.replaceAll('""')
            else:
                matcher.find()
            times.append(time.perf_counter() - began)
        print(f"\n{name} input {index}: 10 KB {times[0] * 1000:.2f} ms, 40 KB {times[1] * 1000:.2f} ms")
        # Linear: 4x the input, about 4x the time (quadratic would be 16x); and well under a second at 10 KB.
        # The overflow check is linear but dear on digit runs just short of 309 (it rescans up to 308 digits
        # from each start): ~0.3 s for a hostile 10 KB record on this machine, a few microseconds per
        # ordinary one.
        assert times[1] < 8 * times[0] + 0.05, (name, index, times)
        assert times[0] < 1.0, (name, index, times)


def test_every_session_has_the_regex_udfs_and_they_cost_little_against_rlike(
    spark_session: SparkSession,
) -> None:
    """The micro-benchmark: RE2/J's UDF against Spark's rlike (java.util.regex) on ordinary short values,
    200,000 rows of an e-mail-like pattern; printed, not asserted beyond both giving the same count."""
    names = {f.name for f in spark_session.catalog.listFunctions() if f.name.startswith("streamforge_")}
    assert names == set(compiled.REGEX_FUNCTIONS)
    pattern = r"^[a-z0-9._-]+@[a-z0-9-]+\.[a-z]{2,}$"
    rows = spark_session.range(200_000).select(
        F.concat(F.lit("user"), F.col("id").cast("string"), F.lit("@example.org")).alias("t")
    )
    rows = rows.union(spark_session.range(1000).select(F.lit("not an address").alias("t"))).cache()
    rows.count()
    results = {}
    for label, condition in (
        ("rlike (java.util.regex)", F.col("t").rlike(pattern)),
        ("streamforge_regex_find (RE2/J)", F.call_udf("streamforge_regex_find", F.col("t"), F.lit(pattern))),
    ):
        best = float("inf")
        for _ in range(3):
            began = time.perf_counter()
            count = rows.where(condition).count()
            best = min(best, time.perf_counter() - began)
        results[label] = (count, best)
        print(f"\n{label}: {count} of 201,000 rows match, best of 3: {best * 1000:.0f} ms")
    rows.unpersist()
    assert {count for count, _ in results.values()} == {200_000}


def test_the_hostile_case_before_and_after_in_the_jvm(spark_session: SparkSession) -> None:
    """Printed figures: ``(a+)+$`` on ``a...a!`` in java.util.regex (what ``rlike`` ran before the fix:
    Java 17 copes with a few dozen characters but grows far faster than the input: ~0.15 s at 1 KB, more
    than 3 s at 10 KB, where ``(x+x+)+y`` and ``(.*a){20}`` already stall at 1 KB) against RE2/J in our UDF on
    10 KB, through Spark."""
    jvm = spark_session.sparkContext._jvm
    assert jvm is not None
    java = jvm.java.util.regex.Pattern.compile("(?dU)(a+)+$")
    for n in (500, 1000, 2000):
        began = time.perf_counter()
        java.matcher("a" * n + "!").find()
        print(
            f"\nbefore: java.util.regex (a+)+$ on {n + 1} chars: {(time.perf_counter() - began) * 1000:.1f} ms"
        )
    hostile = spark_session.createDataFrame([("a" * 10_000 + "!",)], "t string").cache()
    hostile.count()
    began = time.perf_counter()
    (row,) = hostile.select(
        F.call_udf("streamforge_regex_find", F.col("t"), F.lit("(a+)+$")).alias("m")
    ).collect()
    elapsed = time.perf_counter() - began
    print(f"\nafter: RE2/J UDF (a+)+$ on 10,001 chars through Spark (one query): {elapsed * 1000:.0f} ms")
    assert row["m"] is False
    assert elapsed < 5  # a whole Spark query on a loaded machine; the match itself is microseconds
