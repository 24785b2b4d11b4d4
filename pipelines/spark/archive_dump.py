"""``python -m pipelines.spark.archive_dump TARGET --jars a.jar,b.jar``: dump the driver JVM's class-data-sharing
archive (``pipelines.spark.class_archive``) by starting a driver-like session once."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipelines.spark.class_archive import ARCHIVE_ENV, DRIVER_JAVA_OPTIONS
from pipelines.spark.session import build_session


def dump(target: Path, jars: list[str]) -> None:
    """Write the archive to ``target`` by running, in this process, what a driver does at start-up: a session
    on ``local[1]`` with ``jars`` (the connector and regex jars, as ``build_session`` requires), the DSL's JVM
    functions, and one job through ``mapInArrow`` (the Python worker's path); then ends the JVM and waits
    while it writes the archive (tens of seconds). Raises ValueError from ``build_session`` when a jar is
    missing, RuntimeError when the JVM wrote no archive."""
    import pyarrow as pa

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
    """``python -m pipelines.spark.archive_dump TARGET --jars a.jar,b.jar``. Returns the exit code."""
    parser = argparse.ArgumentParser(prog="pipelines.spark.archive_dump")
    parser.add_argument("target", type=Path)
    parser.add_argument("--jars", required=True, help="comma-separated, as STREAMFORGE_SPARK_JARS")
    args = parser.parse_args(argv)
    dump(args.target, [j for j in args.jars.split(",") if j])
    return 0


if __name__ == "__main__":
    sys.exit(main())
