"""Reading and writing registry-format records (``streamforge_core.record_formats``), pure logic: a record that
is bad is a ``DecodeError`` with its reason, a value that does not fit is ``SchemaValidation`` naming the
field, a registry that cannot serve is retried with backoff and then halts the pipeline (never a dead
letter). The registry here is an in-memory stand-in with the client's interface; the real registry is
exercised in tests/streamforge_core/test_schema_registry.py and tests/pipelines/spark/test_registry_formats.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from streamforge_core import contract as c
from streamforge_core.codec_errors import DecodeError, SchemaValidation
from streamforge_core.record_formats import (
    RecordDecoder,
    RecordEncoder,
    call_registry,
    default_subject,
    json_text,
)
from streamforge_core.schema_registry import (
    RegisteredSchema,
    RegistryConnection,
    RegistryRejected,
    RegistryUnavailable,
    UnknownSchema,
    registry_environment,
    registry_from_environment,
)
from streamforge_core.wire_format import frame

AVRO = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}],
    }
)
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


@dataclass
class MemoryRegistry:
    """Schemas by id and subjects' latest ids; ``down`` makes every call fail as an unreachable registry."""

    schemas: dict[int, RegisteredSchema] = field(default_factory=dict)
    latest_ids: dict[str, int] = field(default_factory=dict)
    down: bool = False
    calls: int = 0
    connection: RegistryConnection = field(default_factory=lambda: RegistryConnection("http://registry.test"))

    def add(self, schema_id: int, schema_type: str, text: str, subject: str) -> None:
        self.schemas[schema_id] = RegisteredSchema(schema_id, schema_type, text, (), subject, 1)
        self.latest_ids[subject] = schema_id

    def lookup(self, schema_id: int) -> RegisteredSchema:
        self.calls += 1
        if self.down:
            raise RegistryUnavailable("connection refused")
        if schema_id not in self.schemas:
            raise UnknownSchema(schema_id)
        return self.schemas[schema_id]

    def latest(self, subject: str) -> RegisteredSchema:
        self.calls += 1
        if self.down:
            raise RegistryUnavailable("connection refused")
        if subject not in self.latest_ids:
            raise RegistryRejected(f"subject {subject} not found", 404, 40401)
        return self.schemas[self.latest_ids[subject]]


@pytest.fixture
def registry() -> MemoryRegistry:
    found = MemoryRegistry()
    found.add(7, "AVRO", AVRO, "events-value")
    found.add(8, "JSON", JSON_SCHEMA, "counts-value")
    return found


NO_WAIT: tuple[float, ...] = (0.0, 0.0)


def test_a_record_decodes_with_the_schema_its_id_names(registry):
    encoder = RecordEncoder(registry, backoff=NO_WAIT)
    value = encoder.encode("events-value", "avro", '{"n": 5, "s": "é"}')
    assert value[:5] == b"\x00\x00\x00\x00\x07"
    decoder = RecordDecoder(registry, "avro", backoff=NO_WAIT)
    decoded = decoder.decode(value)
    assert (decoded.value, decoded.schema.schema_id, decoded.schema.subject) == (
        {"n": 5, "s": "é"},
        7,
        "events-value",
    )
    assert decoder.decode_text(value) == '{"n":5,"s":"é"}'


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "record has no value (tombstone)"),
        (b"", "value is empty"),
        (b'{"n": 1}', "no magic byte 0 at byte 0"),
        (b"\x00\x00\x00", "4-byte schema id cut short"),
        (frame(99, b"\x02"), "unknown schema id 99"),
        (frame(8, b'{"n": 1}'), "schema 8 is JSON, not AVRO"),
        (frame(7, b"\x02"), "not Avro for schema 7"),
    ],
)
def test_a_bad_record_is_a_decode_error_with_its_reason(registry, value, reason):
    decoder = RecordDecoder(registry, "avro", backoff=NO_WAIT)
    with pytest.raises(DecodeError) as caught:
        decoder.decode(value)
    assert reason in caught.value.reason


def test_a_value_that_does_not_fit_the_subject_names_the_field(registry):
    encoder = RecordEncoder(registry, backoff=NO_WAIT)
    with pytest.raises(SchemaValidation) as caught:
        encoder.encode("events-value", "avro", '{"n": "five", "s": "x"}')
    assert caught.value.field_path == "$.n"
    with pytest.raises(SchemaValidation) as caught:
        encoder.encode("counts-value", "json_schema", "{}")
    assert "'n' is a required property" in str(caught.value)
    with pytest.raises(SchemaValidation):
        encoder.encode("counts-value", "json_schema", "not json")


def test_a_missing_subject_or_one_of_another_format_halts_as_config(registry):
    encoder = RecordEncoder(registry, backoff=NO_WAIT)
    with pytest.raises(c.PipelineHalt) as caught:
        encoder.encode("nowhere-value", "avro", "{}")
    assert caught.value.error_type == c.CONFIG
    assert "nowhere-value" in caught.value.detail
    with pytest.raises(c.PipelineHalt) as caught:
        encoder.encode("counts-value", "avro", '{"n": 1}')
    assert "is JSON, not AVRO" in caught.value.detail


def test_a_registry_that_cannot_serve_is_retried_then_halts_and_never_decode_errors(registry):
    registry.down = True
    waits: list[float] = []
    decoder = RecordDecoder(registry, "avro", backoff=(0.5, 1.0, 2.0))
    with pytest.raises(c.PipelineHalt) as caught:
        call_registry(
            lambda: decoder.registry.lookup(7),
            "http://registry.test",
            backoff=(0.5, 1.0, 2.0),
            sleep=waits.append,
        )
    assert waits == [0.5, 1.0, 2.0]
    assert registry.calls == 4
    assert caught.value.error_type == c.CONFIG
    assert "schema registry http://registry.test could not serve after 4 attempts over 3.5 s" in str(
        caught.value
    )
    assert "connection refused" in str(caught.value)


def test_a_registry_that_recovers_within_the_backoff_serves_the_record(registry):
    failures = iter([True, True, False])

    def flaky():
        registry.down = next(failures)
        return registry.lookup(7)

    waits: list[float] = []
    assert (
        call_registry(flaky, "http://registry.test", backoff=(1.0, 2.0, 4.0), sleep=waits.append).schema_id
        == 7
    )
    assert waits == [1.0, 2.0]


def test_an_unknown_id_is_not_retried(registry):
    waits: list[float] = []
    with pytest.raises(UnknownSchema):
        call_registry(lambda: registry.lookup(12), "u", backoff=(1.0,), sleep=waits.append)
    assert waits == []


def test_the_registry_travels_to_the_driver_in_its_environment_and_back():
    connection = RegistryConnection(
        "https://registry.example:8081", username="svc", password="s3cret", ca_file="/etc/ca.pem"
    )
    env = registry_environment(connection)
    assert env == {
        "SCHEMA_REGISTRY_URL": "https://registry.example:8081",
        "SCHEMA_REGISTRY_USERNAME": "svc",
        "SCHEMA_REGISTRY_PASSWORD": "s3cret",
        "SCHEMA_REGISTRY_SSL_CA_LOCATION": "/etc/ca.pem",
    }
    assert registry_from_environment(env) == connection
    assert registry_from_environment({}) is None
    assert "s3cret" not in repr(connection)


def test_helpers():
    assert default_subject("orders") == "orders-value"
    assert json_text({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    with pytest.raises(ValueError, match="JSON compliant"):
        json_text(float("nan"))


def test_a_driver_gets_its_own_clusters_registry_and_never_the_workers_default():
    from pipelines.supervision.launcher import driver_environment
    from streamforge_core.kafka import KafkaConnection

    worker = {
        "PATH": "/usr/bin",
        "SCHEMA_REGISTRY_URL": "http://default:8081",
        "SCHEMA_REGISTRY_PASSWORD": "dflt",
    }
    own = RegistryConnection("https://registry.payments:8081", username="svc", password="own-secret")
    env = driver_environment(worker, KafkaConnection("127.0.0.1:9092"), own)
    assert registry_from_environment(env) == own
    assert "dflt" not in env.values()
    plain = driver_environment(worker, KafkaConnection("127.0.0.1:9092"))
    assert not any(name.startswith("SCHEMA_REGISTRY_") for name in plain)
