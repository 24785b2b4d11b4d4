"""The supervision tests' stand-in driver fences itself as the real one does: it accepts the launcher's
``--epoch/--lease-file``, beats with its epoch while the lease holds, and exits 4 with a ``Fenced`` report
within about a second of the lease going (real Redis for its heartbeat)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings

from pipelines.spark.fence import Lease, write_lease
from streamforge_core import contract as c

FAKE = Path(__file__).with_name("fake_driver.py")

pytestmark = pytest.mark.redis


def test_the_fake_driver_beats_with_its_epoch_and_exits_4_once_its_lease_expires(tmp_path):
    pipeline, run_id = f"fake-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    lease_file = tmp_path / "lease.json"
    write_lease(lease_file, Lease(pipeline, run_id, 5, "runner-a", int((time.time() + 60) * 1000)))
    process = subprocess.Popen(
        [sys.executable, str(FAKE), "run", "--pipeline", pipeline, "--run-id", run_id,
         "--redis-url", settings.REDIS_URL, "--epoch", "5", "--lease-file", str(lease_file)],
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        client = redis.Redis.from_url(settings.REDIS_URL)
        deadline = time.monotonic() + 20
        beat = None
        while beat is None and time.monotonic() < deadline:
            beat = client.get(c.heartbeat_key(pipeline))
            time.sleep(0.1)
        assert beat is not None
        assert json.loads(beat)["epoch"] == 5
        assert process.poll() is None, "a held lease keeps it running"

        write_lease(lease_file, Lease(pipeline, run_id, 5, "runner-a", int((time.time() - 1) * 1000)))
        code = process.wait(10)
        _out, err = process.communicate()
    finally:
        if process.poll() is None:
            process.kill()
    assert code == c.EXIT_FENCED
    last = err.decode().strip().splitlines()[-1]
    report = json.loads(last[len(c.EXIT_REASON_MARKER) :])
    assert (report["exit_code"], report["error_type"]) == (c.EXIT_FENCED, "Fenced")
    assert report["message"].startswith(c.FENCED_MARKER)
