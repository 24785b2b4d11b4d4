"""Registry formats end to end: the real driver reads Avro and Protobuf records through the real schema registry
(Apicurio, the test profile's), each with its writer schema, filters and transforms the decoded record, writes
a destination in Avro with its subject's latest schema and another with the original bytes, and dead-letters
what is bad: a record that does not decode (``MessageDeserialization`` with the reason) and a transformed
record that does not fit its subject (``SchemaValidation`` naming the field). A registry that stops answering
mid-stream halts the pipeline with the reason and dead-letters nothing (DESIGN.md "Record formats")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from confluent_kafka.admin import AdminClient
from django.conf import settings

from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from streamforge_core.record_formats import RecordDecoder
from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import RegistryConnection, SchemaRegistry
from streamforge_core.wire_format import frame
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce, written_fates
from tests.tcp_gate import TcpGate

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark, pytest.mark.registry]

ACTOR = {"type": "record", "name": "Actor", "fields": [{"name": "login", "type": ["null", "string"]}]}
EVENT_V1 = {
    "type": "record",
    "name": "Event",
    "namespace": "test.formats",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "type", "type": {"type": "enum", "name": "Kind", "symbols": ["PushEvent", "WatchEvent"]}},
        {"name": "actor", "type": ACTOR},
    ],
}
#: Version 2 adds a field with a default (backward compatible): records of both versions are on the topic.
EVENT_V2 = {**EVENT_V1, "fields": [*EVENT_V1["fields"], {"name": "size", "type": "int", "default": 0}]}
#: The destination's subject: a login is required (a string, not null).
PUSHER = {
    "type": "record",
    "name": "Pusher",
    "namespace": "test.formats",
    "fields": [{"name": "login", "type": "string"}, {"name": "id", "type": "long"}],
}


@pytest.fixture
def registry(registry_url: str) -> Iterator[SchemaRegistry]:
    with SchemaRegistry(RegistryConnection(registry_url, timeout_s=5)) as client:
        yield client


@pytest.fixture
def topics(make_topic, kafka_admin: AdminClient):
    suffix = uuid.uuid4().hex[:8]
    source = make_topic(f"fmt-src-{suffix}", partitions=2)
    created: list[str] = []

    def ensure(spec: dict, name: str) -> None:
        created.extend(ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=name)).created)

    yield suffix, source, ensure
    existing = set(kafka_admin.list_topics(timeout=10).topics)
    if doomed := sorted(set(created) & existing):
        for future in kafka_admin.delete_topics(doomed).values():
            future.result(timeout=30)


def _avro(registry: SchemaRegistry, schema_id: int, value: dict) -> bytes:
    return frame(schema_id, codec_for(registry.lookup(schema_id)).encode(value))


def _driver(tmp_path, spec: dict, name: str, kafka_bootstrap: str, registry_url: str) -> DriverProcess:
    return DriverProcess(
        spec=spec,
        pipeline=name,
        workdir=tmp_path / name,
        bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL,
        jars=list(settings.SPARK_JARS),
        env={"SCHEMA_REGISTRY_URL": registry_url},
    )


def _run_through(driver: DriverProcess, records: int) -> None:
    """Start ``driver``, wait until it consumed ``records``, stop it cleanly (killed whatever happens)."""
    driver.start()
    try:
        driver.wait_consumed(records)
        assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()
    finally:
        driver.ensure_stopped()


def test_avro_records_of_two_schema_versions_are_filtered_transformed_encoded_and_dead_lettered(
    tmp_path, kafka_bootstrap, registry, topics
):
    suffix, source, ensure = topics
    v1 = registry.register(f"{source}-value", json.dumps(EVENT_V1))
    v2 = registry.register(f"{source}-value", json.dumps(EVENT_V2))
    assert v1 != v2
    pushes_topic, archive_topic = f"fmt-pushes-{suffix}", f"fmt-archive-{suffix}"
    registry.register(f"{pushes_topic}-value", json.dumps(PUSHER))
    spec = {
        "source": {"topics": [source], "format": "avro"},
        "destinations": [
            {
                "name": "pushes",
                "topic": pushes_topic,
                "filter": "/type,==,PushEvent",
                "transform": "CONSTRUCT:login=/actor/login:id=/id",
                "format": "avro",
            },
            {"name": "archive", "topic": archive_topic},
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
        "dlq": {"topic": f"fmt-dlq-{suffix}"},
    }
    ensure(spec, f"fmt-{suffix}")

    values: list[bytes | None] = []
    for i in range(40):  # v1 and v2 interleaved; every 10th PushEvent has no login
        event = {
            "id": i,
            "type": "PushEvent" if i % 2 == 0 else "WatchEvent",
            "actor": {"login": None if i % 10 == 0 else f"user{i}"},
        }
        values.append(_avro(registry, v1, event) if i % 4 < 2 else _avro(registry, v2, {**event, "size": i}))
    values.append(frame(2_000_000_000, b"\x02"))  # 40: an id the registry never gave
    values.append(b'{"id": 41}')  # 41: JSON, not Confluent-framed
    values.append(None)  # 42: a tombstone
    coordinates = produce(kafka_bootstrap, source, [(str(i).encode(), v) for i, v in enumerate(values)], 2)
    by_coordinate = {coordinate: i for i, coordinate in enumerate(coordinates)}

    _run_through(
        _driver(tmp_path, spec, f"fmt-{suffix}", kafka_bootstrap, registry.connection.url), len(values)
    )

    fates = written_fates(kafka_bootstrap, spec)
    decoder = RecordDecoder(registry, "avro")
    for (dest, partition, offset), written in fates.items():
        i = by_coordinate[(partition, offset)]
        assert len(written) == 1, f"record {i} written {len(written)} times to {dest}"
        kind, record = written[0]
        if i >= 40:
            assert kind == "dlq"
            assert record.header(c.H_ERROR_TYPE) == c.MESSAGE_DESERIALIZATION
            assert record.header(c.H_DESTINATION) == c.ALL_DESTINATIONS
            assert record.value == values[i], "the DLQ keeps the original bytes"
            reason = str(record.header(c.H_ERROR))
            assert {40: "unknown schema id 2000000000", 41: "no magic byte 0", 42: "tombstone"}[i] in reason
        elif dest == "archive":
            assert (kind, record.value) == ("produced", values[i]), "no transform: the original bytes"
        elif i % 10 == 0:
            assert kind == "dlq"
            assert record.header(c.H_ERROR_TYPE) == c.SCHEMA_VALIDATION
            assert "$.login" in str(record.header(c.H_ERROR)), record.header(c.H_ERROR)
            assert record.value == values[i]
        else:
            assert kind == "produced"
            decoded = decoder.decode(record.value)
            assert decoded.schema.subject == f"{pushes_topic}-value"
            assert decoded.value == {"login": f"user{i}", "id": i}
    pushes = {by_coordinate[(p, o)] for (d, p, o) in fates if d == "pushes"}
    archive = {by_coordinate[(p, o)] for (d, p, o) in fates if d == "archive"}
    # Every PushEvent reached pushes or the DLQ, nothing else did; every record reached archive or the DLQ.
    assert pushes == {i for i in range(40) if i % 2 == 0} | {40, 41, 42}
    assert archive == set(range(43))


def test_protobuf_records_decode_with_their_message_and_pass_through_unchanged(
    tmp_path, kafka_bootstrap, registry, topics
):
    suffix, source, ensure = topics
    proto = (
        f'syntax = "proto3";\npackage fmt{suffix};\n'
        "message Other { string x = 1; }\n"
        "message Event { int64 id = 1; string kind = 2; repeated string tags = 3; }\n"
    )
    schema_id = registry.register(f"{source}-value", proto, "PROTOBUF")
    event_codec = codec_for(registry.lookup(schema_id), (1,))
    spec = {
        "source": {"topics": [source], "format": "protobuf"},
        "destinations": [
            {"name": "tagged", "topic": f"fmt-tagged-{suffix}", "filter": "/tags/0,==,hot",
             "transform": "EXTRACT:/kind,kind"},
            {"name": "copy", "topic": f"fmt-copy-{suffix}"},
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
        "dlq": {"topic": f"fmt-pdlq-{suffix}"},
    }  # fmt: skip
    ensure(spec, f"pfmt-{suffix}")
    values = [
        frame(schema_id, event_codec.encode({"id": i, "kind": f"k{i}", "tags": ["hot" if i % 3 == 0 else "cold"]}), (1,))
        for i in range(12)
    ]  # fmt: skip
    values.append(frame(schema_id, b"\xff\xff\xff", (1,)))  # 12: not Protobuf for that message
    coordinates = produce(kafka_bootstrap, source, [(str(i).encode(), v) for i, v in enumerate(values)], 2)
    by_coordinate = {coordinate: i for i, coordinate in enumerate(coordinates)}

    _run_through(
        _driver(tmp_path, spec, f"pfmt-{suffix}", kafka_bootstrap, registry.connection.url), len(values)
    )

    tagged = consume_all(kafka_bootstrap, f"fmt-tagged-{suffix}")
    assert sorted(json.loads(r.value)["kind"] for r in tagged) == sorted(f"k{i}" for i in range(0, 12, 3))
    copies = consume_all(kafka_bootstrap, f"fmt-copy-{suffix}")
    assert sorted(r.value for r in copies) == sorted(values[:12])
    dlq = consume_all(kafka_bootstrap, f"fmt-pdlq-{suffix}")
    assert len(dlq) == 1
    partition, offset = int(dlq[0].header(c.H_SOURCE_PARTITION)), int(dlq[0].header(c.H_SOURCE_OFFSET))
    assert by_coordinate[(partition, offset)] == 12
    assert f"schema {schema_id}" in str(dlq[0].header(c.H_ERROR))


def test_a_registry_that_stops_mid_stream_halts_the_pipeline_and_the_restart_loses_nothing(
    tmp_path, kafka_bootstrap, registry, topics
):
    """The registry answers while the first records (schema v1) are read, then stops (connections refused
    and the open ones cut, through a gate in front of the real registry, which keeps its schemas) before
    records of v2, an id the driver has not cached yet: the lookups are retried with backoff, then the
    pipeline halts as Config naming the registry; nothing is dead-lettered and nothing of v2 is written.
    The registry back, a new run on the same checkpoint reads from the record it halted on: 0 lost."""
    suffix, source, ensure = topics
    v1 = registry.register(f"{source}-value", json.dumps(EVENT_V1))
    v2 = registry.register(f"{source}-value", json.dumps(EVENT_V2))
    spec = {
        "source": {"topics": [source], "format": "avro"},
        "destinations": [{"name": "all", "topic": f"fmt-all-{suffix}", "transform": "EXTRACT:/id,id"}],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
        "dlq": {"topic": f"fmt-hdlq-{suffix}"},
    }
    ensure(spec, f"hfmt-{suffix}")
    real = urlsplit(registry.connection.url)
    gate = TcpGate((real.hostname or "127.0.0.1", real.port or 80)).open()
    through_gate = urlunsplit(real._replace(netloc=f"127.0.0.1:{gate.port}"))

    def event(i: int, schema_id: int) -> tuple[bytes, bytes]:
        body = {"id": i, "type": "PushEvent", "actor": {"login": f"u{i}"}}
        return str(i).encode(), _avro(registry, schema_id, body if schema_id == v1 else {**body, "size": i})

    produce(kafka_bootstrap, source, [event(i, v1) for i in range(3)])
    driver = _driver(tmp_path, spec, f"hfmt-{suffix}", kafka_bootstrap, through_gate).start()
    try:
        driver.wait_consumed(3)
        gate.shut()
        produce(kafka_bootstrap, source, [event(i, v2) for i in range(3, 5)])
        assert driver.wait(240) == c.EXIT_CONFIG, driver.log_tail()
    finally:
        driver.ensure_stopped()
    report = driver.exit_report()
    assert report["error_type"] == c.CONFIG
    assert f"schema registry {through_gate} could not serve" in report["message"]
    assert consume_all(kafka_bootstrap, spec["dlq"]["topic"]) == []
    assert sorted(json.loads(r.value)["id"] for r in consume_all(kafka_bootstrap, f"fmt-all-{suffix}")) == [
        0,
        1,
        2,
    ]

    gate.open()  # the registry is back, on the same address
    try:
        driver.restart()
        try:
            driver.wait_consumed(2)
            assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()
        finally:
            driver.ensure_stopped()
    finally:
        gate.shut()
    written = [json.loads(r.value)["id"] for r in consume_all(kafka_bootstrap, f"fmt-all-{suffix}")]
    assert sorted(written) == [0, 1, 2, 3, 4], (
        "each record once: nothing lost, the committed batch not read again"
    )
    assert consume_all(kafka_bootstrap, spec["dlq"]["topic"]) == []


def test_json_schema_records_are_read_and_written_with_their_subjects_schema(
    tmp_path, kafka_bootstrap, registry, topics
):
    suffix, source, ensure = topics
    reading = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}},
        "title": suffix,
    }
    writing = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
               "additionalProperties": False, "title": f"out-{suffix}"}  # fmt: skip
    source_id = registry.register(f"{source}-value", json.dumps(reading), "JSON")
    out_topic = f"fmt-js-{suffix}"
    registry.register(f"{out_topic}-value", json.dumps(writing), "JSON")
    spec = {
        "source": {"topics": [source], "format": "json_schema"},
        "destinations": [
            {"name": "numbers", "topic": out_topic, "filter": "/tag,==,keep", "transform": "EXTRACT:/n,n",
             "format": "json_schema"},
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
        "dlq": {"topic": f"fmt-jdlq-{suffix}"},
    }  # fmt: skip
    ensure(spec, f"jfmt-{suffix}")
    bodies = [{"n": i, "tag": "keep"} for i in range(5)] + [
        {"n": "five", "tag": "keep"},
        {"n": 6, "tag": "drop"},
    ]
    values = [frame(source_id, json.dumps(b).encode()) for b in bodies] + [frame(source_id, b"{not json")]
    produce(kafka_bootstrap, source, [(str(i).encode(), v) for i, v in enumerate(values)], 2)

    _run_through(
        _driver(tmp_path, spec, f"jfmt-{suffix}", kafka_bootstrap, registry.connection.url), len(values)
    )

    written = consume_all(kafka_bootstrap, out_topic)
    decoder = RecordDecoder(registry, "json_schema")
    assert sorted(decoder.decode(r.value).value["n"] for r in written) == [0, 1, 2, 3, 4]
    dlq = {
        str(r.header(c.H_ERROR_TYPE)): str(r.header(c.H_ERROR))
        for r in consume_all(kafka_bootstrap, spec["dlq"]["topic"])
    }
    assert set(dlq) == {c.SCHEMA_VALIDATION, c.MESSAGE_DESERIALIZATION}
    assert "$.n" in dlq[c.SCHEMA_VALIDATION]
    assert "invalid JSON" in dlq[c.MESSAGE_DESERIALIZATION]
