"""The Redis boundary: every Redis client of the product (driver heartbeats and progress, supervision, the audit
anchor, readiness, chaos and bench) is made by ``connect``, so timeouts and connection settings live in one
place. Plain Python on redis-py: no Django.
"""

from __future__ import annotations

import os
import threading

import redis

_shared: dict[tuple[int, str, float], redis.Redis] = {}
_shared_lock = threading.Lock()


def connect(url: str, *, timeout: float = 5.0, connect_timeout: float | None = None) -> redis.Redis:
    """A new client for ``url`` (``redis://host:port/db``). Each command may take ``timeout`` seconds and
    opening the connection ``connect_timeout`` seconds (default: ``timeout``); past them redis-py raises
    ``redis.TimeoutError`` (a ``redis.RedisError``). Connections open lazily, on the first command."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout if connect_timeout is None else connect_timeout,
    )


def shared(url: str, *, timeout: float = 5.0) -> redis.Redis:
    """One client per process, URL and timeout, reused across calls (its pool is thread-safe); a forked
    child (Celery prefork, Spark's Python workers) gets its own instead of the parent's sockets."""
    key = (os.getpid(), url, timeout)
    client = _shared.get(key)
    if client is None:
        with _shared_lock:
            client = _shared.get(key)
            if client is None:
                client = _shared[key] = connect(url, timeout=timeout)
    return client


class ProcessConnectionPool:
    """Where redis-py's ``ConnectionPool`` class is expected (its ``from_url``): a connection pool shared by
    every client in the process that asks for the same URL and options.

    Django keeps a cache client per thread (per asyncio context under ASGI), and the ASGI handler serves each
    request in a thread of its own: with redis-py's own pool every request opened, and left to the garbage
    collector, a new connection. Django's ``RedisCache`` takes this class as its ``pool_class`` option.
    redis-py's pool is thread-safe and, after a fork, drops the parent's connections on first use."""

    _pools: dict[tuple[str, str], redis.ConnectionPool] = {}
    _pools_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: object) -> redis.ConnectionPool:
        """The process's pool for ``url`` and ``kwargs`` (made on first use, as redis-py's ``from_url``)."""
        key = (url, repr(sorted(kwargs.items())))
        with cls._pools_lock:
            pool = cls._pools.get(key)
            if pool is None:
                pool = cls._pools[key] = redis.ConnectionPool.from_url(url, **kwargs)
            return pool
