"""The benchmark's pure arithmetic: percentiles, sustained rates, ratios and the issue #8 targets."""

import math

import pytest

from bench.common import Measurement
from bench.report import summarize
from bench.stats import latency_summary, median, percentile, ratio, sustained_rate, targets


def test_percentile_interpolates_like_numpy():
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 0) == 10
    assert percentile(values, 100) == 40
    assert percentile(values, 50) == 25
    assert percentile(values, 99) == pytest.approx(39.7)
    assert percentile([5.0], 99) == 5
    assert median([3, 1, 2]) == 2


def test_percentile_refuses_nonsense():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_latency_summary():
    summary = latency_summary([float(v) for v in range(1, 101)])
    assert summary["p50"] == 50.5
    assert summary["p99"] == 99.0
    assert summary["max"] == 100
    assert summary["count"] == 100
    assert latency_summary([]) == {}


def test_sustained_rate_skips_the_first_batch_and_stops_at_the_backlog():
    # batch 1 ends at t=10 (warm-up), then 3 batches of 50k every 2 s; a later point (latency phase) is ignored
    points = [(10.0, 50_000), (12.0, 100_000), (14.0, 150_000), (16.0, 200_000), (30.0, 210_000)]
    seconds, rate = sustained_rate(points, 200_000)
    assert seconds == 6
    assert rate == 25_000


def test_sustained_rate_edge_cases():
    seconds, rate = sustained_rate([(5.0, 1000)], 1000)
    assert seconds == 0
    assert math.isnan(rate)
    with pytest.raises(ValueError, match="never reach"):
        sustained_rate([(1.0, 10)], 100)
    with pytest.raises(ValueError, match="no progress"):
        sustained_rate([], 1)


def test_ratio():
    assert ratio(30, 60) == 0.5
    assert ratio(None, 60) is None
    assert ratio(30, 0) is None
    assert ratio(math.nan, 3) is None


def test_targets_met_and_missed():
    rows = {t["name"]: t for t in targets(ours=40_000, raw_copy=100_000, python_loop=10_000, rust=35_000)}
    loop, raw, rust = (
        rows["at least 3x the Python loop"],
        rows["at least 50% of the raw Kafka copy"],
        rows["above the StreamForge Rust engine"],
    )
    assert (loop["required"], loop["met"], loop["ratio"]) == (30_000, True, 4.0)
    assert (raw["required"], raw["met"], raw["ratio"]) == (50_000, False, 0.4)
    assert (rust["required"], rust["met"], rust["ratio"]) == (35_000, True, 1.14)


def test_targets_strictly_above_rust_and_unmeasured():
    rows = targets(ours=35_000, raw_copy=None, python_loop=None, rust=35_000)
    assert [t["met"] for t in rows] == [None, None, False]
    assert all(t["met"] is None for t in targets(ours=None, raw_copy=1.0, python_loop=1.0, rust=35_000))


def test_summary_uses_the_headline_variant():
    measurements = [
        Measurement("raw_copy", "kcat pipe", records_per_s=80_000),
        Measurement("python_loop", "2dest", records_per_s=10_000),
        Measurement("spark_pipeline", "at_most_once/2dest", records_per_s=50_000),
        Measurement("spark_pipeline", "at_least_once/2dest", records_per_s=20_000),
        Measurement("spark_reference", "Kafka -> Kafka copy", records_per_s=40_000),
        Measurement("dlq_console", "ingest", status="not_implemented"),
    ]
    summary = summarize(measurements)
    assert summary["headline"]["records_per_s"] == 20_000
    assert summary["ratios"]["at_least_once/2dest"] == {
        "vs_raw_copy": 0.25,
        "vs_python_loop": 2.0,
        "vs_streamforge_rust": 0.57,
        "vs_spark_copy": 0.5,
    }
    assert summary["spark_copy_records_per_s"] == 40_000
    assert [t["met"] for t in summary["targets"]] == [False, False, False]
