"""End-to-end throughput of one pipeline on this machine: 1 KB GitHub-shaped JSON records through the real
driver (Kafka source -> compiled DSL -> destinations + DLQ), measured from the driver's own progress events.

    python -m bench.pipeline_throughput [--records 300000] [--destinations 2] [--mode at_least_once]

Needs Kafka and Redis (``python -m devstack --profile test up kafka redis`` and ``eval "$(python -m devstack
--profile test env)"``; ``make bench-pipeline`` does both). Prints records/s over the steady-state batches
(JVM start-up and query planning excluded, reported separately), per-batch durations, and the comparison with
the StreamForge Rust engine's published ~35,000 msg/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from tests.pipelines.spark.harness import DriverProcess, produce

EVENTS = Path(__file__).resolve().parent.parent / "demo" / "data" / "github-events-2021-07-21.ndjson"
STREAMFORGE_RUST_MSGS_PER_S = 35_000


def one_kb_records(count: int, size: int = 1024) -> list[tuple[bytes | None, bytes | None]]:
    """``count`` records of exactly ``size`` bytes each, shaped like the real events (same top-level fields,
    actor/repo objects, a payload), cycling over the 800 real ones with fresh ids."""
    events = [json.loads(line) for line in EVENTS.read_bytes().splitlines()]
    out: list[tuple[bytes | None, bytes | None]] = []
    for i in range(count):
        event = events[i % len(events)]
        payload = event.get("payload", {})
        record = {
            "id": f"bench-{i}",
            "type": event["type"],
            "actor": {k: event["actor"][k] for k in ("id", "login", "display_login", "url")},
            "repo": event["repo"],
            "payload": {
                "ref": payload.get("ref"),
                "size": payload.get("size"),
                "action": payload.get("action"),
                "pull_request": {"merged": payload["pull_request"].get("merged")}
                if "pull_request" in payload
                else None,
            },
            "public": event["public"],
            "created_at": event["created_at"],
            "pad": "",
        }
        if record["payload"]["pull_request"] is None:
            del record["payload"]["pull_request"]
        text = json.dumps(record, separators=(",", ":"))
        record["pad"] = "x" * max(0, size - len(text))
        data = json.dumps(record, separators=(",", ":")).encode()
        out.append((record["id"].encode(), data))
    return out


def spec_for(source: str, suffix: str, destinations: int, mode: str, batch: int) -> dict[str, Any]:
    dests = [
        {"name": "pushes", "topic": f"bench-pushes-{suffix}", "filter": "/type,==,PushEvent",
         "transform": "EXTRACT:/actor/login,login"},
        {"name": "pull-requests", "topic": f"bench-prs-{suffix}", "filter": "/type,==,PullRequestEvent",
         "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:merged=/payload/pull_request/merged"},
    ][:destinations]  # fmt: skip
    return {
        "source": {"topics": [source]},
        "destinations": dests,
        "delivery": {"mode": mode, "commit_strategy": {"kind": "batch", "max_records": batch}},
        "dlq": {"topic": f"bench-dlq-{suffix}"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--destinations", type=int, choices=[1, 2], default=2)
    parser.add_argument(
        "--mode", default="at_least_once", choices=["at_least_once", "effectively_once", "at_most_once"]
    )
    parser.add_argument("--batch", type=int, default=50_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)

    from django.conf import settings  # settings only for the connection URLs devstack's env gives

    bootstrap, redis_url, jars = (
        settings.KAFKA_BOOTSTRAP_SERVERS,
        settings.REDIS_URL,
        list(settings.SPARK_JARS),
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    suffix = uuid.uuid4().hex[:8]
    source = f"bench-src-{suffix}"
    admin.create_topics([NewTopic(source, args.partitions, 1)])[source].result(30)
    spec = spec_for(source, suffix, args.destinations, args.mode, args.batch)
    plan = ensure_topics(admin, parse_spec(spec, pipeline_name=f"bench-{suffix}"), partitions=args.partitions)

    records = one_kb_records(args.records)
    started = time.perf_counter()
    produce(bootstrap, source, records, partitions=args.partitions)
    produce_s = time.perf_counter() - started
    print(
        f"produced {len(records):,} records of {len(records[0][1] or b'')} bytes in {produce_s:.1f}s",
        flush=True,
    )

    with tempfile.TemporaryDirectory() as workdir:
        driver = DriverProcess(spec=spec, pipeline=f"bench-{suffix}", workdir=Path(workdir), bootstrap=bootstrap,
                               redis_url=redis_url, jars=jars, master=args.master)  # fmt: skip
        launched = time.time()
        driver.start()
        try:
            driver.wait_consumed(len(records), timeout=1800)
        finally:
            driver.stop()
        events = driver.events()
    first_start_ms = events[0]["time_ms"] - events[0]["duration_ms"]
    last_end_ms = events[-1]["time_ms"]
    steady = events[1:] or events
    steady_records = sum(e["consumed"] for e in steady)
    steady_ms = sum(e["duration_ms"] for e in steady)
    wall_rate = len(records) / ((last_end_ms - first_start_ms) / 1000)
    steady_rate = steady_records / (steady_ms / 1000)
    figures = {
        "records": len(records),
        "record_bytes": len(records[0][1] or b""),
        "destinations": args.destinations,
        "mode": args.mode,
        "partitions": args.partitions,
        "master": args.master,
        "batches": len(events),
        "startup_s": round(first_start_ms / 1000 - launched, 1),
        "records_per_s_all_batches": round(wall_rate),
        "records_per_s_steady": round(steady_rate),
        "batch_ms_median": statistics.median(e["duration_ms"] for e in events),
        "vs_streamforge_rust": round(steady_rate / STREAMFORGE_RUST_MSGS_PER_S, 2),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    for future in admin.delete_topics([source, *plan.created]).values():
        future.result(30)
    return 0


if __name__ == "__main__":
    import django

    django.setup()
    sys.exit(main())
