"""The Protobuf codec's figures (issue #31): how many records/s ``streamforge_core.protobuf_codec`` decodes to
the DSL's JSON, against ``json.loads`` on the same records as JSON text, for GitHub events
(``demo/data``, encoded with ``demo/schemas/github_event.proto``). Also: the schema's compile time (paid once
per schema id), encode records/s, protobuf's own ``json_format.MessageToDict`` on the same bodies (the other
route to JSON, with 64-bit integers as strings) and the average record sizes. One process, one core, no
services:

    python -m bench.protobuf_codec_measure [--records 20000] [--repeats 5] [--out figures.json]

Each case runs ``repeats`` times, interleaved with the others, and the median is printed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from bench.stats import median
from streamforge_core.protobuf_codec import compile_schema, protobuf_codec

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "demo" / "schemas" / "github_event.proto"
EVENTS = ROOT / "demo" / "data" / "github-events-2021-07-21.ndjson"


def _rate(records: int, run: Callable[[], object]) -> float:
    """Records per CPU second of this process (CPU time, so a busy machine slows the figure less)."""
    started = time.process_time()
    run()
    return records / (time.process_time() - started)


def measure(records: int, repeats: int) -> dict[str, Any]:
    """The figures: compile ms (first and cached), records/s per case (median of ``repeats``), bytes/record."""
    text = SCHEMA.read_text()
    started = time.perf_counter()
    compile_schema(text)
    compile_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    codec = protobuf_codec(1, text, {}, (0,))
    first_codec_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    protobuf_codec(1, text, {}, (0,))
    cached_us = (time.perf_counter() - started) * 1e6

    lines = EVENTS.read_bytes().splitlines()
    json_bodies = [lines[i % len(lines)] for i in range(records)]
    events = [json.loads(body) for body in json_bodies]
    proto_bodies = [codec.encode(event) for event in events]
    message_class = codec.message_class

    cases: dict[str, Callable[[], object]] = {
        "json.loads": lambda: [json.loads(body) for body in json_bodies],
        "protobuf_codec.decode": lambda: [codec.decode(body) for body in proto_bodies],
        "protobuf_codec.encode": lambda: [codec.encode(event) for event in events],
        "protobuf parse + MessageToDict": lambda: [
            json_format.MessageToDict(message_class.FromString(body), preserving_proto_field_name=True)
            for body in proto_bodies
        ],
        "protobuf parse only": lambda: [message_class.FromString(body) for body in proto_bodies],
    }
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            rates[name].append(_rate(records, run))
    figures = {name: round(median(values)) for name, values in rates.items()}
    return {
        "records": records,
        "repeats": repeats,
        "compile_ms": round(compile_ms, 2),
        "first_codec_ms": round(first_codec_ms, 2),
        "cached_codec_us": round(cached_us, 2),
        "records_per_s": figures,
        "decode_vs_json_loads": round(figures["protobuf_codec.decode"] / figures["json.loads"], 3),
        "bytes_per_record": {
            "json": round(sum(map(len, json_bodies)) / records, 1),
            "protobuf": round(sum(map(len, proto_bodies)) / records, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    figures = measure(args.records, args.repeats)
    print(
        f"schema compile: {figures['compile_ms']} ms; protobuf_codec() first {figures['first_codec_ms']} ms,"
    )
    print(f"  cached {figures['cached_codec_us']} us")
    print(f"records per CPU second, median of {args.repeats} x {args.records} GitHub events:")
    for name, rate in figures["records_per_s"].items():
        print(f"  {name:32} {rate:>10,}")
    print(f"decode / json.loads: {figures['decode_vs_json_loads']}")
    sizes = figures["bytes_per_record"]
    print(f"bytes/record: JSON {sizes['json']}, Protobuf {sizes['protobuf']}")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
