"""What decoding Avro costs next to JSON (issue #31): records/s of the Confluent-framed Avro path (unframe,
decode with fastavro, convert to DSL.md's JSON mapping) on the demo's 800 real GitHub events, re-encoded
with ``demo/schemas/github_event.avsc``, against ``json.loads`` on the same records.

Two JSON rows, because the schema keeps only part of the payloads: ``json.loads`` on the original NDJSON
lines (what a ``json`` topic of these events carries, 3.7 KB a record) and on the JSON text of exactly the
fields the Avro record holds (like for like). Pure CPU, no services:

    python -m bench.avro_codec_measure [--rounds 5] [--repeat 20] [--out FILE]

Prints the figures (best of ``--rounds``, each decoding the 800 records ``--repeat`` times) and writes them
as JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demo.avro_topic import fit_to_schema
from streamforge_core.registered_schema import RegisteredSchema
from streamforge_core.schema_codecs import codec_for
from streamforge_core.wire_format import frame, unframe

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "demo" / "data" / "github-events-2021-07-21.ndjson"
SCHEMA = ROOT / "demo" / "schemas" / "github_event.avsc"
#: The id the measurement frames records with (any id: no registry is asked).
SCHEMA_ID = 1


def _rate(decode: Callable[[Any], Any], records: list[Any], rounds: int, repeat: int) -> float:
    """Records/s of ``decode`` over ``records`` (best of ``rounds``; each decodes them ``repeat`` times)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeat):
            for record in records:
                decode(record)
        best = min(best, time.perf_counter() - started)
    return len(records) * repeat / best


def measure(rounds: int, repeat: int) -> dict[str, Any]:
    """The figures: records/s and bytes/record of each path, and Avro's rate relative to each JSON one."""
    lines = EVENTS.read_bytes().splitlines()
    schema_text = SCHEMA.read_text()
    codec = codec_for(RegisteredSchema(SCHEMA_ID, "AVRO", schema_text, (), "github-events-avro-value", 1))
    fitted = [fit_to_schema(json.loads(schema_text), json.loads(line)) for line in lines]
    framed = [frame(SCHEMA_ID, codec.encode(event)) for event in fitted]
    fitted_json = [json.dumps(codec.decode(unframe(value, protobuf=False).body)).encode() for value in framed]
    assert [codec.decode(unframe(value, protobuf=False).body) for value in framed] == [
        json.loads(text) for text in fitted_json
    ]

    def avro(value: bytes) -> Any:
        return codec.decode(unframe(value, protobuf=False).body)

    rows: dict[str, tuple[list[bytes], Callable[[bytes], Any]]] = {
        "avro (unframe + decode + JSON mapping)": (framed, avro),
        "json.loads, original lines": (lines, json.loads),
        "json.loads, the Avro record's fields": (fitted_json, json.loads),
    }
    figures: dict[str, Any] = {"records": len(lines), "rounds": rounds, "repeat": repeat, "rows": {}}
    for name, (records, decode) in rows.items():
        figures["rows"][name] = {
            "records_per_s": round(_rate(decode, records, rounds, repeat)),
            "bytes_per_record": round(sum(len(record) for record in records) / len(records)),
        }
    avro_rate = figures["rows"]["avro (unframe + decode + JSON mapping)"]["records_per_s"]
    figures["avro_vs_json_original"] = round(
        avro_rate / figures["rows"]["json.loads, original lines"]["records_per_s"], 2
    )
    figures["avro_vs_json_same_fields"] = round(
        avro_rate / figures["rows"]["json.loads, the Avro record's fields"]["records_per_s"], 2
    )
    encode_started = time.perf_counter()
    for event in fitted:
        codec.encode(event)
    figures["encode_records_per_s"] = round(len(fitted) / (time.perf_counter() - encode_started))
    return figures


def main(argv: list[str] | None = None) -> int:
    """Measure and print; ``--out`` also writes the figures as JSON. Returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    figures = measure(args.rounds, args.repeat)
    print(f"{figures['records']} GitHub events, best of {args.rounds} rounds of {args.repeat} passes")
    for name, row in figures["rows"].items():
        print(f"  {name:<42} {row['records_per_s']:>9,} records/s  {row['bytes_per_record']:>6,} B/record")
    print(f"  avro / json.loads (original lines)          {figures['avro_vs_json_original']:.2f}")
    print(f"  avro / json.loads (same fields)             {figures['avro_vs_json_same_fields']:.2f}")
    print(f"  avro encode (JSON mapping -> body)          {figures['encode_records_per_s']:>9,} records/s")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
