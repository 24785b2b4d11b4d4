"""Real-browser fixtures: a real ASGI server (uvicorn as devstack runs it, so websockets work) in its own
processes, serving the test database (PostgreSQL's, or SQLite's in a file: see ``tests/database.py``) over
the real Redis channel layer, and Debian's Chromium driven by Playwright.

Tests that use these are marked ``browser`` and need the test Redis (and Kafka for readiness) that
``make test`` starts, plus ``/usr/bin/chromium`` (``devstack system`` installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection, connections
from django.test import Client

from devstack.services import WEB_WORKERS, web_command
from tests.database import child_database_url

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("STREAMFORGE_CHROMIUM", "/usr/bin/chromium")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AsgiServer:
    """The web as devstack runs it (``devstack.services.web_command``: uvicorn, ``WEB_WORKERS`` processes, so a
    websocket and the request that makes its update may be served by different processes, joined by the Redis
    channel layer) on a free port, started and stopped by the tests (a test may ``stop`` and ``start`` it
    again on the same port to drop every websocket)."""

    def __init__(self, database_url: str, log_path: Path) -> None:
        self.port = _free_port()
        self.database_url = database_url
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.celery_queue = f"browser-tests-{uuid.uuid4().hex[:12]}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "DJANGO_DEBUG": "true",
            "STREAMFORGE_HTTPS": "false",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            # Tasks the pages queue (bulk actions) go to a queue of this run's own: the test Redis is shared,
            # and a worker of another run must not take them. The tests read them from there.
            "STREAMFORGE_CELERY_QUEUE": self.celery_queue,
            # The notification tests' webhook receivers listen on 127.0.0.1, which the server refuses as a
            # target by default (SSRF guard, notifications.targets); this process is not the tests' own, so
            # pytest's ``settings`` cannot lift it here. No browser test checks that refusal (the unit tests do).
            "STREAMFORGE_NOTIFY_ALLOW_PRIVATE": "true",
        }
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            web_command("127.0.0.1", self.port, WEB_WORKERS),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90  # a loaded machine (2 cores, several test runs) starts it slowly
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the web exited with {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"the web did not answer /healthz within 90 s; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None


@pytest.fixture(scope="package")
def asgi_server(django_db_setup, tmp_path_factory) -> Iterator[AsgiServer]:
    """The running web process of the browser tests (one per test run)."""
    server = AsgiServer(child_database_url(), tmp_path_factory.mktemp("daphne") / "daphne.log")
    server.start()
    yield server
    server.stop()
    redis.Redis.from_url(settings.REDIS_URL).delete(server.celery_queue)  # tasks no test took


@pytest.fixture(scope="package")
def chromium(django_db_setup):
    """Debian's Chromium, headless, driven by Playwright (its own browser download is not needed). After the
    test database exists: Playwright keeps an event loop in this thread, in which Django refuses to create it."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail(f"{CHROMIUM} is missing: `python -m devstack system` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def browser_env(monkeypatch, transactional_db):
    """Rows committed for real (the server is another process), and the ORM usable from the test while
    Playwright's sync API keeps an event loop in this thread (Django would otherwise refuse every query)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    yield
    connections.close_all()


@pytest.fixture
def open_page(chromium, asgi_server, browser_env):
    """``open_page(user)``: a fresh browser context signed in as ``user`` (a real session cookie), at 1440x900
    like a laptop, or as Playwright's context ``options`` say (a phone's viewport, a color scheme); closed
    after the test."""
    contexts = []

    def open_as(user=None, **options):
        options = {"viewport": {"width": 1440, "height": 900}, **options}
        context = chromium.new_context(base_url=asgi_server.url, **options)
        if user is not None:
            client = Client()
            client.force_login(type(user).objects.get(pk=user.pk))
            context.add_cookies(
                [
                    {
                        "name": settings.SESSION_COOKIE_NAME,
                        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                        "url": asgi_server.url,
                    }
                ]
            )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        return page

    yield open_as
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot as artifacts/screenshots/<name>.png (looked at by people, not asserted)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.evaluate("window.scrollTo(0, 0)")  # the sticky header is drawn where the page was scrolled to
    page.screenshot(path=str(path), full_page=True)
    return path


def in_thread(work) -> None:
    """Run ``work`` (a service call that broadcasts after commit) outside Playwright's event-loop thread."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not failures, failures
