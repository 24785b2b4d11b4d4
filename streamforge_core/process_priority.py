"""CPU priority of a process group and its session, for drivers and what stands in for them.

Linux weighs CPU in two steps (sched(7), "The autogroup feature"): with ``kernel.sched_autogroup_enabled``
(the default on many kernels) each session is a task group that gets a fair share against every other
session, and a process's nice value only ranks it among the processes of its own session. A pipeline's driver
runs in its own session (the launcher's ``start_new_session``), so its nice value alone does not let the
console take the CPU back from it: the session's group is lowered too.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil


def lower_priority(pid: int, niceness: int) -> None:
    """Lowers the CPU priority of the process group and the session that ``pid`` leads to ``niceness`` (1-19;
    0 does nothing): a driver and everything it started (the JVM, the Python workers, also those in process
    groups of their own); what they start later inherits it.

    ``pid`` must lead its own session: its group's nice value is written to ``/proc/<pid>/autogroup`` as well
    as the process group's (see the module docstring; ``nice`` alone left 20 drivers 20 equal shares of the
    CPU against the console's one). Errors (the process gone, a kernel without autogroup) are ignored: the driver
    then runs at its default priority. Raising a priority needs a privilege; lowering it does not."""
    if niceness <= 0:
        return
    groups = {pid}
    # Processes of the session that made a process group of their own (PySpark's worker daemon does, to
    # signal its workers as one group) are not in ``pid``'s group: their groups are lowered too.
    with contextlib.suppress(psutil.Error, OSError):
        groups |= {os.getpgid(child.pid) for child in psutil.Process(pid).children(recursive=True)}
    for group in sorted(groups):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PGRP, group, niceness)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(niceness), encoding="ascii")


def autogroup_niceness(pid: int) -> int | None:
    """The nice value of ``pid``'s autogroup (``/proc/<pid>/autogroup``: "/autogroup-<id> nice <n>"), or None
    when the kernel has no autogroups or the process is gone."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text(encoding="ascii")
    except OSError:
        return None
    return int(text.split()[-1])
