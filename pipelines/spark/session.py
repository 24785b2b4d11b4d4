"""Building the SparkSession every pipeline driver (and the Spark tests) use."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.dsl.spark import REQUIRED_SPARK_CONF, register_functions
from pipelines.spark.class_archive import with_archive

# Settings that suit a streaming job reading Kafka on a small machine; a spec or caller may override any.
DEFAULT_CONF: Mapping[str, str] = {
    # Few shuffle partitions: the job does not shuffle on its hot path, and 200 tiny tasks cost seconds.
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # Kafka offsets are the source of truth: never let Spark silently skip data it cannot find.
    "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "false",
    "spark.ui.showConsoleProgress": "false",
    # Footprint (issue #29: at most 600 MB per pipeline, 20 and more on one host; bench/FINDINGS.md "Density").
    # No Spark UI: its Jetty server, listeners and retained jobs/stages cost driver memory, and each driver's
    # UI binds 4040+i, giving up after spark.port.maxRetries (16) ports: the 18th driver on a host would not
    # start. Operators read the pipeline's progress in the console instead.
    "spark.ui.enabled": "false",
    # Progress objects a query keeps for StreamingQuery.recentProgress (default 100), SQL executions kept for
    # the UI's listener (default 1000): the driver publishes each batch's progress itself.
    "spark.sql.streaming.numRecentProgressUpdates": "10",
    "spark.sql.ui.retainedExecutions": "10",
    # Python workers are kept between micro-batches (Spark's default). A daemon that pre-imports the writer
    # before forking was measured and dropped: with one worker per driver it costs ~20 MB PSS more than
    # PySpark's small daemon (the worker dirties most of the shared pages anyway; bench/FINDINGS.md "Density").
    "spark.python.worker.reuse": "true",
    # Spark keeps one daemon (and its idle workers) per distinct worker environment, and the warm-up job and
    # the micro-batch jobs disagree on SPARK_SIMPLIFIED_TRACEBACK (measured: two daemons and two idle workers
    # per driver, ~45 MB PSS more). Off, both run without it: one daemon. Python errors keep their full
    # traceback (classify() looks for our markers anywhere in the text).
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    # Batches for the Python writer are cut by record count (spark.sql.execution.arrow.maxRecordsPerBatch)
    # only. With a byte limit, Spark 4.0 asks the Arrow writer for its size after every row, and for list
    # columns (the headers) that walks the whole batch each time: ~15% of the JVM's time in the pipeline
    # (bench/FINDINGS.md). Int.MaxValue is the value that turns the check off.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    # Kafka credentials travel as source/sink options (kafka.sasl.jaas.config, kafka.ssl.keystore.key): Spark
    # masks options whose key or value matches this pattern wherever it shows a plan (UI, event log, explain).
    # Its default ("(?i)url") would leave a client certificate's private key in clear.
    "spark.sql.redaction.options.regex": "(?i)url|password|secret|token|jaas|sasl|keystore|truststore",
    # ... and masks these parts of the plan text it prints (explain, the SQL tab, the event log's plan
    # description), where a streaming source's options appear in full.
    "spark.sql.redaction.string.regex": (
        r'(?i)password="(?:[^"\\]|\\.)*"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----'
    ),
    # What the DSL compilation relies on (duplicate JSON keys: the last wins, as in the Python evaluator).
    **REQUIRED_SPARK_CONF,
}


def cluster_conf(driver_host: str | None, cores_max: int | None) -> dict[str, str]:
    """The Spark conf of a driver in client mode whose executors run on a standalone cluster's workers.

    ``driver_host`` (the runner's RUNNER_ADVERTISE_HOST) becomes ``spark.driver.host``, the address
    executors connect back to; ``cores_max`` (> 0) becomes ``spark.cores.max``, because standalone gives an
    application every free core of the cluster unless ``spark.cores.max`` (or the master's
    ``spark.deploy.defaultCores``) limits it; each executor is one core and 512 MB of heap
    (``spark.executor.cores``, ``spark.executor.memory``). Empty when both are None (a local master).
    Raises ValueError for a ``cores_max`` below 1. Source: https://spark.apache.org/docs/latest/configuration.html
    and https://spark.apache.org/docs/latest/spark-standalone.html ("Resource Scheduling").
    """
    conf: dict[str, str] = {}
    if driver_host:
        conf["spark.driver.host"] = driver_host
    if cores_max is not None:
        if cores_max < 1:
            raise ValueError(f"cores_max must be at least 1, not {cores_max}")
        conf.update(
            {"spark.cores.max": str(cores_max), "spark.executor.cores": "1", "spark.executor.memory": "512m"}
        )
    return conf


#: The driver JVM's options every sizing keeps: Spark's own logging at WARN.
_LOG_OPTIONS = "-Dlog4j2.level=WARN"

#: Driver JVM sizings (``STREAMFORGE_DRIVER_SIZING``). ``standard``: Spark's defaults (1 GB heap, G1, C2).
#: ``compact``: what a pipeline of a few thousand records/s needs, for many drivers per host (issue #29,
#: bench/FINDINGS.md "Density"):
#: - ``spark.driver.memory`` 512m: the smallest heap Spark accepts (``UnifiedMemoryManager`` refuses a heap
#:   under 1.5 x its 300 MB reserve, 450 MiB, "System memory ... must be at least"); PySpark passes it to
#:   ``spark-submit`` before the JVM starts (``pyspark/java_gateway.py``), so it is the real ``-Xmx``;
#: - SerialGC with a small initial heap that grows and shrinks with use (``-Xms64m``, free ratios 10-30%)
#:   instead of G1's remembered sets and a 1/64-of-RAM initial heap, and a young generation of at most 24 MB
#:   (every page of it is touched between two minor collections: it is resident whatever the live data);
#: - C1 only (``-XX:TieredStopAtLevel=1``) and a 64 MB code cache: far less compiler memory and threads, at
#:   a cost in peak records/s the findings measure; metaspace capped at 192 MB, 512 KB thread stacks;
#: - the same collector and compiler for the executors a standalone cluster starts for the pipeline
#:   (``spark.executor.extraJavaOptions``; their heap is ``spark.executor.memory``, ``cluster_conf``): most of
#:   an executor's start-up CPU is C2 compiling the first batches' code, which on a host shared by many
#:   pipelines delays every start, a takeover's included (bench/FINDINGS.md §20).
#: Options from HotSpot's ``java -XX:+PrintFlagsFinal``; Spark: https://spark.apache.org/docs/latest/configuration.html
SIZINGS: Mapping[str, Mapping[str, str]] = {
    "standard": {"spark.driver.extraJavaOptions": _LOG_OPTIONS},
    "compact": {
        # One idle Python worker kept (Spark 4.2's spark.python.factory.idleWorkerMaxPoolSize): with more
        # than one core, every job beyond the first forks and re-imports a worker, so only where memory counts.
        "spark.python.factory.idleWorkerMaxPoolSize": "1",
        "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": " ".join(
            (
                _LOG_OPTIONS,
                "-XX:+UseSerialGC -Xms64m -XX:MaxNewSize=24m -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30",
                "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m",
                "-XX:MaxMetaspaceSize=192m -Xss512k",
            )
        ),
        "spark.executor.extraJavaOptions": " ".join(
            (
                "-XX:+UseSerialGC -XX:MaxNewSize=48m",
                "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m",
                "-XX:MaxMetaspaceSize=192m -Xss512k",
            )
        ),
    },
}
#: The sizing of a driver whose environment names none.
DEFAULT_SIZING = "standard"

#: Environment of a driver that sizes it; a runner host sets them for all its drivers (the launcher's
#: environment allow-list, ``pipelines.supervision.launcher.DRIVER_ENV_NAMES``, lets them through):
#: a key of SIZINGS ...
SIZING_ENV = "STREAMFORGE_DRIVER_SIZING"
#: ... Spark threads per driver when the master is local (``local[*]`` and ``local[N]`` become
#: ``local[<cores>]``; other masters are left alone): one core runs one task at a time, so a driver has one
#: Python worker, which is what a low-rate pipeline needs ...
CORES_ENV = "STREAMFORGE_DRIVER_CORES"
#: ... and Spark conf as a JSON object (``{"spark.ui.enabled": "true"}``), applied over everything else.
CONF_ENV = "STREAMFORGE_DRIVER_CONF"

_LOCAL_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?")


def sized_master(master: str, environ: Mapping[str, str]) -> str:
    """``master`` with ``CORES_ENV`` applied: ``local[<cores>]`` for a local master (``local``, ``local[*]``,
    ``local[N]``, ``local[N,F]`` -> ``local[<cores>,F]``), any other master unchanged, as is everything when the
    variable is unset or empty. Raises ValueError when it is not a positive integer."""
    raw = environ.get(CORES_ENV, "").strip()
    if not raw:
        return master
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{CORES_ENV} must be a positive integer, not {raw!r}")
    match = _LOCAL_MASTER.fullmatch(master)
    if match is None:
        return master
    return f"local[{int(raw)}{match.group(3) or ''}]"


def sizing_conf(environ: Mapping[str, str]) -> dict[str, str]:
    """The Spark conf of the sizing ``environ`` names in ``SIZING_ENV`` (default ``DEFAULT_SIZING``). Raises
    ValueError naming the variable for an unknown sizing."""
    name = environ.get(SIZING_ENV, "").strip() or DEFAULT_SIZING
    if name not in SIZINGS:
        raise ValueError(f"{SIZING_ENV} must be one of {', '.join(sorted(SIZINGS))}, not {name!r}")
    return dict(SIZINGS[name])


def override_conf(environ: Mapping[str, str]) -> dict[str, str]:
    """The Spark conf ``environ`` gives in ``CONF_ENV`` (empty when unset). Raises ValueError naming the
    variable when it is not a JSON object of strings."""
    raw = environ.get(CONF_ENV, "").strip()
    if not raw:
        return {}
    try:
        extra = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{CONF_ENV} is not JSON: {exc}") from None
    if not isinstance(extra, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
    ):
        raise ValueError(f'{CONF_ENV} must be a JSON object of strings ({{"spark.key": "value"}})')
    return extra


def build_session(
    *,
    app_name: str,
    master: str,
    jars: Sequence[str],
    conf: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]``, ``spark://host:7077``, ``k8s://...``).

    ``jars`` are local paths of the Kafka connector jars, RE2/J and our regex UDF jar (``spark.jars``,
    ``devstack.jars.spark_jars``), shipped to executors by Spark; the session gets the DSL's JVM functions
    (:func:`pipelines.dsl.spark.register_functions`). Conf, later entries winning: DEFAULT_CONF, the sizing
    ``environ`` (default ``os.environ``) names (:func:`sizing_conf`), ``conf``, then ``environ``'s
    ``CONF_ENV`` (:func:`override_conf`), and the driver JVM (and a standalone cluster's executors) map the
    class archives ``environ`` names (:func:`pipelines.spark.class_archive.with_archive`); a local master
    gets ``CORES_ENV`` threads (:func:`sized_master`). Raises ValueError when the connector or the regex
    jars are missing, since every pipeline reads Kafka and Spark would only fail later ("Failed to find data
    source: kafka", or a class not found at the first regex), or when the environment's sizing variables
    are invalid.
    """
    environ = os.environ if environ is None else environ
    master = sized_master(master, environ)
    merged = {**DEFAULT_CONF, **sizing_conf(environ), **(conf or {}), **override_conf(environ)}
    merged = with_archive(merged, environ, master)
    if not any("spark-sql-kafka" in jar for jar in jars):
        raise ValueError("no spark-sql-kafka connector jar given (STREAMFORGE_SPARK_JARS / --jars)")
    for needed, what in (("re2j", "RE2/J"), ("streamforge-regex", "StreamForge regex UDF")):
        if not any(needed in Path(jar).name for jar in jars):
            raise ValueError(
                f"no {what} jar given (STREAMFORGE_SPARK_JARS / --jars; `python -m devstack system` builds it)"
            )
    # Python workers must run this interpreter (it has pyarrow, confluent-kafka and our code), not whatever
    # `python3` is first on PATH. On a cluster, set PYSPARK_PYTHON to the executors' environment instead.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master).config("spark.jars", ",".join(jars))
    for key, value in merged.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register_functions(session)
    return session
