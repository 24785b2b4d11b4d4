"""Real receivers for notification tests: an HTTP server in a thread that checks the webhook signature and
counts requests, an SMTP server (aiosmtpd) that keeps the mail it receives, and a Celery worker process that
delivers what the test's code queues."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from aiosmtpd.controller import Controller
from django.conf import settings as django_settings

from access.models import Role
from notifications import channels, delivery, dispatch
from notifications.models import Channel
from pipelines.models import MetricSample, PipelineRun, PipelineState
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from streamforge_web.celery import app as celery_app
from streamforge_web.tasks import ping
from tests.database import child_database_url
from tests.dlq.conftest import dlq_headers
from tests.factories import MembershipFactory, TeamFactory, UserFactory, member
from tests.pipelines.conftest import github_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def local_receivers_allowed(settings):
    """The receivers these tests start listen on 127.0.0.1, which the server refuses by default
    (``notifications.targets``); the test about that refusal turns it back off."""
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True


GROUP = "failure_group.created"


@pytest.fixture
def team():
    return TeamFactory(name="notify-team")


@pytest.fixture
def manager(team):
    return MembershipFactory(team=team, role=Role.OPERATOR, manages_team=True, user=UserFactory()).user


def webhook_channel(manager, team, receiver, events=(GROUP,)) -> Channel:
    """A webhook channel of ``team`` to ``receiver`` (which then checks its signature), made by ``manager``."""
    created = channels.create_channel(
        actor=manager, team=team, name="hook", kind="webhook", events=list(events), url=receiver.url
    )
    receiver.signing_secret = created.signing_secret
    return created.channel


def failure_records(pipeline, count: int, *, start: int = 0, distinct: bool = True) -> list[Record]:
    """``count`` dead letters of ``pipeline`` as the DLQ ingester reads them (offsets from ``start``), each its
    own failure group when ``distinct``, else all in one."""
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    return [
        Record(
            topic=topic,
            partition=0,
            offset=i,
            key=b"k",
            value=b"{}",
            headers=dlq_headers(
                pipeline,
                error_type=f"Broken{i}" if distinct else "JsonPathNotFound",
                message="path /payload/size not found",
                source_offset=i,
            ),
            timestamp_ms=int(time.time() * 1000),
        )
        for i in range(start, start + count)
    ]


@dataclass
class Receiver:
    """Requests received: (headers, body); ``signing_secret`` checks ``X-StreamForge-Signature``."""

    url: str
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    signing_secret: str = ""
    bad_signatures: int = 0

    def bodies(self) -> list[Any]:
        return [json.loads(body) for _, body in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    found = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            if found.signing_secret:
                mac = hmac.new(
                    found.signing_secret.encode(),
                    headers.get("x-streamforge-timestamp", "").encode() + b"." + body,
                    hashlib.sha256,
                ).hexdigest()
                if not hmac.compare_digest(headers.get("x-streamforge-signature", ""), f"sha256={mac}"):
                    found.bad_signatures += 1
            found.requests.append((headers, body))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"thanks")

        def log_message(self, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    server.shutdown()
    server.server_close()


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture
def smtp(settings) -> Iterator[_Inbox]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    yield inbox
    controller.stop()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/down"


@pytest.fixture
def inline_delivery(monkeypatch) -> list[int]:
    """Deliveries run in process right after commit (one attempt each, as a worker's first try); digest
    flushes are collected (tests flush with ``dispatch.flush_due_digests``)."""
    from django.db import transaction

    queued: list[int] = []

    def deliver(notification_id: int) -> None:
        queued.append(notification_id)
        transaction.on_commit(lambda: delivery.attempt(notification_id))

    monkeypatch.setattr(dispatch, "enqueue_delivery", deliver)
    monkeypatch.setattr(dispatch, "enqueue_flush", lambda channel_id, event_type, countdown: None)
    return queued


@dataclass
class WorkerProcess:
    """A Celery worker started as its own process (``celery -A streamforge_web worker``) on this run's own
    queue of the test Redis, opening the test database; ``settings`` are the NOTIFY_* values it runs with."""

    queue: str
    log_path: Path
    settings: dict[str, str]


def _route_to(queue: str) -> None:
    """Make ``queue`` the test process's default Celery queue. Celery caches the queue declarations and the
    router it built from the default (``app.amqp``): they are dropped, so the next send (and any worker a
    later test starts in process, which consumes the declared queues) sees the new default."""
    celery_app.conf.task_default_queue = queue
    for cached in ("default_queue", "queues", "router"):
        celery_app.amqp.__dict__.pop(cached, None)


#: The worker's digest window in seconds: long enough that storing a storm of 1,000 new groups (10-18 s on this
#: 2-core machine when quiet, measured; the store's cost is the per-group transactions; over 40 s once in a
#: full CI run beside Spark tests) fits inside it.
WORKER_DIGEST_SECONDS = 60


@pytest.fixture
def worker_process(transactional_db, tmp_path, settings, smtp) -> Iterator[WorkerProcess]:
    """A real worker taking the tasks this test's code queues (deliveries, digest flushes) from Redis.

    The queue is the test's own (the test Redis is shared), set for the test process's Celery app too. The
    worker's notification settings match the test process's: private targets allowed (the receivers listen on
    127.0.0.1), a 1 s first backoff and 4 attempts (so a failing receiver settles in seconds), a
    ``WORKER_DIGEST_SECONDS`` digest window (a storm of 1,000 is stored within it), mail through the ``smtp`` fixture's server, and the
    same sealing key. Ready once it has answered a ``streamforge.ping`` task; stopped (TERM, then KILL) after
    the test."""
    queue = f"notify-tests-{uuid.uuid4().hex[:12]}"
    default_queue = celery_app.conf.task_default_queue
    notify = {
        "STREAMFORGE_NOTIFY_ALLOW_PRIVATE": "true",
        "STREAMFORGE_NOTIFY_BACKOFF_SECONDS": "1",
        "STREAMFORGE_NOTIFY_MAX_ATTEMPTS": "4",
        "STREAMFORGE_NOTIFY_DIGEST_SECONDS": str(WORKER_DIGEST_SECONDS),
    }
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True
    settings.NOTIFY_BACKOFF_SECONDS, settings.NOTIFY_MAX_ATTEMPTS, settings.NOTIFY_DIGEST_SECONDS = (
        1,
        4,
        WORKER_DIGEST_SECONDS,
    )
    env = {
        **os.environ,
        **notify,
        "DATABASE_URL": child_database_url(),
        "STREAMFORGE_CELERY_QUEUE": queue,
        "STREAMFORGE_NOTIFY_KEY": settings.NOTIFY_KEY,
        "EMAIL_HOST": settings.EMAIL_HOST,
        "EMAIL_PORT": str(settings.EMAIL_PORT),
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "streamforge_web", "worker", "--pool", "solo",
             "--queues", queue, "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _route_to(queue)
        try:
            ping.apply_async(queue=queue).get(timeout=60)
        except Exception as error:
            raise AssertionError(f"the worker did not answer a ping within 60 s; see {log_path}") from error
        yield WorkerProcess(queue=queue, log_path=log_path, settings=notify)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        redis.Redis.from_url(django_settings.REDIS_URL).delete(queue)
        _route_to(default_queue)


@pytest.fixture
def backlogged(team):
    """A pipeline of ``team`` with a running run and one stored sample of 150 records sent to its DLQ two
    seconds ago (DLQBacklog fires above 100 in 15 minutes); returns (pipeline, now_ms)."""
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN), name=f"alerting-{uuid.uuid4().hex[:6]}", team=team, spec=github_spec()
    )
    run = PipelineRun.objects.create(
        pipeline=pipeline, revision=pipeline.current_revision, run_id=uuid.uuid4(), attempt=1,
        state=PipelineState.RUNNING, host="h",
    )  # fmt: skip
    now_ms = int(time.time() * 1000)
    MetricSample.objects.create(
        pipeline=pipeline, run=run, batch_id=0, time_ms=now_ms - 2000, duration_ms=10.0, consumed=200,
        produced=50, filtered=0, dead_lettered=150, dlq_records=150,
    )  # fmt: skip
    return pipeline, now_ms
