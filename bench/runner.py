"""``python -m bench run [--only ...] [--records N] [--quick]``: every scenario in one run, one report.

The scenarios are modules with ``NAME`` and ``run(ctx) -> list[Measurement]`` (see ``SCENARIOS``); the
runner checks the services, produces the shared backlog once, runs the selected scenarios in order, writes
``artifacts/bench/report.{md,json}`` and the plots, and deletes every topic it created.
``python -m bench report`` rebuilds the Markdown and plots from an existing ``report.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType

from bench import (
    density,
    dlq_console,
    linearity,
    python_loop,
    raw_copy,
    registry_pipeline,
    report,
    scaling,
    spark_pipeline,
    spark_reference,
    startup,
)
from bench.common import (
    REPO,
    Context,
    LoadSampler,
    Measurement,
    Services,
    Topics,
    one_kb_records,
    produce_records,
)

#: Scenario modules in the order they run (cheap and native first; density, which brings up a control plane
#: and N drivers, last).
SCENARIOS: dict[str, ModuleType] = {
    m.NAME: m
    for m in (
        raw_copy,
        python_loop,
        spark_pipeline,
        startup,
        spark_reference,
        registry_pipeline,
        linearity,
        scaling,
        dlq_console,
        density,
    )
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def run(args: argparse.Namespace) -> int:
    """Run the selected scenarios and write the report; returns the exit code (1 if a scenario failed)."""
    services = Services.from_env()
    services.check()
    only = [s.strip() for s in args.only.split(",")] if args.only else list(SCENARIOS)
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    quick = args.quick
    records_n = args.records or (30_000 if quick else 200_000)
    if set(only) == {"density"}:  # it feeds its own topics: a token backlog only
        records_n = args.records or 1_000
    batch = args.batch or (10_000 if quick else 50_000)
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    topics = Topics(services.bootstrap)
    sampler = LoadSampler(interval=10).start()
    started = _now()
    print(f"bench: {records_n:,} records, scenarios {', '.join(only)}, topics {topics.prefix}-*", flush=True)
    records = one_kb_records(records_n)
    measurements: list[Measurement] = []
    failed = False
    try:
        backlog = topics.create("backlog", args.partitions)
        produce_s = produce_records(services.bootstrap, backlog, records, args.partitions)
        print(f"  backlog: {records_n:,} records produced in {produce_s:.1f}s", flush=True)
        ctx = Context(
            services=services, topics=topics, records=records, backlog_topic=backlog, partitions=args.partitions,
            quick=quick, out_dir=out_dir, batch=batch, master=args.master, repeats=args.repeats,
            latency_rate=args.latency_rate or (1_000 if quick else 2_000),
            latency_seconds=args.latency_seconds or (5 if quick else 20),
            options={"spark_variants": args.variants.split(",") if args.variants else None,
                     "realtime_batch_ms": args.realtime_batch_ms, "density_n": args.density_n},
        )  # fmt: skip
        for name in only:
            print(f"- {name}", flush=True)
            begun = time.monotonic()
            try:
                measurements += SCENARIOS[name].run(ctx)
            except Exception:
                failed = True
                traceback.print_exc()
                measurements.append(Measurement(scenario=name, variant="-", status="failed"))
            print(f"  ({time.monotonic() - begun:.0f}s)", flush=True)
    finally:
        topics.delete_all()
    meta = {
        "started": started,
        "finished": _now(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "quick": quick,
        "records": records_n,
        "record_bytes": len(records[0][1]),
        "partitions": args.partitions,
        "batch": batch,
        "master": args.master,
        "repeats": args.repeats,
        "latency_rate": args.latency_rate or (1_000 if quick else 2_000),
        "latency_seconds": args.latency_seconds or (5 if quick else 20),
        "realtime_batch_ms": args.realtime_batch_ms or 5_000,
        "load": sampler.stop(),
        "python": sys.version.split()[0],
    }
    summary = report.write(out_dir, measurements, meta, keep_history=True)
    print(f"report: {out_dir / 'report.md'}")
    for target in summary["targets"]:
        print(f"  {target['name']}: required {target['required']}, ours {target['actual']} -> "
              f"{ {True: 'met', False: 'missed', None: 'not measured'}[target['met']] }")  # fmt: skip
    return 1 if failed else 0


def rebuild(path: Path) -> int:
    """Rewrite report.md and the plots next to ``path`` (a report.json)."""
    data = json.loads(path.read_text())
    report.write(path.parent, [Measurement(**m) for m in data["measurements"]], data["meta"])
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``run`` or ``report``."""
    parser = argparse.ArgumentParser(prog="python -m bench", description="StreamForge Web benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="measure and write the report")
    p.add_argument("--only", help=f"comma-separated scenarios ({', '.join(SCENARIOS)})")
    p.add_argument("--records", type=int, help="backlog size (default 200,000; quick 30,000)")
    p.add_argument("--quick", action="store_true", help="a smoke run: small backlog, fewer variants")
    p.add_argument("--partitions", type=int, default=2, help="partitions of every topic")
    p.add_argument("--batch", type=int, help="records per micro-batch at most (default 50,000; quick 10,000)")
    p.add_argument("--master", default="local[2]", help="Spark master of the pipeline runs")
    p.add_argument("--repeats", type=int, default=1, help="Spark variants: run the set this many times")
    p.add_argument("--variants", help="Spark variants, e.g. at_least_once/2,at_most_once/1")
    p.add_argument("--realtime-batch-ms", type=int, default=0,
                   help="real-time batch duration of the realtime variant (default 5,000: the strategy's)")  # fmt: skip
    p.add_argument("--density-n", type=int, help="density: pipelines running together (default 20; quick 4)")
    p.add_argument("--latency-rate", type=float, help="offered records/s of the latency phase")
    p.add_argument("--latency-seconds", type=float, help="length of the latency phase")
    p.add_argument("--out", type=Path, default=REPO / "artifacts" / "bench")
    r = sub.add_parser("report", help="rebuild report.md and plots from report.json")
    r.add_argument("json", type=Path, nargs="?", default=REPO / "artifacts" / "bench" / "report.json")
    args = parser.parse_args(argv)
    if args.command == "report":
        return rebuild(args.json)
    return run(args)
