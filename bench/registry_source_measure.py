"""How a pipeline should read registry-format records in Spark (issue #31): our Python decoder in an Arrow UDF
(``pipelines.spark.decoding``, what pipelines run) against Spark's own ``from_avro``, with the JSON parse of
the same records as the baseline; records/s in Spark ``local[N]`` on the demo's 800 real GitHub events
(re-encoded with ``demo/schemas/github_event.avsc``, registered in the registry of ``SCHEMA_REGISTRY_URL``:
each Python worker looks the id up once, as in a pipeline), repeated to ``--records``.

Rows (each ends in the same aggregate, the number of PushEvents, so every record is read whole):

* ``json``: ``try_parse_json`` of the fields' JSON text (the DSL's input for a ``json`` source);
* ``python decoder + parse``: the Arrow UDF decodes each framed value to JSON text, then ``try_parse_json``
  (exactly the plan of an ``avro`` source);
* ``from_avro``: Spark's decoder into a struct with the one schema given at planning (no framing: the 5-byte
  header cut off with ``substring``), read as a struct;
* ``from_avro + to_json + parse``: the same made into the VARIANT the DSL reads.

``from_avro`` takes one schema fixed when the query is planned; a topic's records name their own writer
schemas, so it would need a branch per known id and a restart for each new one, and its Spark types differ
from DSL.md's JSON mapping (unions, decimals, timestamps). The figures say what that would buy::

    python -m bench.registry_source_measure [--records 100000] [--cores 2] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.avro_codec_measure import EVENTS, SCHEMA
from demo.avro_topic import fit_to_schema
from streamforge_core.registered_schema import RegisteredSchema
from streamforge_core.schema_codecs import codec_for
from streamforge_core.wire_format import frame

#: The subject the measured schema is registered under (in the test stack's registry).
SUBJECT = "bench-github-events-avro-value"


def _records(count: int, schema_id: int) -> tuple[list[bytes], list[bytes]]:
    """(framed Avro values, the same records' JSON text), ``count`` of each, the 800 events repeated."""
    schema_text = SCHEMA.read_text()
    codec = codec_for(RegisteredSchema(schema_id, "AVRO", schema_text, (), SUBJECT, 1))
    fitted = [
        fit_to_schema(json.loads(schema_text), json.loads(line)) for line in EVENTS.read_bytes().splitlines()
    ]
    framed = [frame(schema_id, codec.encode(event)) for event in fitted]
    texts = [json.dumps(codec.decode(value[5:]), separators=(",", ":")).encode() for value in framed]
    repeat = -(-count // len(framed))
    return (framed * repeat)[:count], (texts * repeat)[:count]


def measure(records: int, cores: int, rounds: int) -> dict[str, Any]:
    """The figures: records/s per row (best of ``rounds`` after one warm-up run) and each row against
    ``json``."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from devstack import jars
    from pipelines.spark.decoding import decode_source
    from streamforge_core.schema_registry import RegistryConnection, SchemaRegistry

    url = os.environ.get("SCHEMA_REGISTRY_URL", "")
    if not url:
        raise SystemExit(
            "SCHEMA_REGISTRY_URL is not set: run it in the test stack (devstack --profile test env)"
        )
    connection = RegistryConnection(url)
    with SchemaRegistry(connection) as registry:
        schema_id = registry.register(SUBJECT, SCHEMA.read_text())
    framed, texts = _records(records, schema_id)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers need this venv's pyarrow and codecs
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("registry-source-measure")
        .config("spark.jars", str(jars.spark_avro_jar()))
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame_df = spark.createDataFrame([(v,) for v in framed], "value binary").repartition(cores).cache()
        json_df = spark.createDataFrame([(t,) for t in texts], "value binary").repartition(cores).cache()
        frame_df.count(), json_df.count()
        schema_text = SCHEMA.read_text()
        pushes = F.sum(F.when(F.col("kind") == "PushEvent", 1).otherwise(0)).alias("pushes")

        def via_variant(value: Any) -> Any:
            return F.variant_get(F.try_parse_json(value.cast("string")), "$.type", "string").alias("kind")

        def python_decoder() -> Any:
            decoded_df, decoded_value, _error = decode_source(frame_df, connection, "avro")
            return decoded_df.select(via_variant(decoded_value))

        def cut(_value: Any) -> Any:  # the 5-byte Confluent header cut off
            return from_avro(F.expr("substring(value, 6)"), schema_text)

        def avro_struct() -> Any:
            return frame_df.select(cut(F.col("value"))["type"].alias("kind"))

        def avro_variant() -> Any:
            return frame_df.select(via_variant(F.to_json(cut(F.col("value")))))

        def json_variant() -> Any:
            return json_df.select(via_variant(F.col("value")))

        # Builders, not DataFrames: a query collected twice from one DataFrame reuses its shuffle files and
        # runs only the final aggregation, so every round plans its query anew.
        plans: dict[str, Callable[[], Any]] = {
            "json": json_variant,
            "python decoder + parse": python_decoder,
            "from_avro": avro_struct,
            "from_avro + to_json + parse": avro_variant,
        }
        figures: dict[str, Any] = {"records": records, "cores": cores, "rounds": rounds, "rows": {}}
        for name, plan in plans.items():
            expected = plan().agg(pushes).collect()[0]["pushes"]  # warm-up: Python workers, code generation
            best = float("inf")
            for _ in range(rounds):
                query = plan().agg(pushes)
                started = time.perf_counter()
                assert query.collect()[0]["pushes"] == expected
                best = min(best, time.perf_counter() - started)
            figures["rows"][name] = {"records_per_s": round(records / best), "pushes": expected}
        base = figures["rows"]["json"]["records_per_s"]
        for row in figures["rows"].values():
            row["vs_json"] = round(row["records_per_s"] / base, 2)
        return figures
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    """Measure and print; ``--out`` also writes the figures as JSON. Returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    figures = measure(args.records, args.cores, args.rounds)
    print(
        f"{figures['records']:,} GitHub events in Spark local[{figures['cores']}], best of {figures['rounds']}"
    )
    for name, row in figures["rows"].items():
        print(
            f"  {name:<30} {row['records_per_s']:>9,} records/s  {row['vs_json']:.2f}x json  ({row['pushes']} pushes)"
        )
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
