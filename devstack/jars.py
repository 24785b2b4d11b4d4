"""Fetch the JVM parts from Maven Central with the machine's ``mvn`` into the download cache.

Two sets are fetched, each from a small pom in ``devstack/maven/``:

* ``kafka-<version>/``: the Apache Kafka broker (KRaft), its tools and a Log4j 2 binding;
* ``spark-kafka-<spark version>/``: Spark's ``spark-sql-kafka-0-10_2.13`` connector for the *installed*
  pyspark, with the jars pyspark does not ship (kafka-clients, commons-pool2, the token provider).

A set is complete when its folder holds a ``.complete`` stamp naming the pom digest; a half-finished copy is
never used, and a rerun with a complete set does nothing.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

from devstack.config import MAVEN_DIR, cache_dir

SPARK_CONNECTOR_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


class JarFetchError(RuntimeError):
    """Maven could not produce a jar set; the message carries Maven's own error lines."""


def kafka_version() -> str:
    """The Kafka version the broker pom pins (``kafka.version`` property)."""
    text = (MAVEN_DIR / "kafka-broker.xml").read_text()
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", text)
    if match is None:  # pragma: no cover - the pom is ours
        raise JarFetchError("devstack/maven/kafka-broker.xml has no <kafka.version>")
    return match.group(1)


def spark_version() -> str:
    """The installed pyspark's version (the connector must match it exactly)."""
    return version("pyspark")


def _digest(pom: Path, extra: str) -> str:
    return hashlib.sha256(pom.read_bytes() + extra.encode()).hexdigest()[:16]


def _fetch(pom: Path, target: Path, extra_args: list[str], stamp_extra: str) -> Path:
    stamp = target / ".complete"
    digest = _digest(pom, stamp_extra)
    if stamp.exists() and stamp.read_text().strip() == digest:
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarFetchError("`mvn` is not on PATH: install Maven (Debian package `maven`) and rerun")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [
        mvn,
        "-q",
        "-B",
        "-U",
        "-s",
        str(MAVEN_DIR / "settings.xml"),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
        "-DincludeScope=runtime",
        *extra_args,
    ]
    print(f"devstack: fetching {target.name} from Maven Central ...", flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:5]
        raise JarFetchError(f"mvn failed for {pom.name}:\n" + "\n".join(errors or [result.stderr[-2000:]]))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    stamp.write_text(digest + "\n")
    return target


def kafka_jars() -> Path:
    """The folder of Kafka broker jars, fetched on first use. Raises JarFetchError."""
    target = cache_dir() / f"kafka-{kafka_version()}"
    return _fetch(MAVEN_DIR / "kafka-broker.xml", target, [], "")


def spark_connector_jars() -> list[Path]:
    """The Spark Kafka connector jars for the installed pyspark, fetched on first use. Raises JarFetchError."""
    spark = spark_version()
    target = cache_dir() / f"spark-kafka-{spark}"
    _fetch(
        MAVEN_DIR / "spark-kafka.xml",
        target,
        [f"-Dspark.version={spark}", "-DincludeArtifactIds=" + ",".join(SPARK_CONNECTOR_ARTIFACTS)],
        spark,
    )
    return sorted(target.glob("*.jar"))
