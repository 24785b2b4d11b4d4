"""Host faults for a stack with runner hosts: ``crash-host``, ``freeze-host`` and ``thaw-host``.

A runner host here is one Celery worker (devstack service ``<name>``) plus every pipeline driver it launched;
each driver runs in its own session, hence its own process group (``launcher._launch``:
``start_new_session=True``), with its JVM and Python workers inside. A "host" fault acts on all those groups
at once, the way losing the machine would:

- ``crash_host``: SIGKILL of the runner's group and of every driver group, in one tight loop (a host loss);
- ``freeze_host``: SIGSTOP of the same groups (a network partition: the processes live on but reach nobody),
  recorded in ``<state>/frozen/<name>.json``;
- ``thaw_host``: SIGCONT of the recorded groups, the drivers first and the runner last: the adversarial order
  (the partition heals), where the drivers run before their agent could kill them, so what keeps a
  superseded driver from committing is its own fence (docs/design/runner-hosts.md §3.7, §3.16).

A driver belongs to runner ``name`` of a profile when its environment has ``STREAMFORGE_RUNNER_NAME=<name>``
and it is this profile's (its ``STREAMFORGE_STATE_DIR`` is the runner's state folder, or a path argument of
its command line lies in the profile's state folder), or, failing the environment, when its ``--spec-file``
lies in the runner's state folder (the launcher writes spec files in the run folder there).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from devstack.config import Profile
from devstack.services import StackError, local_path, running_process

#: Options of a driver's command line whose value is a path (used to tell which stack a process is of).
PATH_OPTIONS = ("--spec-file", "--checkpoint-dir", "--lease-file")


@dataclass(frozen=True)
class Group:
    """One process group of a host: ``role`` ``runner`` or ``driver``, its group id, its leader's pid and
    start time (``psutil`` create time, seconds since the epoch: guards against pid reuse), and a label for
    people (the pipeline of a driver, the command of anything else)."""

    role: str
    pgid: int
    pid: int
    started: float
    label: str


def _frozen_file(profile: Profile, name: str) -> Path:
    return profile.state_dir / "frozen" / f"{name}.json"


def _check_runner(profile: Profile, name: str) -> None:
    if not profile.runners:
        raise StackError(f"profile {profile.name} has no runner hosts (use --profile cluster)")
    if name not in profile.runners:
        raise StackError(
            f"unknown runner {name!r}; the runners of {profile.name}: {', '.join(profile.runners)}"
        )


def _under(path: str, folder: Path) -> bool:
    try:
        return Path(local_path(path)).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def _option(cmdline: list[str], option: str) -> str | None:
    if option in cmdline and cmdline.index(option) + 1 < len(cmdline):
        return cmdline[cmdline.index(option) + 1]
    return None


def _label(cmdline: list[str]) -> str:
    pipeline = _option(cmdline, "--pipeline")
    if pipeline is not None:
        return f"pipeline {pipeline}"
    return " ".join(cmdline)[:80] or "?"


def is_host_driver(profile: Profile, name: str, cmdline: list[str], environ: dict[str, str]) -> bool:
    """Whether a process with ``cmdline`` and ``environ`` is a driver (or a process of a driver's group)
    launched by runner ``name`` of ``profile``: the rule of this module's docstring."""
    runner_dir = profile.runner_state_dir(name)
    if environ.get("STREAMFORGE_RUNNER_NAME") == name:
        state = environ.get("STREAMFORGE_STATE_DIR")
        if state is not None and Path(local_path(state)).resolve() == runner_dir.resolve():
            return True
        paths = [_option(cmdline, option) for option in PATH_OPTIONS]
        if any(path is not None and _under(path, profile.state_dir) for path in paths):
            return True
    spec = _option(cmdline, "--spec-file")
    return spec is not None and _under(spec, runner_dir)


def host_groups(profile: Profile, name: str) -> list[Group]:
    """The process groups of runner host ``name``: the runner's own (when it runs) first, then one per
    driver group, each once. Processes of this devstack call's own group are never included. Raises
    StackError for a profile without runners or an unknown runner."""
    _check_runner(profile, name)
    own = os.getpgid(0)
    groups: dict[int, Group] = {}
    runner = running_process(profile, name)
    if runner is not None:
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            pgid = os.getpgid(runner.pid)
            groups[pgid] = Group("runner", pgid, runner.pid, runner.create_time(), f"runner {name}")
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = proc.info.get("cmdline") or []
            environ = proc.environ()
            if not is_host_driver(profile, name, cmdline, environ):
                continue
            pgid = os.getpgid(proc.pid)
            if pgid in groups or pgid == own:
                continue
            # Named after the group's leader (the driver's Python process) when it is alive.
            leader = psutil.Process(pgid) if psutil.pid_exists(pgid) else proc
            groups[pgid] = Group("driver", pgid, leader.pid, leader.create_time(), _label(leader.cmdline()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError):
            continue
    return sorted(groups.values(), key=lambda g: (g.role != "runner", g.pgid))


def _same_leader(group: Group) -> bool:
    """Whether ``group``'s leader is still the process recorded (not a new one that reused the pid)."""
    try:
        return abs(psutil.Process(group.pid).create_time() - group.started) < 1.0
    except psutil.NoSuchProcess:
        return False


def _signal_groups(groups: list[Group], signum: signal.Signals) -> list[Group]:
    """Send ``signum`` to every group, back to back; returns the groups it reached."""
    reached = []
    for group in groups:
        try:
            os.killpg(group.pgid, signum)
            reached.append(group)
        except (ProcessLookupError, PermissionError):
            continue
    return reached


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def crash_host(profile: Profile, name: str, *, wait: float = 10.0) -> list[str]:
    """SIGKILL runner ``name``'s process group and every driver group it launched, in one tight loop (the
    runner's first, so it launches nothing more; then a second look for a driver that was being launched).
    Waits up to ``wait`` seconds for the leaders to die; returns one line per group saying what died.
    Raises StackError for a profile without runners or an unknown runner."""
    groups = host_groups(profile, name)
    killed = _signal_groups(groups, signal.SIGKILL)
    late = [g for g in host_groups(profile, name) if g.pgid not in {k.pgid for k in killed}]
    killed += _signal_groups(late, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not all(_dead(g.pid) for g in killed):
        time.sleep(0.05)
    running_process(profile, name)  # removes the runner's stale pid file
    if not killed:
        return [f"{name}: nothing running (no runner process, no driver)"]
    return [
        f"{name}: {group.role} group {group.pgid} ({group.label}): "
        + ("died" if _dead(group.pid) else "STILL ALIVE")
        for group in killed
    ]


def freeze_host(profile: Profile, name: str) -> list[str]:
    """SIGSTOP runner ``name``'s group and its driver groups (runner first, then a second look for a driver
    that was being launched) and record them in ``<state>/frozen/<name>.json`` for ``thaw_host``. Returns a
    line per group. Raises StackError when the host is frozen already, has nothing running, or is unknown."""
    record = _frozen_file(profile, name)
    _check_runner(profile, name)
    if record.exists():
        raise StackError(f"{name} is frozen already (thaw-host {name} first); record in {record}")
    groups = host_groups(profile, name)
    stopped = _signal_groups(groups, signal.SIGSTOP)
    late = [g for g in host_groups(profile, name) if g.pgid not in {s.pgid for s in stopped}]
    stopped += _signal_groups(late, signal.SIGSTOP)
    if not stopped:
        raise StackError(f"{name}: nothing running to freeze (no runner process, no driver)")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(
        json.dumps({"frozen_at": time.time(), "groups": [asdict(g) for g in stopped]}, indent=1)
    )
    return [f"{name}: {g.role} group {g.pgid} ({g.label}): stopped" for g in stopped]


def frozen_groups(profile: Profile, name: str) -> list[Group]:
    """The groups ``freeze_host`` recorded for ``name`` (empty when it is not frozen)."""
    try:
        data = json.loads(_frozen_file(profile, name).read_text())
    except FileNotFoundError:
        return []
    return [Group(**g) for g in data["groups"]]


def thaw_host(profile: Profile, name: str) -> list[str]:
    """SIGCONT the groups ``freeze_host`` recorded for ``name``: every driver group first, the runner's last.
    A group whose leader is gone, or was replaced by another process with the same pid, is skipped. Removes
    the record; returns a line per group in the order they were resumed. Raises StackError when ``name`` is
    not frozen."""
    _check_runner(profile, name)
    record = _frozen_file(profile, name)
    groups = frozen_groups(profile, name)
    if not record.exists():
        raise StackError(f"{name} is not frozen (no {record})")
    ordered = [g for g in groups if g.role == "driver"] + [g for g in groups if g.role == "runner"]
    lines = []
    for group in ordered:
        if not _same_leader(group):
            lines.append(f"{name}: {group.role} group {group.pgid} ({group.label}): gone")
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group.pgid, signal.SIGCONT)
        lines.append(f"{name}: {group.role} group {group.pgid} ({group.label}): resumed")
    record.unlink()
    return lines
