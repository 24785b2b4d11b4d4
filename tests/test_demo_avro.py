"""The demo's Avro topic (``demo.avro_topic``), pure logic: what the feeder writes. Each record names the
schema it was written with (version 1 for the first half of a pass over the events, version 2 after), the
good ones decode back to the event cut to the schema, and the bad ones are bad in the way they say: an id
no registry gave, a body that no longer decodes, a push whose commit count is null. The registry is a
stand-in that answers ``lookup`` from the two texts (the real one is exercised by ``test_demo``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from itertools import islice

import pytest

from demo import avro_topic
from demo.scenario import load_events
from streamforge_core.codec_errors import DecodeError
from streamforge_core.registered_schema import RegisteredSchema
from streamforge_core.schema_codecs import codec_for
from streamforge_core.wire_format import unframe

V1, V2 = 11, 12


class TwoVersions:
    """``lookup`` of the subject's two versions, by id."""

    def __init__(self) -> None:
        self.schemas = {
            V1: RegisteredSchema(V1, "AVRO", json.dumps(avro_topic.schema_v1()), (), avro_topic.SUBJECT, 1),
            V2: RegisteredSchema(V2, "AVRO", json.dumps(avro_topic.schema_v2()), (), avro_topic.SUBJECT, 2),
        }

    def lookup(self, schema_id: int) -> RegisteredSchema:
        return self.schemas[schema_id]


@pytest.fixture(scope="module")
def events() -> list[dict]:
    return load_events()[:40]


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _records(events, bad_every: int, count: int, clock=None) -> list[tuple[bytes, bytes, str]]:
    stream = avro_topic.avro_stream(TwoVersions(), events, (V1, V2), bad_every=bad_every, clock=clock)  # type: ignore[arg-type]
    return list(islice(stream, count))


def test_the_first_half_of_each_pass_is_version_1_the_second_version_2_each_decoding_to_its_event(events):
    registry = TwoVersions()
    moment = datetime(2026, 11, 27, 10, 0, 0, 123000, tzinfo=UTC)
    records = _records(events, 0, 2 * len(events), clock=lambda: moment)
    assert [kind for _, _, kind in records] == (["v1"] * 20 + ["v2"] * 20) * 2
    for n, (key, value, _kind) in enumerate(records):
        event = events[n % len(events)]
        framed = unframe(value, protobuf=False)
        version = avro_topic.schema_v1() if n % 40 < 20 else avro_topic.schema_v2()
        assert framed.schema_id == (V1 if n % 40 < 20 else V2)
        decoded = codec_for(registry.lookup(framed.schema_id)).decode(framed.body)
        expected = avro_topic.fit_to_schema(version, {**event, "id": f"{event['id']}-{n // 40 + 1}"})
        if framed.schema_id == V2:
            assert decoded.pop("received_at") == "2026-11-27T10:00:00.123Z"
        assert _without_nulls(decoded) == _without_nulls(expected)  # a field the event lacks reads as null
        assert key == event["repo"]["name"].encode()


def test_every_nth_record_is_bad_in_the_next_way_and_fails_as_its_kind_says(events):
    registry = TwoVersions()
    records = _records(events, 4, 36)
    bad = [(value, kind) for _, value, kind in records if kind not in ("v1", "v2")]
    assert [kind for _, kind in bad] == [list(avro_topic.BAD_KINDS)[(n // 4) % 3] for n in range(4, 37, 4)]
    for value, kind in bad:
        framed = unframe(value, protobuf=False)
        if kind == "unknown_schema_id":
            assert framed.schema_id == avro_topic.UNKNOWN_SCHEMA_ID
            assert framed.schema_id not in registry.schemas
            continue
        codec = codec_for(registry.lookup(framed.schema_id))
        if kind == "cut_short":
            with pytest.raises(DecodeError):
                codec.decode(framed.body)
        else:
            decoded = codec.decode(framed.body)
            assert (decoded["type"], decoded["payload"]["size"]) == ("PushEvent", None)
            assert decoded["payload"]["distinct_size"] >= 1


def test_the_registered_subjects_are_the_ones_the_pipeline_spec_names():
    from demo.scenario import AVRO_SPEC

    assert AVRO_SPEC["source"]["topics"] == [avro_topic.SOURCE]
    [pushes] = [d for d in AVRO_SPEC["destinations"] if d.get("format") == "avro"]
    assert pushes["topic"] == avro_topic.PUSHES_TOPIC  # its subject, <topic>-value, is registered too
