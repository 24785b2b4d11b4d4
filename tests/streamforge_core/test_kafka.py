"""The Kafka boundary's pure logic (streamforge_core.kafka): retrying transient errors."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

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
