"""Density (issue #29): how many pipelines one host runs. N pipelines (default 20, ``--density-n``; quick 4),
each fed 100 records/s, started through the console's API on a real control plane (web, worker, beat of
devstack's ``test`` profile: the worker's supervision launches each driver as it launches any), all running
together on this machine. Figures:

- memory per pipeline by role (``driver-python``, ``spark-jvm``, ``python-workers``): PSS (proportional set
  size: a page shared by k processes counts 1/k in each, so the sum over processes is what they occupy
  together; RSS counts shared pages, the JVM's libraries and the workers' forked pages, in every process),
  USS and RSS, from ``/proc/<pid>/smaps_rollup`` (``psutil.Process.memory_full_info``), sampled in the steady
  state;
- CPU % per pipeline over a steady window (default 60 s; quick 20 s) while the feed runs;
- start-to-RUNNING per pipeline: the API's ``POST /api/pipelines/{name}/start/`` answered -> the pipeline
  shows ``running`` in ``GET /api/pipelines/`` (supervision promotes it once its query runs), p50/p95;
- how many were RUNNING together;
- the console's p95 while they run: concurrent operators (default 20; quick 5), each reading
  ``GET /api/pipelines/`` (token), ``/pipelines/overview.json`` and the overview page ``/`` (session) in turn
  with a second to look at each answer, for 60 s (quick 20 s).

Targets: at most 600 MB PSS per pipeline (mean), at least 20 RUNNING together, console p95 at most 300 ms.

The control plane's services are started when they are not running (and only those are stopped at the end),
with the environment of ``DENSITY_ENV`` (a local master with one core per driver, the compact JVM sizing):
``python -m bench run --only density [--density-n 20] [--quick]``.

``python -m bench.density single [--env K=V ...]`` runs one driver by itself (the launcher's command line,
``tests.pipelines.spark.harness.DriverProcess``) with the same feed and prints its memory by role: how each
footprint lever was measured (bench/FINDINGS.md "Density").
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer

from bench.common import REPO, Context, Measurement, Services, Topics, load1, one_kb_records, pipeline_spec
from bench.stats import percentile
from streamforge_core.kafka import KafkaConnection, producer_config
from streamforge_core.process_priority import lower_priority

NAME = "density"

#: Records/s offered to each pipeline's source topic.
RATE_PER_PIPELINE = 100.0
#: The goals of issue #29 item 8.
BUDGET_MB = 600.0
GOAL_RUNNING = 20
CONSOLE_P95_MS = 300.0
#: Process roles of one driver, in report order (bench.profile uses the same names).
ROLES = ("driver-python", "spark-jvm", "python-workers", "other")
#: What the control plane's worker (and so every driver it launches) runs with in this scenario, and why.
DENSITY_ENV: dict[str, str] = {
    # 100 records/s needs one task at a time: one Spark thread, hence one Python worker per driver.
    "SPARK_MASTER": "local[*]",
    "STREAMFORGE_DRIVER_CORES": "1",
    # The driver JVM sized for a low-rate pipeline (pipelines.spark.session.SIZINGS).
    "STREAMFORGE_DRIVER_SIZING": "compact",
    "MALLOC_ARENA_MAX": "2",
    # Drivers at nice 19 (weight 15 against a nice-0 session's 1024): on a host that also serves the console,
    # 20 of them saturating the CPU leave it to the web, supervision and the broker (console p95 1,156 ms at
    # nice 10, 576 ms at 19; bench/FINDINGS.md §20).
    "STREAMFORGE_DRIVER_NICENESS": "19",
    # Supervision promotes to RUNNING within seconds of the query starting.
    "STREAMFORGE_RECONCILE_SECONDS": "2",
}
#: Each pipeline cuts a micro-batch every 5 s (the ``time`` commit strategy): 500 records a batch.
INTERVAL_MS = 5_000
MB = 1024 * 1024


# ------------------------------------------------------------------------------------------------ arithmetic


def role_of(name: str, cmdline: Sequence[str]) -> str:
    """The role of a process below a driver, by its executable: ``spark-jvm`` (java), ``python-workers`` (a
    Python below the JVM: PySpark's daemon and the workers it forks), else
    ``other`` (``spark-submit``'s shell while it execs java). The driver's own process is ``driver-python``
    (by position, see ``driver_tree``)."""
    executable = Path(cmdline[0]).name if cmdline else ""
    if name == "java" or executable == "java":
        return "spark-jvm"
    if name.startswith("python") or executable.startswith("python"):
        return "python-workers"
    return "other"


def memory_summary(pipelines: Sequence[Mapping[str, Mapping[str, float]]]) -> dict[str, Any]:
    """Per-pipeline memory from samples ``[{role: {"rss_mb", "pss_mb", "uss_mb"}}, ...]`` (one per pipeline;
    MB = 2**20 bytes): for each measure (``pss_mb``, ``uss_mb``, ``rss_mb``) the pipeline totals' ``mean``,
    ``p50``, ``max`` and ``total`` (the sum over pipelines), and ``by_role`` the mean per role and measure.
    Raises ValueError for no samples."""
    if not pipelines:
        raise ValueError("no pipelines sampled")
    out: dict[str, Any] = {"pipelines": len(pipelines)}
    for measure in ("pss_mb", "uss_mb", "rss_mb"):
        totals = [sum(role.get(measure, 0.0) for role in sample.values()) for sample in pipelines]
        out[measure] = {
            "mean": round(sum(totals) / len(totals), 1),
            "p50": round(percentile(totals, 50), 1),
            "max": round(max(totals), 1),
            "total": round(sum(totals), 1),
        }
    roles = [r for r in ROLES if any(r in sample for sample in pipelines)]
    out["by_role"] = {
        role: {
            measure: round(sum(s.get(role, {}).get(measure, 0.0) for s in pipelines) / len(pipelines), 1)
            for measure in ("pss_mb", "uss_mb", "rss_mb")
        }
        for role in roles
    }
    return out


def cpu_percent(
    before_s: Mapping[str, float], after_s: Mapping[str, float], seconds: float
) -> dict[str, float]:
    """CPU % of one core per key (a pipeline, or a role) over a window of ``seconds``, from CPU seconds
    (user + system) at its start and end; a key missing at the start counts from 0. Raises ValueError for an
    empty window."""
    if seconds <= 0:
        raise ValueError("an empty window")
    return {k: round(100 * (after_s[k] - before_s.get(k, 0.0)) / seconds, 1) for k in after_s}


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    """``{"p50", "p95", "max", "count"}`` of durations (empty dict for none)."""
    if not values:
        return {}
    return {
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "max": round(max(values), 1),
        "count": len(values),
    }


def density_targets(
    pss_mean_mb: float | None, running: int | None, console_p95_ms: float | None
) -> list[dict[str, Any]]:
    """Issue #29's three density goals in the shape of ``bench.goals.engine_goals``: ``name``, ``required``,
    ``actual``, ``ratio`` (actual / required) and ``met`` (None when not measured): at most ``BUDGET_MB``
    PSS per pipeline (the mean: the host's share per pipeline), at least ``GOAL_RUNNING`` pipelines RUNNING
    together, console p95 at most ``CONSOLE_P95_MS``."""
    rows: list[tuple[str, float, float | None, bool]] = [
        (f"at most {BUDGET_MB:.0f} MB PSS per pipeline", BUDGET_MB, pss_mean_mb, False),
        (f"at least {GOAL_RUNNING} pipelines RUNNING together", float(GOAL_RUNNING), running, True),
        (f"console p95 at most {CONSOLE_P95_MS:.0f} ms", CONSOLE_P95_MS, console_p95_ms, False),
    ]
    out = []
    for name, required, actual, at_least in rows:
        met = None if actual is None else (actual >= required if at_least else actual <= required)
        out.append(
            {
                "name": name,
                "required": required,
                "actual": None if actual is None else round(float(actual), 1),
                "ratio": None if actual is None else round(actual / required, 2),
                "met": met,
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ processes


def driver_tree(driver_pid: int) -> dict[str, list[psutil.Process]]:
    """The processes of one driver by role: the driver itself, then every descendant (``role_of``)."""
    root = psutil.Process(driver_pid)
    groups: dict[str, list[psutil.Process]] = collections.defaultdict(list)
    groups["driver-python"].append(root)
    for child in root.children(recursive=True):
        try:
            groups[role_of(child.name(), child.cmdline())].append(child)
        except psutil.Error:
            continue
    return dict(groups)


def memory_by_role(driver_pid: int) -> dict[str, dict[str, float]]:
    """``{role: {"rss_mb", "pss_mb", "uss_mb", "processes"}}`` of one driver's process tree now (MB = 2**20
    bytes; PSS/USS from ``/proc/<pid>/smaps_rollup``)."""
    out: dict[str, dict[str, float]] = {}
    for role, procs in driver_tree(driver_pid).items():
        rss = pss = uss = 0.0
        count = 0
        for proc in procs:
            try:
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            rss, pss, uss, count = rss + info.rss / MB, pss + info.pss / MB, uss + info.uss / MB, count + 1
        out[role] = {
            "rss_mb": round(rss, 1),
            "pss_mb": round(pss, 1),
            "uss_mb": round(uss, 1),
            "processes": count,
        }
    return out


def cpu_seconds(driver_pid: int) -> float:
    """CPU seconds (user + system) the driver's process tree has used so far (living processes only)."""
    total = 0.0
    for procs in driver_tree(driver_pid).values():
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total


def drivers_by_pipeline(names: Iterable[str]) -> dict[str, int]:
    """{pipeline name: pid} of the running ``pipelines.spark.driver`` processes of ``names``."""
    wanted = set(names)
    found: dict[str, int] = {}
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "pipelines.spark.driver" in cmdline and "--pipeline" in cmdline:
            name = cmdline[cmdline.index("--pipeline") + 1]
            if name in wanted:
                found[name] = proc.pid
    return found


# ------------------------------------------------------------------------------------------------ feed


class Feed:
    """One producer thread offering ``rate`` records/s to each of ``topics`` (1 KB GitHub-event-shaped records,
    ``bench.common.one_kb_records``), until ``stop()``."""

    def __init__(self, bootstrap: str, topics: Sequence[str], rate: float = RATE_PER_PIPELINE) -> None:
        self.topics = list(topics)
        self.rate = rate
        self.sent = 0
        self.records = one_kb_records(1_000)
        self.producer = Producer(producer_config(KafkaConnection(bootstrap), extra={"linger.ms": 50}))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="density-feed", daemon=True)

    def start(self) -> Feed:
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            tick += 1
            for topic in self.topics:  # one record per topic per tick, `rate` ticks a second
                key, value = self.records[self.sent % len(self.records)]
                while True:
                    try:
                        self.producer.produce(topic, key=key, value=value)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.sent += 1
            self.producer.poll(0)
            ahead = tick / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self._stop.wait(ahead)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)


# ------------------------------------------------------------------------------------------------ console


@dataclass
class Console:
    """The console over HTTP as an operator: ``token`` for the API, ``session`` (a ``sessionid`` cookie value)
    for the pages. Every request's wall time is kept per path when ``timings`` is set."""

    base_url: str
    token: str
    session: str
    timings: dict[str, list[float]] | None = None
    errors: collections.Counter[str] = field(default_factory=collections.Counter)

    def _open(self, method: str, path: str, body: dict[str, Any] | None = None, *, page: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)  # noqa: S310 - loopback
        if page:
            request.add_header("Cookie", f"sessionid={self.session}")
        else:
            request.add_header("Authorization", f"Token {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback only
                payload = response.read()
        except urllib.error.HTTPError as exc:
            self.errors[f"{path.split('?')[0]} {exc.code}"] += 1
            raise
        except OSError as exc:  # no answer within the timeout (socket.timeout), refused, reset
            self.errors[f"{path.split('?')[0]} {type(exc).__name__}"] += 1
            raise
        finally:
            if self.timings is not None:
                self.timings.setdefault(path, []).append((time.perf_counter() - started) * 1000)
        if page:
            return payload
        return json.loads(payload) if payload else None

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """JSON of an API call (token auth). Raises urllib.error.HTTPError on 4xx/5xx."""
        return self._open(method, path, body)

    def page(self, path: str) -> bytes:
        """A page's body (session auth)."""
        payload: bytes = self._open("GET", path, page=True)
        return payload

    def states(self) -> dict[str, str]:
        """{pipeline name: state} of every visible pipeline (``GET /api/pipelines/``, all pages)."""
        out: dict[str, str] = {}
        path: str | None = "/api/pipelines/?page_size=500"
        while path:
            data = self.api("GET", path)
            for row in data["results"]:
                out[row["name"]] = row["state"]
            nxt = data.get("next")
            path = nxt[len(self.base_url) :] if nxt and nxt.startswith(self.base_url) else None
        return out


def console_load(console: Console, *, clients: int, seconds: float, think_s: float = 1.0) -> dict[str, Any]:
    """``clients`` operators (threads), each reading ``GET /api/pipelines/``, ``/pipelines/overview.json`` and
    ``/`` in turn for ``seconds``, waiting ``think_s`` after each answer (an operator looking at it; 0: a
    closed loop, a stress test): latency per path and overall (ms: p50/p95/max/count) and the errors seen."""
    timings: dict[str, list[float]] = {}
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    errors: collections.Counter[str] = collections.Counter()

    def operator() -> None:
        mine = Console(console.base_url, console.token, console.session, timings={})
        calls: list[Callable[[], Any]] = [
            lambda: mine.api("GET", "/api/pipelines/"),
            lambda: mine.page("/pipelines/overview.json"),
            lambda: mine.page("/"),
        ]
        i = 0
        while time.monotonic() < stop:
            with contextlib.suppress(urllib.error.URLError, OSError):
                calls[i % len(calls)]()
            i += 1
            time.sleep(think_s)
        with lock:
            for path, values in (mine.timings or {}).items():
                timings.setdefault(path.split("?")[0], []).extend(values)
            errors.update(mine.errors)

    threads = [threading.Thread(target=operator, name=f"operator-{i}") for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [v for values in timings.values() for v in values]
    return {
        "clients": clients,
        "seconds": seconds,
        "think_s": think_s,
        "overall_ms": summary_ms(every),
        "by_path_ms": {path: summary_ms(values) for path, values in timings.items()},
        "errors": dict(errors),
    }


# ------------------------------------------------------------------------------------------------ the stack


def _stack_profile() -> Any:
    from devstack.config import profile

    return profile("test")


def _operator_credentials(profile: Any, team: str) -> tuple[str, str, str]:
    """Create (or reuse) team ``team``, an admin and an operator of it on the stack's database; returns (admin
    token, operator token, operator session id)."""
    from devstack.services import django_env

    script = f"""
import json
from django.contrib.auth.models import User
from django.test import Client
from access.models import Membership, Role, Team
from access.api_tokens import issue_token
team, _ = Team.objects.get_or_create(name={team!r}, defaults={{"description": "density benchmark"}})
out = []
for name, role in (("density-admin", Role.ADMIN), ("density-operator", Role.OPERATOR)):
    user, _ = User.objects.get_or_create(username=name)
    Membership.objects.update_or_create(user=user, team=team, defaults={{"role": role}})
    out.append(issue_token(actor=user))
client = Client()
client.force_login(User.objects.get(username="density-operator"))
out.append(client.cookies["sessionid"].value)
print("DENSITY" + json.dumps(out))
"""
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO, env={**os.environ, **django_env(profile)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    line = next((x for x in result.stdout.splitlines() if x.startswith("DENSITY")), None)
    if result.returncode != 0 or line is None:
        raise RuntimeError(
            f"could not create the benchmark's users:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )
    admin, operator, session = json.loads(line[len("DENSITY") :])
    return admin, operator, session


class Stack:
    """The control plane the scenario runs on: devstack's ``test`` profile (with the port offset of the
    environment) serving as in production (``as_in_production``: the test profile's debug settings log every
    query and compile every template, which is not what an operator's console costs); starts what is not
    running with ``DENSITY_ENV`` and stops exactly that at the end."""

    NAMES = ("postgres", "web", "worker", "beat")

    def __init__(self, names: Sequence[str] = NAMES) -> None:
        self.names = tuple(names)
        self.profile = as_in_production(_stack_profile())
        self.started: list[str] = []
        self.reused: list[str] = []

    def up(self) -> None:
        from devstack.services import running_process, services, start

        os.environ.update(DENSITY_ENV)  # devstack passes the run's environment to the services it starts
        for svc in services(self.profile):
            if svc.name not in self.names:
                continue
            if running_process(self.profile, svc.name) is not None:
                self.reused.append(svc.name)
                continue
            start(self.profile, svc)
            self.started.append(svc.name)

    def down(self) -> None:
        from devstack.services import services, stop

        by_name = {s.name: s for s in services(self.profile, every=True)}
        for name in reversed(self.started):
            stop(self.profile, by_name[name])
        self.started.clear()


# ------------------------------------------------------------------------------------------------ scenario


def _wait(predicate: Callable[[], bool], timeout: float, interval: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def _kill_leftovers(names: Iterable[str]) -> int:
    killed = 0
    for pid in drivers_by_pipeline(names).values():
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def measure(ctx: Context, n: int) -> Measurement:
    """Run ``n`` pipelines together on the stack and measure them (see the module docstring)."""
    quick = ctx.quick
    steady_s = float(ctx.options.get("density_seconds") or (20 if quick else 60))
    clients = int(ctx.options.get("density_clients") or (5 if quick else 20))
    start_timeout = float(ctx.options.get("density_start_timeout") or (300 if quick else 540))
    stack = Stack()
    stack.up()
    topics: Topics = ctx.topics
    tag = topics.prefix.split("-", 1)[1]
    team = "density"
    admin_token, operator_token, session = _operator_credentials(stack.profile, team)
    base = f"http://127.0.0.1:{stack.profile.web_port}"
    admin = Console(base, admin_token, session)
    operator = Console(base, operator_token, session)
    names = [f"density-{tag}-{i:02d}" for i in range(n)]
    sources = [topics.create(f"{name}-src", 2) for name in names]
    feed = Feed(ctx.services.bootstrap, sources).start()
    mem_before = psutil.virtual_memory()
    load = {"start": load1()}
    began = time.time()
    posted: dict[str, float] = {}
    running_at: dict[str, float] = {}
    restart_s: float | None = None
    try:
        for name, source in zip(names, sources, strict=True):
            spec = pipeline_spec(
                source_topics=[source], dest_topics=[f"{name}-d0", f"{name}-d1"], dlq_topic=f"{name}-dlq",
                mode="at_least_once", batch=10_000,
            )  # fmt: skip
            spec["delivery"]["commit_strategy"] = {
                "kind": "time",
                "interval_ms": INTERVAL_MS,
                "max_records": 10_000,
            }
            admin.api("POST", "/api/pipelines/", {"name": name, "team": team, "spec": spec})
            topics.created += [
                f"{name}-d0",
                f"{name}-d1",
                f"{name}-dlq",
            ]  # created by the start; deleted at the end
        for name in names:  # all at once, as after a host's restart: the worst case for start-up
            admin.api("POST", f"/api/pipelines/{name}/start/", {"reason": "density benchmark"})
            posted[name] = time.monotonic()

        def all_running() -> bool:
            states = operator.states()
            now = time.monotonic()
            for name in names:
                if name not in running_at and states.get(name) == "running":
                    running_at[name] = now
            failed = [x for x in names if states.get(x) in ("failed", "halted")]
            return len(running_at) == n or bool(failed)

        _wait(all_running, start_timeout, 1.0)
        startup = [running_at[x] - posted[x] for x in names if x in running_at]
        print(f"  density: {len(running_at)}/{n} RUNNING, start-to-RUNNING {summary_ms([s * 1000 for s in startup])} ms",
              flush=True)  # fmt: skip
        time.sleep(10 if quick else 20)  # the last ones' first batches
        pids = drivers_by_pipeline(names)
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(steady_s)
        cpu1 = {name: cpu_seconds(pid) for name, pid in pids.items() if psutil.pid_exists(pid)}
        cpu = cpu_percent(cpu0, cpu1, time.monotonic() - t0)
        memory = [memory_by_role(pid) for pid in drivers_by_pipeline(names).values()]
        running_now = sum(
            1 for name, state in operator.states().items() if name in names and state == "running"
        )
        mem_during = psutil.virtual_memory()
        console = console_load(operator, clients=clients, seconds=steady_s)
        running_after = sum(
            1 for name, state in operator.states().items() if name in names and state == "running"
        )
        load["end"] = load1()
        restart_s = restart_to_apply(admin, names[0], names[1:])
        print(f"  density: restart-to-apply {restart_s:.1f} s" if restart_s is not None
              else "  density: restart-to-apply not measured (no RUNNING on the new revision in time)", flush=True)  # fmt: skip
    finally:
        feed.stop()
        for name in names:
            with contextlib.suppress(urllib.error.URLError, OSError):
                admin.api("POST", f"/api/pipelines/{name}/stop/", {"reason": "density benchmark done"})
        _wait(lambda: not drivers_by_pipeline(names), 120, 2.0)
        left = _kill_leftovers(names)
        if left:
            print(f"  density: killed {left} driver(s) that did not stop in time", flush=True)
        started = list(stack.started)
        stack.down()
    mem = memory_summary(memory) if memory else {}
    running_together = min(running_now, running_after)
    startup_ms = summary_ms([s * 1000 for s in startup])
    cpu_values = list(cpu.values())
    extra: dict[str, Any] = {
        "pipelines": n,
        "rate_per_pipeline": RATE_PER_PIPELINE,
        "interval_ms": INTERVAL_MS,
        "environment": DENSITY_ENV,
        "services_started": started,
        "services_reused": stack.reused,
        "running_together": running_together,
        "memory": mem,
        "cpu_percent": {
            "mean": round(sum(cpu_values) / len(cpu_values), 1) if cpu_values else None,
            "max": max(cpu_values) if cpu_values else None,
            "total": round(sum(cpu_values), 1),
            "window_s": steady_s,
        },
        "start_to_running_ms": startup_ms,
        "restart_to_apply_s": restart_s,
        "console": console,
        "host_memory_used_mb": {
            "before": round((mem_before.total - mem_before.available) / MB),
            "during": round((mem_during.total - mem_during.available) / MB),
        },
        "fed_records": feed.sent,
    }
    pss = mem.get("pss_mb", {}).get("mean") if mem else None
    extra["targets"] = density_targets(pss, running_together, console["overall_ms"].get("p95"))
    return Measurement(
        scenario=NAME,
        variant=f"{n} pipelines x {RATE_PER_PIPELINE:.0f} records/s",
        records=feed.sent,
        seconds=round(time.time() - began, 1),
        latency_ms={"p95": console["overall_ms"].get("p95", 0.0)},
        load=load,
        extra=extra,
    )


#: How long ``restart_to_apply`` waits for the new revision to run, seconds.
RESTART_TIMEOUT_S = 180.0


def restart_to_apply(console: Console, name: str, others: Sequence[str]) -> float | None:
    """Seconds from the console's restart of ``name`` (a new revision saved just before: the first
    destination's batch size one record smaller) to ``GET /api/pipelines/{name}/`` showing it ``running`` that
    revision, as an operator applying a change waits for it. ``others`` are stopped first (and their drivers
    waited for), so the host is as quiet as a healthy one. None when it does not run the revision within
    RESTART_TIMEOUT_S. Raises urllib.error.HTTPError when the console refuses a call."""
    for other in others:
        console.api(
            "POST", f"/api/pipelines/{other}/stop/", {"reason": "density benchmark: restart-to-apply"}
        )
    _wait(lambda: not drivers_by_pipeline(others), 120, 1.0)
    spec = console.api("GET", f"/api/pipelines/{name}/")["spec"]
    strategy = spec["delivery"]["commit_strategy"]
    strategy["max_records"] = int(strategy.get("max_records") or 10_000) - 1
    revision = console.api(
        "PATCH", f"/api/pipelines/{name}/", {"spec": spec, "comment": "density benchmark: restart-to-apply"}
    )["revision"]
    started = time.monotonic()
    console.api("POST", f"/api/pipelines/{name}/restart/", {"reason": "density benchmark: restart-to-apply"})

    def applied() -> bool:
        detail = console.api("GET", f"/api/pipelines/{name}/")
        return bool(detail["state"] == "running" and detail["running_revision"] == revision)

    if not _wait(applied, RESTART_TIMEOUT_S, 0.25):
        return None
    return round(time.monotonic() - started, 1)


def run(ctx: Context) -> list[Measurement]:
    """The density row: ``density_n`` pipelines (default 20; quick 4)."""
    n = int(ctx.options.get("density_n") or (4 if ctx.quick else 20))
    return [measure(ctx, n)]


# ------------------------------------------------------------------------------------------------ one driver


def single(argv: list[str] | None = None) -> int:
    """``python -m bench.density single``: one driver with the feed; prints its memory by role as JSON."""
    from tests.pipelines.spark.harness import DriverProcess

    parser = argparse.ArgumentParser(prog="bench.density single")
    parser.add_argument("--env", action="append", default=[], help="K=V for the driver's environment")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--seconds", type=float, default=40, help="steady seconds after the first batch")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    services = Services.from_env()
    topics = Topics(services.bootstrap, prefix="dens1")
    env = dict(kv.split("=", 1) for kv in args.env)
    try:
        source = topics.create("src", 2)
        dests = [topics.create(f"d{i}", 2) for i in range(2)]
        spec = pipeline_spec(source_topics=[source], dest_topics=dests, dlq_topic=topics.create("dlq", 1),
                             mode="at_least_once", batch=10_000)  # fmt: skip
        spec["delivery"]["commit_strategy"] = {
            "kind": "time",
            "interval_ms": INTERVAL_MS,
            "max_records": 10_000,
        }
        feed = Feed(services.bootstrap, [source]).start()
        with tempfile.TemporaryDirectory(prefix="bench-density-") as workdir:
            driver = DriverProcess(spec=spec, pipeline=topics.prefix, workdir=Path(workdir),
                                   bootstrap=services.bootstrap, redis_url=services.redis_url,
                                   jars=list(services.jars), master=args.master, env=env)  # fmt: skip
            launched = time.monotonic()
            driver.start()
            try:
                driver.wait_for(lambda: driver.consumed() > 0, 300, "the first batch")
                first = time.monotonic() - launched
                assert driver.process is not None
                cpu0, t0 = cpu_seconds(driver.process.pid), time.monotonic()
                time.sleep(args.seconds)
                cpu = 100 * (cpu_seconds(driver.process.pid) - cpu0) / (time.monotonic() - t0)
                memory = memory_by_role(driver.process.pid)
            finally:
                driver.stop()
                driver.ensure_stopped()
                feed.stop()
        summary = memory_summary([memory])
        print(json.dumps({"label": args.label, "env": env, "master": args.master, "first_batch_s": round(first, 1),
                          "cpu_percent": round(cpu, 1), "total": {k: summary[k]["mean"] for k in ("pss_mb", "uss_mb", "rss_mb")},
                          "by_role": memory}))  # fmt: skip
    finally:
        topics.delete_all()
    return 0


# ------------------------------------------------------------------------------------------------ the console


def _seed_console(profile: Any, team: str, n: int, prefix: str) -> None:
    """``bench.console_world.seed`` on the stack's database (a ``manage.py shell``), as ``density-admin``."""
    from devstack.services import django_env

    script = f"""
from django.contrib.auth.models import User
from access.models import Team
from bench.console_world import seed
seed(team=Team.objects.get(name={team!r}), admin=User.objects.get(username="density-admin"), n={n}, prefix={prefix!r})
"""
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO, env={**os.environ, **django_env(profile)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(
            f"could not seed the console's pipelines:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )


def _clear_console(profile: Any, prefix: str) -> None:
    """``bench.console_world.clear`` on the stack's database (a ``manage.py shell``): the seeded pipelines and
    runner hosts must not outlive the run (the density row's worker would place nothing beside two lost
    hosts). Raises RuntimeError when the shell fails."""
    from devstack.services import django_env

    script = f"from bench.console_world import clear\nclear(prefix={prefix!r})\n"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO, env={**os.environ, **django_env(profile)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"could not clear the console's pipelines:\n{result.stderr[-3000:]}")


_BURN = "while True:\n    pass\n"


def burners(count: int, *, whole_session: bool = True) -> list[subprocess.Popen[bytes]]:
    """``count`` processes spinning a core each, started as the launcher starts drivers: each in its own
    session at nice 10 (the density row's drivers run at ``STREAMFORGE_DRIVER_NICENESS=10``), lowered with
    ``streamforge_core.process_priority.lower_priority`` (the group and its session), or with
    ``whole_session=False`` by the process group's nice value alone (what the launcher did before, for
    ``priority``'s comparison). Kill them when done."""
    started = [subprocess.Popen([sys.executable, "-c", _BURN], start_new_session=True) for _ in range(count)]
    for burner in started:
        if whole_session:
            lower_priority(burner.pid, 10)
        else:
            os.setpriority(os.PRIO_PGRP, burner.pid, 10)
    return started


def as_in_production(profile: Any) -> Any:
    """``profile`` with its web serving as it does in production, which is what a console benchmark measures
    (devstack's test profile serves with ``DJANGO_DEBUG=true``: every query logged, templates not cached):
    ``DJANGO_DEBUG=false`` over plain HTTP on loopback (``STREAMFORGE_HTTPS=false``), under the stack's own
    keys (its state folder's ``secret_key`` and ``audit_key``, made as the settings make them when missing) so
    sessions and the audit chain stay one with the rest of the stack. Sets them in this process's environment,
    which the services it starts and its helper scripts inherit."""
    folder = profile.state_dir
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, variable in (("secret_key", "DJANGO_SECRET_KEY"), ("audit_key", "STREAMFORGE_AUDIT_KEY")):
        path = folder / name
        if not path.exists():
            path.write_text(secrets.token_urlsafe(50))
            path.chmod(0o600)
        os.environ[variable] = path.read_text().strip()
    os.environ["STREAMFORGE_HTTPS"] = "false"
    return replace(profile, debug=False)


def console(argv: list[str] | None = None) -> int:
    """``python -m bench.density console``: the console under load without drivers. On devstack's ``test``
    stack (PostgreSQL and the web, started when not running, stopped after; Kafka and Redis must answer:
    ``devstack --profile test up kafka redis``), ``--pipelines`` (20) pipelines RUNNING as far as the
    database says (``bench.console_world``), ``--burners`` (2) CPU burners at nice 10 for the drivers, and
    ``--clients`` (20) operators reading ``GET /api/pipelines/``, ``/pipelines/overview.json`` and ``/`` for
    ``--seconds`` (60) with 1 s between answer and request (``console_load``). Prints the latency per path and
    overall (ms) as JSON; exits 1 when the p95 misses ``CONSOLE_P95_MS``."""
    parser = argparse.ArgumentParser(prog="bench.density console")
    parser.add_argument("--pipelines", type=int, default=20)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    stack = Stack(names=("postgres", "web"))
    stack.up()
    spinning: list[subprocess.Popen[bytes]] = []
    try:
        team = "console"
        _admin, operator_token, session = _operator_credentials(stack.profile, team)
        _seed_console(stack.profile, team, args.pipelines, f"console-{args.pipelines}")
        operator = Console(f"http://127.0.0.1:{stack.profile.web_port}", operator_token, session)
        visible = len(operator.states())
        spinning = burners(args.burners)
        load = {"start": load1()}
        result = console_load(operator, clients=args.clients, seconds=args.seconds)
        load["end"] = load1()
    finally:
        for proc in spinning:
            proc.kill()
            proc.wait(10)
        _clear_console(stack.profile, f"console-{args.pipelines}")
        started = list(stack.started)
        stack.down()
    p95 = result["overall_ms"].get("p95", float("inf"))
    print(json.dumps({"label": args.label, "pipelines_visible": visible, "burners": args.burners, "load": load,
                      "services_started": started, "services_reused": stack.reused, **result}))  # fmt: skip
    return 0 if p95 <= CONSOLE_P95_MS else 1


def _console_share(count: int, seconds: float, *, whole_session: bool) -> float:
    """The share of one core (0-1) a busy nice-0 process in its own session (the console) gets over
    ``seconds`` while ``count`` busy processes, each in its own session as drivers are, run at nice 10: with
    ``whole_session`` lowered by ``lower_priority``, else by their process group's nice value alone."""
    spinning = burners(count, whole_session=whole_session)
    measured = subprocess.Popen([sys.executable, "-c", _BURN], start_new_session=True)
    try:
        time.sleep(1.0)
        before, began = sum(psutil.Process(measured.pid).cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        return (sum(psutil.Process(measured.pid).cpu_times()[:2]) - before) / (time.monotonic() - began)
    finally:
        for proc in [*spinning, measured]:
            proc.kill()
            proc.wait(10)


def priority(argv: list[str] | None = None) -> int:
    """``python -m bench.density priority``: what a driver's nice value leaves the console. ``--burners``
    (20) busy processes stand in for drivers (each in its own session, as the launcher starts them, at nice
    10) against one busy nice-0 process in another session (the console's web), measured ``--rounds`` (2)
    times each way, alternating: the burners lowered by their process group's nice value alone (before) and
    by ``streamforge_core.process_priority.lower_priority`` (the group and its session, now). Prints the
    console's share of a core per round as JSON; exits 0."""
    parser = argparse.ArgumentParser(prog="bench.density priority")
    parser.add_argument("--burners", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    shares: dict[str, list[float]] = {"process_nice_only": [], "session_lowered": []}
    load = {"start": load1()}
    for _ in range(args.rounds):
        for key, whole in (("process_nice_only", False), ("session_lowered", True)):
            shares[key].append(round(_console_share(args.burners, args.seconds, whole_session=whole), 3))
    load["end"] = load1()
    cores = os.cpu_count()
    print(json.dumps({"burners": args.burners, "cores": cores, "seconds": args.seconds, "load": load,
                      "console_share_of_a_core": shares}))  # fmt: skip
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["single"]:
        raise SystemExit(single(sys.argv[2:]))
    if sys.argv[1:2] == ["console"]:
        raise SystemExit(console(sys.argv[2:]))
    if sys.argv[1:2] == ["priority"]:
        raise SystemExit(priority(sys.argv[2:]))
    raise SystemExit(
        "usage: python -m bench.density single [--env K=V ...] | console [--pipelines 20 --clients 20 ...]"
        " | priority [--burners 20];"
        " the scenario runs in `python -m bench run`"
    )
