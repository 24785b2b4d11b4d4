"""The DLQ console's figures (issue #8): ingest records/s, list/search p95 with 1,000,000 parked messages, bulk
replay records/s, measured by ``bench.dlq_measure`` on a database of its own (a temporary SQLite file) and
the run's Kafka. ``--quick`` parks 100,000 messages instead of 1,000,000. The database is deleted after the
list timings (the last scenario).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Context, Measurement, load1

NAME = "dlq_console"

#: variant -> what it measures (the report's row labels).
PLANNED: dict[str, str] = {
    "ingest": "DLQ topic -> parked DeadLetter rows, records/s",
    "bulk_replay": "bulk replay, records/s",
    "list_p95_1m": "list/search API p95 latency (ms) with 1,000,000 parked messages",
}

_state: dict[str, Any] = {}


def _world(ctx: Context) -> dict[str, Any]:
    """Django on a temporary database under the report folder, set up once per run (the first DLQ scenario)."""
    if "world" not in _state:
        from bench import dlq_measure

        db_dir = Path(tempfile.mkdtemp(prefix="dlq-bench-", dir=ctx.out_dir))
        _state["db_dir"] = db_dir
        dlq_measure.setup_django(db_dir)
        _state["world"] = dlq_measure._world()
    world: dict[str, Any] = _state["world"]
    return world


def _ingest(ctx: Context) -> Measurement:
    from bench import dlq_measure

    load = {"start": load1()}
    figures = dlq_measure.ingest_rate(
        ctx.services.bootstrap, records=5_000 if ctx.quick else 20_000, world=_world(ctx)
    )
    load["end"] = load1()
    return Measurement(
        scenario=NAME, variant="ingest", records=figures["records"], seconds=figures["seconds"],
        records_per_s=figures["records_per_s"], load=load, extra={"description": PLANNED["ingest"]},
    )  # fmt: skip


def _bulk(ctx: Context) -> Measurement:
    from bench import dlq_measure

    load = {"start": load1()}
    figures = dlq_measure.bulk_replay_rate(
        ctx.services.bootstrap, records=2_000 if ctx.quick else 10_000, world=_world(ctx)
    )
    load["end"] = load1()
    return Measurement(
        scenario=NAME, variant="bulk_replay", records=figures["records"], seconds=figures["seconds"],
        records_per_s=figures["records_per_s"], load=load, extra={"description": PLANNED["bulk_replay"]},
    )  # fmt: skip


def _list(ctx: Context) -> Measurement:
    from bench import dlq_measure

    rows = 100_000 if ctx.quick else 1_000_000
    world = _world(ctx)
    load = {"start": load1()}
    fill_s = dlq_measure.fill(rows, world=world)
    cases = dlq_measure.list_latency(world=world, requests=30 if ctx.quick else 100)
    load["end"] = load1()
    shutil.rmtree(_state["db_dir"], ignore_errors=True)
    worst = max(case["p95_ms"] for case in cases.values())
    return Measurement(
        scenario=NAME, variant="list_p95_1m", records=rows, seconds=fill_s, latency_ms={"p95": worst},
        load=load, extra={"description": PLANNED["list_p95_1m"].replace("1,000,000", f"{rows:,}") + " (worst case)",
                          "cases": cases},
    )  # fmt: skip


#: variant -> the function measuring it.
SCENARIOS: dict[str, Callable[[Context], Measurement]] = {
    "ingest": _ingest,
    "bulk_replay": _bulk,
    "list_p95_1m": _list,
}


def run(ctx: Context) -> list[Measurement]:
    """Run the registered DLQ scenarios; the others appear as ``not_implemented``."""
    out: list[Measurement] = []
    for variant, description in PLANNED.items():
        scenario = SCENARIOS.get(variant)
        if scenario is None:
            out.append(Measurement(scenario=NAME, variant=variant, status="not_implemented",
                                   extra={"description": description}))  # fmt: skip
        else:
            out.append(scenario(ctx))
    return out
