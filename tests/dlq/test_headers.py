"""The three DLQ header conventions read into one normalized Failure (pure logic, no broker)."""

from __future__ import annotations

from datetime import UTC, datetime

from dlq import headers
from dlq.grouping import group_key, normalize_message
from streamforge_core import contract as c


def streamforge_headers(**overrides: bytes | None) -> list[tuple[str, bytes | None]]:
    base: dict[str, bytes | None] = {
        c.H_ERROR: b"path /payload/size not found",
        c.H_ERROR_TYPE: b"JsonPathNotFound",
        c.H_SOURCE_TOPIC: b"github.events",
        c.H_SOURCE_PARTITION: b"2",
        c.H_SOURCE_OFFSET: b"1234",
        c.H_TIMESTAMP: b"2026-11-21T08:00:00.123Z",
        c.H_PIPELINE: b"github-demo",
        c.H_DESTINATION: b"pushes",
        c.H_REVISION: b"3",
        c.H_ATTEMPTS: b"1",
        c.H_TRANSFORM: b"EXTRACT:/payload/size,size",
        "trace-id": b"abc",
    }
    base.update(overrides)
    return list(base.items())


def test_it_reads_streamforge_headers():
    failure = headers.parse(streamforge_headers())
    assert failure.convention == "streamforge"
    assert (failure.error_type, failure.error_message) == ("JsonPathNotFound", "path /payload/size not found")
    assert (failure.source_topic, failure.source_partition, failure.source_offset) == (
        "github.events",
        2,
        1234,
    )
    assert (failure.pipeline, failure.destination, failure.revision, failure.attempts) == (
        "github-demo",
        "pushes",
        3,
        1,
    )
    assert failure.failed_at == datetime(2026, 11, 21, 8, 0, 0, 123000, tzinfo=UTC)
    assert failure.extra == {"transform": "EXTRACT:/payload/size,size"}
    assert failure.warnings == []


def test_it_reads_kafka_connect_headers():
    failure = headers.parse(
        [
            ("__connect.errors.topic", b"orders"),
            ("__connect.errors.partition", b"0"),
            ("__connect.errors.offset", b"77"),
            ("__connect.errors.connector.name", b"jdbc-sink"),
            ("__connect.errors.stage", b"VALUE_CONVERTER"),
            ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
            ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
        ]
    )
    assert failure.convention == "kafka_connect"
    assert failure.error_type == "DataException"
    assert failure.error_message.startswith("Converting byte[]")
    assert (failure.source_topic, failure.source_partition, failure.source_offset) == ("orders", 0, 77)
    assert failure.extra["stage"] == "VALUE_CONVERTER"


def test_it_reads_spring_binary_ints_and_longs():
    failure = headers.parse(
        [
            ("kafka_dlt-original-topic", b"payments"),
            ("kafka_dlt-original-partition", headers.spring_int(5)),
            ("kafka_dlt-original-offset", headers.spring_long(2**40 + 3)),
            ("kafka_dlt-original-timestamp", headers.spring_long(1_700_000_000_000)),
            (
                "kafka_dlt-exception-fqcn",
                b"org.springframework.kafka.listener.ListenerExecutionFailedException",
            ),
            (
                "kafka_dlt-exception-message",
                b"Listener failed; nested exception is java.lang.NumberFormatException",
            ),
        ]
    )
    assert failure.convention == "spring"
    assert (failure.source_topic, failure.source_partition, failure.source_offset) == (
        "payments",
        5,
        2**40 + 3,
    )
    assert failure.error_type == "ListenerExecutionFailedException"
    assert failure.extra["original-timestamp"] == "1700000000000"


def test_a_malformed_header_is_a_warning_not_a_failure():
    failure = headers.parse(
        [("kafka_dlt-original-topic", b"x"), ("kafka_dlt-original-partition", b"\x00\x01")]
    )
    assert failure.source_partition is None
    assert failure.warnings == ["kafka_dlt-original-partition: 2 bytes, expected a 4-byte big-endian integer"]
    failure = headers.parse(streamforge_headers(**{c.H_SOURCE_OFFSET: b"twelve"}))
    assert failure.source_offset is None
    assert "not an integer" in failure.warnings[0]


def test_a_number_beyond_what_kafka_or_a_count_can_hold_is_a_warning_not_a_value():
    failure = headers.parse(
        streamforge_headers(
            **{
                c.H_SOURCE_PARTITION: str(2**31).encode(),
                c.H_SOURCE_OFFSET: str(2**63).encode(),
                c.H_REVISION: b"-1",
                c.H_ATTEMPTS: b"99999999999",
            }
        )
    )
    assert (failure.source_partition, failure.source_offset, failure.revision) == (None, None, None)
    assert failure.attempts == 1
    assert len(failure.warnings) == 4
    assert all("out of range" in warning for warning in failure.warnings)
    assert headers.parse(
        streamforge_headers(**{c.H_SOURCE_OFFSET: str(2**63 - 1).encode()})
    ).source_offset == (2**63 - 1)


def test_a_record_without_known_headers_is_unknown():
    failure = headers.parse([("content-type", b"application/json")])
    assert (failure.convention, failure.error_type) == ("unknown", "Unknown")


def test_a_replayed_record_that_failed_again_carries_its_replay_id():
    failure = headers.parse([*streamforge_headers(), (c.H_REPLAY_ID, b"5d0c"), (c.H_REPLAY_OF, b"dlq/0/9")])
    assert (failure.replay_id, failure.replay_of) == ("5d0c", "dlq/0/9")


def test_replay_sends_only_the_original_headers():
    kept = headers.original_headers(
        [
            *streamforge_headers(),
            (c.H_LINEAGE, b"src/0/1"),
            ("__connect.errors.topic", b"t"),
            ("kafka_dlt-original-topic", b"t"),
            (c.H_REPLAY_ID, b"old"),
        ]
    )
    assert kept == [("trace-id", b"abc"), (c.H_LINEAGE, b"src/0/1")]


def test_messages_that_differ_only_in_values_share_a_group():
    a = normalize_message("invalid JSON: Expecting value: line 1 column 5 (char 4)")
    b = normalize_message("invalid JSON: Expecting value: line 1 column 99 (char 98)")
    assert a == b == "invalid JSON: Expecting value: line <n> column <n> (char <n>)"
    assert normalize_message("path /payload/size not found") != normalize_message(
        "path /payload/ref not found"
    )
    assert normalize_message("id 3f2b1c9e-0d4a-4c1e-9a7b-2f1e0c9d8b7a failed") == "id <uuid> failed"
    key = group_key(team_id=1, pipeline="p", dlq_topic="d", error_type="JsonPathNotFound", signature=a)
    assert key == group_key(
        team_id=1, pipeline="p", dlq_topic="other", error_type="JsonPathNotFound", signature=b
    )
    assert key != group_key(
        team_id=1, pipeline="q", dlq_topic="d", error_type="JsonPathNotFound", signature=a
    )


def test_the_same_failure_of_two_teams_never_shares_a_group():
    """The owner is part of the key, so records attributed to team 2 never land in team 1's group."""
    same = {"pipeline": "p", "dlq_topic": "d", "error_type": "JsonPathNotFound", "signature": "s"}
    assert group_key(team_id=1, **same) != group_key(team_id=2, **same)
