"""The host agent (``pipelines.supervision.agent``) over real processes: PostgreSQL, Redis, the stand-in driver
``fake_driver.py`` (real child processes in their own sessions) and, where the claim is about a runner,
real ``celery -A streamforge_web worker`` subprocesses with their own ``STREAMFORGE_RUNNER_NAME`` and state
folder. Runner names are unique per test: the stray scan kills drivers tagged with its own name, and other
runs on this machine must never carry it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from access.models import AuditEvent, Role
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.services import create_pipeline
from pipelines.spark.fence import read_lease
from pipelines.supervision import agent, drain, launcher, processes
from pipelines.supervision.processes import host_queue, lease_path
from streamforge_core.kafka import KafkaConnection
from streamforge_web.tasks import ping
from tests.database import child_database_url
from tests.factories import member
from tests.pipelines.conftest import github_spec

FAKE = Path(__file__).with_name("fake_driver.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.redis]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def me(settings, tmp_path) -> str:
    """This test process acts as runner ``me`` (its own state folder); the agent's memory is reset."""
    name = _unique("agent")
    settings.RUNNER_NAME = name
    settings.STATE_DIR = tmp_path / name
    settings.LEASE_TTL_SECONDS = 20
    agent._registered.discard(name)
    return name


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Stand-in drivers a test launched; their groups are killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)


def _pipeline(team, name: str | None = None) -> Pipeline:
    admin = member(team, Role.ADMIN, username=_unique("ada"))
    name = name or _unique("p")
    return create_pipeline(actor=admin, name=name, team=team, spec=github_spec(dlq=f"{name}.dlq"))


def _lease(pipeline: Pipeline, host: RunnerHost, *, epoch: int, expires_in_s: float) -> None:
    Pipeline.objects.filter(pk=pipeline.pk).update(
        lease_host=host,
        lease_epoch=epoch,
        lease_expires_at=timezone.now() + timedelta(seconds=expires_in_s),
        state=PipelineState.RUNNING,
        desired_state=DesiredState.RUNNING,
    )


def _run(pipeline: Pipeline, host: str, *, epoch: int, state: str = PipelineState.RUNNING) -> PipelineRun:
    assert pipeline.current_revision is not None
    return PipelineRun.objects.create(
        pipeline=pipeline,
        revision=pipeline.current_revision,
        run_id=uuid.uuid4(),
        attempt=1,
        state=state,
        host=host,
        epoch=epoch,
    )


def _spawn(
    run: PipelineRun, runner: str, spawned: list[subprocess.Popen[bytes]], behaviour: str = "run"
) -> subprocess.Popen[bytes]:
    """Launch the stand-in driver for ``run`` as runner ``runner``'s launcher would: its own session, tagged
    ``STREAMFORGE_RUNNER_NAME``; the pid is stored on the run."""
    workdir = processes.run_dir(run.pipeline.name, run.run_id)
    workdir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, str(FAKE), behaviour,
        "--spec-file", str(workdir / "spec.json"), "--pipeline", run.pipeline.name, "--revision", "1",
        "--run-id", str(run.run_id), "--bootstrap", "127.0.0.1:1", "--redis-url", django_settings.REDIS_URL,
        "--checkpoint-dir", str(workdir / "checkpoint"), "--master", "local[1]", "--jars", "",
    ]  # fmt: skip
    env = {**os.environ, "STREAMFORGE_RUNNER_NAME": runner}
    log_path = workdir / "driver.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    spawned.append(process)
    created = psutil.Process(process.pid).create_time()
    PipelineRun.objects.filter(pk=run.pk).update(
        pid=process.pid, process_started_at=created, log_path=str(log_path)
    )
    run.pid, run.process_started_at, run.log_path = process.pid, created, str(log_path)
    return process


def _gone(process: subprocess.Popen[bytes], timeout: float = 10) -> int | None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        return process.wait(timeout)
    return None


def _until(predicate, timeout: float = 30.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not reached")


# ------------------------------------------------------------------------------------------ one tick, in process


@pytest.mark.django_db
def test_the_first_tick_registers_the_host_and_each_tick_moves_its_heartbeat(me, settings):
    settings.RUNNER_SLOTS, settings.RUNNER_MEMORY_MB, settings.RUNNER_LABELS = 3, 2048, ["ssd", "zone=a"]
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    assert (host.queue, host.slots, host.memory_mb, host.labels) == (
        host_queue(me),
        3,
        2048,
        ["ssd", "zone=a"],
    )
    assert (host.lost_at, host.draining) == (None, False)
    first = host.last_heartbeat_at
    time.sleep(0.05)
    agent.host_tick()
    assert RunnerHost.objects.get(name=me).last_heartbeat_at > first


@pytest.mark.django_db
def test_a_host_marked_lost_is_back_at_its_next_tick_audited_once_and_keeps_its_drain(me):
    agent.host_tick()
    lost_at = timezone.now() - timedelta(seconds=30)
    RunnerHost.objects.filter(name=me).update(lost_at=lost_at, draining=True)
    agent.host_tick()
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    assert (host.lost_at, host.draining) == (None, True)
    assert AuditEvent.objects.filter(action="host.back", target_id=me).count() == 1


@pytest.mark.django_db
def test_a_live_drivers_lease_is_renewed_on_the_databases_clock_and_its_lease_file_rewritten(
    me, team, spawned
):
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    pipeline = _pipeline(team)
    _lease(pipeline, host, epoch=3, expires_in_s=5)
    run = _run(pipeline, me, epoch=3)
    _spawn(run, me, spawned)
    report = agent.host_tick()
    assert report.renewed == [pipeline.name]
    expires = Pipeline.objects.get(pk=pipeline.pk).lease_expires_at
    assert expires is not None
    assert 15 < (expires - timezone.now()).total_seconds() <= 20  # now() + LEASE_TTL_SECONDS (20)
    lease = read_lease(lease_path(pipeline.name, run.run_id))
    assert lease is not None
    assert (lease.run_id, lease.epoch, lease.host, lease.state) == (str(run.run_id), 3, me, "held")
    assert lease.expires_at_ms == int(expires.timestamp() * 1000)
    assert oct(lease_path(pipeline.name, run.run_id).stat().st_mode & 0o777) == "0o600"


@pytest.mark.django_db
def test_with_redis_unreachable_the_agent_still_beats_and_renews_a_live_drivers_lease(
    me, team, spawned, settings
):
    """Only PostgreSQL keeps a pipeline alive: a Redis outage must not let a lease lapse."""
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    pipeline = _pipeline(team)
    _lease(pipeline, host, epoch=1, expires_in_s=5)
    run = _run(pipeline, me, epoch=1)
    process = _spawn(run, me, spawned)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{closed}/0"  # nothing listens there
    before = RunnerHost.objects.get(name=me).last_heartbeat_at
    report = agent.host_tick()
    assert report.renewed == [pipeline.name]
    assert report.ended == report.fenced == []
    assert RunnerHost.objects.get(name=me).last_heartbeat_at > before
    expires = Pipeline.objects.get(pk=pipeline.pk).lease_expires_at
    assert expires is not None
    assert (expires - timezone.now()).total_seconds() > 15
    assert process.poll() is None


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["superseded", "expired"])
def test_a_driver_whose_lease_is_lost_is_killed_with_its_group_its_file_says_lost_and_its_run_ends_fenced(
    me, team, spawned, how
):
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    pipeline = _pipeline(team)
    if how == "superseded":  # another runner took the pipeline over: epoch 2 > the run's 1
        _lease(pipeline, host, epoch=2, expires_in_s=20)
    else:  # nobody renewed it in time (the runner was frozen): expired on the database's clock
        _lease(pipeline, host, epoch=1, expires_in_s=-1)
    run = _run(pipeline, me, epoch=1)
    process = _spawn(run, me, spawned)
    report = agent.host_tick()
    assert report.fenced == [pipeline.name]
    assert _gone(process) == -signal.SIGKILL  # killed, not asked: a graceful stop would commit its batch
    lease = read_lease(lease_path(pipeline.name, run.run_id))
    assert lease is not None
    assert (lease.epoch, lease.state) == (1, "lost")
    run.refresh_from_db()
    assert (run.ended_at is not None, run.error_type, run.exit_code) == (True, "Fenced", 4)


@pytest.mark.django_db
def test_a_stray_driver_of_this_runner_is_killed_and_one_of_another_runner_is_left_alone(me, team, spawned):
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    pipeline = _pipeline(team)
    _lease(pipeline, host, epoch=1, expires_in_s=20)
    ended = _run(pipeline, me, epoch=1, state=PipelineState.STOPPED)  # its run ended: nobody wants it
    stray = _spawn(ended, me, spawned)
    other = _spawn(
        _run(_pipeline(team), "someone-else", epoch=1, state=PipelineState.STOPPED), _unique("x"), spawned
    )
    wanted_run = _run(pipeline, me, epoch=1)
    wanted = _spawn(wanted_run, me, spawned)
    report = agent.host_tick()
    assert report.killed == [stray.pid]
    assert _gone(stray) == -signal.SIGKILL
    assert other.poll() is None
    assert wanted.poll() is None


@pytest.mark.django_db(transaction=True)
def test_a_claimed_run_whose_launch_message_was_lost_is_launched_by_its_agent_once(me, team, monkeypatch):
    """The claim committed but ``pipelines.launch_run`` never arrived: after ``LAUNCH_FALLBACK_SECONDS`` the
    owner's agent launches the run itself (lease file first), in a thread, and ticks while that launch is
    under way do not launch it again."""
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    pipeline = _pipeline(team)
    _lease(pipeline, host, epoch=2, expires_in_s=20)
    run = _run(pipeline, me, epoch=2, state=PipelineState.STARTING)
    launched: list[uuid.UUID] = []

    def slow_launch(run: PipelineRun, workdir: Path, conn: KafkaConnection, registry: object = None) -> None:
        launched.append(run.run_id)
        time.sleep(1.5)

    monkeypatch.setattr(launcher, "_launch", slow_launch)
    assert agent.host_tick().launched == []  # just claimed: its message may still be on its way
    PipelineRun.objects.filter(pk=run.pk).update(
        started_at=timezone.now() - timedelta(seconds=agent.LAUNCH_FALLBACK_SECONDS + 5)
    )
    assert agent.host_tick().launched == [pipeline.name]
    agent.host_tick()  # while the first launch is still under way
    _until(lambda: launched, timeout=10)
    time.sleep(2)
    assert launched == [run.run_id]
    lease = read_lease(lease_path(pipeline.name, run.run_id))
    assert lease is not None
    assert (lease.run_id, lease.epoch) == (str(run.run_id), 2)


@pytest.mark.django_db
def test_a_stopping_run_is_signalled_by_the_agent_once_not_at_every_tick(me, team, spawned):
    agent.host_tick()
    host = RunnerHost.objects.get(name=me)
    pipeline = _pipeline(team)
    _lease(pipeline, host, epoch=1, expires_in_s=20)
    run = _run(pipeline, me, epoch=1, state=PipelineState.STOPPING)
    PipelineRun.objects.filter(pk=run.pk).update(stop_requested_at=timezone.now())
    process = _spawn(run, me, spawned, behaviour="stubborn")  # ignores SIGTERM: stays to be counted
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    _until(lambda: client.exists(f"streamforge:heartbeat:{pipeline.name}"))  # its handler is in place
    assert agent.host_tick().signalled == [pipeline.name]
    assert processes.was_signalled(run.run_id)
    assert agent.host_tick().signalled == []  # asked once, not at every tick
    assert process.poll() is None


# ------------------------------------------------------------------------------------------ real runner workers


def _start_runner(name: str, queue: str, state_dir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "STREAMFORGE_CELERY_QUEUE": queue,
        "STREAMFORGE_RUNNER_NAME": name,
        "STREAMFORGE_STATE_DIR": str(state_dir),
        "STREAMFORGE_HOST_TICK_SECONDS": "1",
        "STREAMFORGE_AUDIT_KEY": django_settings.AUDIT_KEY,
    }
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "streamforge_web", "worker", "--pool", "solo",
             "--without-gossip", "--without-mingle", "--loglevel", "INFO", "-n", f"{name}@%h"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


@pytest.fixture
def two_runners(transactional_db, settings, tmp_path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Two runner workers on this test's own shared queue, each with its name and state folder."""
    if connection.vendor != "postgresql":
        pytest.skip("runner hosts share PostgreSQL")
    queue = _unique("agent-tests")
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    names = {"a": _unique("runner-a"), "b": _unique("runner-b")}
    workers = {
        names[key]: _start_runner(names[key], queue, tmp_path / key, tmp_path / f"{key}.log") for key in names
    }
    try:
        yield workers
    finally:
        for process in workers.values():
            process.terminate()
        for process in workers.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        client = redis.Redis.from_url(django_settings.REDIS_URL)
        client.delete(queue, *(host_queue(name) for name in workers))


@pytest.mark.django_db(transaction=True)
def test_two_runner_workers_register_read_their_own_queue_keep_or_fence_leases_and_signal_a_drain(
    two_runners, team, spawned, settings, tmp_path
):
    """Runner behaviour across processes, one pair of workers for the lot (each takes seconds to start): both
    register and beat; a task sent to one runner's queue runs only there; runner b's agent renews a live
    driver's lease and kills it once superseded; runner a's agent delivers a drain's SIGTERM."""
    (name_a, worker_a), (name_b, worker_b) = two_runners.items()
    _until(lambda: RunnerHost.objects.filter(name__in=two_runners).count() == 2, timeout=90)
    beat = RunnerHost.objects.get(name=name_b).last_heartbeat_at
    _until(lambda: RunnerHost.objects.get(name=name_b).last_heartbeat_at > beat, timeout=10)
    assert RunnerHost.objects.get(name=name_a).queue == host_queue(name_a)

    answered = {ping.apply_async(queue=host_queue(name_b)).get(timeout=60)["pid"] for _ in range(4)}
    assert answered == {worker_b.pid}
    answered = {ping.apply_async(queue=host_queue(name_a)).get(timeout=60)["pid"] for _ in range(4)}
    assert answered == {worker_a.pid}
    assert ping.apply_async(queue=settings.CELERY_TASK_DEFAULT_QUEUE).get(timeout=60)["pid"] in {
        worker_a.pid,
        worker_b.pid,
    }

    # runner b's agent, in its worker, keeps a live driver's lease: the expiry moves and the file follows
    host = RunnerHost.objects.get(name=name_b)
    settings.STATE_DIR = tmp_path / "b"  # runner b's state folder: its run folders and lease files
    pipeline = _pipeline(team)
    _lease(pipeline, host, epoch=1, expires_in_s=6)
    run = _run(pipeline, name_b, epoch=1)
    process = _spawn(run, name_b, spawned)
    first = Pipeline.objects.get(pk=pipeline.pk).lease_expires_at
    assert first is not None
    _until(lambda: Pipeline.objects.get(pk=pipeline.pk).lease_expires_at > first + timedelta(seconds=5))
    lease = _until(lambda: read_lease(lease_path(pipeline.name, run.run_id)))
    assert (lease.epoch, lease.host, lease.state) == (1, name_b, "held")
    # then another runner takes the pipeline over: runner b's agent kills its driver
    Pipeline.objects.filter(pk=pipeline.pk).update(lease_epoch=2)
    assert _gone(process, timeout=20) == -signal.SIGKILL
    assert _until(lambda: read_lease(lease_path(pipeline.name, run.run_id)).state == "lost")
    assert _until(lambda: PipelineRun.objects.get(pk=run.pk).error_type == "Fenced")

    # a drain of runner a: the reconcile's drain step claims its run STOPPING, runner a's agent sends the
    # SIGTERM (nothing else signals it here), the driver exits 0 and the agent records the clean end
    settings.STATE_DIR = tmp_path / "a"
    host_a = RunnerHost.objects.get(name=name_a)
    moving = _pipeline(team)
    _lease(moving, host_a, epoch=1, expires_in_s=20)
    drained_run = _run(moving, name_a, epoch=1)
    driver = _spawn(drained_run, name_a, spawned)
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    _until(lambda: client.exists(f"streamforge:heartbeat:{moving.name}"))  # its handler is in place
    RunnerHost.objects.filter(pk=host_a.pk).update(draining=True, drain_requested_at=timezone.now())
    assert drain.drain_step() == [moving.name]
    assert _gone(driver, timeout=20) == 0  # asked, not killed: its batch would be committed
    ended = _until(lambda: PipelineRun.objects.filter(pk=drained_run.pk, ended_at__isnull=False).first())
    assert (ended.exit_code, ended.error_type, ended.stop_cause) == (0, "Stopped", "drain")


def test_a_driver_carries_its_runners_name_and_still_no_secret_of_the_worker():
    """The tag the stray scan and devstack's crash-host find a runner's drivers by."""
    worker_env = {"STREAMFORGE_RUNNER_NAME": "runner-b", "DJANGO_SECRET_KEY": "s3cret", "PATH": "/usr/bin"}
    env = launcher.driver_environment(worker_env, KafkaConnection(bootstrap_servers="127.0.0.1:9092"))
    assert env["STREAMFORGE_RUNNER_NAME"] == "runner-b"
    assert "DJANGO_SECRET_KEY" not in env
