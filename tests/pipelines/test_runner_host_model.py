"""Runner hosts' derived state and the runner name a process supervises under."""

from __future__ import annotations

import pytest

from pipelines.models import RunnerHost, RunnerHostState
from pipelines.supervision.processes import runner_name
from tests.factories import runner_host

pytestmark = pytest.mark.django_db


def test_a_host_is_up_draining_or_lost_by_its_heartbeat_age_on_the_databases_clock(settings):
    settings.HOST_LOST_SECONDS = 20
    runner_host("fresh", heartbeat_age_s=1)
    runner_host("leaving", heartbeat_age_s=1, draining=True)
    runner_host("silent", heartbeat_age_s=25)
    runner_host("silent-draining", heartbeat_age_s=25, draining=True)
    states = dict(RunnerHost.objects.with_state().values_list("name", "state"))
    assert states == {
        "fresh": RunnerHostState.UP,
        "leaving": RunnerHostState.DRAINING,
        "silent": RunnerHostState.LOST,
        "silent-draining": RunnerHostState.LOST,
    }


def test_the_runner_name_is_the_configured_one_else_the_machines(settings):
    import socket

    settings.RUNNER_NAME = "runner-b"
    assert runner_name() == "runner-b"
    settings.RUNNER_NAME = None
    assert runner_name() == socket.gethostname()


@pytest.mark.parametrize("name", ["Runner-A", "-a", "a-", "a_b", "x" * 64])
def test_a_runner_name_outside_the_hostname_alphabet_is_refused_at_start(name):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={
            "DJANGO_SETTINGS_MODULE": "streamforge_web.settings",
            "DJANGO_DEBUG": "1",
            "STREAMFORGE_RUNNER_NAME": name,
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "STREAMFORGE_RUNNER_NAME" in result.stderr
