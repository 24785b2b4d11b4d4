"""The Kafka boundary's pure logic (streamforge_core.kafka): retrying transient errors, partition ends."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from streamforge_core import kafka


def test_retrying_rides_out_a_restarting_broker_and_gives_up_on_real_errors(monkeypatch):
    monkeypatch.setattr(kafka.time, "sleep", lambda _s: None)
    answers = [KafkaError.NOT_COORDINATOR, KafkaError.NOT_LEADER_FOR_PARTITION, None]

    def flaky() -> str:
        code = answers.pop(0)
        if code is not None:
            raise KafkaException(KafkaError(code))
        return "read"

    assert kafka.retrying(flaky) == "read"
    assert answers == []

    calls = []

    def denied() -> str:
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        kafka.retrying(denied)
    assert len(calls) == 1


CONN = kafka.KafkaConnection("broker-a:9092,broker-b:9092")


def test_every_client_role_starts_from_the_connection_settings():
    configs = [
        kafka.producer_config(CONN),
        kafka.transactional_producer_config(CONN, transactional_id="t"),
        kafka.consumer_config(CONN, group_id="g"),
        kafka.admin_config(CONN),
    ]
    assert all(config["bootstrap.servers"] == "broker-a:9092,broker-b:9092" for config in configs)


def test_a_producer_is_idempotent_with_acks_all_unless_asked_otherwise():
    assert kafka.producer_config(CONN)["enable.idempotence"] is True
    assert kafka.producer_config(CONN)["acks"] == "all"
    assert "enable.idempotence" not in kafka.producer_config(CONN, idempotent=False)


def test_a_transactional_producer_names_its_id_and_timeout():
    config = kafka.transactional_producer_config(CONN, transactional_id="p-0", transaction_timeout_ms=30_000)
    assert (config["transactional.id"], config["transaction.timeout.ms"]) == ("p-0", 30_000)
    assert config["enable.idempotence"] is True


def test_a_consumer_never_auto_commits_and_says_its_isolation_level():
    committed = kafka.consumer_config(CONN, group_id="g", offset_reset="earliest")
    assert committed["enable.auto.commit"] is False
    assert committed["isolation.level"] == "read_committed"
    assert committed["auto.offset.reset"] == "earliest"
    assert (
        kafka.consumer_config(CONN, group_id="g", read_committed=False)["isolation.level"]
        == "read_uncommitted"
    )


def test_extra_settings_tune_a_client():
    assert kafka.producer_config(CONN, extra={"linger.ms": 5})["linger.ms"] == 5


def test_spark_options_prefix_each_client_setting_with_kafka():
    assert kafka.spark_kafka_options(CONN) == {"kafka.bootstrap.servers": "broker-a:9092,broker-b:9092"}


def test_a_connection_needs_a_bootstrap_server():
    with pytest.raises(ValueError, match="bootstrap"):
        kafka.KafkaConnection("  ")


def test_record_size_counts_value_key_and_headers_with_their_framing():
    bare = kafka.record_size(None, None, [])
    assert bare == kafka.RECORD_OVERHEAD
    assert (
        kafka.record_size(b"v" * 100, b"kk", [("h", b"123")])
        == bare + 100 + 2 + 1 + 3 + kafka.HEADER_OVERHEAD
    )


def test_a_record_reads_its_first_header_as_text():
    record = kafka.Record("t", 0, 5, None, b"{}", [("a", b"1"), ("a", b"2"), ("n", None)], None)
    assert (record.header("a"), record.header("n"), record.header("missing")) == ("1", None, None)


def test_transient_errors_include_the_local_ones_kafka_does_not_mark_retriable():
    assert kafka.is_transient(KafkaError(KafkaError._TRANSPORT))
    assert kafka.is_transient(KafkaError(KafkaError.NOT_COORDINATOR))
    assert not kafka.is_transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))


def test_an_end_of_partition_event_ends_a_read_only_at_or_past_its_end():
    def eof(offset: int) -> Message:
        return Message(topic="t", partition=0, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))

    assert kafka.reached_end(eof(30), 30)
    assert kafka.reached_end(eof(31), 30)
    # An end seen below the range's end (a stale fetch) is not the end: the read goes on.
    assert not kafka.reached_end(eof(0), 30)
    assert not kafka.reached_end(Message(topic="t", partition=0, offset=30, value=b"v"), 30)
    other = Message(topic="t", partition=0, offset=30, error=KafkaError(KafkaError._TRANSPORT))
    assert not kafka.reached_end(other, 30)
