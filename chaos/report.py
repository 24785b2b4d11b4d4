"""``artifacts/chaos/report.json`` and ``report.md``: per fault and delivery mode, records produced, lost,
duplicates, recovery time and pass/fail, with what was done and the fault-specific checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.context import FaultResult


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def write(out: Path, run: dict[str, Any], faults: list[FaultResult]) -> tuple[Path, Path]:
    """Write both files into ``out`` (created); returns their paths. ``run`` holds the run's settings and
    totals (tag, seed, quick, modes, duration, producer counts, passed)."""
    out.mkdir(parents=True, exist_ok=True)
    data = {**run, "faults": [f.as_dict() for f in faults]}
    json_path = out / "report.json"
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    lines = [
        "# StreamForge chaos run",
        "",
        f"Run `{run['tag']}` ({'quick' if run['quick'] else 'full'}), seed {run['seed']}, modes "
        f"{', '.join(run['modes'])}, {run['duration_s']:.0f} s in all. Verdict: "
        f"**{'PASS' if run['passed'] else 'FAIL'}**.",
        "",
        f"Producer: {run['producer']['delivered']} records delivered to `{run['source_topic']}` "
        f"({run['producer']['failed']} failed), kinds {run['producer']['kinds']}. Stack knobs: "
        + ", ".join(f"`{k}={v}`" for k, v in run["env"].items())
        + ".",
        "",
        "Columns: *mode* = the pipeline's delivery mode, or low_latency (at_least_once in Spark's real-time "
        "mode, run only during its own fault); *produced* = source records in the fault's window (for the "
        "bulk fault: messages selected; for the ingest fault: DLQ records; for low_latency: every source "
        "record of the run, which it reads from earliest); *lost* = expected somewhere, found nowhere; "
        "*duplicates* = extra copies that appeared during the window (summed over destinations; "
        "effectively_once is read with read_committed); *recovery* = seconds from the end of the fault until the pipeline committed every "
        "source offset that existed then (kills: the worst kill-to-processing time; bulk: kill to completed; "
        "ingest: until every DLQ record had its row).",
        "",
        "| fault | mode | produced | lost | duplicates | rerouted | wrong | recovery s | result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for fault in faults:
        for mode, r in fault.modes.items():
            lines.append(
                f"| {fault.name} | {mode} | {r.produced} | {r.lost} | {r.duplicates} | {r.rerouted} | {r.wrong} "
                f"| {_cell(r.recovery_s)} | {'pass' if r.passed else 'FAIL'} |"
            )
        if fault.error:
            lines.append(f"| {fault.name} | - | - | - | - | - | - | - | ERROR |")
    for fault in faults:
        lines += ["", f"## {fault.name}: {fault.title}", "", f"{fault.duration_s:.0f} s."]
        if fault.error:
            lines += ["", f"**Error:** `{fault.error}`"]
        if fault.actions:
            lines += ["", *[f"- {a}" for a in fault.actions]]
        for mode, r in fault.modes.items():
            lines += ["", f"**{mode}**: {'pass' if r.passed else 'FAIL'}"]
            if r.checks:
                lines.append("- checks: " + ", ".join(f"{k}={_cell(v)}" for k, v in r.checks.items()))
            for failure in r.failures:
                lines.append(f"- failure: {failure}")
            for example in r.examples[:5]:
                lines.append(f"- e.g. {example}")
    md_path = out / "report.md"
    md_path.write_text("\n".join(lines) + "\n")
    return json_path, md_path
