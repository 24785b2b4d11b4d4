"""The benchmark report: ``report.json`` (every measurement), ``report.md`` (tables, ratios, targets) and PNG
plots, from the measurements of one run. Only measured figures are printed; a figure that was not measured
says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import history
from bench.common import STREAMFORGE_RUST_MSGS_PER_S, Measurement
from bench.goals import VS_PYTHON_LOOP, VS_SPARK_COPY, engine_goals
from bench.registry_pipeline import AVRO_VS_JSON_GOAL
from bench.stats import ratio

#: The configuration the targets are judged on: the default delivery mode with issue #3's two destinations.
HEADLINE = ("spark_pipeline", "at_least_once/2dest")


def _find(measurements: list[Measurement], scenario: str, variant: str | None = None) -> Measurement | None:
    for m in measurements:
        if m.scenario == scenario and (variant is None or m.variant == variant) and m.status == "measured":
            return m
    return None


def summarize(measurements: list[Measurement], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ratios and targets: ``headline`` (our records/s in the HEADLINE configuration), ``raw_copy``,
    ``python_loop`` (records/s), ``ratios`` per Spark variant (ours / raw copy, ours / Python loop, ours /
    Rust engine, ours / Spark's copy), ``targets`` (issue #34's engine goals, ``bench.goals.engine_goals``,
    judged with the run's backlog and latency rate from ``meta``; then the density goals of
    ``bench.density.density_targets`` when the density row was measured, and the registry goal) and
    ``density`` (that row's figures, or None)."""
    meta = meta or {}
    raw = _find(measurements, "raw_copy")
    loop = _find(measurements, "python_loop")
    ours = _find(measurements, *HEADLINE)
    ceiling = _find(measurements, "spark_reference", "Kafka -> Kafka copy")
    ceiling_rate = ceiling.records_per_s if ceiling else None
    raw_rate = raw.records_per_s if raw else None
    loop_rate = loop.records_per_s if loop else None
    ours_rate = ours.records_per_s if ours else None
    ratios = {
        m.variant: {
            "vs_raw_copy": ratio(m.records_per_s, raw_rate),
            "vs_python_loop": ratio(m.records_per_s, loop_rate),
            "vs_streamforge_rust": ratio(m.records_per_s, STREAMFORGE_RUST_MSGS_PER_S),
            "vs_spark_copy": ratio(m.records_per_s, ceiling_rate),
        }
        for m in measurements
        if m.scenario == "spark_pipeline" and m.status == "measured"
    }
    density = _find(measurements, "density")
    avro = _find(measurements, "registry_pipeline", "avro")
    return {
        "headline": {"scenario": HEADLINE[0], "variant": HEADLINE[1], "records_per_s": ours_rate},
        "raw_copy_records_per_s": raw_rate,
        "python_loop_records_per_s": loop_rate,
        "spark_copy_records_per_s": ceiling_rate,
        "streamforge_rust_msgs_per_s": STREAMFORGE_RUST_MSGS_PER_S,
        "ratios": ratios,
        "targets": engine_goals(
            measurements, records=meta.get("records"), latency_rate=meta.get("latency_rate")
        )
        + (density.extra.get("targets", []) if density else [])
        + (registry_targets(avro, _find(measurements, "registry_pipeline", "json")) if avro else []),
        "density": density.extra if density else None,
    }


def registry_targets(avro: Measurement, json_row: Measurement | None) -> list[dict[str, Any]]:
    """Issue #31's goal for the ``registry_pipeline`` rows: the Avro source's records/s at least
    ``AVRO_VS_JSON_GOAL`` of the JSON source's on the same records (same entry shape as ``goals.engine_goals``)."""
    reference = json_row.records_per_s if json_row else None
    required = AVRO_VS_JSON_GOAL * reference if reference else None
    ours = avro.records_per_s
    return [
        {
            "name": f"Avro source at least {AVRO_VS_JSON_GOAL:.0%} of the JSON source (registry_pipeline)",
            "required": None if required is None else round(required),
            "actual": ours,
            "ratio": ratio(ours, reference),
            "met": None if ours is None or required is None else ours >= required,
        }
    ]


def _fmt(value: float | None, suffix: str = "") -> str:
    if value is None:
        return "not measured"
    return f"{value:,.0f}{suffix}" if abs(value) >= 10 else f"{value:,.2f}{suffix}"


def _unit(goal: dict[str, Any]) -> str:
    return f" {goal['unit']}" if goal.get("unit") and goal["unit"] != "records/s" else ""


def _met(flag: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[flag]


def write(
    out_dir: Path, measurements: list[Measurement], meta: dict[str, Any], *, keep_history: bool = False
) -> dict[str, Any]:
    """Write report.json, report.md and the plots into ``out_dir``; returns the summary. The report shows the
    earlier runs' headline figures (``bench.history``); ``keep_history`` also adds this run's to them when it
    measured the headline (a fresh run does; rebuilding an old report, or a run of other scenarios, does not)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(measurements, meta)
    earlier = history.read(history.HISTORY)
    current = history.entry(measurements, meta)
    summary["history_entry"] = current
    plots = _plots(out_dir, measurements, summary)
    (out_dir / "report.json").write_text(
        json.dumps(
            {"meta": meta, "summary": summary, "measurements": [m.to_json() for m in measurements]}, indent=2
        )
    )
    (out_dir / "report.md").write_text(
        _markdown(measurements, meta, summary, plots) + "\n" + "\n".join(history.markdown(earlier, current))
    )
    if keep_history and current["at_least_once/2dest"] is not None:  # a run that measured the headline
        history.append(current, history.HISTORY)
    return summary


def _markdown(
    measurements: list[Measurement], meta: dict[str, Any], summary: dict[str, Any], plots: list[str]
) -> str:
    lines = [
        "# StreamForge Web benchmark",
        "",
        f"Run {meta['started']} - {meta['finished']} on {meta['host']} ({meta['cpus']} CPUs, {meta['cpu_model']}), "
        f"mode {'quick' if meta['quick'] else 'full'}: {meta['records']:,} records of {meta['record_bytes']} bytes "
        f"(GitHub-event-shaped JSON) in a {meta['partitions']}-partition backlog topic; Spark master "
        f"`{meta['master']}`, at most {meta['batch']:,} records per micro-batch; latency at "
        f"{meta['latency_rate']:,.0f} records/s offered for {meta['latency_seconds']:.0f} s.",
        "",
        f"Load average (1 min) during the run: min {meta['load']['min']}, median {meta['load']['median']}, "
        f"max {meta['load']['max']} (other work shares this machine; see each row's load).",
        "",
        "## Goals",
        "",
        "Issue #34's engine goals, then issue #29's density goals and issue #31's registry goal. "
        f"Throughput judged on our pipeline in `{summary['headline']['variant']}` "
        f"({_fmt(summary['headline']['records_per_s'], ' records/s')}); density (MB, pipelines, ms) on the "
        "`density` row (below).",
        "",
        "| target | required | ours | ratio | result |",
        "|---|---:|---:|---:|---|",
    ]
    for t in summary["targets"]:
        lines.append(
            f"| {t['name']} | {_fmt(t['required'], _unit(t))} | {_fmt(t['actual'], _unit(t))} | "
            f"{'-' if t['ratio'] is None else t['ratio']} | {_met(t['met'])} |"
        )
    lines += [
        "",
        "## Pipeline throughput and latency",
        "",
        f"StreamForge's Rust engine publishes ~{STREAMFORGE_RUST_MSGS_PER_S:,} msg/s. "
        f"Raw copy: {_fmt(summary['raw_copy_records_per_s'], ' records/s')}; "
        f"Python loop: {_fmt(summary['python_loop_records_per_s'], ' records/s')}.",
        "",
        "| scenario | variant | records/s | / raw copy | / Python loop | / Rust 35k | latency p50 ms | "
        "latency p99 ms | load (start/end) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in measurements:
        if m.scenario in ("dlq_console", "density", "startup") or m.status != "measured":
            continue
        r = summary["ratios"].get(m.variant, {}) if m.scenario == "spark_pipeline" else {}
        lines.append(
            f"| {m.scenario} | {m.variant} | {_fmt(m.records_per_s)} | {r.get('vs_raw_copy') or '-'} | "
            f"{r.get('vs_python_loop') or '-'} | {r.get('vs_streamforge_rust') or '-'} | "
            f"{_fmt(m.latency_ms.get('p50'))} | {_fmt(m.latency_ms.get('p99'))} | "
            f"{m.load.get('start', '-')}/{m.load.get('end', '-')} |"
        )
    if summary.get("spark_copy_records_per_s"):
        headline = summary["ratios"].get(summary["headline"]["variant"], {})
        lines += [
            "",
            f"Spark's own ceiling on this machine (`spark_reference`, Spark's Kafka source straight into Spark's Kafka "
            f"sink, nothing looked at): {_fmt(summary['spark_copy_records_per_s'], ' records/s')}; our headline "
            f"configuration runs at {headline.get('vs_spark_copy') or '-'}x of it. The `dsl` reference adds our "
            "compiled DSL plan but writes with Spark's sink (no dead letters, no delivery report, no "
            "transactions): the difference to our pipeline is what our writer costs.",
        ]
    spark = [m for m in measurements if m.scenario == "spark_pipeline" and m.status == "measured"]
    if spark:
        lines += [
            "",
            "Spark details: start-up (driver launch to first batch start), first batch, sustained rate inside "
            "batches (records / foreachBatch time, excluding Spark's per-trigger bookkeeping), batch durations.",
            "",
            "| variant | start-up s | first batch s | inside batches records/s | batch ms |",
            "|---|---:|---:|---:|---|",
        ]
        for m in spark:
            e = m.extra
            lines.append(
                f"| {m.variant} | {e.get('startup_s')} | {e.get('first_batch_s')} | "
                f"{_fmt(e.get('in_batch_records_per_s'))} | {', '.join(f'{b:,.0f}' for b in e.get('batch_ms', []))} |"
            )
    started = _find(measurements, "startup")
    if started is not None:
        e = started.extra
        lines += [
            "",
            f"Start-up (`startup`): {len(e['running_s'])} fresh drivers of at_least_once/2dest, one after the other. "
            f"Launch to RUNNING (the query started, after the warm-up): {', '.join(f'{s:.1f}' for s in e['running_s'])} s "
            f"(median {e['median_running_s']:.1f} s); launch to the first records delivered: "
            f"{', '.join(f'{s:.1f}' for s in e['first_records_s'])} s (median {e['median_first_records_s']:.1f} s).",
        ]
    sized = [m for m in measurements if m.scenario == "linearity" and m.status == "measured"]
    if sized:
        rates = [m.records_per_s for m in sized if m.records_per_s]
        spread = f"{max(rates) / min(rates):.2f}" if rates else "-"
        lines += [
            "",
            "Linearity (`linearity`): the headline configuration over growing backlogs, each read from the start "
            f"by a fresh driver; largest/smallest rate {spread} (goal: within 15%, i.e. at most 1.15).",
            "",
            "| backlog | records/s | / smallest backlog | load (start/end) |",
            "|---|---:|---:|---|",
        ]
        for m in sized:
            lines.append(
                f"| {m.records:,} | {_fmt(m.records_per_s)} | {m.extra.get('vs_smallest', '-')} | "
                f"{m.load.get('start')}/{m.load.get('end')} |"
            )
    scaled = [m for m in measurements if m.scenario == "scaling" and m.status == "measured"]
    if scaled:
        lines += [
            "",
            "Scaling (`scaling`): the headline configuration with 1 and 2 executor cores, as `local[N]` (tasks in the "
            "driver's JVM) and on a Spark standalone cluster (executors in JVMs of their own, the driver in client "
            "mode). The broker, the driver and the executors share this machine's cores, so the 2-core rows are the "
            "machine's ceiling; past it the argument is the cost per core (bench/FINDINGS.md).",
            "",
            "| executors | records/s | records/s per executor core | load (start/end) |",
            "|---|---:|---:|---|",
        ]
        for m in scaled:
            lines.append(
                f"| {m.variant.split(', ', 1)[-1]} | {_fmt(m.records_per_s)} | "
                f"{_fmt(m.extra.get('records_per_s_per_core'))} | {m.load.get('start')}/{m.load.get('end')} |"
            )
    lines += _density_lines(summary.get("density"))
    lines += ["", "## DLQ console", ""]
    dlq = [m for m in measurements if m.scenario == "dlq_console"]
    if not dlq:
        lines.append("Not run in this report (`--only` left it out).")
    else:
        lines += ["| figure | value | status |", "|---|---:|---|"]
        for m in dlq:
            value = (
                _fmt(m.records_per_s, " records/s")
                if m.records_per_s is not None
                else (_fmt(m.latency_ms.get("p95"), " ms") if m.latency_ms else "-")
            )
            label = m.extra.get("description", m.variant)
            lines.append(f"| {label} | {value} | {m.status.replace('_', ' ')} |")
        lines += ["", "Scenarios plug in through `bench/dlq_console.py` (`SCENARIOS`)."]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += [
        "",
        "## How these were measured",
        "",
        "- Raw copy: `kcat -C` (from the beginning to the end of the backlog) piped into `kcat -P` (acks=all), "
        "records / wall time, median of the runs.",
        "- Python loop: one process, confluent-kafka consumer -> `pipelines.dsl.evaluate_destinations` -> "
        "idempotent producer, flush then synchronous commit every <= 1,000 records (at-least-once); sustained "
        "rate from its commit timeline, first commit excluded.",
        "- Spark: the real driver; sustained rate from its per-batch progress events, from the end of the first "
        "batch to the batch completing the backlog (start-up and the first batch excluded).",
        "- Spark reference: `bench.spark_reference` child processes, same session settings, master and micro-batch "
        "size as the driver, `availableNow` trigger; sustained rate from the query's own progress (first "
        "micro-batch excluded).",
        "- Latency: records offered at a fixed rate to a LogAppendTime source topic; each destination record "
        "(LogAppendTime topic) is matched to its source record through the `x-streamforge-source` lineage "
        "header; latency = destination append time - source append time (one clock, the broker's).",
        "",
    ]
    return "\n".join(lines)


def _density_lines(figures: dict[str, Any] | None) -> list[str]:
    """The "Density" section: memory per pipeline by role, CPU, start-to-RUNNING, console latency."""
    lines = ["", "## Density", ""]
    if not figures:
        return [*lines, "Not run in this report (`--only` left it out)."]
    mem = figures.get("memory") or {}
    start = figures.get("start_to_running_ms") or {}
    cpu = figures.get("cpu_percent") or {}
    console = figures.get("console") or {}
    overall = console.get("overall_ms") or {}
    env = ", ".join(f"`{k}={v}`" for k, v in (figures.get("environment") or {}).items())
    lines += [
        f"{figures['pipelines']} pipelines, each fed {figures['rate_per_pipeline']:.0f} records/s (1 KB) and cutting "
        f"a micro-batch every {figures['interval_ms'] / 1000:g} s, started together through the API on one "
        f"control plane (web, worker, beat); drivers run with {env}. "
        f"{figures.get('running_together')} were RUNNING together.",
        "",
        "| per pipeline | PSS MB | USS MB | RSS MB |",
        "|---|---:|---:|---:|",
    ]
    for role, values in (mem.get("by_role") or {}).items():
        lines.append(f"| {role} (mean) | {values['pss_mb']} | {values['uss_mb']} | {values['rss_mb']} |")
    for stat in ("mean", "p50", "max"):
        if mem:
            lines.append(
                f"| **total, {stat}** | {mem['pss_mb'][stat]} | {mem['uss_mb'][stat]} | {mem['rss_mb'][stat]} |"
            )
    used = figures.get("host_memory_used_mb") or {}
    lines += [
        "",
        f"- CPU per pipeline over {cpu.get('window_s', '-')} s of steady feed: mean {cpu.get('mean')}% of a core, "
        f"max {cpu.get('max')}%, all drivers {cpu.get('total')}%.",
        f"- Start-to-RUNNING (`POST start` answered -> `running` in `GET /api/pipelines/`): p50 "
        f"{_fmt((start.get('p50') or 0) / 1000, ' s')}, p95 {_fmt((start.get('p95') or 0) / 1000, ' s')}, "
        f"max {_fmt((start.get('max') or 0) / 1000, ' s')}.",
        f"- Console, {console.get('clients')} operators for {console.get('seconds')} s, each reading "
        f"`GET /api/pipelines/`, `/pipelines/overview.json`, `/` in turn, {console.get('think_s', 0)} s between "
        f"an answer and the next request: p50 {overall.get('p50')} ms, p95 {overall.get('p95')} ms over "
        f"{overall.get('count')} requests; errors {console.get('errors') or 'none'}.",
        f"- Machine memory in use: {used.get('before')} MB before the drivers, {used.get('during')} MB with them "
        "(everything on the machine, other work included).",
    ]
    return lines


def _plots(out_dir: Path, measurements: list[Measurement], summary: dict[str, Any]) -> list[str]:
    """Throughput and latency bar charts; returns the file names written (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names: list[str] = []
    rows = [m for m in measurements if m.records_per_s is not None and m.scenario != "dlq_console"]
    if rows:
        fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 2))
        labels = [f"{m.scenario}\n{m.variant}" for m in rows]
        colors = [{"raw_copy": "#888888", "python_loop": "#d9822b"}.get(m.scenario, "#2b6cb0") for m in rows]
        ax.barh(labels, [m.records_per_s or 0 for m in rows], color=colors)
        ax.axvline(
            STREAMFORGE_RUST_MSGS_PER_S, color="#c53030", linestyle="--", label="StreamForge Rust ~35k"
        )
        copy = summary["spark_copy_records_per_s"]
        loop = summary["python_loop_records_per_s"]
        if copy:
            ax.axvline(
                copy * VS_SPARK_COPY, color="#555555", linestyle=":", label=f"{VS_SPARK_COPY}x Spark's copy"
            )
        if loop:
            ax.axvline(
                loop * VS_PYTHON_LOOP, color="#d9822b", linestyle=":", label=f"{VS_PYTHON_LOOP}x Python loop"
            )
        ax.invert_yaxis()
        ax.set_xlabel("records/s (1 KB records)")
        ax.set_title("Sustained throughput")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "throughput.png", dpi=110)
        plt.close(fig)
        names.append("throughput.png")
    lat = [m for m in measurements if m.latency_ms.get("p50") is not None]
    if lat:
        fig, ax = plt.subplots(figsize=(9, 0.5 * len(lat) + 2))
        labels = [f"{m.scenario}\n{m.variant}" for m in lat]
        y = list(range(len(lat)))
        ax.barh([v - 0.2 for v in y], [m.latency_ms["p50"] for m in lat], height=0.4, label="p50")
        ax.barh([v + 0.2 for v in y], [m.latency_ms.get("p99", 0) for m in lat], height=0.4, label="p99")
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set_xlabel("end-to-end latency, ms (broker append time to broker append time)")
        ax.set_title("Latency at a fixed offered rate")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "latency.png", dpi=110)
        plt.close(fig)
        names.append("latency.png")
    spark = [m for m in measurements if m.scenario == "spark_pipeline" and m.extra.get("batch_ms")]
    if spark:
        fig, ax = plt.subplots(figsize=(9, 4))
        for m in spark:
            pairs = zip(m.extra.get("batch_consumed", []), m.extra["batch_ms"], strict=False)
            rates = [n / (ms / 1000) for n, ms in pairs if ms]
            ax.plot(range(len(rates)), rates, marker="o", label=m.variant)
        ax.set_xlabel("micro-batch")
        ax.set_ylabel("records/s inside the batch")
        ax.set_title("Spark micro-batches (the first pays for warm-up)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / "batches.png", dpi=110)
        plt.close(fig)
        names.append("batches.png")
    return names
