"""The demo's Avro topic (#31): the same real GitHub events, re-encoded in the Confluent wire format with
``schemas/github_event.avsc`` registered as ``github.events.avro-value``, so the demo shows a pipeline over
the kind of topic most teams run.

What the records carry, on purpose:

- **Two writer versions.** The first half of each pass over the events is written with version 1 of the
  subject, the second half with version 2, which adds an optional ``received_at``. Each record names its
  own schema id, so the pipeline decodes each with the schema it was written with.
- **Bad input of three kinds**, every ``bad_every``-th record in rotation:
  - framed with an id the registry never gave (``MessageDeserialization``: unknown schema id);
  - a body cut short (``MessageDeserialization``: not Avro for that schema);
  - a push without its commit count (valid Avro, ``payload.size`` null): the pipeline refuses a null, so it
    is a dead letter to fix as JSON in the console and replay (framed again with its writer schema).

Django-free except ``register_schemas``'s caller: the stream is pure logic over a registry client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import SchemaRegistry
from streamforge_core.wire_format import frame

SCHEMA_FILE = Path(__file__).resolve().parent / "schemas" / "github_event.avsc"
SOURCE = "github.events.avro"
SUBJECT = f"{SOURCE}-value"
#: The pipeline's Avro destination and its subject's schema (what the ``pushes`` projection writes).
PUSHES_TOPIC = "github.avro.pushes"
PUSH_SUMMARY = {
    "type": "record",
    "name": "PushSummary",
    "namespace": "io.streamforge.demo.github",
    "fields": [
        {"name": "actor", "type": "string"},
        {"name": "repo", "type": "string"},
        {"name": "commits", "type": "int"},
    ],
}
#: An id no registry of the demo gives out (Apicurio counts from 1), in the signed 32-bit range the wire
#: format carries: a record framed with it is bad input, not a registry outage.
UNKNOWN_SCHEMA_ID = 2_000_000_000


def schema_v1() -> dict[str, Any]:
    """Version 1: ``schemas/github_event.avsc`` as parsed JSON."""
    return dict(json.loads(SCHEMA_FILE.read_text()))


def schema_v2() -> dict[str, Any]:
    """Version 2: version 1 plus ``received_at`` (optional, default null): backward compatible, so a reader
    of either version reads both."""
    v1 = schema_v1()
    received_at = {
        "name": "received_at",
        "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
        "default": None,
        "doc": "When the demo's feeder produced the record (version 2).",
    }
    return {**v1, "fields": [*v1["fields"], received_at]}


def register_schemas(registry: SchemaRegistry) -> tuple[int, int]:
    """Register both versions of ``SUBJECT`` and the ``pushes`` destination's subject (registering a text
    the subject has already returns its id: safe on every start). Returns (v1 id, v2 id). Raises the
    registry client's ``RegistryError`` subclasses."""
    v1 = registry.register(SUBJECT, json.dumps(schema_v1()))
    v2 = registry.register(SUBJECT, json.dumps(schema_v2()))
    registry.register(f"{PUSHES_TOPIC}-value", json.dumps(PUSH_SUMMARY))
    return v1, v2


def fit_to_schema(schema: Any, value: Any, named: dict[str, Any] | None = None) -> Any:
    """``value`` (a decoded GitHub event) cut down to the fields ``schema`` (parsed Avro JSON) declares:
    fields the schema lacks are dropped, fields the value lacks are left out (their default, null, is
    written). Handles what ``github_event.avsc`` uses: records, arrays, ``["null", T]`` unions, primitives
    and logical types."""
    named = {} if named is None else named
    if isinstance(schema, str):
        return fit_to_schema(named[schema], value, named) if schema in named else value
    if isinstance(schema, list):
        branch = next(branch for branch in schema if branch != "null")
        return None if value is None else fit_to_schema(branch, value, named)
    if schema["type"] == "record":
        named[schema["name"]] = schema
        fields = schema["fields"]
        return {
            f["name"]: fit_to_schema(f["type"], value[f["name"]], named) for f in fields if f["name"] in value
        }
    if schema["type"] == "array":
        return [fit_to_schema(schema["items"], item, named) for item in value]
    return value


#: The kinds of bad record, in rotation: kind -> the error type the pipeline gives it.
BAD_KINDS = {
    "unknown_schema_id": "MessageDeserialization",
    "push_without_size": "TransformEvaluation",
    "cut_short": "MessageDeserialization",
}


def avro_stream(
    registry: SchemaRegistry,
    events: list[dict[str, Any]],
    versions: tuple[int, int],
    *,
    bad_every: int,
    clock: Callable[[], datetime] | None = None,
) -> Iterator[tuple[bytes, bytes, str]]:
    """Endless (key, value, kind) records of ``events`` (each with a fresh id per pass, as the JSON feed):
    the first half of each pass framed with ``versions[0]``, the second with ``versions[1]`` (with
    ``received_at`` from ``clock()``, an aware datetime; without a clock it is null); every ``bad_every``-th record (0:
    none) is bad in the next way of ``BAD_KINDS``. ``kind`` is ``v1``, ``v2`` or the bad kind. Raises the
    registry client's errors when a schema cannot be looked up (once per id: the client caches)."""
    v1_id, v2_id = versions
    codecs = {v1_id: codec_for(registry.lookup(v1_id)), v2_id: codec_for(registry.lookup(v2_id))}
    shapes = {v1_id: schema_v1(), v2_id: schema_v2()}
    bad = list(BAD_KINDS)
    n = 0
    cycle = 0
    while True:
        cycle += 1
        for index, event in enumerate(events):
            n += 1
            schema_id = v1_id if index < len(events) // 2 else v2_id
            fresh = fit_to_schema(shapes[schema_id], {**event, "id": f"{event.get('id')}-{cycle}"})
            if schema_id == v2_id and clock is not None:
                fresh["received_at"] = clock().astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
            key = str((event.get("repo") or {}).get("name", "")).encode()
            kind = "v1" if schema_id == v1_id else "v2"
            if bad_every and n % bad_every == 0:
                kind = bad[(n // bad_every) % len(bad)]
            if kind == "push_without_size":
                fresh = copy.deepcopy(fresh)
                fresh["type"] = "PushEvent"
                payload = fresh.get("payload") or {}
                fresh["payload"] = {
                    **payload,
                    "size": None,
                    "distinct_size": payload.get("distinct_size") or 1,
                }
            body = codecs[schema_id].encode(fresh)
            if kind == "unknown_schema_id":
                yield key, frame(UNKNOWN_SCHEMA_ID, body), kind
            elif kind == "cut_short":
                yield key, frame(schema_id, body[: len(body) // 3]), kind
            else:
                yield key, frame(schema_id, body), kind
