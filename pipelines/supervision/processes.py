"""The driver's operating-system process as seen from the worker that launched it: the children this
process launched, whether a run's pid is alive here, signalling and killing its process group, and the tail
of its log file. Liveness is judged from the pid only on the host that launched the driver; elsewhere the
heartbeat (which carries host and pid) is the evidence (see ``reconciler``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import psutil
from django.conf import settings

from pipelines.models import PipelineRun, PipelineState

#: Drivers launched by this process, by pid: polled by ``reconcile`` so an exited child is reaped (not left
#: a zombie that still "has" a pid) and its exit code is known even without an exit report.
_children: dict[int, subprocess.Popen[bytes]] = {}

#: Runs whose driver this process has sent its graceful SIGTERM (run ids as strings): the pushed
#: ``signal_stop`` task and the host agent's pulled fallback share it, so a driver is asked once.
_signalled: set[str] = set()
_signalled_lock = threading.Lock()

LOG_TAIL_LINES = 60
LOG_TAIL_BYTES = 64 * 1024


def runner_name() -> str:
    """This process's runner host name: ``settings.RUNNER_NAME`` (``STREAMFORGE_RUNNER_NAME``) on a runner;
    elsewhere the machine's host name, so a one-machine install without named runners keeps judging the
    drivers its worker launched. Several runners on one machine must each be given a name: they would
    otherwise judge each other's pids."""
    return settings.RUNNER_NAME or socket.gethostname()


def host_queue(name: str) -> str:
    """The Celery queue only runner ``name`` reads (besides the shared one): ``<default queue>.runner.<name>``.
    Launches, stops and restarts of the pipelines it holds are sent there (Celery routing: a worker started
    with ``-Q <shared>,<this>``)."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.runner.{name}"


def run_dir(pipeline_name: str, run_id: object) -> Path:
    """The folder of one driver run on the runner that launched it: its spec, log and lease file."""
    return Path(settings.STATE_DIR) / "runs" / pipeline_name / str(run_id)


def lease_path(pipeline_name: str, run_id: object) -> Path:
    """The lease file the runner keeps for a run's driver (``pipelines.spark.fence``)."""
    return run_dir(pipeline_name, run_id) / "lease.json"


def mark_signalled(run_id: object) -> bool:
    """Record that this process sends run ``run_id`` its stop signal; True for the first caller only (a
    test-and-set, safe across threads), so the caller that gets True is the one that signals."""
    key = str(run_id)
    with _signalled_lock:
        if key in _signalled:
            return False
        _signalled.add(key)
        return True


def was_signalled(run_id: object) -> bool:
    """Whether this process has already sent run ``run_id`` its stop signal (``mark_signalled``)."""
    with _signalled_lock:
        return str(run_id) in _signalled


def forget_signalled(run_id: object) -> None:
    """Drop an ended run from the signalled set (it never needs a signal again)."""
    with _signalled_lock:
        _signalled.discard(str(run_id))


def _signal_process(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _kill_group(pid: int) -> None:
    """SIGKILL the driver's whole session group (JVM and Python workers included); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    child = _children.pop(pid, None)
    if child is not None:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            _children[pid] = child


def _alive(run: PipelineRun) -> bool | None:
    """Whether the run's driver process exists: None when it cannot be told (another host, or a launch
    still in progress)."""
    if run.host != runner_name():
        return None
    if run.pid is None:
        # STARTING without a pid: the starting worker is launching it (topics, then the process) and has
        # not stored the pid yet. Judging it dead here started a second driver on the same checkpoint
        # (seen in `make chaos`: CONCURRENT_STREAM_LOG_UPDATE in a restart loop). The start timeout still
        # ends a launch that never happened.
        return None if run.state == PipelineState.STARTING else False
    child = _children.get(run.pid)
    if child is not None:
        return child.poll() is None
    try:
        process = psutil.Process(run.pid)
        if run.process_started_at is not None and abs(process.create_time() - run.process_started_at) > 1:
            return False  # the pid was reused by another process
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _exit_code_of_child(pid: int | None) -> int | None:
    if pid is None:
        return None
    child = _children.get(pid)
    return child.poll() if child is not None else None


def read_log_tail(path: str) -> str:
    """The last ``LOG_TAIL_LINES`` lines (at most ``LOG_TAIL_BYTES``) of a driver log; "" when the file
    is missing or unreadable here (the log lives on the host that launched the driver)."""
    if not path:
        return ""
    try:
        with Path(path).open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:])
