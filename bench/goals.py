"""Issue #34's engine goals, judged on the measurements of one ``make bench`` run.

- ``at_least_once/2dest`` (the headline) at least 0.6x Spark's own Kafka copy (``spark_reference``, Spark's
  Kafka source straight into Spark's Kafka sink) and at least 1.3x the Python loop, on a backlog of at least
  200,000 records (a quick run's smaller backlog is judged too, and says so);
- the headline's latency p50 at most 400 ms and p99 at most 1,000 ms at 2,000 records/s offered (judged only
  when the run offered that rate);
- ``effectively_once/2dest`` within 15% of ``at_least_once/2dest`` (at least 0.85x its records/s);
- launch to RUNNING at most 8 s: the median of the ``startup`` row's fresh drivers (5; quick: 2), from launching
  the driver to its query running (``bench.startup``); without that row, the median over the
  ``spark_pipeline`` rows' fresh drivers of launch to their first micro-batch starting, said so;
- restart-to-apply to running at most 15 s: the ``density`` row's measurement (``bench.density.restart_to_apply``:
  a new revision saved, then the console's restart, until the pipeline runs that revision), taken after the
  row's other pipelines stopped; not measured without that row (said so in the report).

Each goal is a dict: ``name``, ``required`` and ``actual`` (in ``unit``), ``ratio`` (actual / the reference
the goal is relative to, or None), ``met`` (True / False, None when not measured).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.common import Measurement
from bench.stats import ratio

VS_SPARK_COPY = 0.6
VS_PYTHON_LOOP = 1.3
P50_MS, P99_MS, LATENCY_RATE = 400.0, 1000.0, 2000.0
EFFECTIVELY_ONCE_SHARE = 0.85
LAUNCH_S, RESTART_TO_APPLY_S = 8.0, 15.0
#: The backlog the throughput goals are stated for, and the fresh starts the start-up goal asks for.
GOAL_RECORDS, GOAL_STARTS = 200_000, 5


def _rate(m: Measurement | None) -> float | None:
    if m is None or m.records_per_s is None or math.isnan(m.records_per_s):
        return None
    return m.records_per_s


def _goal(name: str, required: float | None, actual: float | None, *, at_most: bool = False,
          reference: float | None = None, unit: str = "records/s") -> dict[str, Any]:  # fmt: skip
    met: bool | None = None
    if required is not None and actual is not None:
        met = actual <= required if at_most else actual >= required
    return {
        "name": name,
        "unit": unit,
        "required": None if required is None else round(required, 1),
        "actual": None if actual is None else round(actual, 1),
        "ratio": ratio(actual, reference) if reference is not None else None,
        "met": met,
    }


def engine_goals(
    measurements: list[Measurement], *, records: int | None = None, latency_rate: float | None = None
) -> list[dict[str, Any]]:
    """The goals above, in that order. ``records`` is the run's backlog and ``latency_rate`` the records/s
    its latency phase offered (from the run's meta; None: unknown)."""

    def find(scenario: str, variant: str) -> Measurement | None:
        return next(
            (m for m in measurements if (m.scenario, m.variant, m.status) == (scenario, variant, "measured")),
            None,
        )

    headline = find("spark_pipeline", "at_least_once/2dest")
    ours = _rate(headline)
    copy = _rate(find("spark_reference", "Kafka -> Kafka copy"))
    loop = _rate(
        next((m for m in measurements if m.scenario == "python_loop" and m.status == "measured"), None)
    )
    eos = _rate(find("spark_pipeline", "effectively_once/2dest"))
    backlog = "" if records is None or records >= GOAL_RECORDS else f" (this run: {records:,} records)"
    at_rate = latency_rate is not None and abs(latency_rate - LATENCY_RATE) < 1
    offered = (
        "" if at_rate or latency_rate is None else f" (not judged: this run offered {latency_rate:,.0f}/s)"
    )
    latency = headline.latency_ms if headline is not None and at_rate else {}
    startup = find("startup", "at_least_once/2dest, launch to RUNNING")
    if startup is not None:
        starts = [float(s) for s in startup.extra["running_s"]]
        launch_name = f"launch to RUNNING at most {LAUNCH_S:.0f} s (median of {len(starts)} fresh drivers)"
    else:
        starts = [
            float(m.extra["startup_s"])
            for m in measurements
            if m.scenario == "spark_pipeline"
            and m.status == "measured"
            and m.extra.get("startup_s") is not None
        ]
        launch_name = (
            f"launch to first batch at most {LAUNCH_S:.0f} s (no startup row: median of {len(starts)} "
            f"spark_pipeline drivers; the goal asks for {GOAL_STARTS} starts)"
        )
    launch = statistics.median(starts) if starts else None
    density = next((m for m in measurements if m.scenario == "density" and m.status == "measured"), None)
    restart = density.extra.get("restart_to_apply_s") if density is not None else None
    restart_note = (
        " (density row, its other pipelines stopped)" if restart is not None else " (no density row)"
    )
    return [
        _goal(f"at_least_once/2dest at least {VS_SPARK_COPY}x Spark's own Kafka copy{backlog}",
              VS_SPARK_COPY * copy if copy else None, ours, reference=copy),
        _goal(f"at_least_once/2dest at least {VS_PYTHON_LOOP}x the Python loop{backlog}",
              VS_PYTHON_LOOP * loop if loop else None, ours, reference=loop),
        _goal(f"latency p50 at most {P50_MS:,.0f} ms at {LATENCY_RATE:,.0f} records/s{offered}",
              P50_MS, latency.get("p50"), at_most=True, unit="ms"),
        _goal(f"latency p99 at most {P99_MS:,.0f} ms at {LATENCY_RATE:,.0f} records/s{offered}",
              P99_MS, latency.get("p99"), at_most=True, unit="ms"),
        _goal(f"effectively_once/2dest within {1 - EFFECTIVELY_ONCE_SHARE:.0%} of at_least_once/2dest",
              EFFECTIVELY_ONCE_SHARE * ours if ours else None, eos, reference=ours),
        _goal(launch_name, LAUNCH_S, launch, at_most=True, unit="s"),
        _goal(f"restart-to-apply to running at most {RESTART_TO_APPLY_S:.0f} s{restart_note}",
              RESTART_TO_APPLY_S, restart, at_most=True, unit="s"),
    ]  # fmt: skip
