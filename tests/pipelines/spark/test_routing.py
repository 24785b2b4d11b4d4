"""The routing compiled into the plan (``pipelines.spark.routing``, for real-time mode) writes what the Python
writer writes: the same records to the same topics with the same key, value and headers, and the same
counts, for records that pass, are filtered, fail a transform, do not decode, are too large for their
topic, and replays restricted to some destinations. The writer runs on the same enriched rows with a
producer that records what it is handed instead of sending it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import types as T

from pipelines.spark import routing, writer
from pipelines.spark.driver import enrich
from pipelines.spec import parse_spec
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import KafkaConnection

pytestmark = [pytest.mark.spark]

SOURCE_SCHEMA = T.StructType(
    [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
        T.StructField(
            "headers",
            T.ArrayType(
                T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
            ),
        ),
    ]
)
SPEC = {
    "source": {"topics": ["events"]},
    "destinations": [
        {
            "name": "pushes",
            "topic": "pushes-out",
            "filter": "/type,==,PushEvent",
            "transform": "EXTRACT:/actor/login,login",
        },
        {
            "name": "archive",
            "topic": "archive-out",
            "filter": "EXISTS:/id",
            "key_transform": "/id",
            "headers": {"x-team": "core"},
        },
    ],
    "dlq": {"topic": "events.dlq"},
}
#: archive-out's max.message.bytes: small, so one record of the corpus is too large for it.
ARCHIVE_LIMIT = 400


def _event(kind: str, login: str | None, ident: str, pad: int = 0) -> bytes:
    event: dict[str, Any] = {"id": ident, "type": kind, "pad": "x" * pad}
    if login is not None:
        event["actor"] = {"login": login}
    return json.dumps(event).encode()


#: The installation's replay key both backends verify replay headers with.
KEY = b"routing test replay key"


def _replay(value: bytes, of: str = "", to: str = "", *, forge: bool = False) -> list[tuple[str, bytes]]:
    """The replay headers the console sends with ``value`` (signed), or a producer's forgery of them."""
    headers = [(c.H_REPLAY_OF, of.encode())] if of else []
    headers += [(c.H_REPLAY_DESTINATIONS, to.encode())] if to else []
    signature = replay_signing.sign(b"not the key" if forge else KEY, of, to, value)
    return [*headers, (c.H_REPLAY_SIGNATURE, signature.encode())]


_K7, _K9, _K10 = (
    _event("PushEvent", "fay", "7"),
    _event("PushEvent", "gus", "9"),
    _event("PushEvent", "hal", "10"),
)
_K14, _K15 = _event("PushEvent", "ida", "14"), _event("PushEvent", "jon", "15")

CORPUS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]] = [
    (b"k1", _event("PushEvent", "ada", "1"), None),  # produced by both
    (b"k2", _event("WatchEvent", "bob", "2"), [("trace", b"t-2")]),  # filtered by pushes
    (b"k3", _event("PushEvent", None, "3"), [("trace", b"t-3")]),  # pushes: JsonPathNotFound
    (b"k4", b'{"id": "4", "type": ', [("trace", b"t-4")]),  # does not decode: one DLQ record for all
    (None, None, None),  # a tombstone: does not decode either
    (b"k6", _event("WatchEvent", "eve", "6", pad=500), None),  # too large for archive-out
    (b"k7", _K7, _replay(_K7, to="archive")),  # pushes skips
    (b"k8", b"not json", _replay(b"not json", to="pushes, gone")),  # a decode failure for pushes only
    (b"k9", _K9, _replay(_K9, "other.dlq/0/3")),  # not ours: both skip
    (b"k10", _K10, _replay(_K10, "events.dlq/1/2")),  # ours, for both
    # Values Spark's lenient parse accepts and only the evaluator's strict decoder refuses: the micro-batch
    # writer decodes them again, the real-time plan's exact parse must refuse them itself.
    (b"k11", b'{"id": "11", "type": "PushEvent", "n": 1e400}', None),
    (b"k12", b'{"id": "12", "type": "PushEvent", "s": "\\ud800"}', None),
    (b"k13", b'{"id": "13", "type": "WatchEvent"} {"again": 1}', None),
    # Replay headers a producer wrote (security review #28, finding 4): an ordinary record for both.
    (b"k14", _K14, [(c.H_REPLAY_OF, b"other.dlq/0/3")]),
    (b"k15", _K15, _replay(_K15, to="archive", forge=True)),
]


class RecordingProducer:
    """What ``BatchWriter`` hands its producer, in order; every delivery succeeds."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []

    def produce(self, topic: str, value=None, key=None, headers=None, timestamp=0, on_delivery=None) -> None:
        self.records.append((topic, key, value, list(headers or [])))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0


def _config(include_original_headers: bool = True) -> writer.WriterConfig:
    spec = parse_spec(SPEC, pipeline_name="routing")
    limits = {"pushes-out": 1_048_588, "archive-out": ARCHIVE_LIMIT}
    return writer.WriterConfig(
        pipeline="routing",
        revision=3,
        kafka=KafkaConnection("127.0.0.1:1"),
        mode="at_least_once",
        consumer_group="g",
        destinations=tuple(
            writer.DestinationInfo(d.name, d.topic, d.filter, d.transform, limits[d.topic])
            for d in spec.destinations
        ),
        dlq_topic=spec.dlq.topic,
        dlq_max_message_bytes=1_048_588,
        include_original_headers=include_original_headers,
        include_stack_trace=False,
        max_dlq_retries=1,
        retry=spec.retry,
        replay_key=KEY,
    )


def _normalized(topic: str, key: Any, value: Any, headers: list[tuple[str, Any]]) -> tuple:
    """A record with its DLQ write time replaced by a marker (the two sides write at different instants);
    the time must still be ISO-8601 UTC in milliseconds, as the writer writes it. A decode failure's reason
    is cut to its kind ("invalid JSON", "invalid UTF-8"): the micro-batch writer reports the Python decoder's
    detail (line and column), which the real-time plan's exact parse does not know."""
    out = []
    undecodable = (c.H_ERROR_TYPE, c.MESSAGE_DESERIALIZATION.encode()) in [
        (n, bytes(d or b"")) for n, d in headers
    ]
    for name, data in headers:
        if name == c.H_TIMESTAMP:
            text = bytes(data).decode()
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text), text
            assert abs(datetime.fromisoformat(text).timestamp() - datetime.now(UTC).timestamp()) < 120
            data = b"<now>"
        if name == c.H_ERROR and undecodable:
            data = bytes(data).split(b":", 1)[0]
        out.append((name, None if data is None else bytes(data)))
    return (topic, None if key is None else bytes(key), None if value is None else bytes(value), tuple(out))


@pytest.fixture
def enriched(spark_session):
    rows = [
        (key, value, "events", 0, offset, datetime(2024, 5, 1, tzinfo=UTC), 0,
         [(k, v) for k, v in headers] if headers is not None else None)
        for offset, (key, value, headers) in enumerate(CORPUS)
    ]  # fmt: skip
    source = spark_session.createDataFrame(rows, SOURCE_SCHEMA)
    spec = parse_spec(SPEC, pipeline_name="routing")
    # (the micro-batch writer's input: a lenient parse it checks again; the real-time plan's: an exact one)
    return enrich(source, spec), enrich(source, spec, exact_deserialization=True)


def _writer_output(enriched, config, monkeypatch) -> tuple[list[tuple], dict[str, int]]:
    enriched = enriched[0]
    producer = RecordingProducer()
    monkeypatch.setattr(writer, "_producer", lambda _config: producer)
    batch_writer = writer.BatchWriter(config)
    table = enriched.toArrow()
    summaries = list(batch_writer.write(iter(table.to_batches())))
    assert len(summaries) == 1
    records = [_normalized(*record) for record in producer.records]
    return records, {k: v for k, v in batch_writer.counts.items() if v}


def _plan_output(enriched, config) -> tuple[list[tuple], dict[str, int]]:
    enriched = enriched[1]
    routed = routing.route(enriched, config).collect()
    records = [
        _normalized(r.topic, r.key, r.value, [(h.key, h.value) for h in r.headers or []]) for r in routed
    ]
    (totals,) = routing.with_fates(enriched, config).agg(*routing.metric_columns(config)).collect()
    counts = {k: v for k, v in totals.asDict().items() if v and k != "consumed"}
    assert totals["consumed"] == len(CORPUS)
    return records, counts


@pytest.mark.parametrize("include_original_headers", [True, False])
def test_the_plan_writes_the_records_and_counts_the_writer_writes(
    enriched, monkeypatch, include_original_headers
):
    config = _config(include_original_headers)
    expected_records, expected_counts = _writer_output(enriched, config, monkeypatch)
    records, counts = _plan_output(enriched, config)

    assert sorted(records, key=repr) == sorted(expected_records, key=repr)
    assert counts == expected_counts
    # The corpus reaches every case it is meant to.
    assert expected_counts["dlq_type:RecordTooLarge"] == 1
    assert expected_counts["dlq_type:JsonPathNotFound"] == 1
    assert expected_counts["dlq_type:MessageDeserialization"] == 6
    assert expected_counts["dest:pushes:replay_skipped"] == 2
    assert expected_counts["dest:archive:replay_skipped"] == 2
    assert expected_counts["dest:pushes:filtered"] >= 1


def test_each_source_record_gets_the_fate_the_cases_describe(enriched):
    config = _config()
    records, _counts = _plan_output(enriched, config)
    by_offset: dict[int, list[tuple[str, str]]] = {}
    for topic, _key, _value, headers in records:
        named = dict(headers)
        if topic == config.dlq_topic:
            offset = int(named[c.H_SOURCE_OFFSET])
            by_offset.setdefault(offset, []).append(
                (f"dlq:{named[c.H_DESTINATION].decode()}", named[c.H_ERROR_TYPE].decode())
            )
        else:
            offset = int(named[c.H_LINEAGE].decode().rsplit("/", 1)[1])
            by_offset.setdefault(offset, []).append((topic, "produced"))
    assert {k: sorted(v) for k, v in by_offset.items()} == {
        0: [("archive-out", "produced"), ("pushes-out", "produced")],
        1: [("archive-out", "produced")],
        2: [("archive-out", "produced"), ("dlq:pushes", "JsonPathNotFound")],
        3: [("dlq:*", "MessageDeserialization")],
        4: [("dlq:*", "MessageDeserialization")],
        5: [("dlq:archive", "RecordTooLarge")],
        6: [("archive-out", "produced")],
        7: [("dlq:pushes", "MessageDeserialization")],
        9: [("archive-out", "produced"), ("pushes-out", "produced")],
        10: [("dlq:*", "MessageDeserialization")],
        11: [("dlq:*", "MessageDeserialization")],
        12: [("dlq:*", "MessageDeserialization")],
        13: [("archive-out", "produced"), ("pushes-out", "produced")],
        14: [("archive-out", "produced"), ("pushes-out", "produced")],
    }
    too_large = next(r for r in records if dict(r[3]).get(c.H_ERROR_TYPE) == b"RecordTooLarge")
    # The size is the produced value's (the JSON as the destination writes it, not the source bytes).
    message = dict(too_large[3])[c.H_ERROR].decode()
    found = re.fullmatch(
        rf"record of (\d+) bytes exceeds max.message.bytes={ARCHIVE_LIMIT} of topic archive-out", message
    )
    assert found, message
    assert 500 < int(found[1]) < len(CORPUS[5][1] or b"")
