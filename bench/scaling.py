"""Does throughput grow with executor cores? (issue #34, Deliver 3.) The headline configuration
(at_least_once, 2 destinations) over the run's backlog, each row a fresh driver:

- ``local[1]`` and ``local[2]``: the executor is the driver's own JVM, with 1 or 2 task threads;
- a Spark standalone cluster (a master and two 1-core workers from pyspark's own classes,
  ``devstack.spark_cluster``) with ``spark.cores.max`` 1 and 2: executors are JVMs of their own on the
  workers, the driver in client mode on this host (as on a runner host with ``SPARK_MASTER=spark://...``).

Each row gives records/s and records/s per executor core. On this 2-core machine the broker, the driver, the
executors and their Python workers share the same two cores, so the 2-core rows show the machine's ceiling,
not Spark's; the argument past it is per-core cost (bench/FINDINGS.md). Quick: ``local[2]`` and the cluster
with 2 cores only.
"""

from __future__ import annotations

import dataclasses
import socket
import tempfile
from pathlib import Path

from bench import spark_pipeline
from bench.common import Context, Measurement
from devstack.spark_cluster import standalone_cluster

NAME = "scaling"
#: Offered-rate phase kept short: these rows are about throughput.
LATENCY_SECONDS = 2.0
#: Each worker of the cluster: one core, and room for one 512 MB executor (``session.cluster_conf``).
WORKER_CORES, WORKER_MEMORY = 1, "1g"


def _free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 right now (bound and released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _row(ctx: Context, master: str, cores: int, index: int, *, cluster: bool) -> Measurement:
    """One driver run of the headline configuration on ``master`` with ``cores`` executor cores."""
    sized = dataclasses.replace(ctx, master=master, latency_seconds=LATENCY_SECONDS)
    args = ["--cores-max", str(cores), "--driver-host", "127.0.0.1"] if cluster else []
    measured = spark_pipeline.run_variant(
        sized, "at_least_once", 2, 100 + index, driver_args=args, driver_env={"SPARK_LOCAL_IP": "127.0.0.1"}
    )
    where = f"standalone cluster, {cores} executor core{'s' if cores > 1 else ''}" if cluster else master
    measured.scenario = NAME
    measured.variant = f"at_least_once/2dest, {where}"
    measured.latency_ms = {}
    measured.extra["executor_cores"] = cores
    measured.extra["master"] = "spark://" if cluster else master
    if measured.records_per_s:
        measured.extra["records_per_s_per_core"] = round(measured.records_per_s / cores)
    return measured


def run(ctx: Context) -> list[Measurement]:
    """The ``local[N]`` rows, then the cluster rows (the cluster started here and stopped after)."""
    local_cores = (2,) if ctx.quick else (1, 2)
    cluster_cores = (2,) if ctx.quick else (1, 2)
    out = [_row(ctx, f"local[{n}]", n, i, cluster=False) for i, n in enumerate(local_cores)]
    master_port, master_ui, *worker_uis = _free_ports(4)
    with (
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as root,
        standalone_cluster(
            Path(root),
            master_port,
            master_ui,
            worker_uis,
            cores=WORKER_CORES,
            memory=WORKER_MEMORY,
            timeout=120,
        ) as master,  # fmt: skip
    ):
        for n in cluster_cores:
            out.append(_row(ctx, master, n, len(out), cluster=True))
    for m in out:
        print(f"  scaling {m.variant}: {m.records_per_s or '-'} records/s, "
              f"{m.extra.get('records_per_s_per_core', '-')} per executor core")  # fmt: skip
    return out
