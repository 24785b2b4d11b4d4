"""The transactional writer's start: ``init_transactions`` is retried on retriable errors (a previous holder
of the transactional id left a transaction the coordinator is still aborting), never on fatal ones."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipelines.spark import writer
from pipelines.spec import RetryPolicy

CONFIG = writer.WriterConfig(
    pipeline="p",
    revision=1,
    bootstrap="127.0.0.1:1",
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
