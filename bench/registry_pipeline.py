"""A pipeline over a registry-format topic against the same pipeline over JSON (issue #31: "``make bench``
gains an Avro row: throughput within 20% of the JSON row on the same records").

The records are the demo's 800 real GitHub events (``demo/data``) cut to ``demo/schemas/github_event.avsc``
(``demo.avro_topic.fit_to_schema``), repeated to the run's record count: one topic carries them as JSON text
(1.2 KB a record), the other as Avro in the Confluent wire format (0.6 KB), registered in the registry of
``SCHEMA_REGISTRY_URL`` under the topic's ``-value`` subject. The same pipeline runs over each (the demo's
``pushes`` projection and an archive of every record, at_least_once, the backlog's batch size), one driver
run after the other; records/s are sustained from the driver's own progress events after its first batch,
as in ``bench.spark_pipeline``. The ``avro`` row carries ``vs_json``: its rate over the JSON row's.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.avro_codec_measure import EVENTS as EVENTS_FILE
from bench.common import Context, LoadSampler, Measurement, load1, produce_records
from bench.spark_pipeline import ProgressReader, sustained_from_progress, wait_consumed
from demo.avro_topic import fit_to_schema
from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import RegistryConnection, SchemaRegistry
from streamforge_core.wire_format import frame
from tests.pipelines.spark.harness import DriverProcess

NAME = "registry_pipeline"
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "demo" / "schemas" / "github_event.avsc"
#: The goal the ``avro`` row is judged on: at least this share of the JSON row's records/s.
AVRO_VS_JSON_GOAL = 0.8


def _spec(source: str, fmt: str, pushes: str, archive: str, dlq: str, batch: int) -> dict[str, Any]:
    return {
        "source": {"topics": [source], "format": fmt, "starting_offsets": "earliest"},
        "destinations": [
            {
                "name": "pushes",
                "topic": pushes,
                "filter": "/type,==,PushEvent",
                "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:commits=/payload/size",
            },
            {"name": "archive", "topic": archive},
        ],
        "delivery": {"mode": "at_least_once", "commit_strategy": {"kind": "batch", "max_records": batch}},
        "dlq": {"topic": dlq},
    }


def records(count: int, registry: SchemaRegistry, subject: str) -> tuple[list[bytes], list[bytes], int]:
    """(JSON texts, Avro framed values, the schema id): the demo's events cut to the schema, ``count`` of
    each, the schema registered under ``subject``. Raises the registry client's errors."""
    schema_text = SCHEMA_FILE.read_text()
    schema_id = registry.register(subject, schema_text)
    codec = codec_for(registry.lookup(schema_id))
    shape = json.loads(schema_text)
    events = [json.loads(line) for line in EVENTS_FILE.read_bytes().splitlines() if line.strip()]
    framed = [frame(schema_id, codec.encode(fit_to_schema(shape, event))) for event in events]
    # The JSON row reads what the Avro row decodes to: the same fields, as JSON text.
    texts = [json.dumps(codec.decode(value[5:]), separators=(",", ":")).encode() for value in framed]
    repeat = -(-count // len(events))
    return (texts * repeat)[:count], (framed * repeat)[:count], schema_id


def _run(ctx: Context, fmt: str, source: str, registry_url: str) -> Measurement:
    topics, services = ctx.topics, ctx.services
    name = f"reg-{fmt}"
    spec = _spec(
        source, "avro" if fmt == "avro" else "json", topics.create(f"{name}-pushes", ctx.partitions),
        topics.create(f"{name}-archive", ctx.partitions), topics.create(f"{name}-dlq", 1), ctx.batch,
    )  # fmt: skip
    n = len(ctx.records)
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as workdir:
        driver = DriverProcess(spec=spec, pipeline=f"{topics.prefix}-{name}", workdir=Path(workdir),
                               bootstrap=services.bootstrap, redis_url=services.redis_url,
                               jars=list(services.jars), master=ctx.master,
                               env={"SCHEMA_REGISTRY_URL": registry_url})  # fmt: skip
        reader = ProgressReader(services.redis_url, driver.run_id)
        before = load1()
        sampler = LoadSampler().start()
        driver.start()
        try:
            wait_consumed(driver, reader, n, 1800, f"the {fmt} backlog")
        finally:
            load = sampler.stop()
            driver.stop()
            driver.ensure_stopped()
    events = list(reader.events)
    seconds, rate = sustained_from_progress(events, n)
    dead = sum(e["dlq_records"] for e in events)
    print(f"  {fmt}: {rate:,.0f} records/s sustained over {n:,} GitHub events, {dead} dead-lettered")
    return Measurement(
        scenario=NAME,
        variant=fmt,
        records=n,
        seconds=round(seconds, 2),
        records_per_s=None if math.isnan(rate) else round(rate),
        load={"start": before, "end": load1(), **{f"during_{k}": v for k, v in load.items()}},
        extra={"batches": len(events), "dead_lettered": dead, "batch_ms": [e["duration_ms"] for e in events]},
    )


def run(ctx: Context) -> list[Measurement]:
    """The JSON row, then the Avro row on the same records; the Avro row's ``extra`` carries ``vs_json``
    and whether it meets ``AVRO_VS_JSON_GOAL``. Raises ``SystemExit`` without ``SCHEMA_REGISTRY_URL``."""
    url = os.environ.get("SCHEMA_REGISTRY_URL", "")
    if not url:
        raise SystemExit("SCHEMA_REGISTRY_URL is not set: the registry row needs the test stack's registry")
    json_topic = ctx.topics.create("reg-json-src", ctx.partitions)
    avro_topic = ctx.topics.create("reg-avro-src", ctx.partitions)
    with SchemaRegistry(RegistryConnection(url)) as registry:
        texts, framed, _schema_id = records(len(ctx.records), registry, f"{avro_topic}-value")
    started = time.monotonic()
    produce_records(ctx.services.bootstrap, json_topic, [(b"", t) for t in texts], ctx.partitions)
    produce_records(ctx.services.bootstrap, avro_topic, [(b"", v) for v in framed], ctx.partitions)
    print(f"  produced {len(texts):,} records twice in {time.monotonic() - started:.0f}s")
    json_row = _run(ctx, "json", json_topic, url)
    avro_row = _run(ctx, "avro", avro_topic, url)
    if json_row.records_per_s and avro_row.records_per_s:
        share = avro_row.records_per_s / json_row.records_per_s
        avro_row.extra["vs_json"] = round(share, 2)
        avro_row.extra["goal"] = AVRO_VS_JSON_GOAL
        avro_row.extra["met"] = share >= AVRO_VS_JSON_GOAL
        print(f"  avro / json: {share:.2f} (goal at least {AVRO_VS_JSON_GOAL})")
    return [json_row, avro_row]
