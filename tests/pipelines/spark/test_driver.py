"""The driver end to end on the real broker, real Spark and real Redis.

Every source record's fate is checked per destination against the pure-Python evaluator (what dry runs
show): produced (found on the destination topic by its lineage header), filtered (found nowhere), or
dead-lettered (found on the DLQ with the right error type, its source coordinates and its original bytes).
That is the accounting identity, record by record.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from django.conf import settings

from chaos import accounting
from pipelines.dsl import Message
from pipelines.services import dry_run
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, consumer_config
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce, written_fates

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

EVENTS = Path(__file__).resolve().parents[3] / "demo" / "data" / "github-events-2021-07-21.ndjson"


def _spec(source: str, suffix: str, **delivery) -> dict:
    return {
        "source": {"topics": [source]},
        "destinations": [
            {
                "name": "pushes",
                "topic": f"pushes-{suffix}",
                "filter": "/type,==,PushEvent",
                "transform": "EXTRACT:/actor/login,login",
            },
            {
                "name": "pull-requests",
                "topic": f"prs-{suffix}",
                "filter": "/type,==,PullRequestEvent",
                "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:merged=/payload/pull_request/merged",
                "key_transform": "/repo",
            },
            # Every event, unchanged: the destination where an oversized event hits the topic's size limit.
            {"name": "archive", "topic": f"archive-{suffix}", "filter": "EXISTS:/id"},
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 300}, **delivery},
        "retry": {"max_attempts": 3, "initial_delay_ms": 50, "max_delay_ms": 500},
        "dlq": {"topic": f"dlq-{suffix}", "max_dlq_retries": 1},
    }


def _corpus() -> tuple[list[tuple[bytes | None, bytes | None]], dict[int, str]]:
    """The 800 real events plus corrupted copies; returns (key, value) pairs and {index: what was done}."""
    lines = EVENTS.read_bytes().splitlines()
    events = [json.loads(line) for line in lines]
    records: list[tuple[bytes | None, bytes | None]] = [
        (e["id"].encode(), line) for e, line in zip(events, lines, strict=True)
    ]
    notes: dict[int, str] = {}

    def add(value: bytes | None, note: str, key: bytes | None = b"corrupt") -> None:
        notes[len(records)] = note
        records.append((key, value))

    prs = [e for e in events if e["type"] == "PullRequestEvent"]
    for event in prs[:10]:
        broken = copy.deepcopy(event)
        del broken["payload"]["pull_request"]
        add(json.dumps(broken).encode(), "missing /payload/pull_request")
    for line in lines[:5]:
        add(line[: len(line) // 2], "truncated line")
    add(b'{"id": "x", "type": "PushEvent", "actor": }', "invalid JSON")
    add(lines[1].replace(b'"type"', b'"ty\xff\xfepe"'), "invalid UTF-8")
    # Only the writer's strict decoder refuses these: Spark's lenient parse (the plan's) accepts each.
    add(lines[2] + b' {"again": 1}', "content after the value")
    add(b'{"id": "x", "type": "PushEvent", "n": 1e400}', "number out of range")
    add(b'{"id": "x", "type": "PushEvent", "s": "\\ud800"}', "lone surrogate escape")
    add(b'{"id": "x", "type": "PushEvent", "n": 1' + b"0" * 320 + b"}", "integer of 321 digits")
    add(b"", "empty value")
    add(None, "null value (tombstone)")
    add(bytes(range(256)) * 4, "binary (every byte value)")
    add(b"\x00\x01\x02\x03", "binary, short")
    add(
        b'{"id": "deep", "a": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "nested 5,000 deep (over every parser's limit)",
    )
    huge = copy.deepcopy(next(e for e in events if e["type"] == "PushEvent"))
    huge["id"] = "oversized-1"
    huge["payload"]["commits"][0]["message"] = "x" * 1_500_000
    add(json.dumps(huge).encode(), "over the destination's 1 MB limit")
    return records, notes


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(consumer_config(KafkaConnection(bootstrap), group_id=group))
    try:
        return [
            tp.offset
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        ]
    finally:
        consumer.close()


@pytest.fixture
def pipeline_env(tmp_path, kafka_bootstrap, kafka_admin: AdminClient, make_topic):
    """A fresh source topic (2 partitions, 4 MB records allowed), the spec's output topics, and a factory of
    driver processes that are killed at the end of the test whatever happens."""
    suffix = uuid.uuid4().hex[:8]
    source = make_topic("src", partitions=2, config={"max.message.bytes": str(4 * 1024 * 1024)})
    drivers: list[DriverProcess] = []
    created: list[str] = []

    def make(**delivery) -> tuple[dict, DriverProcess]:
        spec = _spec(source, suffix, **delivery)
        plan = ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=f"p-{suffix}"))
        created.extend(plan.created)
        driver = DriverProcess(
            spec=spec,
            pipeline=f"p-{suffix}",
            workdir=tmp_path / "driver",
            bootstrap=kafka_bootstrap,
            redis_url=settings.REDIS_URL,
            jars=list(settings.SPARK_JARS),
        )
        drivers.append(driver)
        return spec, driver

    yield source, make
    for driver in drivers:
        driver.ensure_stopped()
    existing = set(kafka_admin.list_topics(timeout=10).topics)
    doomed = sorted(set(created) & existing)
    if doomed:
        for future in kafka_admin.delete_topics(doomed).values():
            future.result(timeout=30)


def test_every_source_record_is_produced_filtered_or_dead_lettered_as_the_evaluator_says(
    pipeline_env, kafka_bootstrap
):
    source, make = pipeline_env
    spec, driver = make()
    records, notes = _corpus()
    coordinates = produce(kafka_bootstrap, source, records, partitions=2)

    driver.start()
    driver.wait_consumed(len(records))
    assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()

    parsed = parse_spec(spec, pipeline_name=driver.pipeline)
    expected = dry_run(spec=parsed, messages=[Message(value=v, key=k) for k, v in records], now_ms=0)
    fates = written_fates(kafka_bootstrap, spec)
    by_type: Counter[str] = Counter()
    for index, ((key, value), (partition, offset)) in enumerate(zip(records, coordinates, strict=True)):
        for dest_result in expected[index]:
            fate = fates.get((dest_result.destination, partition, offset), [])
            where = f"record {index} ({notes.get(index, 'real event')}) -> {dest_result.destination}"
            oversized = notes.get(index, "").startswith("over") and dest_result.destination == "archive"
            if dest_result.outcome == "filtered":
                assert fate == [], where
            elif dest_result.outcome == "produced" and not oversized:
                assert [kind for kind, _ in fate] == ["produced"], where
                assert json.loads(fate[0][1].value) == json.loads(dest_result.value), where
            else:
                assert [kind for kind, _ in fate] == ["dlq"], where
                dlq = fate[0][1]
                error_type = "RecordTooLarge" if oversized else dest_result.error_type
                assert dlq.header(c.H_ERROR_TYPE) == error_type, where
                assert (
                    dlq.header(c.H_SOURCE_TOPIC),
                    dlq.header(c.H_SOURCE_PARTITION),
                    dlq.header(c.H_SOURCE_OFFSET),
                ) == (
                    source,
                    str(partition),
                    str(offset),
                ), where
                assert (dlq.key, dlq.value) == (key, value), f"{where}: the DLQ keeps the original bytes"
                assert dlq.header(c.H_PIPELINE) == driver.pipeline
                by_type[error_type] += 1
    assert {"MessageDeserialization", "JsonPathNotFound", "RecordTooLarge"} <= set(by_type)

    # The progress events add up to the same identity: consumed = produced + filtered + dead-lettered.
    events = driver.events()
    consumed = sum(e["consumed"] for e in events)
    assert consumed == len(records)
    for name in ("pushes", "pull-requests", "archive"):
        totals = Counter()
        for event in events:
            totals.update(event["destinations"][name])
        assert totals["produced"] + totals["filtered"] + totals["dead_lettered"] == consumed, name
    last = events[-1]["offsets"][source]
    assert {p: o["end"] for p, o in last.items()} == {p: o["latest"] for p, o in last.items()}
    assert _committed(kafka_bootstrap, parsed.source.consumer_group, source, 2) == [
        max(o for p, o in coordinates if p == part) + 1 for part in (0, 1)
    ]


def _live_corpus(count: int) -> list[tuple[bytes | None, bytes | None]]:
    lines = EVENTS.read_bytes().splitlines()
    out: list[tuple[bytes | None, bytes | None]] = []
    for i in range(count):
        event = json.loads(lines[i % len(lines)])
        event["id"] = f"live-{i}"
        out.append((event["id"].encode(), json.dumps(event).encode()))
    return out


@pytest.mark.parametrize("mode", ["at_least_once", "effectively_once"])
def test_a_killed_driver_restarts_from_its_checkpoint_without_losing_a_record(
    pipeline_env, kafka_bootstrap, mode
):
    source, make = pipeline_env
    spec, driver = make(mode=mode)
    records = _live_corpus(4000)
    spec["delivery"]["commit_strategy"]["max_records"] = 200
    driver.spec = spec
    coordinates = produce(kafka_bootstrap, source, records, partitions=2)

    driver.start()
    driver.wait_consumed(1200)
    driver.kill()  # kill -9 in the middle of the stream
    driver.restart()
    group = parse_spec(spec, pipeline_name=driver.pipeline).source.consumer_group
    ends = [max(o for p, o in coordinates if p == part) + 1 for part in (0, 1)]
    driver.wait_for(
        lambda: _committed(kafka_bootstrap, group, source, 2) == ends, 240, "every offset committed"
    )
    assert driver.stop() == c.EXIT_STOPPED

    # The shared accounting (chaos.accounting) checks the identity record by record, as `make chaos` does.
    parsed = parse_spec(spec, pipeline_name=driver.pipeline)
    committed = mode == "effectively_once"
    source_records = consume_all(kafka_bootstrap, source)
    assert len(source_records) == len(records)
    limits = {d["topic"]: 1_048_588 for d in spec["destinations"]}
    expected = accounting.expected_fates(parsed, source_records, limits)
    observed = accounting.observe(
        parsed,
        {
            d["name"]: consume_all(kafka_bootstrap, d["topic"], read_committed=committed)
            for d in spec["destinations"]
        },
        consume_all(kafka_bootstrap, spec["dlq"]["topic"], read_committed=committed),
    )
    tallies = accounting.tally(expected, observed)
    missing = [example for t in tallies.values() for example in t.examples if "LOST" in example]
    duplicates = sum(t.duplicates for t in tallies.values())
    assert sum(t.lost for t in tallies.values()) == 0, missing
    assert sum(t.wrong + t.value_mismatch for t in tallies.values()) == 0, tallies
    if mode == "effectively_once":
        assert duplicates == 0, "read_committed readers must see each record once"


def test_a_dlq_that_cannot_be_written_halts_the_pipeline_and_loses_nothing_after_repair(
    pipeline_env, kafka_bootstrap, kafka_admin
):
    source, make = pipeline_env
    spec, driver = make()
    good = _live_corpus(100)
    produce(kafka_bootstrap, source, good, partitions=2)
    driver.start()
    driver.wait_consumed(len(good))

    for future in kafka_admin.delete_topics([spec["dlq"]["topic"]]).values():
        future.result(timeout=30)
    bad = [(b"bad", b"{not json")] * 20
    produce(kafka_bootstrap, source, bad, partitions=2)

    assert driver.wait(180) == c.EXIT_DLQ, driver.log_tail()
    report = driver.exit_report()
    assert report["error_type"] == "DeadLetterQueue"
    assert spec["dlq"]["topic"] in report["message"]

    ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=driver.pipeline))  # repair: the DLQ is back
    driver.restart()
    driver.wait_consumed(len(bad))
    assert driver.stop() == c.EXIT_STOPPED
    dlq = consume_all(kafka_bootstrap, spec["dlq"]["topic"])
    offsets = {(int(r.header(c.H_SOURCE_PARTITION)), int(r.header(c.H_SOURCE_OFFSET))) for r in dlq}
    assert len(offsets) == len(bad), "every bad record reached the DLQ after the repair"
    assert all(r.header(c.H_ERROR_TYPE) == "MessageDeserialization" for r in dlq)
