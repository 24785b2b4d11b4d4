"""devstack's ``cluster`` profile (no single control process: two webs, two beats, three runner hosts, a Spark
standalone master with two workers, PostgreSQL) and the host faults it offers (crash, freeze, thaw)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from devstack import __main__ as cli
from devstack import config, hosts
from devstack.config import PROFILES
from devstack.services import (
    CLUSTER_KEYS,
    Service,
    StackError,
    launches_drivers,
    running_process,
    services,
    start,
    stop,
)

RUNNERS = ("runner-a", "runner-b", "runner-c")
DJANGO_SERVICES = ("web-1", "web-2", *RUNNERS, "beat-1", "beat-2", "dlq-ingest")


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The cluster profile with its state folder under ``tmp_path`` (keys, runner folders, pid files)."""
    monkeypatch.setattr("devstack.config.REPO_ROOT", tmp_path)
    monkeypatch.delenv("STREAMFORGE_CELERY_QUEUE", raising=False)
    monkeypatch.delenv("STREAMFORGE_RECONCILE_SECONDS", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return replace(PROFILES["cluster"], name=f"unit-{tmp_path.name}")


def _by_name(profile: config.Profile) -> dict[str, Service]:
    return {service.name: service for service in services(profile)}


# ------------------------------------------------------------------------------------------------ the profile


def test_the_cluster_profile_runs_postgres_whatever_streamforge_db_says_and_an_offset_moves_spark_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMFORGE_DB", "sqlite")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv(config.PORT_OFFSET_VARIABLE, "400")
    base, shifted = PROFILES["cluster"], config.profile("cluster")
    assert shifted.uses_postgres
    assert shifted.database_url.startswith("postgres://")
    assert not config.profile("test").uses_postgres
    assert shifted.name == "cluster-400"
    assert (shifted.spark_port, shifted.spark_ui_port) == (base.spark_port + 400, base.spark_ui_port + 400)
    assert shifted.spark_master_url == f"spark://127.0.0.1:{base.spark_port + 400}"
    assert shifted.web_ports == (base.web_port + 400, base.web_port + 401)
    assert config.profile("test").spark_master_url is None  # no cluster: drivers keep SPARK_MASTER


def test_cluster_services_in_start_order(cluster: config.Profile) -> None:
    assert [s.name for s in services(cluster)] == [
        "postgres", "kafka", "redis", "spark-master", "spark-worker-1", "spark-worker-2",
        "web-1", "web-2", *RUNNERS, "beat-1", "beat-2", "dlq-ingest",
    ]  # fmt: skip
    # The single-host profiles keep their one web, worker and beat; the chaos stack adds two runner hosts
    # beside its plain worker (which chaos.bulk_worker kills alone).
    assert [s.name for s in services(PROFILES["dev"])][-4:] == ["web", "worker", "beat", "dlq-ingest"]
    chaos = [s.name for s in services(replace(PROFILES["chaos"], name=cluster.name))]
    assert chaos[-6:] == ["web", "worker", "runner-a", "runner-b", "beat", "dlq-ingest"]


def test_each_runner_reads_the_shared_queue_and_its_own_under_its_name_with_its_own_state_folder(
    cluster: config.Profile,
) -> None:
    found = _by_name(cluster)
    state_dirs = set()
    for name in RUNNERS:
        runner = found[name]
        command, env = runner.command(), runner.env()
        assert command[command.index("--queues") + 1] == f"celery,celery.runner.{name}"
        assert command[command.index("--hostname") + 1] == f"{name}@%h"
        assert command[command.index("--pool") + 1] == "threads"
        assert env["STREAMFORGE_RUNNER_NAME"] == name
        assert env["STREAMFORGE_STATE_DIR"] == str(cluster.state_dir / "runners" / name)
        assert env["STREAMFORGE_CHECKPOINT_ROOT"] == str(cluster.state_dir / "shared" / "checkpoints")
        assert env["SPARK_MASTER"] == f"spark://127.0.0.1:{cluster.spark_port}"
        assert env["DATABASE_URL"].startswith("postgres://")
        runner.prepare()
        assert stat.S_IMODE(Path(env["STREAMFORGE_STATE_DIR"]).stat().st_mode) == 0o700
        state_dirs.add(env["STREAMFORGE_STATE_DIR"])
    assert len(state_dirs) == 3


def test_the_shared_queue_name_follows_streamforge_celery_queue(
    cluster: config.Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMFORGE_CELERY_QUEUE", "sf-test")
    command = _by_name(cluster)["runner-b"].command()
    assert command[command.index("--queues") + 1] == "sf-test,sf-test.runner.runner-b"


def test_every_django_process_gets_one_set_of_keys_made_once_and_kept_private(
    cluster: config.Profile,
) -> None:
    found = _by_name(cluster)
    envs = {name: found[name].env() for name in DJANGO_SERVICES}
    for variable in CLUSTER_KEYS:
        values = {env[variable] for env in envs.values()}
        assert len(values) == 1, variable
        assert len(values.pop()) >= 32
    folder = cluster.state_dir / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in CLUSTER_KEYS.values():
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert len({envs["web-1"][v] for v in CLUSTER_KEYS}) == 3, "three different keys"
    again = _by_name(cluster)["beat-2"].env()
    assert all(again[v] == envs["web-1"][v] for v in CLUSTER_KEYS), "read back, not made again"
    # The webs and beats keep the stack's state folder; checkpoints are shared by all.
    assert {envs[n]["STREAMFORGE_STATE_DIR"] for n in ("web-1", "web-2", "beat-1", "beat-2")} == {
        str(cluster.state_dir)
    }
    assert {env["STREAMFORGE_CHECKPOINT_ROOT"] for env in envs.values()} == {str(cluster.checkpoint_root)}


def test_two_webs_on_two_ports_and_two_beats_with_their_own_schedule_files(cluster: config.Profile) -> None:
    found = _by_name(cluster)
    assert found["web-1"].ports == (cluster.web_port,)
    assert found["web-2"].ports == (cluster.web_port + 1,)
    for name, port in (("web-1", cluster.web_port), ("web-2", cluster.web_port + 1)):
        command = found[name].command()
        assert command[command.index("--port") + 1] == str(port)
    schedules = []
    for name in ("beat-1", "beat-2"):
        command = found[name].command()
        schedules.append(command[command.index("--schedule") + 1])
    assert schedules == [str(cluster.state_dir / f"celerybeat-schedule-{i}") for i in (1, 2)]


def test_the_spark_master_and_workers_run_from_spark_class_of_a_home_with_a_release_marker(
    cluster: config.Profile,
) -> None:
    found = _by_name(cluster)
    master, worker = found["spark-master"], found["spark-worker-2"]
    master.prepare()
    command = master.command()
    home = Path(master.env()["SPARK_HOME"])
    assert command[0] == str(home / "bin" / "spark-class")
    assert (home / "bin" / "spark-class").is_file()
    assert (home / "RELEASE").is_file()
    assert command[1] == "org.apache.spark.deploy.master.Master"
    assert command[command.index("--port") + 1] == str(cluster.spark_port)
    assert master.ports == (cluster.spark_port, cluster.spark_ui_port)
    command = worker.command()
    assert command[1:3] == ["org.apache.spark.deploy.worker.Worker", cluster.spark_master_url]
    assert command[command.index("--webui-port") + 1] == str(cluster.spark_ui_port + 2)
    assert worker.env()["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_down_stops_runners_and_beats_before_the_drivers(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr("devstack.config.REPO_ROOT", tmp_path)
    order: list[str] = []

    def stop(profile: config.Profile, service: Service) -> str:
        order.append(service.name)
        return f"{service.name}: stopped"

    def stop_drivers(profile: config.Profile) -> list[str]:
        order.append("drivers")
        return []

    monkeypatch.setattr(cli, "stop", stop)
    monkeypatch.setattr(cli, "stop_pipeline_drivers", stop_drivers)
    assert cli.main(["--profile", "cluster", "down"]) == 0
    drivers = order.index("drivers")
    assert {*RUNNERS, "beat-1", "beat-2"} <= set(order[:drivers])
    assert {"web-1", "web-2", "spark-master", "kafka", "postgres"} <= set(order[drivers:])
    assert launches_drivers(PROFILES["cluster"], "runner-c")
    assert not launches_drivers(PROFILES["cluster"], "web-1")


# ------------------------------------------------------------------------------------------------ host faults


#: A group leader that sleeps with a ``sleep`` child beside it; extra arguments stay on its command line.
SLEEPER = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def _group(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """A new process group of two processes (a Python leader with ``args`` on its command line and a
    ``sleep`` child), with ``env``; returned once the child runs ``sleep``. Python starts a child with
    vfork: a SIGSTOP that reaches the child before its exec leaves the leader in uninterruptible sleep
    (``disk-sleep``) until SIGCONT, so a test that freezes the group must not race its start."""
    leader = subprocess.Popen(
        [sys.executable, "-c", SLEEPER, *args],
        env={**os.environ, **env},
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not any(_name(p) == "sleep" for p in _members(leader.pid)):
        assert time.monotonic() < deadline, "the group's sleep child did not start within 30 s"
        time.sleep(0.02)
    return leader


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return ""


def _members(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return found


def _states(pgid: int) -> set[str]:
    states: set[str] = set()
    for proc in _members(pgid):
        try:
            states.add(proc.status())
        except psutil.NoSuchProcess:
            continue
    return states


def _settled_states(pgid: int, wanted: str, seconds: float = 10.0) -> set[str]:
    """The group's states once every member shows ``wanted``, or as they are after ``seconds``. A signal is
    delivered when the process next leaves the kernel: one in uninterruptible sleep (``disk-sleep``) shows
    SIGSTOP only when it wakes, so an immediate look can miss it (see ``_group`` for one that never wakes)."""
    deadline = time.monotonic() + seconds
    while True:
        states = _states(pgid)
        if states <= {wanted} or time.monotonic() > deadline:
            return states
        time.sleep(0.05)


def _settled_without(pgid: int, unwanted: str, seconds: float = 10.0) -> set[str]:
    """The group's states once no member shows ``unwanted`` (SIGCONT delivered), or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        states = _states(pgid)
        if unwanted not in states or time.monotonic() > deadline:
            return states
        time.sleep(0.05)


@pytest.fixture
def host(cluster: config.Profile, tmp_path):
    """runner-a as a devstack service (a two-process group tagged as the runner) with two driver groups: one
    tagged by its environment, one untagged whose ``--spec-file`` lies in runner-a's folder; plus groups that
    must never be touched: runner-b's driver, a runner-a driver of another stack, an untagged process."""
    tag = {
        "STREAMFORGE_RUNNER_NAME": "runner-a",
        "STREAMFORGE_STATE_DIR": str(cluster.runner_state_dir("runner-a")),
    }
    runner = Service(
        "runner-a", (), lambda: ["sh", "-c", "sleep 300 & exec sleep 300"], lambda: True, env=lambda: tag
    )
    assert start(cluster, runner).startswith("runner-a: started")
    spec = cluster.runner_state_dir("runner-a") / "runs" / "p2" / "spec.json"
    other_stack = tmp_path / "elsewhere" / ".stack" / "cluster" / "runners" / "runner-a"
    groups = {
        "driver-env": _group(tag),
        "driver-spec": _group({}, "--pipeline", "p2", "--spec-file", str(spec)),
        "runner-b-driver": _group(
            {
                "STREAMFORGE_RUNNER_NAME": "runner-b",
                "STREAMFORGE_STATE_DIR": str(cluster.runner_state_dir("runner-b")),
            }
        ),
        "other-stack": _group(
            {"STREAMFORGE_RUNNER_NAME": "runner-a", "STREAMFORGE_STATE_DIR": str(other_stack)}
        ),
        "untagged": _group({}),
    }
    proc = running_process(cluster, "runner-a")
    assert proc is not None
    yield proc.pid, groups
    for process in groups.values():
        with_suppressed = [signal.SIGCONT, signal.SIGKILL]
        for signum in with_suppressed:
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                break
        process.wait(10)
    stop(cluster, runner)


def test_host_groups_are_the_runner_and_exactly_its_drivers(cluster, host) -> None:
    runner_pid, groups = host
    found = hosts.host_groups(cluster, "runner-a")
    assert [(g.role, g.pgid) for g in found] == [
        ("runner", runner_pid),
        *sorted(("driver", groups[n].pid) for n in ("driver-env", "driver-spec")),
    ]
    assert any(g.label == "pipeline p2" for g in found)


def test_crash_host_sigkills_the_runner_and_its_driver_groups_and_nothing_else(cluster, host, capsys) -> None:
    runner_pid, groups = host
    # The same runner name in another stack (the CLI's own cluster profile) touches none of these.
    assert cli.main(["--profile", "cluster", "crash-host", "runner-a"]) == 0
    assert "nothing running" in capsys.readouterr().out
    lines = hosts.crash_host(cluster, "runner-a")
    assert len(lines) == 3, lines
    assert all(line.endswith(": died") for line in lines), lines
    for name in ("driver-env", "driver-spec"):
        assert groups[name].wait(10) == -signal.SIGKILL
        assert not [p for p in _members(groups[name].pid) if p.status() != psutil.STATUS_ZOMBIE]
    assert not psutil.pid_exists(runner_pid) or psutil.Process(runner_pid).status() == psutil.STATUS_ZOMBIE
    assert running_process(cluster, "runner-a") is None
    for name in ("runner-b-driver", "other-stack", "untagged"):
        assert groups[name].poll() is None, name
        assert _states(groups[name].pid) <= {psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING}, name


def test_freeze_stops_the_same_groups_and_thaw_resumes_the_drivers_before_the_runner(
    cluster, host, monkeypatch
) -> None:
    runner_pid, groups = host
    mine = [runner_pid, groups["driver-env"].pid, groups["driver-spec"].pid]
    lines = hosts.freeze_host(cluster, "runner-a")
    assert len(lines) == 3
    for pgid in mine:
        assert _settled_states(pgid, psutil.STATUS_STOPPED) == {psutil.STATUS_STOPPED}, pgid
    for name in ("runner-b-driver", "other-stack", "untagged"):
        assert psutil.STATUS_STOPPED not in _states(groups[name].pid), name
    assert {g.pgid for g in hosts.frozen_groups(cluster, "runner-a")} == set(mine)
    with pytest.raises(StackError, match="frozen already"):
        hosts.freeze_host(cluster, "runner-a")

    resumed: list[int] = []
    real_killpg = os.killpg

    def recording_killpg(pgid: int, signum: int) -> None:
        if signum == signal.SIGCONT:
            resumed.append(pgid)
        real_killpg(pgid, signum)

    monkeypatch.setattr(os, "killpg", recording_killpg)
    lines = hosts.thaw_host(cluster, "runner-a")
    assert resumed[-1] == runner_pid, "the runner last"
    assert set(resumed[:-1]) == set(mine[1:]), "every driver before it"
    assert all(line.endswith("resumed") for line in lines)
    for pgid in mine:
        assert psutil.STATUS_STOPPED not in _settled_without(pgid, psutil.STATUS_STOPPED), pgid
    assert hosts.frozen_groups(cluster, "runner-a") == []
    with pytest.raises(StackError, match="not frozen"):
        hosts.thaw_host(cluster, "runner-a")


def test_thaw_skips_a_group_whose_leader_is_gone(cluster, host) -> None:
    _runner_pid, groups = host
    hosts.freeze_host(cluster, "runner-a")
    os.killpg(groups["driver-env"].pid, signal.SIGKILL)
    groups["driver-env"].wait(10)
    lines = hosts.thaw_host(cluster, "runner-a")
    assert [line.rsplit(": ", 1)[1] for line in lines].count("gone") == 1


def test_a_host_command_names_one_known_runner(cluster, capsys) -> None:
    assert cli.main(["--profile", "cluster", "crash-host"]) == 1
    assert "one runner name" in capsys.readouterr().err
    assert cli.main(["--profile", "cluster", "freeze-host", "runner-z"]) == 1
    assert "unknown runner 'runner-z'" in capsys.readouterr().err
    assert cli.main(["--profile", "test", "crash-host", "local"]) == 1
    assert "has no runner hosts" in capsys.readouterr().err
    with pytest.raises(StackError):
        hosts.crash_host(cluster, "web-1")
