"""The driver JVM's class-data-sharing archive (``pipelines.spark.class_archive``): the options that map it,
and that the archive ``devstack system`` dumped is really mapped by a driver JVM of this environment."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.spark.class_archive import (
    ARCHIVE_ENV,
    DRIVER_JAVA_OPTIONS,
    EXECUTOR_ARCHIVE_ENV,
    EXECUTOR_JAVA_OPTIONS,
    archive_options,
    executor_archive_options,
    with_archive,
)


def test_no_archive_named_or_no_file_leaves_the_options_alone(tmp_path):
    assert archive_options({}) == ""
    assert archive_options({ARCHIVE_ENV: "  "}) == ""
    assert archive_options({ARCHIVE_ENV: str(tmp_path / "missing.jsa")}) == ""
    conf = {DRIVER_JAVA_OPTIONS: "-Dlog4j2.level=WARN"}
    assert with_archive(conf, {ARCHIVE_ENV: str(tmp_path / "missing.jsa")}) == conf


def test_an_archive_is_appended_to_the_sizings_java_options(tmp_path):
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"archive")
    environ = {ARCHIVE_ENV: str(archive)}
    assert with_archive({DRIVER_JAVA_OPTIONS: "-XX:+UseSerialGC"}, environ)[DRIVER_JAVA_OPTIONS] == (
        f"-XX:+UseSerialGC -XX:SharedArchiveFile={archive} -Xlog:cds=off"
    )
    assert with_archive({}, environ) == {
        DRIVER_JAVA_OPTIONS: f"-XX:SharedArchiveFile={archive} -Xlog:cds=off"
    }


def test_executors_get_their_archive_only_from_a_standalone_master():
    # The path is one on the workers' hosts: not checked here (HotSpot ignores a missing archive).
    environ = {EXECUTOR_ARCHIVE_ENV: "/var/lib/spark/executor.jsa"}
    assert executor_archive_options("local[*]", environ) == ""
    assert executor_archive_options("spark://10.0.0.5:7077", {}) == ""
    assert executor_archive_options("spark://10.0.0.5:7077", {EXECUTOR_ARCHIVE_ENV: " "}) == ""
    conf = with_archive({EXECUTOR_JAVA_OPTIONS: "-XX:+UseG1GC"}, environ, "spark://10.0.0.5:7077")
    assert conf == {
        EXECUTOR_JAVA_OPTIONS: "-XX:+UseG1GC -XX:SharedArchiveFile=/var/lib/spark/executor.jsa -Xlog:cds=off"
    }
    assert with_archive({}, environ, "local[2]") == {}


def test_the_session_jvm_maps_the_archive_devstack_dumped(spark_session):
    # make test's environment is `devstack env`'s, which names the archive `devstack system` dumped; HotSpot
    # maps an archive it accepts (same JVM, same class path) into the process, and silently ignores one it
    # does not: a stale or mismatched archive shows up here, not as a failure anywhere else.
    archive = os.environ.get(ARCHIVE_ENV)
    assert archive, f"{ARCHIVE_ENV} is not set: run `python -m devstack system`, then `devstack env`"
    assert Path(archive).is_file(), f"{archive} is missing: run `python -m devstack system`"
    jvm = spark_session.sparkContext._gateway.proc.pid
    maps = Path(f"/proc/{jvm}/maps").read_text()
    assert archive in maps, "the driver JVM did not map the class archive (mismatched JVM or class path?)"
