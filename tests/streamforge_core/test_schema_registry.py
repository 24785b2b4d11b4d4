"""The schema registry client (``streamforge_core.schema_registry``) against the real Apicurio Registry of the
test profile (``SCHEMA_REGISTRY_URL``): Avro, Protobuf (with a reference) and JSON Schema registered and
looked up by id, from a bounded cache afterwards; an unknown id is the record's fault (``UnknownSchema``), a
registry that does not answer is transient (``RegistryUnavailable``) and said quickly, a server that is not
a registry is never taken for one that does not know the id."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest

from streamforge_core.schema_registry import (
    NotARegistry,
    Reference,
    RegistryConnection,
    RegistryUnavailable,
    SchemaRegistry,
    UnknownSchema,
)

pytestmark = pytest.mark.registry


@pytest.fixture
def registry(registry_url):
    with SchemaRegistry(RegistryConnection(registry_url, timeout_s=5), cache_size=2) as client:
        yield client


def test_avro_protobuf_and_json_schema_are_registered_and_looked_up_by_id(registry):
    tag = uuid.uuid4().hex[:8]
    avro = json.dumps({"type": "record", "name": f"Ev{tag}", "fields": [{"name": "id", "type": "long"}]})
    avro_id = registry.register(f"avro-{tag}-value", avro)
    money = (
        f'syntax = "proto3";\npackage m{tag};\nmessage Money {{ string currency = 1; int64 units = 2; }}\n'
    )
    registry.register(f"money-{tag}.proto", money, "PROTOBUF")
    order = (
        f'syntax = "proto3";\npackage o{tag};\nimport "money-{tag}.proto";\n'
        f"message Order {{ string id = 1; m{tag}.Money total = 2; }}\n"
    )
    proto_id = registry.register(
        f"proto-{tag}-value", order, "PROTOBUF", ((f"money-{tag}.proto", f"money-{tag}.proto", 1),)
    )
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "title": tag}
    json_id = registry.register(f"json-{tag}-value", json.dumps(schema), "JSON")

    found = registry.lookup(avro_id)
    assert (found.schema_id, found.schema_type, found.subject, found.version) == (
        avro_id,
        "AVRO",
        f"avro-{tag}-value",
        1,
    )
    assert json.loads(found.schema_str) == json.loads(avro)
    proto = registry.lookup(proto_id)
    assert (proto.schema_type, proto.schema_str, proto.subject) == ("PROTOBUF", order, f"proto-{tag}-value")
    assert proto.references == (Reference(f"money-{tag}.proto", f"money-{tag}.proto", 1, money),)
    as_json = registry.lookup(json_id)
    assert (as_json.schema_type, json.loads(as_json.schema_str)) == ("JSON", schema)

    # ids are immutable: a looked-up schema is served from memory (the HTTP client may even be gone), and the
    # cache keeps at most cache_size (2) schemas
    registry._client.close()
    assert registry.lookup(json_id) == as_json
    assert len(registry._cache) == 2

    # a second version of the subject, and the compatibility check before it
    newer = json.dumps(
        {"type": "record", "name": f"Ev{tag}", "fields": [{"name": "id", "type": "long"},
                                                         {"name": "note", "type": ["null", "string"], "default": None}]}
    )  # fmt: skip
    url = registry.connection.url
    with SchemaRegistry(RegistryConnection(url, timeout_s=5)) as fresh:
        assert fresh.check_compatibility(f"avro-{tag}-value", newer) is True
        fresh.register(f"avro-{tag}-value", newer)
        assert (
            fresh.latest(f"avro-{tag}-value").version,
            fresh.version(f"avro-{tag}-value", 1).schema_id,
        ) == (2, avro_id)


def test_an_unknown_id_is_the_records_fault_and_a_wrong_path_is_not_a_registry(registry):
    with pytest.raises(UnknownSchema) as unknown:
        registry.lookup(987_654_321)
    assert unknown.value.schema_id == 987_654_321
    assert str(unknown.value) == "unknown schema id 987654321"
    # remembered for a while: a topic of records with a bogus id asks once per id, not once per record
    url = registry.connection.url
    with SchemaRegistry(RegistryConnection(url, timeout_s=5), unknown_ttl_s=60) as remembering:
        with pytest.raises(UnknownSchema):
            remembering.lookup(987_654_322)
        remembering._client.close()
        calls = []
        remembering._client.get_schema = lambda schema_id: calls.append(schema_id)
        with pytest.raises(UnknownSchema):
            remembering.lookup(987_654_322)
        assert calls == []
    with SchemaRegistry(RegistryConnection(url, timeout_s=5), unknown_ttl_s=0) as forgetting:
        for _ in range(2):
            with pytest.raises(UnknownSchema):
                forgetting.lookup(987_654_323)
        assert forgetting._unknown == {}
    # the same server under a path that is not the Confluent API: its 404 must not dead-letter the record
    root = registry.connection.url.split("/apis/")[0] + "/nothing"
    with SchemaRegistry(RegistryConnection(root, timeout_s=5)) as wrong, pytest.raises(NotARegistry):
        wrong.lookup(1)


def test_a_registry_that_does_not_answer_is_unavailable_within_the_bound():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match="not reached"):
        SchemaRegistry(RegistryConnection(f"http://127.0.0.1:{closed}", retries=0)).lookup(1)
    assert time.monotonic() - started < 2

    # a registry that accepts connections and never answers (a hung JVM): the timeout bounds the wait
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: held.append(silent.accept()[0]), daemon=True)
    accepting.start()
    try:
        started = time.monotonic()
        connection = RegistryConnection(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=1, retries=1)
        with pytest.raises(RegistryUnavailable, match="timed out"):
            SchemaRegistry(connection).lookup(1)
        assert time.monotonic() - started < 1 * 2 + 2  # two attempts of 1 s, a short backoff
    finally:
        for conn in held:
            conn.close()
        silent.close()
