"""The transactional writer's start: ``init_transactions`` is retried on retriable errors (a previous holder
of the transactional id left a transaction the coordinator is still aborting), never on fatal ones."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipelines.spark import writer
from pipelines.spec import RetryPolicy
from streamforge_core.kafka import KafkaConnection

CONFIG = writer.WriterConfig(
    pipeline="p",
    revision=1,
    kafka=KafkaConnection("127.0.0.1:1"),
    mode="effectively_once",
    consumer_group="g",
    destinations=(writer.DestinationInfo("d", "t", None, None, 1_048_588),),
    dlq_topic="dlq",
    dlq_max_message_bytes=1_048_588,
    include_original_headers=True,
    include_stack_trace=False,
    max_dlq_retries=1,
    retry=RetryPolicy(3, 1, 1, 2.0, 0.0),
)


class FlakyProducer:
    """Stands in for confluent_kafka.Producer: init_transactions fails with ``errors`` in turn, then works."""

    errors: list[KafkaError] = []
    calls = 0

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def init_transactions(self, timeout: float) -> None:
        FlakyProducer.calls += 1
        if FlakyProducer.errors:
            raise KafkaException(FlakyProducer.errors.pop(0))


@pytest.fixture
def flaky(monkeypatch):
    monkeypatch.setattr(writer, "Producer", FlakyProducer)
    monkeypatch.setattr(writer.time, "sleep", lambda _s: None)
    FlakyProducer.calls = 0
    return FlakyProducer


def test_a_transaction_still_being_aborted_is_waited_out(flaky):
    concurrent = KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, "still aborting", retriable=True)
    flaky.errors = [concurrent, concurrent]
    producer = writer._transactional_producer(CONFIG, "streamforge-p-t-0")
    assert isinstance(producer, FlakyProducer)
    assert flaky.calls == 3


def test_a_fatal_error_is_raised_at_once(flaky):
    flaky.errors = [KafkaError(KafkaError._FENCED, "fenced", fatal=True)]
    with pytest.raises(KafkaException):
        writer._transactional_producer(CONFIG, "streamforge-p-t-0")
    assert flaky.calls == 1


class _DeliveryReport:
    """What confluent-kafka hands a delivery callback: value and key, but ``headers()`` is None."""

    def value(self) -> bytes:
        return b'{"a":1}'

    def key(self) -> bytes:
        return b"k"

    def headers(self) -> None:
        return None


def test_a_failed_delivery_is_retried_with_its_headers():
    """The fast path rebuilds a failed record from its delivery report; the headers (the lineage header
    among them) must come along, or the retry writes a record nobody can trace (`make chaos`, broker
    restart, at_least_once)."""
    batch_writer = writer.BatchWriter(CONFIG)
    headers = [("x-streamforge-source", b"events/0/1004"), ("trace", None)]
    report = batch_writer._failure_reporter(3, 0, "t", headers, 1_700_000_000_000)
    report(KafkaError(KafkaError._MSG_TIMED_OUT), _DeliveryReport())
    [(pending, error)] = batch_writer.failed
    assert error.code() == KafkaError._MSG_TIMED_OUT
    assert (pending.topic, pending.value, pending.key, pending.timestamp) == (
        "t",
        b'{"a":1}',
        b"k",
        1_700_000_000_000,
    )
    assert pending.headers == headers
