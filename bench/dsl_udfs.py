"""Measure what the UDF-compiled DSL forms cost next to a built-in one.

Run: ``python -m bench.dsl_udfs [rows]`` (default 200,000 generated rows, local[2]).
Prints rows/s for a built-in form (``HASH:SHA256``), each Python UDF form (``HASH:MURMUR64``,
``HASH:MURMUR128``, ``CACHE_LOOKUP`` against an in-memory store) and the JVM UDF over RE2/J that runs
``STRING:REGEX_REPLACE`` (with an empty-matching pattern in passthrough mode, which took a Python UDF
before RE2/J).
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import functions as F

from devstack import jars
from pipelines.dsl import evaluate as ev
from pipelines.dsl import parser
from pipelines.dsl.spark import SourceColumns, stage_destinations
from pipelines.spark.session import build_session

_FORMS = [
    ("built-in HASH:SHA256", "HASH:SHA256,/user/email,h", "error"),
    ("UDF HASH:MURMUR64", "HASH:MURMUR64,/user/email,h", "error"),
    ("UDF HASH:MURMUR128", "HASH:MURMUR128,/user/email,h", "error"),
    ("JVM UDF STRING:REGEX_REPLACE (RE2/J)", "STRING:REGEX_REPLACE,/user/email,x*,-", "passthrough"),
    ("UDF CACHE_LOOKUP", "CACHE_LOOKUP:/user/id,users,profile", "error"),
]


def _store() -> ev.KeyValueStore:
    return ev.DictStore({"users": {str(i): {"tier": i % 3} for i in range(1000)}})


def main(rows: int) -> None:
    spark = build_session(
        app_name="bench-dsl-udfs",
        master="local[2]",
        jars=[str(jar) for jar in jars.spark_jars()],
        conf={"spark.ui.enabled": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = (
        spark.range(rows)
        .select(
            F.lit(None).cast("binary").alias("key"),
            F.encode(
                F.format_string('{"user":{"id":%d,"email":"user%d@example.com"},"n":%d}', "id", "id", "id"),
                "UTF-8",
            ).alias("value"),
            F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
            F.current_timestamp().alias("timestamp"),
        )
        .cache()
    )
    frame.count()
    source = SourceColumns.kafka()
    frame = frame.cache()
    for label, expression, mode in _FORMS:
        dest = ev.DestinationSpec(name="b", topic="b", transform=parser.parse_transform(expression))
        staged, (out,) = stage_destinations(
            frame,
            [(dest, ev.ErrorHandling(mode))],  # type: ignore[arg-type]
            source=source,
            now_ms=F.lit(0),
            store_factory=_store,
        )
        parsed = staged
        started = time.perf_counter()
        parsed.select(F.sum(F.length(out.value))).collect()
        elapsed = time.perf_counter() - started
        print(f"{label:50s} {rows / elapsed:12,.0f} rows/s")
    spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
