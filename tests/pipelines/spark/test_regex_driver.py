"""Security review #28, finding 1 (high): a pipeline's regex meeting hostile data must not stall a partition.

The real driver (micro-batch and ``low_latency``, Spark's real-time mode) on the real broker and Redis, with
the classic catastrophic patterns in ``REGEX:``, ``KEY_MATCHES:`` and ``STRING:REGEX_REPLACE`` and 10 KB
records built to make a backtracking engine explode. Before the fix the plan ran them on
``java.util.regex`` (``rlike``/``regexp_replace``): the task never finished and these tests ran into their
timeouts. Now they run on RE2/J in our Java UDF: every record gets its right fate within seconds (the time
from producing the records to their progress is printed), and real-time mode accepts the plan (a Java UDF
is an expression inside an allowed operator; a Python UDF would be refused).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from django.conf import settings

from streamforge_core import contract as c
from tests.pipelines.spark.harness import DriverProcess, produce, written_fates

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

HOSTILE_A = "a" * 10_000 + "!"  # (a+)+$: 2^10000 paths for a backtracking engine
HOSTILE_X = "x" * 10_000  # (x+x+)+y: the same, without the y

#: (key, value, {destination: fate}); "produced" records are checked for their value too.
RECORDS: list[tuple[bytes, dict[str, str], dict[str, str]]] = [
    (b"hostile-a", {"id": "1", "msg": HOSTILE_A}, {"matches": "filtered", "keys": "filtered"}),
    (b"plain", {"id": "2", "msg": "aaaa"}, {"matches": "produced", "keys": "filtered"}),
    (HOSTILE_X.encode(), {"id": "3", "msg": HOSTILE_X}, {"matches": "filtered", "keys": "filtered"}),
    (b"xxy", {"id": "4", "msg": "xxy"}, {"matches": "filtered", "keys": "produced"}),
]
#: STRING:REGEX_REPLACE of (x+x+)+y by "-" on every record: only "xxy" changes.
REWRITTEN = {"1": HOSTILE_A, "2": "aaaa", "3": HOSTILE_X, "4": "-"}


def _spec(source: str, suffix: str, dlq: str, low_latency: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"topics": [source]},
        "destinations": [
            {"name": "matches", "topic": f"re-matches-{suffix}", "filter": "REGEX:/msg,(a+)+$"},
            {"name": "keys", "topic": f"re-keys-{suffix}", "filter": "KEY_MATCHES:(x+x+)+y"},
            {
                "name": "rewrites",
                "topic": f"re-rewrites-{suffix}",
                "filter": "EXISTS:/id",
                "transform": "STRING:REGEX_REPLACE,/msg,(x+x+)+y,-",
            },
        ],
        "dlq": {"topic": dlq},
    }
    if low_latency:
        spec["delivery"] = {"mode": "at_least_once", "commit_strategy": {"kind": "low_latency"}}
    return spec


@pytest.mark.timeout(420)
@pytest.mark.parametrize("low_latency", [False, True], ids=["micro-batch", "low_latency"])
def test_a_catastrophic_regex_meets_10kb_hostile_records_in_a_real_driver_and_every_fate_is_right(
    tmp_path, kafka_bootstrap, make_topic, low_latency: bool
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source = make_topic("re-src")
    dlq = make_topic("re-dlq")
    spec = _spec(source, suffix, dlq, low_latency)
    for dest in spec["destinations"]:
        dest["topic"] = make_topic(dest["topic"])
    pipeline = f"re-{suffix}"
    driver = DriverProcess(
        spec=spec,
        pipeline=pipeline,
        workdir=tmp_path / "driver",
        bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL,
        jars=list(settings.SPARK_JARS),
        master="local[3]" if low_latency else "local[2]",
    )
    try:
        driver.start()
        # A first, harmless record: the query is up and past its first batch before the timed ones.
        produce(kafka_bootstrap, source, [(b"warm-up", json.dumps({"id": "0", "msg": "b"}).encode())])
        driver.wait_for(lambda: driver.consumed() >= 1, 240, "the warm-up record")
        began = time.monotonic()
        produce(kafka_bootstrap, source, [(key, json.dumps(value).encode()) for key, value, _ in RECORDS])
        driver.wait_for(lambda: driver.consumed() >= 1 + len(RECORDS), 90, "the hostile records")
        elapsed = time.monotonic() - began
        mode = "low_latency" if low_latency else "micro-batch"
        print(f"\n{mode}: 4 records (two of 10 KB, hostile) produced -> progress in {elapsed:.2f} s")
        assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()
    finally:
        driver.ensure_stopped()

    fates = written_fates(kafka_bootstrap, spec)
    for offset, (_key, value, expected) in enumerate(RECORDS, start=1):
        for name, fate in expected.items():
            got = [kind for kind, _record in fates.get((name, 0, offset), [])]
            assert got == ([] if fate == "filtered" else [fate]), (name, value["id"], got)
        ((kind, record),) = fates[("rewrites", 0, offset)]
        assert kind == "produced"
        assert json.loads(record.value or b"null") == {"id": value["id"], "msg": REWRITTEN[value["id"]]}
