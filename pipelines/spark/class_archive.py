"""A class-data-sharing (CDS) archive for the driver JVM: the Spark classes a driver loads at start-up, parsed
and verified once, mapped from a file by every later driver instead of read from ~250 jars again.

Why: a driver's start is mostly class loading and verification, single-threaded and CPU-bound, so on a busy
host it is what a failover, a restart and a start-to-RUNNING wait for. Measured on this 2-core machine (session
start + one tiny job, ``local[1]``): 26-28 s of JVM CPU without the archive, 15-17 s with it (bench/FINDINGS.md
"Driver start-up").

The archive is a HotSpot *dynamic* archive (JEP 350, JDK 13+): ``dump`` runs a driver-like session once with
``-XX:ArchiveClassesAtExit=<file>`` and the JVM writes every class it loaded (beyond the JDK's own base
archive) when it exits. A driver then starts with ``-XX:SharedArchiveFile=<file>``. HotSpot validates the
archive against the JVM build and the class path it was dumped with; on any mismatch (another JDK, another
pyspark, another virtualenv path) it ignores the archive and loads classes as usual (``-Xshare:auto``, the
default), so a stale archive costs its speed-up, never a start. Source:
https://docs.oracle.com/en/java/javase/17/vm/class-data-sharing.html

This module is Django-free (the driver imports it). ``devstack system`` builds the archive
(``devstack.jars.driver_class_archive``); runners pass its path to their drivers in ``ARCHIVE_ENV``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

#: The archive a driver maps (a path); unset or a missing file: none.
ARCHIVE_ENV = "STREAMFORGE_DRIVER_CLASS_ARCHIVE"
#: Spark conf key the options go to (client mode: PySpark hands it to spark-submit before the JVM starts).
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def archive_options(environ: Mapping[str, str]) -> str:
    """The JVM options that map the archive ``environ`` names in ``ARCHIVE_ENV``: ``-XX:SharedArchiveFile=...``
    plus ``-Xlog:cds=off`` (a mismatch is expected after an upgrade and is not worth a warning in every
    driver log); ``""`` when the variable is unset, empty or names no file."""
    path = environ.get(ARCHIVE_ENV, "").strip()
    if not path or not Path(path).is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off"


def with_archive(conf: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with ``archive_options(environ)`` appended to its ``spark.driver.extraJavaOptions`` (created
    when absent); ``conf`` unchanged (as a new dict) when there is no archive."""
    merged = dict(conf)
    options = archive_options(environ)
    if options:
        merged[DRIVER_JAVA_OPTIONS] = " ".join(p for p in (merged.get(DRIVER_JAVA_OPTIONS, ""), options) if p)
    return merged


def dump(target: Path, jars: list[str]) -> None:
    """Write the archive to ``target`` by running, in this process, what a driver does at start-up: a session
    on ``local[1]`` with ``jars`` (the connector and regex jars, as ``build_session`` requires), the DSL's JVM
    functions, and one job through ``mapInArrow`` (the Python worker's path); then ends the JVM and waits
    while it writes the archive (tens of seconds). Raises ValueError from ``build_session`` when a jar is
    missing, RuntimeError when the JVM wrote no archive."""
    import pyarrow as pa

    from pipelines.spark.session import build_session

    environ = {k: v for k, v in os.environ.items() if k != ARCHIVE_ENV}
    session = build_session(
        app_name="streamforge-class-archive",
        master="local[1]",
        jars=jars,
        conf={DRIVER_JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={target} -Xlog:cds=off"},
        environ=environ,
    )

    def passthrough(batches):  # type: ignore[no-untyped-def]
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"n": [batch.num_rows]})

    frame = session.createDataFrame([(1, "{}")], "id long, value string")
    frame.selectExpr("id", "get_json_object(value, '$.a') as a").mapInArrow(passthrough, "n long").collect()
    gateway = session.sparkContext._gateway
    if gateway is None:
        raise RuntimeError("the session has no JVM gateway")
    session.stop()
    # The JVM dumps at exit: end it now (EOF on its stdin makes PySpark's gateway server exit) and wait, so
    # the archive is complete when this process ends.
    process = gateway.proc
    gateway.shutdown()
    process.stdin.close()
    process.wait(timeout=600)
    if not target.is_file():
        raise RuntimeError(f"the JVM exited ({process.returncode}) without writing {target}")


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.spark.class_archive dump TARGET --jars a.jar,b.jar``. Returns the exit code."""
    parser = argparse.ArgumentParser(prog="pipelines.spark.class_archive")
    parser.add_argument("command", choices=["dump"])
    parser.add_argument("target", type=Path)
    parser.add_argument("--jars", required=True, help="comma-separated, as STREAMFORGE_SPARK_JARS")
    args = parser.parse_args(argv)
    dump(args.target, [j for j in args.jars.split(",") if j])
    return 0


if __name__ == "__main__":
    sys.exit(main())
