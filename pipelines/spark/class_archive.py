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

Executors on a standalone cluster are JVMs of their own, started by the cluster's workers with the workers'
Spark home on the class path, so they need an archive of their own (``EXECUTOR_ARCHIVE_ENV``): measured on a
one-core worker, 6.5-6.9 s of executor CPU for a session's first job without it, 5.0-5.2 s with it
(bench/FINDINGS.md "Executors' class archive"). The path is one on the *workers'* hosts, which the driver
cannot check; HotSpot ignores a missing archive there just as a mismatched one.

This module is Django-free (the driver imports it). ``devstack system`` builds the driver's archive with
``python -m pipelines.spark.archive_dump`` (``devstack.jars.driver_class_archive``), a profile with a
standalone cluster the executors' one (``python -m pipelines.spark.archive_dump --executor-master``, on the
workers' host); runners pass their paths to their drivers in ``ARCHIVE_ENV`` and ``EXECUTOR_ARCHIVE_ENV``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: The archive a driver maps (a path); unset or a missing file: none.
ARCHIVE_ENV = "STREAMFORGE_DRIVER_CLASS_ARCHIVE"
#: Spark conf key the options go to (client mode: PySpark hands it to spark-submit before the JVM starts).
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: The archive a standalone cluster's executors map: a path on the workers' hosts; unset or empty: none.
EXECUTOR_ARCHIVE_ENV = "STREAMFORGE_EXECUTOR_CLASS_ARCHIVE"
#: Spark conf key for the executors' JVM options (the worker puts them on each executor's command line).
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"


def archive_options(environ: Mapping[str, str]) -> str:
    """The JVM options that map the archive ``environ`` names in ``ARCHIVE_ENV``: ``-XX:SharedArchiveFile=...``
    plus ``-Xlog:cds=off`` (a mismatch is expected after an upgrade and is not worth a warning in every
    driver log); ``""`` when the variable is unset, empty or names no file."""
    path = environ.get(ARCHIVE_ENV, "").strip()
    if not path or not Path(path).is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off"


def executor_archive_options(master: str, environ: Mapping[str, str]) -> str:
    """The executors' JVM options that map the archive ``environ`` names in ``EXECUTOR_ARCHIVE_ENV``, for a
    standalone ``master`` (``spark://...``) only: a local master's executors are threads of the driver JVM.
    ``""`` when the variable is unset or empty. The file is not checked: it lives on the workers' hosts."""
    path = environ.get(EXECUTOR_ARCHIVE_ENV, "").strip()
    if not path or not master.startswith("spark://"):
        return ""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off"


def _appended(conf: dict[str, str], key: str, options: str) -> None:
    if options:
        conf[key] = " ".join(p for p in (conf.get(key, ""), options) if p)


def with_archive(
    conf: Mapping[str, str], environ: Mapping[str, str], master: str = "local[*]"
) -> dict[str, str]:
    """``conf`` with ``archive_options(environ)`` appended to its ``spark.driver.extraJavaOptions`` and
    ``executor_archive_options(master, environ)`` to its ``spark.executor.extraJavaOptions`` (each created when
    absent); ``conf`` unchanged (as a new dict) when there is no archive."""
    merged = dict(conf)
    _appended(merged, DRIVER_JAVA_OPTIONS, archive_options(environ))
    _appended(merged, EXECUTOR_JAVA_OPTIONS, executor_archive_options(master, environ))
    return merged
