"""A pipeline on the secured broker (devstack's ``kafka-secure``), with real Spark: the accounting identity
over SASL_SSL and over mTLS, and the credential and ACL faults that must halt it with reason Config (exit 2)
naming the cause, instead of crash-looping. The connection reaches the driver as the supervisor hands it
over: KAFKA_* variables in its environment, nothing secret on its command line."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from django.conf import settings

from pipelines.dsl import Message
from pipelines.services import dry_run
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Secret, admin_config, connection_environment
from tests.pipelines.spark.harness import DriverProcess, produce, written_fates
from tests.streamforge_core.test_secured_broker import _env, mtls, sasl

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

EVENTS = Path(__file__).resolve().parents[3] / "demo" / "data" / "github-events-2021-07-21.ndjson"


def _spec(suffix: str, *, dlq: str | None = None) -> dict:
    return {
        "source": {"topics": [f"secure.src-{suffix}"], "consumer_group": f"secure.g-{suffix}"},
        "destinations": [
            {
                "name": "pushes",
                "topic": f"secure.pushes-{suffix}",
                "filter": "/type,==,PushEvent",
                "transform": "EXTRACT:/actor/login,login",
            },
            {
                "name": "pull-requests",
                "topic": f"secure.prs-{suffix}",
                "filter": "/type,==,PullRequestEvent",
                "transform": "CONSTRUCT:actor=/actor/login:merged=/payload/pull_request/merged",
            },
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 300}},
        "dlq": {"topic": dlq or f"secure.dlq-{suffix}"},
    }


@pytest.fixture
def secured(tmp_path):
    """A factory of (spec, driver) on the secured broker as ``conn``; topics are created as that principal
    (alice may create ``secure.*``) and deleted afterwards by the broker's own principal."""
    internal = AdminClient(admin_config(KafkaConnection(_env("SECURE_INTERNAL"))))
    drivers: list[DriverProcess] = []
    topics: list[str] = []

    def make(conn: KafkaConnection, spec: dict) -> DriverProcess:
        name = f"p-{uuid.uuid4().hex[:8]}"
        parsed = parse_spec(spec, pipeline_name=name)
        source = parsed.source.topics[0]
        internal.create_topics([NewTopic(source, 2, 1)])[source].result(timeout=30)
        topics.append(source)
        plan = ensure_topics(internal, parsed)
        topics.extend(plan.created)
        driver = DriverProcess(
            spec=spec,
            pipeline=name,
            workdir=tmp_path / name,
            bootstrap=conn.bootstrap_servers,
            redis_url=settings.REDIS_URL,
            jars=list(settings.SPARK_JARS),
            env=connection_environment(conn),
        )
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.ensure_stopped()
    if topics:
        for future in internal.delete_topics(sorted(set(topics))).values():
            future.result(timeout=30)


def _corpus() -> list[tuple[bytes | None, bytes | None]]:
    lines = EVENTS.read_bytes().splitlines()[:300]
    broken = [b'{"id": "x", "type": "PushEvent", "actor": }', lines[3][: len(lines[3]) // 2], b""]
    return [(str(i).encode(), line) for i, line in enumerate([*lines, *broken])]


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_every_source_offset_is_accounted_for_over_a_secured_listener(secured, listener):
    conn = sasl("alice") if listener == "sasl_ssl" else mtls("alice")
    suffix = uuid.uuid4().hex[:8]
    spec = _spec(suffix)
    driver = secured(conn, spec)
    records = _corpus()
    coordinates = produce(conn, spec["source"]["topics"][0], records, partitions=2)

    driver.start()
    driver.wait_consumed(len(records))
    assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()

    parsed = parse_spec(spec, pipeline_name=driver.pipeline)
    expected = dry_run(spec=parsed, messages=[Message(value=v, key=k) for k, v in records], now_ms=0)
    written = written_fates(conn, spec, group_prefix="secure.reader-")
    found: Counter[tuple[str, int, int, str]] = Counter()
    for (name, partition, offset), fates in written.items():
        for kind, _record in fates:
            found[(name, partition, offset, "produced" if kind == "produced" else "dead_lettered")] += 1
    wanted: Counter[tuple[str, int, int, str]] = Counter()
    for results, (partition, offset) in zip(expected, coordinates, strict=True):
        for result in results:
            if result.outcome != "filtered":
                outcome = "produced" if result.outcome == "produced" else "dead_lettered"
                wanted[(result.destination, partition, offset, outcome)] += 1
    assert found == wanted  # every source offset: produced, filtered or dead-lettered, each exactly once
    assert sum(1 for key in wanted if key[3] == "dead_lettered") >= 3


def test_a_wrong_password_halts_with_reason_config_naming_the_brokers_answer(secured):
    conn = sasl("alice", secret=Secret("not-her-password"))
    driver = secured(sasl("alice"), _spec(uuid.uuid4().hex[:8]))
    driver.env = connection_environment(conn)
    began = time.monotonic()
    driver.start()
    assert driver.wait(timeout=120) == c.EXIT_CONFIG, driver.log_tail()
    assert time.monotonic() - began < 60
    report = driver.exit_report()
    assert report["error_type"] == c.CONFIG
    assert "authentication as alice failed" in report["message"]
    assert "invalid credentials" in report["message"]


def test_a_dlq_topic_the_principal_may_not_write_halts_naming_it(secured):
    suffix = uuid.uuid4().hex[:8]
    dlq = f"readonly.dlq-{suffix}"  # outside alice's prefix: only the READ/DESCRIBE granted below
    internal = AdminClient(admin_config(KafkaConnection(_env("SECURE_INTERNAL"))))
    grants = [
        AclBinding(ResourceType.TOPIC, dlq, ResourcePatternType.LITERAL, "User:alice", "*", operation,
                   AclPermissionType.ALLOW)
        for operation in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
    ]  # fmt: skip
    for future in internal.create_acls(grants).values():
        future.result(timeout=30)
    try:
        driver = secured(sasl("alice"), _spec(suffix, dlq=dlq))
        driver.start()
        assert driver.wait(timeout=120) == c.EXIT_CONFIG, driver.log_tail()
        report = driver.exit_report()
        assert report["error_type"] == c.CONFIG
        assert f"not authorized to WRITE topic {dlq}" in report["message"]
    finally:
        every = AclBindingFilter(
            ResourceType.TOPIC, dlq, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.ANY,
            AclPermissionType.ANY,
        )  # fmt: skip
        for future in internal.delete_acls([every]).values():
            future.result(timeout=30)


def test_the_driver_command_line_and_spec_file_hold_no_secret(secured):
    conn = sasl("alice")
    driver = secured(conn, _spec(uuid.uuid4().hex[:8]))
    driver.start()
    try:
        assert driver.process is not None
        secret = conn.sasl_password.reveal() if conn.sasl_password else ""
        command_line = Path(f"/proc/{driver.process.pid}/cmdline").read_bytes().decode(errors="replace")
        assert secret
        assert secret not in command_line
        assert secret not in (driver.workdir / "spec.json").read_text()
        assert json.loads((driver.workdir / "spec.json").read_text())["source"]["topics"]
    finally:
        driver.kill()
