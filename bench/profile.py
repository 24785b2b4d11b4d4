"""Where the time of one Spark pipeline run goes: CPU seconds per process group (driver JVM, Python workers,
the driver's Python, the Kafka broker) over the steady batches, optionally py-spy stacks of the Python
workers, and Spark's stage metrics from its REST API.

    python -m bench.profile [--records 300000] [--destinations 2] [--mode at_least_once] [--py-spy DIR]
                            [--batch 50000] [--partitions 2] [--jfr FILE]
    python -m bench.profile --breakdown [--ladder-records 100000] [--small-batch 1000] [--small-records 40000]

``--breakdown``: CPU µs per source record for each piece of the path (``bench.breakdown``), largest first.

Not part of ``make bench``; the figures go into bench/FINDINGS.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from bench.common import Services, Topics, load1, one_kb_records, pipeline_spec, produce_records
from bench.spark_pipeline import ProgressReader
from pipelines.spark.class_archive import DRIVER_JAVA_OPTIONS
from pipelines.spark.session import CONF_ENV, sizing_conf
from tests.pipelines.spark.harness import DriverProcess


def _groups(driver_pid: int, broker_port: int) -> dict[str, list[psutil.Process]]:
    """The processes of the run by role."""
    root = psutil.Process(driver_pid)
    groups: dict[str, list[psutil.Process]] = collections.defaultdict(list)
    groups["driver-python"].append(root)
    for child in root.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "java" in child.name() or "java" in cmd.split(" ")[0]:
            groups["spark-jvm"].append(child)
        elif "pyspark" in cmd or "python" in child.name():
            groups["python-workers"].append(child)
        else:
            groups["other"].append(child)
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == broker_port and conn.status == psutil.CONN_LISTEN and conn.pid:
            groups["kafka-broker"].append(psutil.Process(conn.pid))
    return groups


#: HotSpot's JIT compiler threads, by their OS thread name (``/proc/<pid>/task/<tid>/comm``).
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def _jit_seconds(proc: psutil.Process) -> float:
    """CPU seconds of ``proc``'s live JIT compiler threads. HotSpot starts and ends compiler threads with the
    queue (``UseDynamicNumberOfCompilerThreads``): a thread that ended between two readings takes its CPU out
    of this sum, so the JIT share read from two readings is a lower bound."""
    total = 0.0
    for thread in proc.threads():
        try:
            name = Path(f"/proc/{proc.pid}/task/{thread.id}/comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(_JIT_THREADS):
            total += thread.user_time + thread.system_time
    return total


def _cpu(groups: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU seconds so far per process group; the Spark JVM's JIT compiler threads as their own group
    ``jvm-jit`` (taken out of ``spark-jvm``)."""
    out: dict[str, float] = {}
    for name, procs in groups.items():
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system + getattr(t, "children_user", 0) + getattr(t, "children_system", 0)
                if name == "spark-jvm":
                    jit = _jit_seconds(p)
                    out["jvm-jit"] = out.get("jvm-jit", 0.0) + jit
                    total -= jit
            except psutil.Error:
                pass
        out[name] = total
    return out


def _spark_ui(jvm: list[psutil.Process]) -> str | None:
    for p in jvm:
        try:
            for conn in p.net_connections("tcp"):
                if conn.status == psutil.CONN_LISTEN and 4040 <= conn.laddr.port < 4100:
                    return f"http://127.0.0.1:{conn.laddr.port}"
        except psutil.Error:
            continue
    return None


def _stages(ui: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{ui}/api/v1/applications", timeout=5) as r:  # noqa: S310 - local UI
        app = json.load(r)[0]["id"]
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages?details=false", timeout=10) as r:  # noqa: S310
        return list(json.load(r))


def hot_methods(path: Path, top: int = 40) -> dict[str, Any]:
    """Execution samples of a JFR recording: the ``top`` methods by self samples and by inclusive samples
    (each as ``[percent, "Class.method"]``), over the executor task threads only."""
    raw = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample", str(path)],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    events = json.loads(raw)["recording"]["events"]
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for event in events:
        thread = (event["values"].get("sampledThread") or {}).get("javaName") or ""
        if "Executor task" not in thread:
            continue
        frames = [
            f"{f['method']['type']['name']}.{f['method']['name']}"
            for f in event["values"]["stackTrace"]["frames"]
        ]
        if not frames:
            continue
        total += 1
        own[frames[0]] += 1
        for name in set(frames):
            incl[name] += 1
    return {
        "samples": total,
        "self": [[round(100 * n / total, 1), m] for m, n in own.most_common(top)],
        "inclusive": [[round(100 * n / total, 1), m] for m, n in incl.most_common(top * 2)],
    }


def _driver_conf(java_options: str) -> dict[str, str]:
    """Spark conf over the driver's own: the UI on (the stage metrics come from it), and ``java_options``
    after the sizing's JVM options when given."""
    conf = {"spark.ui.enabled": "true"}
    if java_options:
        sizing = sizing_conf(os.environ).get(DRIVER_JAVA_OPTIONS, "")
        conf[DRIVER_JAVA_OPTIONS] = f"{sizing} {java_options}".strip()
    return conf


def run_driver(
    services: Services,
    *,
    records: int,
    batch: int,
    destinations: int = 2,
    mode: str = "at_least_once",
    realtime: bool = False,
    partitions: int = 2,
    master: str = "local[2]",
    py_spy: Path | None = None,
    py_spy_seconds: int = 20,
    jfr: Path | None = None,
    java_options: str = "",
) -> dict[str, Any]:
    """One real driver over ``records`` 1 KB records in micro-batches of at most ``batch``: CPU seconds per
    process group over the batches after the first (``cpu_s``, ``cpu_us_per_record``, ``cores_busy``), the
    batches' progress, Spark's stage metrics, and with ``jfr`` the JVM's hot methods. ``java_options``: HotSpot
    options added to the driver JVM's (``-XX:TieredStopAtLevel=1``, to compare JIT settings)."""
    topics = Topics(services.bootstrap, prefix="prof")
    try:
        backlog = topics.create("backlog", partitions)
        produce_records(services.bootstrap, backlog, one_kb_records(records), partitions)
        dests = [topics.create(f"d{i}", partitions) for i in range(destinations)]
        dlq = topics.create("dlq", 1)
        spec = pipeline_spec(source_topics=[backlog], dest_topics=dests, dlq_topic=dlq, mode=mode,
                             batch=batch, realtime=realtime)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="bench-prof-") as workdir:
            driver = DriverProcess(spec=spec, pipeline=topics.prefix, workdir=Path(workdir),
                                   bootstrap=services.bootstrap, redis_url=services.redis_url,
                                   jars=list(services.jars), master=master,
                                   # the stage metrics below come from the Spark UI, off by default
                                   env={CONF_ENV: json.dumps(_driver_conf(java_options))})  # fmt: skip
            reader = ProgressReader(services.redis_url, driver.run_id)
            driver.start()
            assert driver.process is not None
            try:
                while not reader.poll():
                    time.sleep(0.3)
                first_batches = len(reader.events)
                port = int(services.bootstrap.rsplit(":", 1)[1])
                groups = _groups(driver.process.pid, port)
                before, t0, n0 = _cpu(groups), time.monotonic(), reader.consumed()
                load0 = load1()
                spy: list[subprocess.Popen[bytes]] = []
                if py_spy:
                    py_spy.mkdir(parents=True, exist_ok=True)
                    for p in groups["python-workers"]:
                        if "pyspark.daemon" in " ".join(p.cmdline()):
                            spy.append(subprocess.Popen(
                                [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(p.pid), "--subprocesses", "--nonblocking",
                                 "--duration", str(py_spy_seconds), "--format", "raw",
                                 "-o", str(py_spy / f"workers-{p.pid}.txt")],
                            ))  # fmt: skip
                    spy.append(subprocess.Popen(
                        [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(driver.process.pid), "--nonblocking",
                         "--duration", str(py_spy_seconds), "--format", "raw",
                         "-o", str(py_spy / "driver.txt")],
                    ))  # fmt: skip
                if jfr:
                    for jvm in groups["spark-jvm"]:
                        subprocess.run(["jcmd", str(jvm.pid), "JFR.start", "name=bench", "settings=profile",
                                        f"filename={jfr}"], check=True, capture_output=True)  # fmt: skip
                while reader.consumed() < records:
                    time.sleep(0.3)
                    # workers are forked lazily: pick up new ones
                    for p in _groups(driver.process.pid, port)["python-workers"]:
                        if p.pid not in {q.pid for q in groups["python-workers"]}:
                            groups["python-workers"].append(p)
                            before.setdefault("python-workers", 0.0)
                after, t1, n1 = _cpu(groups), time.monotonic(), reader.consumed()
                if jfr:
                    for jvm in groups["spark-jvm"]:
                        subprocess.run(["jcmd", str(jvm.pid), "JFR.stop", "name=bench"], check=True,
                                       capture_output=True)  # fmt: skip
                ui = _spark_ui(groups["spark-jvm"])
                try:
                    stages = _stages(ui) if ui else []
                except OSError as exc:  # the UI may not answer in time on a loaded machine
                    print(f"no stage metrics: {exc}")
                    stages = []
                for s in spy:
                    s.wait(120)
            finally:
                driver.stop()
                driver.ensure_stopped()
    finally:
        topics.delete_all()
    records_done = n1 - n0
    wall = t1 - t0
    cpu = {k: round(after.get(k, 0) - before.get(k, 0), 3) for k in after}
    figures: dict[str, Any] = {
        "records": records_done,
        "batch": batch,
        "wall_s": round(wall, 2),
        "records_per_s": round(records_done / wall),
        "load_start": load0,
        "load_end": load1(),
        "cpu_s": cpu,
        "cpu_us_per_record": {k: round(v / records_done * 1e6, 1) for k, v in cpu.items()},
        "cores_busy": {k: round(v / wall, 2) for k, v in cpu.items()},
        # the batches measured: those after the ones finished before the CPU baseline was taken
        "batches": [
            {k: e[k] for k in ("batch_id", "consumed", "duration_ms")} for e in reader.events[first_batches:]
        ],
        "stages": [
            {
                k: s.get(k)
                for k in (
                    "stageId",
                    "name",
                    "numTasks",
                    "executorRunTime",
                    "executorCpuTime",
                    "jvmGcTime",
                    "inputRecords",
                    "resultSerializationTime",
                )
            }
            for s in stages[:12]
        ],
    }
    if jfr:
        figures["jfr_hot"] = hot_methods(jfr)
    return figures


def breakdown(services: Services, args: argparse.Namespace) -> dict[str, Any]:
    """``--breakdown``: ``bench.breakdown``'s plan ladder and writer, then the driver with large and small
    micro-batches; the per-piece table, largest first."""
    from bench import breakdown as bd

    parts = bd.measure_plan_and_writer(services, records=args.ladder_records, partitions=args.partitions,
                                       repeats=args.repeats, master=args.master,
                                       destinations=args.destinations)  # fmt: skip
    large = run_driver(services, records=args.records, batch=args.batch, destinations=args.destinations,
                       partitions=args.partitions, master=args.master)  # fmt: skip
    small = run_driver(services, records=args.small_records, batch=args.small_batch,
                       destinations=args.destinations, partitions=args.partitions, master=args.master)  # fmt: skip
    fixed = bd.fixed_cost(large, small)
    rows = bd.table(parts["ladder"], parts["writer"], fixed, args.batch,
                    jit_us=large["cpu_us_per_record"].get("jvm-jit"))  # fmt: skip
    total = sum(v for _, v in rows)
    return {
        **parts,
        "driver_large": {k: large[k] for k in ("records", "batch", "wall_s", "records_per_s", "load_start",
                                               "load_end", "cpu_us_per_record")},
        "driver_small": {k: small[k] for k in ("records", "batch", "wall_s", "records_per_s", "load_start",
                                               "load_end", "cpu_us_per_record")},
        "fixed": fixed,
        "table": [{"piece": name, "cpu_us_per_record": value, "share": round(100 * value / total, 1)}
                  for name, value in rows],
        "total_us_per_record": round(total, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run one profiled pipeline (or with ``--breakdown`` the per-piece profile) and print the figures as
    JSON."""
    parser = argparse.ArgumentParser(prog="bench.profile")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--destinations", type=int, default=2)
    parser.add_argument("--mode", default="at_least_once")
    parser.add_argument(
        "--realtime", action="store_true", help="the low_latency commit strategy (Spark's real-time mode)"
    )
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--py-spy", type=Path, help="record the Python workers' stacks into this directory")
    parser.add_argument("--py-spy-seconds", type=int, default=20)
    parser.add_argument(
        "--jfr", type=Path, help="record the Spark JVM with Java Flight Recorder into this file"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="CPU µs per record for each piece of the path (bench.breakdown)",
    )
    parser.add_argument("--ladder-records", type=int, default=100_000, help="--breakdown: cached records")
    parser.add_argument("--repeats", type=int, default=3, help="--breakdown: rounds of the ladder and writer")
    parser.add_argument("--small-batch", type=int, default=1_000, help="--breakdown: the small micro-batches")
    parser.add_argument("--small-records", type=int, default=40_000, help="--breakdown: records of that run")
    parser.add_argument("--java-options", default="", help="HotSpot options added to the driver JVM's")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    services = Services.from_env()
    if args.breakdown:
        figures = breakdown(services, args)
        for row in figures["table"]:
            print(f"{row['cpu_us_per_record']:8.2f} µs  {row['share']:5.1f}%  {row['piece']}")
        print(f"{figures['total_us_per_record']:8.2f} µs  total CPU per source record")
    else:
        figures = run_driver(services, records=args.records, batch=args.batch, destinations=args.destinations,
                             mode=args.mode, realtime=args.realtime, partitions=args.partitions,
                             master=args.master, py_spy=args.py_spy, py_spy_seconds=args.py_spy_seconds,
                             jfr=args.jfr, java_options=args.java_options)  # fmt: skip
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
