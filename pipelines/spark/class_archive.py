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

This module is Django-free (the driver imports it). ``devstack system`` builds the archive with
``python -m pipelines.spark.archive_dump`` (``devstack.jars.driver_class_archive``); runners pass its path to
their drivers in ``ARCHIVE_ENV``.
"""

from __future__ import annotations

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
