"""The benchmark's pure arithmetic: percentiles, sustained rates and ratios.

No I/O here, so it is unit-tested (``tests/bench/test_stats.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` with linear interpolation between closest ranks (the
    same definition as ``numpy.percentile``'s default). Raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the 50th percentile)."""
    return percentile(list(values), 50)


def latency_summary(values_ms: Sequence[float]) -> dict[str, float]:
    """``{"p50", "p90", "p99", "max", "count"}`` of latencies in milliseconds (empty dict for no values)."""
    if not values_ms:
        return {}
    return {
        "p50": round(percentile(values_ms, 50), 1),
        "p90": round(percentile(values_ms, 90), 1),
        "p99": round(percentile(values_ms, 99), 1),
        "max": round(max(values_ms), 1),
        "count": len(values_ms),
    }


def sustained_rate(points: Sequence[tuple[float, int]], total: int) -> tuple[float, float]:
    """Sustained records/s over a backlog of ``total`` records from progress points ``(time s, records
    done so far)``, oldest first, one per commit or micro-batch.

    The window runs from the first point (so start-up and the first batch, which pays for JIT, planning
    and worker start, are excluded) to the first point at which ``total`` records were done. Returns
    (window seconds, records/s). With a single point (the whole backlog in one batch) the window is empty
    and the rate is NaN: the caller must use a larger backlog or smaller batches.
    """
    if not points:
        raise ValueError("no progress points")
    t0, done0 = points[0]
    end = next(((t, done) for t, done in points if done >= total), None)
    if end is None:
        raise ValueError(f"the progress points never reach {total} records")
    t1, done1 = end
    if t1 <= t0:
        return 0.0, math.nan
    return t1 - t0, (min(done1, total) - done0) / (t1 - t0)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` rounded to 2 decimals, None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0 or math.isnan(numerator):
        return None
    return round(numerator / denominator, 2)
