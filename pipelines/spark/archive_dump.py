"""``python -m pipelines.spark.archive_dump TARGET --jars a.jar,b.jar [--executor-master spark://...]``: dump the
driver JVM's class-data-sharing archive (``pipelines.spark.class_archive``) by starting a driver-like session
once, or with ``--executor-master`` the archive of that standalone cluster's executors."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import psutil

from pipelines.spark.class_archive import (
    ARCHIVE_ENV,
    DRIVER_JAVA_OPTIONS,
    EXECUTOR_ARCHIVE_ENV,
    EXECUTOR_JAVA_OPTIONS,
)
from pipelines.spark.session import build_session

#: The class a standalone worker runs as an executor (Spark's ``CoarseGrainedExecutorBackend``).
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _training_job(session) -> None:  # type: ignore[no-untyped-def]
    """What a driver's start runs on its executors: a JSON path, a shuffle and the Python worker's Arrow path."""
    import pyarrow as pa

    def passthrough(batches):  # type: ignore[no-untyped-def]
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"n": [batch.num_rows]})

    frame = session.createDataFrame([(i, '{"a": 1}') for i in range(64)], "id long, value string")
    frame.selectExpr("id", "get_json_object(value, '$.a') as a").repartition(2).mapInArrow(
        passthrough, "n long"
    ).collect()


def dump(target: Path, jars: list[str]) -> None:
    """Write the archive to ``target`` by running, in this process, what a driver does at start-up: a session
    on ``local[1]`` with ``jars`` (the connector and regex jars, as ``build_session`` requires), the DSL's JVM
    functions, and one job through ``mapInArrow`` (the Python worker's path); then ends the JVM and waits
    while it writes the archive (tens of seconds). Raises ValueError from ``build_session`` when a jar is
    missing, RuntimeError when the JVM wrote no archive."""
    environ = {k: v for k, v in os.environ.items() if k not in (ARCHIVE_ENV, EXECUTOR_ARCHIVE_ENV)}
    session = build_session(
        app_name="streamforge-class-archive",
        master="local[1]",
        jars=jars,
        conf={DRIVER_JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={target} -Xlog:cds=off"},
        environ=environ,
    )
    _training_job(session)
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


def _alive(process: psutil.Process) -> bool:
    """Whether ``process`` still runs (a zombie has ended)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def executor_processes(app_id: str) -> list[psutil.Process]:
    """This machine's executor JVMs of application ``app_id``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if EXECUTOR_CLASS in cmdline and app_id in cmdline:
            found.append(process)
    return found


def dump_executor(target: Path, jars: list[str], master: str, *, timeout: float = 600.0) -> None:
    """Write the executors' archive to ``target``: an application on the standalone ``master`` (one core)
    whose executor runs with ``-XX:ArchiveClassesAtExit`` runs the training job, then ends its own JVM with
    ``System.exit(0)`` (Spark SQL's ``java_method``); HotSpot writes the archive inside that exit, and this
    function waits for the executor's process to end. Run it on the workers' host: the archive is written
    there, and the process is looked up there.

    Why the executor ends itself: at an application's end the worker SIGKILLs an executor 10 s after asking
    it to stop (``ExecutorRunner``), too soon to finish a dump. The executor the master starts in its place
    writes to a file of its own (Spark puts ``{{EXECUTOR_ID}}`` in the path), deleted afterwards. Raises
    RuntimeError when no executor of the application runs here or none wrote its archive within ``timeout``
    seconds."""
    folder = target.parent
    pattern = folder / f"{target.name}.executor-{{{{EXECUTOR_ID}}}}"
    environ = {k: v for k, v in os.environ.items() if k not in (ARCHIVE_ENV, EXECUTOR_ARCHIVE_ENV)}
    session = build_session(
        app_name="streamforge-executor-class-archive",
        master=master,
        jars=jars,
        conf={
            "spark.cores.max": "1",
            "spark.executor.cores": "1",
            "spark.task.maxFailures": "1",
            EXECUTOR_JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={pattern} -Xlog:cds=off",
        },
        environ=environ,
    )
    app_id = session.sparkContext.applicationId
    try:
        _training_job(session)
        executors = executor_processes(app_id)
        if not executors:
            raise RuntimeError(
                f"no executor of {app_id} runs on this host: run the dump on the workers' host"
            )
        first = executors[0]
        executor_id = first.cmdline()[first.cmdline().index("--executor-id") + 1]
        with contextlib.suppress(Exception):  # the task's executor is gone: the job fails, as intended
            session.range(1).selectExpr("java_method('java.lang.System', 'exit', 0)").collect()
        deadline = time.monotonic() + timeout
        while _alive(first) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        session.stop()
        # The executor started in its place is ended by its worker (SIGKILL at the latest 10 s after the stop):
        # wait for it, so that no half-written file of its own appears after the clean-up below.
        deadline = time.monotonic() + 60
        while executor_processes(app_id) and time.monotonic() < deadline:
            time.sleep(0.5)
    written = folder / f"{target.name}.executor-{executor_id}"
    try:
        if not written.is_file() or _alive(first):
            raise RuntimeError(
                f"the executor {executor_id} of {app_id} wrote no archive within {timeout:.0f}s"
            )
        written.rename(target)
    finally:
        for leftover in folder.glob(f"{target.name}.executor-*"):
            leftover.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.spark.archive_dump TARGET --jars a.jar,b.jar [--executor-master URL]``. Returns the
    exit code."""
    parser = argparse.ArgumentParser(prog="pipelines.spark.archive_dump")
    parser.add_argument("target", type=Path)
    parser.add_argument("--jars", required=True, help="comma-separated, as STREAMFORGE_SPARK_JARS")
    parser.add_argument(
        "--executor-master", help="dump the executors' archive of this standalone master (spark://host:port)"
    )
    args = parser.parse_args(argv)
    jars = [j for j in args.jars.split(",") if j]
    if args.executor_master:
        dump_executor(args.target, jars, args.executor_master)
    else:
        dump(args.target, jars)
    return 0


if __name__ == "__main__":
    sys.exit(main())
