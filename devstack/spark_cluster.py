"""A Spark standalone cluster (a master and workers) from the installed pyspark's own launcher.

pyspark ships ``bin/spark-class`` and every jar a standalone master and worker need, but a pip-installed
pyspark is not a distribution: it lacks the ``RELEASE`` marker by which Spark's launcher
(``org.apache.spark.launcher.AbstractCommandBuilder.findJarsDir``) takes ``$SPARK_HOME/jars`` as its class
path, and a worker builds each executor's command line from its ``SPARK_HOME`` the same way. So the cluster
runs from a small synthetic ``SPARK_HOME``: a ``RELEASE`` file plus symbolic links to the installed jars,
scripts and Python package.

Used by devstack's ``cluster`` profile (services ``spark-master``, ``spark-worker-<i>``) and by the test
fixture of ``tests/pipelines/test_scale_out.py``. Spark's standalone mode:
https://spark.apache.org/docs/latest/spark-standalone.html (master and worker options, ``--cores``,
``--memory``, ``--work-dir``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

#: The Scala version pyspark 4 is built with; the launcher asks for it when it cannot find build folders.
SCALA_VERSION = "2.13"
#: Heap of the master's and each worker's own JVM (SPARK_DAEMON_MEMORY; Spark's default is 1g).
DAEMON_MEMORY = "512m"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def installed_pyspark() -> Path:
    """The folder of the installed pyspark package (it holds ``jars/`` and ``bin/spark-class``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_home(root: Path) -> Path:
    """Create (idempotently) ``root/spark-home``: a ``RELEASE`` marker and links to the installed pyspark's
    ``jars``, ``bin``, ``python`` and ``conf``; returns its path. A link left by another interpreter's
    pyspark is replaced. Raises FileNotFoundError when the installed pyspark has no ``bin/spark-class``."""
    import pyspark

    installed = installed_pyspark()
    if not (installed / "bin" / "spark-class").is_file():
        raise FileNotFoundError(f"{installed}/bin/spark-class is missing: reinstall pyspark")
    home = root / "spark-home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "RELEASE").write_text(f"Spark {pyspark.__version__} (pip-installed pyspark)\n")
    for part in ("jars", "bin", "python", "conf"):
        target, link = installed / part, home / part
        if not target.exists():
            continue
        if link.is_symlink() and link.readlink() == target:
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
    return home


def cluster_env(home: Path, work_dir: Path) -> dict[str, str]:
    """The environment a master or worker (and, through the worker, its executors) runs with: the synthetic
    home, the Scala version, loopback only, the workers' scratch folder and the daemons' heap."""
    return {
        "SPARK_HOME": str(home),
        "SPARK_SCALA_VERSION": SCALA_VERSION,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(work_dir),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # Daemons log to stdout (devstack's log file); no pid files or log folders of sbin/ scripts.
        "SPARK_NO_DAEMONIZE": "1",
    }


def master_command(home: Path, port: int, ui_port: int) -> list[str]:
    """``spark-class ...Master`` bound to 127.0.0.1 on ``port`` with its web UI on ``ui_port``."""
    return [
        str(home / "bin" / "spark-class"), MASTER_CLASS,
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port),
    ]  # fmt: skip


def worker_command(
    home: Path, master_url: str, ui_port: int, work_dir: Path, *, cores: int = 1, memory: str = "1g"
) -> list[str]:
    """``spark-class ...Worker <master_url>`` offering ``cores`` cores and ``memory`` (Spark's size syntax,
    e.g. ``1g``) to executors, its UI on ``ui_port``, executors' folders under ``work_dir``."""
    return [
        str(home / "bin" / "spark-class"), WORKER_CLASS, master_url,
        "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
        "--webui-port", str(ui_port), "--work-dir", str(work_dir),
    ]  # fmt: skip


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_port(port: int, timeout: float) -> None:
    """Block until something listens on 127.0.0.1:``port``; raises TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_listening(port):
            return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on {port} after {timeout:.0f}s")


@contextlib.contextmanager
def standalone_cluster(
    root: Path,
    master_port: int,
    master_ui_port: int,
    worker_ui_ports: Sequence[int],
    *,
    cores: int = 1,
    memory: str = "1g",
    timeout: float = 60.0,
) -> Iterator[str]:
    """Run a master and one worker per ``worker_ui_ports`` entry (each ``cores`` cores, ``memory``) under
    ``root`` (home, ``work/``, ``master.log``, ``worker-<i>.log``), each in its own process group; yields
    the master URL once the master's port and every worker's UI port answer; SIGKILLs the groups on exit.
    Raises RuntimeError when one of the ports is in use before the start, TimeoutError when a port does
    not answer within ``timeout`` seconds. For tests; devstack's
    ``cluster`` profile runs the same commands as services."""
    taken = [port for port in (master_port, master_ui_port, *worker_ui_ports) if port_listening(port)]
    if taken:
        # Another cluster (a run that died without its clean-up) would take our worker and our application.
        raise RuntimeError(f"port(s) {', '.join(map(str, taken))} already in use: stop what holds them first")
    home = spark_home(root)
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **cluster_env(home, work)}
    master_url = f"spark://127.0.0.1:{master_port}"
    processes: list[subprocess.Popen[bytes]] = []

    def launch(command: list[str], log_name: str) -> None:
        with (root / log_name).open("ab") as log:
            processes.append(
                subprocess.Popen(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )  # fmt: skip

    try:
        launch(master_command(home, master_port, master_ui_port), "master.log")
        wait_port(master_port, timeout)
        for i, ui_port in enumerate(worker_ui_ports, start=1):
            launch(
                worker_command(home, master_url, ui_port, work, cores=cores, memory=memory), f"worker-{i}.log"
            )
        for ui_port in worker_ui_ports:
            wait_port(ui_port, timeout)
        yield master_url
    finally:
        for process in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
