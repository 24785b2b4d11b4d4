"""``lower_priority`` lowers a real process group and its session (``streamforge_core.process_priority``):
the nice value of every process in the group, and the session's autogroup, which is what ranks a driver
against the console when the kernel groups by session (sched(7)). The figures of what that leaves the
console: ``python -m bench.density priority``."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from streamforge_core.process_priority import autogroup_niceness, lower_priority

#: A leader that starts a child in its own group and session (a driver and its JVM), then waits.
_LEADER = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def session_leader() -> Iterator[psutil.Process]:
    """The leader of a new session (as the launcher starts a driver), once its child runs."""
    popen = subprocess.Popen([sys.executable, "-c", _LEADER], start_new_session=True)
    leader = psutil.Process(popen.pid)
    try:
        deadline = time.monotonic() + 10
        while not leader.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leader.children(), "the leader's child did not start"
        yield leader
    finally:
        for child in leader.children(recursive=True):
            child.kill()
        popen.kill()
        popen.wait(10)


def test_the_group_and_its_session_are_lowered_children_included(session_leader):
    (child,) = session_leader.children()
    before = autogroup_niceness(session_leader.pid)

    lower_priority(session_leader.pid, 7)

    assert (session_leader.nice(), child.nice()) == (7, 7)
    if before is None:
        pytest.skip("this kernel has no autogroups (sched_autogroup_enabled or CONFIG_SCHED_AUTOGROUP)")
    assert before == 0
    # One autogroup per session: the child's is the leader's, lowered with it.
    assert (autogroup_niceness(session_leader.pid), autogroup_niceness(child.pid)) == (7, 7)


def test_zero_leaves_the_priority_alone(session_leader):
    lower_priority(session_leader.pid, 0)
    assert session_leader.nice() == 0
    assert autogroup_niceness(session_leader.pid) in (None, 0)


def test_a_process_that_is_gone_is_not_an_error():
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    done.wait(10)
    lower_priority(done.pid, 5)  # raises nothing
    assert autogroup_niceness(done.pid) is None
