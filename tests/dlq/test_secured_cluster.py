"""The control plane on a secured cluster: with the installation's connection set to SASL_SSL (the KAFKA_*
environment), DLQ records are ingested from the secured DLQ topic, a fixed payload is replayed onto the
secured source topic, the consumer group's lag is read, and the audit anchor writes there too: every
control-plane client goes through the one boundary with the cluster's settings."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from dlq import services
from dlq.ingest import Ingester
from dlq.models import DeadLetter, Status
from pipelines.lag import consumer_group_lag
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, admin_config, connection_environment, producer_config
from tests.dlq.conftest import dlq_headers
from tests.pipelines.spark.harness import consume_all
from tests.streamforge_core.test_secured_broker import _env, sasl

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.django_db]


@pytest.fixture
def secured_installation(settings, monkeypatch):
    """The installation's default cluster is the secured broker, as alice (SCRAM-SHA-512 over SASL_SSL)."""
    conn = sasl("alice")
    for name, value in connection_environment(conn).items():
        monkeypatch.setenv(name, value)
    settings.KAFKA_BOOTSTRAP_SERVERS = conn.bootstrap_servers
    settings.AUDIT_ANCHOR_TOPIC = f"secure.audit-{uuid.uuid4().hex[:8]}"  # within alice's ACLs
    internal = AdminClient(admin_config(KafkaConnection(_env("SECURE_INTERNAL"))))
    created: list[str] = []

    def topic(name: str, partitions: int = 1) -> str:
        internal.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
        created.append(name)
        return name

    yield conn, topic
    created.append(str(settings.AUDIT_ANCHOR_TOPIC))
    existing = set(internal.list_topics(timeout=10).topics)
    doomed = sorted(set(created) & existing)
    if doomed:
        for future in internal.delete_topics(doomed).values():
            future.result(timeout=30)


def test_ingest_fix_replay_and_lag_work_against_the_secured_cluster(secured_installation, team, people):
    conn, topic = secured_installation
    suffix = uuid.uuid4().hex[:8]
    source, dlq = topic(f"secure.src-{suffix}", 2), topic(f"secure.dlq-{suffix}")
    spec = {
        "source": {"topics": [source], "consumer_group": f"secure.g-{suffix}"},
        "destinations": [{"name": "pushes", "topic": f"secure.pushes-{suffix}", "filter": "EXISTS:/id"}],
        "dlq": {"topic": dlq},
    }
    pipeline = create_pipeline(actor=people["admin"], name=f"sec-{suffix}", team=team, spec=spec)

    # A dead letter arrives on the secured DLQ topic, and the ingester (the installation's connection) stores it.
    broken = b'{"id": 7, "type": "PushEvent"'
    with_headers = Producer(producer_config(conn))
    with_headers.produce(
        dlq,
        key=b"k7",
        value=broken,
        headers=dlq_headers(
            pipeline, error_type="MessageDeserialization", message="bad JSON", source_offset=3
        ),
    )
    assert with_headers.flush(30) == 0
    ingester = Ingester(group_id=f"secure.ingest-{suffix}", poll_timeout=1.0)
    stored = 0
    for _ in range(30):
        stored += ingester.run_once().inserted
        if stored >= 1:
            break
    ingester.stop.set()
    assert stored == 1
    dead = DeadLetter.objects.filter(dlq_topic=dlq, error_type="MessageDeserialization").get()
    assert dead.pipeline_id == pipeline.pk

    # Fixed and replayed: the record arrives on the secured source topic with the replay headers.
    services.fix_payload(
        actor=people["operator"],
        dead_letter=dead,
        value=b'{"id": 7, "type": "PushEvent"}',
        reason="closed the brace",
    )
    replay = services.replay(actor=people["operator"], dead_letter=dead, reason="fixed")
    [arrived] = consume_all(conn, source, group_prefix="secure.reader-")
    assert json.loads(arrived.value) == {"id": 7, "type": "PushEvent"}
    assert arrived.header(c.H_REPLAY_ID) == str(replay.replay_id)
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.REPLAYED

    # Lag of the pipeline's consumer group, read through the installation's connection.
    lags = consumer_group_lag(group=f"secure.g-{suffix}", topics=[source])
    assert sorted((lag.partition, lag.committed) for lag in lags) == [(0, None), (1, None)]
    assert sum(lag.lag for lag in lags) == 1  # the replayed record, not yet consumed by any driver
