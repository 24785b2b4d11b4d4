"""``bench.avro_codec_measure`` (issue #31): the demo's GitHub events fit ``demo/schemas/github_event.avsc``,
decode back to the same JSON, and the measurement runs. Pure CPU, a few seconds."""

from __future__ import annotations

import json

from bench.avro_codec_measure import EVENTS, SCHEMA, SCHEMA_ID, measure
from demo.avro_topic import fit_to_schema
from streamforge_core.registered_schema import RegisteredSchema
from streamforge_core.schema_codecs import codec_for


def test_every_demo_event_fits_the_schema_and_decodes_to_its_fields_with_created_at_unchanged():
    schema = json.loads(SCHEMA.read_text())
    codec = codec_for(RegisteredSchema(SCHEMA_ID, "AVRO", SCHEMA.read_text(), (), None, None))
    events = [json.loads(line) for line in EVENTS.read_bytes().splitlines()]
    decoded = [codec.decode(codec.encode(fit_to_schema(schema, event))) for event in events]
    assert len(decoded) == 800
    for event, record in zip(events, decoded, strict=True):
        assert record["created_at"] == event["created_at"]  # timestamp-millis shows as the API's own text
        assert record["actor"] == {key: event["actor"][key] for key in record["actor"]}
        assert record["payload"]["size"] == event["payload"].get("size")
        merged = (event["payload"].get("pull_request") or {}).get("merged")
        assert (record["payload"]["pull_request"] or {}).get("merged") == merged


def test_the_measurement_reports_a_rate_for_each_row():
    figures = measure(rounds=1, repeat=1)
    assert set(figures["rows"]) == {
        "avro (unframe + decode + JSON mapping)",
        "json.loads, original lines",
        "json.loads, the Avro record's fields",
    }
    assert all(row["records_per_s"] > 0 for row in figures["rows"].values())
    assert figures["rows"]["avro (unframe + decode + JSON mapping)"]["bytes_per_record"] < 1000
