"""Shared fixtures. Real services come from devstack's test profile (see the Makefile's ``test`` target):
Kafka on 127.0.0.1:19092, Redis on 127.0.0.1:16379 and, with ``STREAMFORGE_DB=postgres``, PostgreSQL on
127.0.0.1:15433, passed in through the environment (``DATABASE_URL``; SQLite without it)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings
from hypothesis import settings as hypothesis_settings

from streamforge_core.kafka import KafkaConnection, admin_config

# Property tests check correctness, not speed (speed is what the benchmarks measure): Hypothesis's per-example
# deadline (200 ms) only measures how loaded the 2-core machine is, and failed a run that way.
hypothesis_settings.register_profile("streamforge", deadline=None)
hypothesis_settings.load_profile("streamforge")

# py4j logs at INFO from finalizers after pytest has closed its streams; nothing there is worth reading.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _private_cache(settings) -> None:
    """Each test counts API throttles in its own keys of the shared Redis: runs of other worktrees, and
    earlier tests whose users had the same ids, must not eat into this test's rates."""
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "KEY_PREFIX": f"sf-test-{uuid.uuid4().hex[:12]}"}
    }


@pytest.fixture(autouse=True)
def _own_audit_chain(settings) -> None:
    """Each test its own audit key, and so its own chain in the anchors (they name a chain by its key): the
    test database starts empty, but the Kafka anchor topic and Redis outlive it and are shared by every run."""
    settings.AUDIT_KEY = secrets.token_urlsafe(48)


@pytest.fixture(autouse=True)
def _own_channel_layer() -> Iterator[None]:
    """Each test its own channel-layer instance. A Redis layer keeps the receive lock and connections of the
    event loop it was first used on, and every ``async_to_sync`` in a test runs a new loop: a layer shared
    with an earlier test fails with "bound to a different event loop" when a socket is torn down. (Daphne
    serves on one loop, where this cannot happen.)"""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``sqlite`` are about SQLite itself (the embedded default): a run on another database
    leaves them out rather than reporting them skipped; ``make test`` runs them in a second, SQLite run."""
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        return
    about_sqlite = [item for item in items if item.get_closest_marker("sqlite") is not None]
    if about_sqlite:
        config.hook.pytest_deselected(items=about_sqlite)
        items[:] = [item for item in items if item.get_closest_marker("sqlite") is None]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The bootstrap servers of the real test broker."""
    return str(settings.KAFKA_BOOTSTRAP_SERVERS)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An AdminClient on the test broker; fails the test early when the broker is not up."""
    admin = AdminClient(admin_config(KafkaConnection(kafka_bootstrap)))
    try:
        admin.list_topics(timeout=10)
    except Exception as exc:
        pytest.fail(f"the test Kafka broker at {kafka_bootstrap} does not answer ({exc}); run `make test`")
    return admin


@pytest.fixture(scope="session")
def registry_url() -> str:
    """The test profile's schema registry (``SCHEMA_REGISTRY_URL``, Apicurio's Confluent-compatible API);
    fails, never skips, when it is not set."""
    url = os.environ.get("SCHEMA_REGISTRY_URL")
    if not url:
        pytest.fail(
            "SCHEMA_REGISTRY_URL is not set: start the test profile's registry (devstack up registry)"
        )
    return url


@pytest.fixture
def make_topic(kafka_admin: AdminClient) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics for one test and delete them afterwards."""
    created: list[str] = []

    def make(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = kafka_admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
        futures[name].result(timeout=30)
        created.append(name)
        return name

    yield make
    if created:
        for future in kafka_admin.delete_topics(created).values():
            future.result(timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A private redis-server process a test may stop and start again on the same port."""

    def __init__(self, directory: Path) -> None:
        self.port = _free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed; `make test` installs it"
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A running private Redis; stopped at the end of the test whatever state it was left in."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark_session():
    """One real local SparkSession (with the Kafka connector jars) shared by the Spark tests of a run."""
    from pipelines.spark.session import build_session

    session = build_session(
        app_name="streamforge-tests",
        master="local[2]",
        jars=settings.SPARK_JARS,
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    yield session
    session.stop()


@pytest.fixture
def supervised_drivers(settings, tmp_path: Path) -> Iterator[None]:
    """Pipelines started for real, as a worker and the beat run them: drivers on ``local[2]`` keeping their
    checkpoints and logs under ``tmp_path``, Celery eager (the start and stop tasks run when the request
    commits), and a private consumer group on the shared progress stream for ``progress.ingest``.

    The test calls the beat's work (``supervision.reconcile``, ``progress.ingest``) itself. Afterwards the
    process group of every run with a pid (driver, JVM, Python workers) is killed, so a failed test leaves
    no Spark behind.
    """
    from pipelines import progress, supervision
    from pipelines.models import PipelineRun
    from streamforge_core import contract as c
    from streamforge_web.celery import app as celery_app

    settings.STATE_DIR = tmp_path
    settings.CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    settings.SPARK_MASTER = "local[2]"
    settings.PROGRESS_CONSUMER_GROUP = f"test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(settings.REDIS_URL)
    progress.ensure_group(client, settings.PROGRESS_CONSUMER_GROUP)
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False
    for pid in PipelineRun.objects.exclude(pid=None).values_list("pid", flat=True):
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for child in supervision._children.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(10)  # reaped, not left a zombie of this process
    supervision._children.clear()
    client.xgroup_destroy(c.PROGRESS_STREAM, settings.PROGRESS_CONSUMER_GROUP)
