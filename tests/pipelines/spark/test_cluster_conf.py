"""The Spark conf of a driver whose executors run on a standalone cluster (``session.cluster_conf``) and
the driver options that carry it (``--driver-host``, ``--cores-max``); no Spark session."""

from __future__ import annotations

import pytest

from pipelines.spark import driver
from pipelines.spark.session import cluster_conf


def test_a_local_master_gets_no_cluster_conf():
    assert cluster_conf(None, None) == {}


def test_the_driver_host_and_the_cores_cap_become_spark_conf():
    assert cluster_conf("10.0.0.7", 2) == {
        "spark.driver.host": "10.0.0.7",
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
    }
    assert cluster_conf("127.0.0.1", None) == {"spark.driver.host": "127.0.0.1"}


def test_a_cores_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="cores_max must be at least 1, not 0"):
        cluster_conf(None, 0)


def test_the_driver_takes_driver_host_and_cores_max_options(monkeypatch, tmp_path):
    seen = {}

    class Stop(Exception):
        pass

    def capture(spec, options):
        seen["options"] = options
        raise Stop

    monkeypatch.setattr(driver, "Driver", capture)
    monkeypatch.setattr(driver, "_report_exit", lambda *args: None)
    monkeypatch.setattr(driver, "classify", lambda exc: (1, type(exc).__name__))
    monkeypatch.setattr(driver, "parse_spec", lambda raw, pipeline_name: raw)
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    argv = ["--spec-file", str(spec), "--pipeline", "p", "--revision", "1", "--checkpoint-dir", str(tmp_path)]
    driver.main([*argv, "--driver-host", "10.0.0.7", "--cores-max", "3"])
    assert (seen["options"].driver_host, seen["options"].cores_max) == ("10.0.0.7", 3)
    driver.main(argv)
    assert (seen["options"].driver_host, seen["options"].cores_max) == (None, None)
