"""The benchmark's pure arithmetic: percentiles, sustained rates, ratios, issue #34's goals and the runs' history."""

import math

import pytest

from bench import history
from bench.common import Measurement
from bench.goals import engine_goals
from bench.report import summarize
from bench.stats import latency_summary, median, percentile, ratio, sustained_rate


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


def _run(**rates) -> list[Measurement]:
    names = {
        "alo2": ("spark_pipeline", "at_least_once/2dest"),
        "eos2": ("spark_pipeline", "effectively_once/2dest"),
        "copy": ("spark_reference", "Kafka -> Kafka copy"),
        "loop": ("python_loop", "2dest"),
    }
    return [Measurement(*names[k], records_per_s=v) for k, v in rates.items()]


def test_engine_goals_met_and_missed():
    run = _run(alo2=36_000, eos2=30_000, copy=58_000, loop=26_000)
    run[0].latency_ms = {"p50": 350.0, "p99": 1200.0}
    run[0].extra = {"startup_s": 7.0}
    run[1].extra = {"startup_s": 9.5}
    goals = engine_goals(run, records=200_000, latency_rate=2000)
    assert [g["met"] for g in goals] == [True, True, True, False, False, False, None]
    vs_copy, vs_loop, p50, p99, eos, launch, restart = goals
    assert (vs_copy["required"], vs_copy["ratio"]) == (34_800, 0.62)
    assert (vs_loop["required"], vs_loop["ratio"]) == (33_800, 1.38)
    assert (p50["actual"], p99["actual"], p99["unit"]) == (350.0, 1200.0, "ms")
    assert (eos["required"], eos["actual"], eos["ratio"]) == (30_600, 30_000, 0.83)
    assert (launch["actual"], launch["unit"]) == (8.2, "s")  # the median of 7.0 and 9.5
    assert "no startup row: median of 2 spark_pipeline drivers" in launch["name"]
    assert restart["actual"] is None
    run.append(
        Measurement(
            "startup", "at_least_once/2dest, launch to RUNNING", extra={"running_s": [6, 7.5, 9, 7, 8]}
        )
    )
    launch = engine_goals(run, records=200_000, latency_rate=2000)[5]
    assert (launch["actual"], launch["met"], launch["name"]) == (
        7.5,
        True,
        "launch to RUNNING at most 8 s (median of 5 fresh drivers)",
    )
    assert history.entry(run, {})["launch_s"] == 7.5
    run.append(Measurement("density", "20 pipelines x 100 records/s", extra={"restart_to_apply_s": 16.4}))
    restart = engine_goals(run, records=200_000, latency_rate=2000)[6]
    assert (restart["actual"], restart["met"], restart["unit"]) == (16.4, False, "s")
    assert (
        restart["name"]
        == "restart-to-apply to running at most 15 s (density row, its other pipelines stopped)"
    )


def test_engine_goals_say_what_a_run_did_not_measure():
    goals = engine_goals(_run(alo2=36_000), records=20_000, latency_rate=1000)
    assert [g["met"] for g in goals] == [None] * 7
    assert "(this run: 20,000 records)" in goals[0]["name"]
    assert "(not judged: this run offered 1,000/s)" in goals[2]["name"]


def test_the_history_keeps_each_run_and_the_report_shows_the_earlier_ones(tmp_path):
    path = tmp_path / "history.jsonl"
    meta = {"started": "2026-11-27T18:00:00Z", "quick": False, "records": 200_000, "load": {"median": 2.1},
            "latency_rate": 2000}  # fmt: skip
    first = history.entry(_run(alo2=22_936.4, copy=58_754, loop=26_441), meta)
    assert (first["at_least_once/2dest"], first["spark_copy"], first["effectively_once/2dest"]) == (
        22_936,
        58_754,
        None,
    )
    history.append(first, path)
    second = history.entry(_run(alo2=30_000), meta | {"started": "2026-11-28T09:00:00Z"})
    history.append(second, path)
    assert [line["started"] for line in history.read(path)] == [
        "2026-11-27T18:00:00Z",
        "2026-11-28T09:00:00Z",
    ]
    table = history.markdown(history.read(path)[:1], second)
    assert table[0] == "## History"
    assert "| 2026-11-27T18:00:00Z | full | 200,000 | 2.1 | 22,936 |" in table[-3]
    assert table[-2].startswith("| **2026-11-28T09:00:00Z (this run)** | full | 200,000 | 2.1 | 30,000 |")
    assert history.read(tmp_path / "none.jsonl") == []


def test_a_run_keeps_its_line_only_when_it_measured_the_headline(tmp_path, monkeypatch):
    from bench import report

    monkeypatch.setattr(history, "HISTORY", tmp_path / "history.jsonl")
    meta = {"started": "s", "finished": "f", "host": "h", "cpus": 2, "cpu_model": "c", "quick": True,
            "records": 30_000, "record_bytes": 1024, "partitions": 2, "master": "local[2]", "batch": 10_000,
            "latency_rate": 1000, "latency_seconds": 5, "load": {"min": 1, "median": 1, "max": 1}}  # fmt: skip
    startup_only = [Measurement("startup", "at_least_once/2dest, launch to RUNNING", extra={
        "running_s": [8.0], "median_running_s": 8.0, "first_records_s": [10.0], "median_first_records_s": 10.0})]  # fmt: skip
    report.write(tmp_path / "a", startup_only, meta, keep_history=True)
    assert history.read(history.HISTORY) == []
    report.write(tmp_path / "b", _run(alo2=25_000), meta, keep_history=True)
    assert [line["at_least_once/2dest"] for line in history.read(history.HISTORY)] == [25_000]
    assert "## History" in (tmp_path / "b" / "report.md").read_text()
    assert (
        "launch to RUNNING at most 8 s (median of 1 fresh drivers)"
        in (tmp_path / "a" / "report.md").read_text()
    )


def test_the_kept_history_reads():
    lines = history.read()
    assert lines, "bench/results/history.jsonl holds at least the run issue #34 quotes"
    assert all("started" in line and "at_least_once/2dest" in line for line in lines)


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
    assert [t["met"] for t in summary["targets"]][:2] == [False, True]  # 0.5x the copy; 2.0x the loop
    assert summary["targets"][1]["ratio"] == 2.0
