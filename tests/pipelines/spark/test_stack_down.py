"""``make down`` (``devstack down``) stops the stack's pipeline drivers before the services: a driver runs
in its own session, so stopping the worker that launched it leaves it running, holding a core and retrying
a broker that is gone. Here a real driver, its checkpoint under a profile's state directory as the launcher
puts it, is found and stopped gracefully; one that ignores SIGTERM is killed with its process group."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace

import psutil
import pytest
from django.conf import settings

from devstack.config import PROFILES
from devstack.services import pipeline_drivers, stop_pipeline_drivers
from streamforge_core import contract as c
from tests.pipelines.spark.harness import DriverProcess

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]


@pytest.fixture
def profile(tmp_path, monkeypatch):
    monkeypatch.setattr("devstack.config.REPO_ROOT", tmp_path)
    return replace(PROFILES["test"], name=f"down-{tmp_path.name}")


def test_down_stops_the_profiles_running_drivers_and_no_other(profile, tmp_path, kafka_bootstrap, make_topic):
    source = make_topic("src")
    suffix = uuid.uuid4().hex[:8]
    spec = {
        "source": {"topics": [source]},
        "destinations": [{"name": "all", "topic": make_topic(f"out-{suffix}")}],
        "dlq": {"topic": make_topic(f"dlq-{suffix}")},
    }

    def driver(workdir):
        return DriverProcess(
            spec=spec,
            pipeline=f"down-{suffix}",
            workdir=workdir,
            bootstrap=kafka_bootstrap,
            redis_url=settings.REDIS_URL,
            jars=list(settings.SPARK_JARS),
        )

    ours = driver(profile.state_dir / "checkpoints-parent")  # checkpoint under the profile's state dir
    other = driver(tmp_path / "elsewhere")  # another stack's: left alone
    try:
        ours.start()
        other.start()
        ours.wait_for(lambda: ours.events() or ours.checkpoint.exists(), 180, "the driver running")
        assert [p.pid for p in pipeline_drivers(profile)] == [ours.process.pid]

        lines = stop_pipeline_drivers(profile, grace=90)

        assert lines == [f"pipeline driver down-{suffix} (pid {ours.process.pid}): stopped"]
        assert ours.wait(10) == c.EXIT_STOPPED, ours.log_tail()  # graceful: its own exit report
        assert other.process.poll() is None
    finally:
        ours.ensure_stopped()
        other.ensure_stopped()


def test_a_driver_that_ignores_sigterm_is_killed_with_its_process_group_after_the_grace(profile):
    checkpoint = profile.state_dir / "checkpoints" / "stuck"
    checkpoint.mkdir(parents=True)
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    stuck = subprocess.Popen(
        [sys.executable, "-c", ignore, "pipelines.spark.driver", "--pipeline", "stuck",
         "--checkpoint-dir", str(checkpoint)],
        start_new_session=True,
    )  # fmt: skip
    try:
        time.sleep(0.5)  # the handler is installed
        started = time.monotonic()
        assert stop_pipeline_drivers(profile, grace=2) == [
            f"pipeline driver stuck (pid {stuck.pid}): killed after 2 s"
        ]
        assert stuck.wait(10) == -signal.SIGKILL
        assert time.monotonic() - started < 10
        assert not psutil.pid_exists(stuck.pid) or psutil.Process(stuck.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if stuck.poll() is None:
            stuck.kill()
