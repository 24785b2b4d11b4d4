"""Which Kafka cluster the control plane talks to: today the one named by ``KAFKA_BOOTSTRAP_SERVERS``.

Every control-plane Kafka client (lag reads, topic administration, DLQ ingest, replay, readiness) asks
``default_kafka()`` for its ``KafkaConnection`` and builds its configuration with ``streamforge_core.kafka``.
"""

from __future__ import annotations

from django.conf import settings

from streamforge_core.kafka import KafkaConnection


def default_kafka() -> KafkaConnection:
    """The installation's default cluster, read from settings at call time (tests may override it)."""
    return KafkaConnection(settings.KAFKA_BOOTSTRAP_SERVERS)
