"""The Python worker daemon of a pipeline's driver (``spark.python.daemon.module``, set in
``pipelines.spark.session.DEFAULT_CONF``): PySpark's own daemon (``pyspark.daemon.manager``), after importing
what every micro-batch's Python worker needs.

Spark's JVM starts ``python -m <daemon module>`` once per executor and asks it for a worker per Python task;
the daemon ``fork()``s each worker (Spark's ``PythonWorkerFactory``; configuration names in
``spark-core_2.13-4.2.0.jar:org/apache/spark/internal/config/Python$``). With ``pyspark.daemon`` every
worker then imports pyarrow, confluent-kafka, the writer and the DSL itself: ~100 MB of modules per worker,
paid again by each new one and by the first micro-batch. Imported here, before the fork, those pages are
shared copy-on-write between the daemon and its workers (their PSS halves; RSS, which counts shared pages in
every process, does not show it), and a worker starts ready. ``gc.freeze()`` keeps the collector from
writing to the imported objects' pages (it would copy them into each worker again).

Nothing but imports and the daemon run here: the driver (and so this module) never reaches Django
(tests/test_layering.py).
"""

from __future__ import annotations

import gc

import confluent_kafka  # noqa: F401  (imported for its pages, see above)
import pyarrow
import pyarrow.compute  # noqa: F401
from pyspark import daemon, worker  # noqa: F401  (the worker's main, imported by every forked worker)

import pipelines.dsl
import pipelines.spark.writer  # noqa: F401  (foreachBatch's mapInArrow function lives here)


def main() -> None:
    """Freeze the imported objects out of the collector's reach and run PySpark's daemon until Spark closes
    its stdin (``pyspark.daemon.manager``: it never returns normally, it exits the process)."""
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
