"""The web as devstack runs it (uvicorn, ASGI) reuses its connections: under ASGI Django serves each request in
a thread of its own, so a per-thread persistent PostgreSQL connection, and a per-thread Redis cache client,
were a new connection for every request. ``settings.DB_POOL`` (set by ``streamforge_web.asgi``) and
``streamforge_core.redis_client.ProcessConnectionPool`` keep them in one pool per process."""

from __future__ import annotations

import time
import urllib.request

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection
from rest_framework.authtoken.models import Token

from devstack.services import WEB_WORKERS
from tests.browser.conftest import AsgiServer
from tests.database import child_database_url
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

REQUESTS = 30


def _database_sessions(url: str) -> int:
    """Sessions PostgreSQL has opened on the test database so far (``pg_stat_database.sessions``, PostgreSQL
    14+; a backend reports its session within about a second)."""
    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _redis_connections() -> int:
    """Connections the Redis server has accepted since it started (``INFO stats``)."""
    stats: dict[str, int] = redis.Redis.from_url(settings.REDIS_URL).info("stats")  # type: ignore[assignment]
    return int(stats["total_connections_received"])


def test_requests_to_the_web_open_no_connection_of_their_own(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's; SQLite opens a file")
    token = Token.objects.create(user=UserFactory(username="pat")).key
    url = child_database_url()
    server = AsgiServer(url, tmp_path / "web.log")
    server.start()
    try:

        def ask() -> None:
            request = urllib.request.Request(  # noqa: S310 - loopback
                f"{server.url}/api/pipelines/", headers={"Authorization": f"Token {token}"}
            )
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                assert response.status == 200

        for _ in range(2 * WEB_WORKERS):  # each worker opens its pools
            ask()
        time.sleep(1.5)
        database_before, redis_before = _database_sessions(url), _redis_connections()
        for _ in range(REQUESTS):
            ask()  # a token lookup and a throttle count each: the database and Redis both
        time.sleep(1.5)
        database_opened = _database_sessions(url) - database_before - 1  # minus our own count's session
        redis_opened = _redis_connections() - redis_before - 1
    finally:
        server.stop()
    # A connection per request would be REQUESTS. Each count is the server's, so another process of the
    # suite may add one or two; a pool that grows or replaces a connection may too.
    assert database_opened < REQUESTS // 3, f"{database_opened} PostgreSQL sessions for {REQUESTS} requests"
    assert redis_opened < REQUESTS // 3, f"{redis_opened} Redis connections for {REQUESTS} requests"
