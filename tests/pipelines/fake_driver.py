"""A stand-in for ``pipelines.spark.driver`` in the fast supervision tests: same arguments, same exit codes,
same exit line and heartbeat key, no Spark. ``python fake_driver.py BEHAVIOUR <driver arguments>``.

BEHAVIOUR: ``crash`` (exit 1), ``halt`` (exit 3, DeadLetterQueue), ``run`` (heartbeat until SIGTERM, then
exit 0), ``stubborn`` (heartbeat and ignore SIGTERM), ``silent`` (alive until SIGTERM, never a heartbeat),
``slow_start`` (like ``run``, but its beats say phase "starting" for its first 2 s, as the real driver's do
until its streaming query has started).

Fencing, as the real driver's: with ``--lease-file`` (and ``--epoch``) every behaviour that stays alive checks
the lease once a second (``pipelines.spark.fence.Fence``, ``--fence-margin`` seconds before expiry, 3 by
default) and, once it is not valid, exits 4 (``EXIT_FENCED``) with a ``Fenced`` report; its beats carry
``epoch`` and stop while the lease is not valid.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import redis

from pipelines.spark.fence import Fence
from streamforge_core.contract import EXIT_FENCED, FENCED_MARKER

EXIT = "STREAMFORGE_EXIT "


def main() -> int:
    behaviour = sys.argv[1]
    parser = argparse.ArgumentParser()
    for name in ("spec-file", "pipeline", "revision", "run-id", "bootstrap", "redis-url", "checkpoint-dir"):
        parser.add_argument(f"--{name}")
    parser.add_argument("--master")
    parser.add_argument("--jars")
    parser.add_argument("--epoch", type=int)
    parser.add_argument("--lease-file")
    parser.add_argument("--fence-margin", type=float, default=3.0)
    parser.add_argument("--niceness", type=int, default=0)  # the real driver's, taken after its first batch
    args = parser.parse_args(sys.argv[2:])
    fence = Fence(args.lease_file, str(args.run_id), args.epoch, args.fence_margin)
    next_check = 0.0

    def fenced() -> str | None:
        """Why the lease is not this run's any more, checked at most once a second; None while it is."""
        nonlocal next_check
        if not fence.enabled or time.monotonic() < next_check:
            return None
        next_check = time.monotonic() + 1.0
        ok, why = fence.valid()
        return None if ok else why

    def leave(code: int, error_type: str, message: str) -> int:
        report = {"exit_code": code, "error_type": error_type, "message": message, "time_ms": 0}
        sys.stderr.write(EXIT + json.dumps(report) + "\n")
        sys.stderr.flush()
        return code

    if behaviour == "crash":
        return leave(1, "Crash", "boom: something unexpected")
    if behaviour == "halt":
        return leave(3, "DeadLetterQueue", "[streamforge-halt:DeadLetterQueue] DLQ topic gone")
    stop = []
    if behaviour == "silent":
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while not stop:
            why = fenced()
            if why is not None:
                return leave(EXIT_FENCED, "Fenced", f"{FENCED_MARKER} watchdog: {why}")
            time.sleep(0.1)
        return leave(0, "Stopped", "stopped on request")
    if behaviour in ("run", "slow_start"):
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    client = redis.Redis.from_url(args.redis_url)
    query_starts_at = time.monotonic() + (2.0 if behaviour == "slow_start" else 0.0)
    while not stop:
        why = fenced()
        if why is not None:  # its heartbeat key is left alone: the run that took over may be writing it
            return leave(EXIT_FENCED, "Fenced", f"{FENCED_MARKER} watchdog: {why}")
        beat = {
            "run_id": args.run_id,
            "pid": os.getpid(),
            "app_id": "fake-app",
            "time_ms": int(time.time() * 1000),
            "phase": "starting" if time.monotonic() < query_starts_at else "waiting-for-first-batch",
            "epoch": args.epoch,
        }
        client.set(f"streamforge:heartbeat:{args.pipeline}", json.dumps(beat), ex=30)
        time.sleep(0.2)
    client.delete(f"streamforge:heartbeat:{args.pipeline}")
    return leave(0, "Stopped", "stopped on request")


if __name__ == "__main__":
    sys.exit(main())
