"""``streamforge_core.redis_client.ProcessConnectionPool``: one redis-py pool per URL and options in a process,
whichever thread asks (Django's cache asks once per thread, and under ASGI once per request)."""

from __future__ import annotations

import threading

from streamforge_core.redis_client import ProcessConnectionPool

URL = "redis://127.0.0.1:1/0"  # never connected to: pools open connections on first use


def test_the_same_url_and_options_get_the_same_pool_from_every_thread():
    pools = []

    def ask() -> None:
        pools.append(ProcessConnectionPool.from_url(URL, socket_timeout=2))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pools) == 8
    assert all(pool is pools[0] for pool in pools)


def test_another_url_or_other_options_get_a_pool_of_their_own():
    first = ProcessConnectionPool.from_url(URL, socket_timeout=2)
    assert ProcessConnectionPool.from_url("redis://127.0.0.1:1/1", socket_timeout=2) is not first
    assert ProcessConnectionPool.from_url(URL, socket_timeout=3) is not first
    assert first.connection_kwargs["socket_timeout"] == 2
