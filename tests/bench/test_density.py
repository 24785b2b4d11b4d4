"""The density row's arithmetic and report (issue #29): memory per pipeline by role, CPU %, start-up
percentiles, the three goals, and how the report shows them."""

import pytest

from bench.common import Measurement
from bench.density import (
    BUDGET_MB,
    cpu_percent,
    density_targets,
    memory_summary,
    role_of,
    summary_ms,
)
from bench.report import _markdown, summarize


def test_processes_below_a_driver_get_their_role():
    java = ["/usr/lib/jvm/bin/java", "-cp", "jars/*", "org.apache.spark.deploy.SparkSubmit"]
    assert role_of("java", java) == "spark-jvm"
    assert role_of("python3.11", ["/venv/bin/python", "-m", "pipelines.spark.daemon"]) == "python-workers"
    assert role_of("python3.11", ["/venv/bin/python", "-m", "pyspark.daemon"]) == "python-workers"
    assert role_of("bash", ["bash", "/venv/lib/python3.11/site-packages/pyspark/bin/spark-submit"]) == "other"


def _sample(jvm: float, driver: float, workers: float) -> dict[str, dict[str, float]]:
    return {
        "spark-jvm": {"pss_mb": jvm, "uss_mb": jvm - 10, "rss_mb": jvm + 20},
        "driver-python": {"pss_mb": driver, "uss_mb": driver - 5, "rss_mb": driver + 30},
        "python-workers": {"pss_mb": workers, "uss_mb": workers / 2, "rss_mb": workers * 2},
    }


def test_memory_per_pipeline_sums_the_roles_and_averages_over_pipelines():
    summary = memory_summary([_sample(300, 100, 100), _sample(400, 100, 100)])
    assert summary["pipelines"] == 2
    # totals 500 and 600 MB PSS
    assert summary["pss_mb"] == {"mean": 550.0, "p50": 550.0, "max": 600.0, "total": 1100.0}
    assert summary["rss_mb"]["mean"] == 550 + 20 + 30 + 100
    assert summary["by_role"]["spark-jvm"] == {"pss_mb": 350.0, "uss_mb": 340.0, "rss_mb": 370.0}
    assert list(summary["by_role"]) == ["driver-python", "spark-jvm", "python-workers"]
    with pytest.raises(ValueError, match="no pipelines"):
        memory_summary([])


def test_cpu_percent_is_cpu_seconds_over_the_window():
    assert cpu_percent({"a": 10.0, "b": 5.0}, {"a": 16.0, "b": 5.0, "c": 3.0}, 60) == {
        "a": 10.0,
        "b": 0.0,
        "c": 5.0,
    }
    with pytest.raises(ValueError, match="empty window"):
        cpu_percent({}, {}, 0)


def test_summary_ms():
    summary = summary_ms([float(v) for v in range(1, 21)])
    assert summary == {"p50": 10.5, "p95": 19.1, "max": 20, "count": 20}  # 19.05 rounded
    assert summary_ms([]) == {}


def test_the_three_goals_met_missed_and_unmeasured():
    met = {t["name"]: t for t in density_targets(550.0, 20, 120.0)}
    assert [t["met"] for t in met.values()] == [True, True, True]
    memory = met[f"at most {BUDGET_MB:.0f} MB PSS per pipeline"]
    assert (memory["required"], memory["actual"], memory["ratio"]) == (600.0, 550.0, 0.92)
    assert [t["met"] for t in density_targets(601.0, 19, 300.1)] == [False, False, False]
    assert [t["met"] for t in density_targets(600.0, 20, 300.0)] == [
        True,
        True,
        True,
    ]  # the bounds are inclusive
    assert [t["met"] for t in density_targets(None, None, None)] == [None, None, None]


def _density_measurement() -> Measurement:
    return Measurement(
        scenario="density",
        variant="20 pipelines x 100 records/s",
        latency_ms={"p95": 180.0},
        extra={
            "pipelines": 20,
            "rate_per_pipeline": 100.0,
            "interval_ms": 5000,
            "environment": {"STREAMFORGE_DRIVER_CORES": "1"},
            "running_together": 20,
            "memory": memory_summary([_sample(300, 100, 100)] * 20),
            "cpu_percent": {"mean": 4.0, "max": 6.0, "total": 80.0, "window_s": 60},
            "start_to_running_ms": {"p50": 60_000.0, "p95": 110_000.0, "max": 120_000.0, "count": 20},
            "console": {
                "clients": 20,
                "seconds": 60,
                "overall_ms": {"p50": 50.0, "p95": 180.0, "count": 900},
                "errors": {},
            },
            "host_memory_used_mb": {"before": 3000, "during": 13000},
            "targets": density_targets(500.0, 20, 180.0),
        },
    )


def test_the_report_carries_the_density_goals_and_section():
    summary = summarize([_density_measurement()])
    names = [t["name"] for t in summary["targets"]]
    assert names[-3:] == [t["name"] for t in density_targets(1.0, 1, 1.0)]
    assert summary["targets"][-3]["met"] is True
    assert summary["density"]["running_together"] == 20
    meta = {"started": "s", "finished": "f", "host": "h", "cpus": 2, "cpu_model": "cpu", "quick": False,
            "records": 1, "record_bytes": 1024, "partitions": 2, "batch": 1, "master": "local[2]",
            "latency_rate": 1.0, "latency_seconds": 1.0, "load": {"min": 1, "median": 1, "max": 1}}  # fmt: skip
    text = _markdown([_density_measurement()], meta, summary, [])
    section = text[text.index("## Density") : text.index("## DLQ console")]
    assert "| **total, mean** | 500.0 |" in section
    assert "| spark-jvm (mean) | 300.0 | 290.0 | 320.0 |" in section
    assert "p95 110 s" in section
    assert "p95 180.0 ms" in section
    assert "20 were RUNNING together" in section
    # not a throughput row
    assert "| density |" not in text


def test_without_the_row_the_report_says_so():
    summary = summarize([])
    assert summary["density"] is None
    assert len(summary["targets"]) == 7  # issue #34's engine goals only, each not measured
    assert {t["met"] for t in summary["targets"]} == {None}
