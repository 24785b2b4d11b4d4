"""Building the SparkSession every pipeline driver (and the Spark tests) use."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from pipelines.dsl.spark import REQUIRED_SPARK_CONF, register_functions

# Settings that suit a streaming job reading Kafka on a small machine; a spec or caller may override any.
DEFAULT_CONF: Mapping[str, str] = {
    # Few shuffle partitions: the job does not shuffle on its hot path, and 200 tiny tasks cost seconds.
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # Kafka offsets are the source of truth: never let Spark silently skip data it cannot find.
    "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=WARN",
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


def build_session(
    *,
    app_name: str,
    master: str,
    jars: Sequence[str],
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]``, ``spark://host:7077``, ``k8s://...``).

    ``jars`` are local paths of the Kafka connector jars, RE2/J and our regex UDF jar (``spark.jars``,
    ``devstack.jars.spark_jars``), shipped to executors by Spark; the session gets the DSL's JVM functions
    (:func:`pipelines.dsl.spark.register_functions`). ``conf`` entries override DEFAULT_CONF. Raises
    ValueError when the connector or the regex jars are missing, since every pipeline reads Kafka and Spark
    would only fail later ("Failed to find data source: kafka", or a class not found at the first regex).
    """
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
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register_functions(session)
    return session
