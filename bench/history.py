"""The headline figures of every ``make bench`` run, kept in ``bench/results/history.jsonl`` (one JSON object a
line, oldest first, in the repository), so each report shows the runs before it beside its own and a
regression shows.

A line: ``started`` (ISO-8601), ``mode`` (full / quick), ``records`` (the backlog), ``load`` (the run's median
1-minute load average), and records/s of ``at_least_once/2dest``, ``at_least_once/1dest``,
``effectively_once/2dest``, Spark's own copy (``spark_copy``) and the Python loop (``python_loop``), the
headline's latency ``p50_ms`` / ``p99_ms`` with the ``latency_rate`` offered, the median ``launch_s`` (launch
to RUNNING of the ``startup`` row, else launch to first batch of the ``spark_pipeline`` rows); a figure
not measured is null. A line may carry a ``note`` (where its figures come from).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench.common import Measurement

HISTORY = Path(__file__).resolve().parent / "results" / "history.jsonl"
#: Earlier runs shown in a report.
SHOWN = 10


def _rate(measurements: list[Measurement], scenario: str, variant: str | None = None) -> float | None:
    for m in measurements:
        if m.scenario == scenario and m.status == "measured" and (variant is None or m.variant == variant):
            return None if m.records_per_s is None else round(m.records_per_s)
    return None


def entry(measurements: list[Measurement], meta: dict[str, Any]) -> dict[str, Any]:
    """The history line of one run (see the module's docstring)."""
    headline = next(
        (m for m in measurements if (m.scenario, m.variant, m.status)
         == ("spark_pipeline", "at_least_once/2dest", "measured")),
        None,
    )  # fmt: skip
    startup = next((m for m in measurements if m.scenario == "startup" and m.status == "measured"), None)
    starts = (
        list(startup.extra["running_s"])
        if startup is not None
        else [
            m.extra["startup_s"]
            for m in measurements
            if m.scenario == "spark_pipeline" and m.extra.get("startup_s")
        ]
    )
    return {
        "started": meta.get("started"),
        "mode": "quick" if meta.get("quick") else "full",
        "records": meta.get("records"),
        "load": (meta.get("load") or {}).get("median"),
        "at_least_once/2dest": _rate(measurements, "spark_pipeline", "at_least_once/2dest"),
        "at_least_once/1dest": _rate(measurements, "spark_pipeline", "at_least_once/1dest"),
        "effectively_once/2dest": _rate(measurements, "spark_pipeline", "effectively_once/2dest"),
        "spark_copy": _rate(measurements, "spark_reference", "Kafka -> Kafka copy"),
        "python_loop": _rate(measurements, "python_loop"),
        "p50_ms": headline.latency_ms.get("p50") if headline else None,
        "p99_ms": headline.latency_ms.get("p99") if headline else None,
        "latency_rate": meta.get("latency_rate"),
        "launch_s": round(statistics.median(starts), 1) if starts else None,
    }


def read(path: Path = HISTORY) -> list[dict[str, Any]]:
    """Every line, oldest first ([] when there is no history yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(line: dict[str, Any], path: Path = HISTORY) -> None:
    """Add one run's line at the end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")


def markdown(lines: list[dict[str, Any]], current: dict[str, Any] | None) -> list[str]:
    """The report's history table: the last ``SHOWN`` earlier runs and, marked, this one."""
    rows = [(line, False) for line in lines[-SHOWN:]] + ([(current, True)] if current else [])
    if not rows:
        return []

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:,.0f}" if isinstance(value, int | float) and abs(value) >= 10 else str(value)

    out = [
        "## History",
        "",
        "Headline figures of earlier `make bench` runs (`bench/results/history.jsonl`) and this one, so a "
        "regression shows. records/s unless said; load is the run's median 1-minute load average.",
        "",
        "| run | mode | records | load | alo/2dest | alo/1dest | eos/2dest | Spark copy | Python loop | "
        "p50 ms | p99 ms | at /s | launch s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for line, this in rows:
        name = f"**{line.get('started')} (this run)**" if this else str(line.get("started"))
        if line.get("note"):
            name += f" ({line['note']})"
        out.append(
            "| " + " | ".join([name, str(line.get("mode")), *(cell(line.get(k)) for k in (
                "records", "load", "at_least_once/2dest", "at_least_once/1dest", "effectively_once/2dest",
                "spark_copy", "python_loop", "p50_ms", "p99_ms", "latency_rate", "launch_s"))]) + " |"
        )  # fmt: skip
    return [*out, ""]
