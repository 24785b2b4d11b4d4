"""Liveness (``/healthz``) and readiness (``/readyz``) probes.

Both answer without authentication, as orchestrators' probes do not log in, and tell an anonymous caller
nothing but the answer (security review #28, finding 2): ``/readyz`` is 200 ``{"status": "ready"}`` or 503
``{"status": "not ready"}``, no cluster names, no error strings. A signed-in admin gets the details: each
dependency, whether it answered, how long it took in milliseconds, and for a failure the exception class and
a short reason.

No request opens a client: the probe's result is cached for ``READINESS_CACHE_SECONDS``
(``STREAMFORGE_READINESS_CACHE``, default 5 s) per process, and one probe runs at a time (a lock; requests
arriving meanwhile wait for its result instead of probing too). However many requests arrive, each process
probes each dependency at most once per period. Named clusters no admin's test approved are not probed at
all (``pipelines.clusters.connection_for`` refuses them).

Kafka is checked once per cluster: ``kafka`` is the installation's default cluster, ``kafka:<name>`` each
named one. The default is needed by everything (the audit anchor among it) and fails readiness; a named
cluster that does not answer is reported in ``degraded`` and leaves the process ready, as one team's cluster
outage must not take the console away from every other team (nor from that team's on-call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection
from django.dispatch import receiver
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from access.permissions import is_admin
from pipelines.clusters import connection_for
from pipelines.models import KafkaCluster
from streamforge_core import redis_client
from streamforge_core.kafka import KafkaConnection, admin_config


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


def check_kafka(conn: KafkaConnection) -> None:
    """Fetch ``conn``'s cluster metadata; raises when no broker answers within the readiness timeout."""
    admin = AdminClient(
        admin_config(conn, extra={"socket.timeout.ms": settings.READINESS_TIMEOUT_SECONDS * 1000})
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
    """``status`` ("ready" or "not ready"), the names of the ``failing`` dependencies (the database, Redis,
    the default Kafka cluster), the named Kafka clusters that did not answer (``degraded``), and every
    check."""

    status: str
    failing: list[str]
    degraded: list[str]
    checks: dict[str, CheckResult]


def _connection_check(cluster: KafkaCluster | None) -> Callable[[], None]:
    """The check of ``cluster``, to run on a pool thread. Its connection is resolved here, on the caller's
    thread: ``connection_for`` reads the row again from the database, and a pool thread's own database
    connection would outlive the probe. A cluster that may not be connected to (not approved by an admin's
    test) or whose password cannot be read fails this check alone, without a client."""
    try:
        conn = connection_for(cluster)
    except ValueError as exc:
        refusal = exc

        def refused() -> None:
            raise refusal

        return refused

    def check() -> None:
        check_kafka(conn)

    return check


def readiness() -> Readiness:
    """Check the database, Redis and each Kafka cluster; all but the database in parallel threads, the
    database on the caller's own connection (which also lists the named clusters). Never raises: a failing
    dependency is reported in the result."""
    started = time.perf_counter()
    checks: dict[str, CheckResult] = {"database": _timed(check_database)}
    named: list[KafkaCluster] = []
    if checks["database"]["ok"]:
        try:
            named = list(KafkaCluster.objects.order_by("name"))
        except Exception as exc:  # the database answered SELECT 1 but not this: report, do not raise
            checks["database"] = {"ok": False, "ms": _elapsed_ms(started), "error": type(exc).__name__}
    with ThreadPoolExecutor(max_workers=min(8, 2 + len(named))) as pool:
        futures = {
            "redis": pool.submit(_timed, check_redis),
            "kafka": pool.submit(_timed, _connection_check(None)),
            **{f"kafka:{c.name}": pool.submit(_timed, _connection_check(c)) for c in named},
        }
        checks.update({name: future.result() for name, future in futures.items()})
    failing = [n for n, r in checks.items() if not r["ok"] and not n.startswith("kafka:")]
    degraded = [n for n, r in checks.items() if not r["ok"] and n.startswith("kafka:")]
    return {
        "status": "not ready" if failing else "ready",
        "failing": failing,
        "degraded": degraded,
        "checks": checks,
    }


_probe_lock = threading.Lock()
_last: dict[str, Any] = {}  # "at": time.monotonic() of the cached probe's end, "result": its Readiness


def cached_readiness() -> tuple[Readiness, float]:
    """The last ``readiness()`` and its age in seconds, probing again only when it is older than
    ``READINESS_CACHE_SECONDS`` (0: every call). One probe at a time: a caller that finds the cache stale
    waits for the lock, and a caller that got it after another probed uses that result. Never raises."""
    ttl = float(settings.READINESS_CACHE_SECONDS)

    def fresh() -> bool:
        return "at" in _last and time.monotonic() - _last["at"] < ttl

    with _probe_lock:
        if not fresh():
            result = readiness()
            _last.update(at=time.monotonic(), result=result)
        return _last["result"], round(time.monotonic() - _last["at"], 1)


def forget_readiness() -> None:
    """Drop the cached probe: the next ``cached_readiness`` probes."""
    with _probe_lock:
        _last.clear()


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    # What a probe depends on changed (tests override settings): a cached answer would be about the old ones.
    if setting.startswith("READINESS_") or setting in {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "DATABASES"}:
        forget_readiness()


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database, Redis and the default Kafka cluster answer, else 503 (named clusters that do
    not answer, or are not approved, leave it ready). The body is ``{"status": "ready"}`` or
    ``{"status": "not ready"}``; for a signed-in admin, ``cached_readiness()`` in full with ``age_seconds``.
    The answer comes from the cache: a request opens no client of its own."""
    result, age = cached_readiness()
    status = 503 if result["failing"] else 200
    if is_admin(request.user):
        return JsonResponse({**result, "age_seconds": age}, status=status)
    return JsonResponse({"status": result["status"]}, status=status)
