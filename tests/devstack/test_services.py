"""devstack starts what is missing, leaves running services alone, and refuses a port someone else holds."""

import socket
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from devstack import __main__ as cli
from devstack.config import PROFILES
from devstack.services import Service, StackError, _ended, port_open, running_process, start, stop


@pytest.fixture
def profile(tmp_path, monkeypatch):
    monkeypatch.setattr("devstack.config.REPO_ROOT", tmp_path)
    return replace(PROFILES["test"], name=f"unit-{tmp_path.name}")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http_service(port):
    return Service(
        name="http",
        ports=(port,),
        command=lambda: [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        ready=lambda: port_open(port),
        ready_timeout=15,
        stop_timeout=5,
    )


def test_up_starts_a_service_once_and_a_second_up_leaves_it_running(profile):
    service = _http_service(_free_port())
    try:
        assert start(profile, service).startswith("http: started")
        first = running_process(profile, "http")
        assert start(profile, service).startswith("http: already running")
        again = running_process(profile, "http")
        assert again is not None
        assert first is not None
        assert again.pid == first.pid
    finally:
        assert stop(profile, service) == "http: stopped"
    assert running_process(profile, "http") is None
    assert stop(profile, service) == "http: not running"


def test_a_port_held_by_another_process_is_reported_at_once_not_waited_on(profile):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(StackError, match=rf"port {port} is already in use by pid \d+"):
            start(profile, _http_service(port))


def test_a_service_that_exits_while_starting_fails_with_its_log_tail(profile):
    service = Service(
        name="broken",
        ports=(),
        command=lambda: [sys.executable, "-c", "import sys; print('boom: bad config'); sys.exit(3)"],
        ready=lambda: False,
        ready_timeout=10,
    )
    with pytest.raises(StackError, match=r"(?s)exited with code 3.*boom: bad config"):
        start(profile, service)


def test_a_kraft_cluster_id_never_looks_like_an_option():
    """About 1 in 64 random ids starts with "-", which kafka-storage took for a flag (a first `make demo`
    failed that way); every id is 22 URL-safe base64 characters and never starts with "-"."""
    import re

    from devstack.services import kafka_cluster_id

    ids = [kafka_cluster_id() for _ in range(5_000)]
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_postgres_runs_as_an_unprivileged_user_on_its_own_port_and_serves_the_streamforge_database(
    monkeypatch, tmp_path_factory
):
    import contextlib
    import os
    import shutil
    import tempfile
    from pathlib import Path

    import psutil
    import psycopg

    from devstack.services import _postgres

    # initdb refuses root, so the cluster belongs to another user: its folder must be reachable by that user
    # (pytest's own tmp folder is root's alone).
    root = Path(tempfile.mkdtemp(prefix="devstack-pg-", dir="/tmp"))
    root.chmod(0o755)
    monkeypatch.setattr("devstack.config.REPO_ROOT", root)
    profile = replace(PROFILES["test"], name="unit-pg", postgres_port=_free_port())
    service = _postgres(profile)
    try:
        assert start(profile, service).startswith("postgres: started")
        server = psutil.Process(running_process(profile, "postgres").pid)
        owners = set()
        for process in [server, *server.children(recursive=True)]:
            # A backend or worker may exit between the listing and the look (seen in CI): skip it.
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.name() == "postgres":
                    owners.add(process.username())
        assert owners, "no postgres process found"
        assert "root" not in owners, owners
        password = (root / ".stack" / "postgres" / "unit-pg" / "password").read_text().strip()
        with psycopg.connect(
            host="127.0.0.1",
            port=profile.postgres_port,
            user="streamforge",
            password=password,
            dbname="streamforge",
        ) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("streamforge",)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(
                host="127.0.0.1",
                port=profile.postgres_port,
                user="streamforge",
                password="wrong",
                dbname="streamforge",
            )
        assert start(profile, service).startswith("postgres: already running")
    finally:
        stop(profile, service)
        if os.geteuid() == 0:
            shutil.rmtree(root, ignore_errors=True)


def test_a_zombie_left_by_a_parent_that_never_collects_it_counts_as_stopped():
    """``make down`` crashed on the ingester a `make demo` had started: killed, it stayed a zombie of the demo
    process (not ours to reap), and waiting for it timed out. An exited process is stopped."""
    # sh starts a short child in the background, then becomes `sleep` (which never reaps): a zombie whose
    # parent is alive and not us.
    parent = subprocess.Popen(["sh", "-c", "true & exec sleep 30"])
    try:
        deadline = time.monotonic() + 10
        zombie = None
        while zombie is None and time.monotonic() < deadline:
            children = psutil.Process(parent.pid).children()
            if children and children[0].status() == psutil.STATUS_ZOMBIE:
                zombie = children[0]
            time.sleep(0.05)
        assert zombie is not None, "no zombie child appeared"
        assert _ended(zombie, 0.5)
        assert not _ended(psutil.Process(parent.pid), 0.5)  # a live one is not
    finally:
        parent.kill()
        parent.wait()


def test_down_stops_what_launches_drivers_before_the_drivers(monkeypatch):
    """Stopping a driver while the beat runs makes supervision start it again (seen with `make demo`): the
    beat and the worker go first, then the drivers, then the rest."""
    order: list[str] = []
    monkeypatch.setattr(
        cli, "stop", lambda profile, service: order.append(service.name) or f"{service.name}: stopped"
    )
    monkeypatch.setattr(cli, "stop_pipeline_drivers", lambda profile: order.append("drivers") or [])
    assert cli.main(["--profile", "test", "down"]) == 0
    drivers = order.index("drivers")
    assert {"beat", "worker"} <= set(order[:drivers])
    assert "kafka" in order[drivers:]
