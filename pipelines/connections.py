"""Which Kafka cluster the control plane talks to: today the one named by ``KAFKA_BOOTSTRAP_SERVERS``, secured
by the other ``KAFKA_*`` variables (``streamforge_core.kafka.connection_from_environment``: TLS, SASL, mTLS).

Every control-plane Kafka client (lag reads, topic administration, DLQ ingest, replay, readiness) asks
``default_kafka()`` for its ``KafkaConnection`` and builds its configuration with ``streamforge_core.kafka``.
"""

from __future__ import annotations

import os

from django.conf import settings

from streamforge_core.kafka import KafkaConnection, connection_from_environment


def default_kafka() -> KafkaConnection:
    """The installation's default cluster: the bootstrap servers from settings (tests may override them),
    security from the environment, read at call time (a rotated password file is picked up). Raises
    ValueError naming the ``KAFKA_*`` variable that is missing or wrong."""
    return connection_from_environment(os.environ, bootstrap_servers=str(settings.KAFKA_BOOTSTRAP_SERVERS))
