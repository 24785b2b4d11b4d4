"""A stand-in for ``pipelines.spark.driver`` in the fast supervision tests: same arguments, same exit codes,
same exit line and heartbeat key, no Spark. ``python fake_driver.py BEHAVIOUR <driver arguments>``.

BEHAVIOUR: ``crash`` (exit 1), ``halt`` (exit 3, DeadLetterQueue), ``run`` (heartbeat until SIGTERM, then
exit 0), ``stubborn`` (heartbeat and ignore SIGTERM), ``silent`` (alive until SIGTERM, never a heartbeat),
``slow_start`` (like ``run``, but its beats say phase "starting" for its first 2 s, as the real driver's do
until its streaming query has started).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import redis

EXIT = "STREAMFORGE_EXIT "


def main() -> int:
    behaviour = sys.argv[1]
    parser = argparse.ArgumentParser()
    for name in ("spec-file", "pipeline", "revision", "run-id", "bootstrap", "redis-url", "checkpoint-dir"):
        parser.add_argument(f"--{name}")
    parser.add_argument("--master")
    parser.add_argument("--jars")
    args = parser.parse_args(sys.argv[2:])

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
            time.sleep(0.1)
        return leave(0, "Stopped", "stopped on request")
    if behaviour in ("run", "slow_start"):
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    client = redis.Redis.from_url(args.redis_url)
    query_starts_at = time.monotonic() + (2.0 if behaviour == "slow_start" else 0.0)
    while not stop:
        beat = {
            "run_id": args.run_id,
            "pid": os.getpid(),
            "app_id": "fake-app",
            "time_ms": int(time.time() * 1000),
            "phase": "starting" if time.monotonic() < query_starts_at else "waiting-for-first-batch",
        }
        client.set(f"streamforge:heartbeat:{args.pipeline}", json.dumps(beat), ex=30)
        time.sleep(0.2)
    client.delete(f"streamforge:heartbeat:{args.pipeline}")
    return leave(0, "Stopped", "stopped on request")


if __name__ == "__main__":
    sys.exit(main())
