"""Liveness (``/healthz``) and readiness (``/readyz``) probes.

Both answer without authentication, as orchestrators' probes do not log in, and say nothing secret: the
readiness body names each dependency, whether it answered, how long it took in milliseconds, and for a
failure the exception class and a short reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypedDict

from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from pipelines.connections import default_kafka
from streamforge_core import redis_client
from streamforge_core.kafka import admin_config


class CheckResult(TypedDict, total=False):
    """One dependency's answer: ``ok``, ``ms`` (elapsed milliseconds) and, when not ok, ``error``."""

    ok: bool
    ms: float
    error: str


def check_database() -> None:
    """Run ``SELECT 1`` on the default database; raises the driver's error when it cannot."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_redis() -> None:
    """PING ``REDIS_URL``; raises redis.RedisError when it does not answer within the readiness timeout."""
    timeout = settings.READINESS_TIMEOUT_SECONDS
    client = redis_client.connect(settings.REDIS_URL, timeout=timeout)
    try:
        client.ping()
    finally:
        client.close()


def check_kafka() -> None:
    """Fetch cluster metadata from ``KAFKA_BOOTSTRAP_SERVERS``; raises when no broker answers in time."""
    admin = AdminClient(
        admin_config(default_kafka(), extra={"socket.timeout.ms": settings.READINESS_TIMEOUT_SECONDS * 1000})
    )
    metadata = admin.list_topics(timeout=settings.READINESS_TIMEOUT_SECONDS)
    if not metadata.brokers:
        raise ConnectionError("no broker in the cluster metadata")


def _timed(check: Callable[[], None]) -> CheckResult:
    started = time.perf_counter()
    try:
        check()
    except Exception as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else ""
        return {
            "ok": False,
            "ms": _elapsed_ms(started),
            "error": f"{type(exc).__name__}: {reason}".rstrip(": "),
        }
    return {"ok": True, "ms": _elapsed_ms(started)}


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ok"}`` while the process serves requests; it checks nothing else on purpose."""
    return JsonResponse({"status": "ok"})


class Readiness(TypedDict):
    """``status`` ("ready" or "not ready"), the names of the ``failing`` dependencies, and every check."""

    status: str
    failing: list[str]
    checks: dict[str, CheckResult]


def readiness() -> Readiness:
    """Check the database, Redis and Kafka; Redis and Kafka in parallel threads, the database on the caller's
    own connection. Never raises: a failing dependency is reported in the result."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        redis_future = pool.submit(_timed, check_redis)
        kafka_future = pool.submit(_timed, check_kafka)
        checks = {
            "database": _timed(check_database),
            "redis": redis_future.result(),
            "kafka": kafka_future.result(),
        }
    failing = [name for name, result in checks.items() if not result["ok"]]
    return {"status": "not ready" if failing else "ready", "failing": failing, "checks": checks}


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and Kafka all answer, else 503; the body is ``readiness()``."""
    result = readiness()
    return JsonResponse(result, status=503 if result["failing"] else 200)
