"""The DLQ console's figures (issue #8): ingest records/s, list/search p95 with 1,000,000 parked messages, bulk
replay records/s. A hook for the ``dlq`` app's engineers: this module reports them as not measured until
``SCENARIOS`` below lists real measurements.

To add one: write a function ``(ctx: bench.common.Context) -> bench.common.Measurement`` with
``scenario="dlq_console"`` and ``variant`` one of the names below (``records_per_s`` for rates,
``latency_ms={"p95": ...}`` for the list/search timings), and put it in ``SCENARIOS``. The report's
"DLQ console" section prints whatever this module returns, separately from the pipeline figures.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.common import Context, Measurement

NAME = "dlq_console"

#: variant -> what it measures (the report's row labels).
PLANNED: dict[str, str] = {
    "ingest": "DLQ topic -> parked DeadLetter rows, records/s",
    "list_p95_1m": "list/search API p95 latency (ms) with 1,000,000 parked messages",
    "bulk_replay": "bulk replay, records/s",
}

#: variant -> the function measuring it. Empty until the dlq app provides them.
SCENARIOS: dict[str, Callable[[Context], Measurement]] = {}


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
