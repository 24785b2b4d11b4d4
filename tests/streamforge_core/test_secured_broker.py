"""Secured connections through the Kafka boundary, on the test stack's real secured broker (devstack's
``kafka-secure``: SASL_SSL with SCRAM-SHA-512 and PLAIN users, SSL with required client certificates, a
listener whose certificate names another host, and ACLs: alice may use ``secure.*``, bob may only read it).
librdkafka clients and Spark's Java client, each through ``streamforge_core.kafka``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streamforge_core.kafka import (
    KafkaConnection,
    Secret,
    admin_config,
    consumer_config,
    producer_config,
    spark_kafka_options,
)

pytestmark = [pytest.mark.kafka]


def _env(name: str) -> str:
    value = os.environ.get(f"STREAMFORGE_TEST_KAFKA_{name}")
    if not value:
        pytest.fail(f"STREAMFORGE_TEST_KAFKA_{name} is not set: start the test stack (make test does)")
    return value


def password(user: str) -> Secret:
    return Secret((Path(_env("SECRETS_DIR")) / f"{user}.password").read_text().strip())


def sasl(
    user: str, *, mechanism: str = "SCRAM-SHA-512", secret: Secret | None = None, **kw
) -> KafkaConnection:
    return KafkaConnection(
        kw.pop("bootstrap", _env("SASL_SSL")),
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_username=user,
        sasl_password=secret or password(user),
        ssl_ca_location=_env("CA"),
        **kw,
    )


def mtls(user: str = "alice", **kw) -> KafkaConnection:
    return KafkaConnection(
        _env("MTLS"),
        security_protocol="SSL",
        ssl_ca_location=_env("CA"),
        ssl_certificate_location=_env(f"CLIENT_CERT_{user.upper()}"),
        ssl_key_location=_env(f"CLIENT_KEY_{user.upper()}"),
        **kw,
    )


#: Quiet clients: the failures these tests provoke would otherwise print a line per retry.
QUIET = {"log_level": 0}


def _failure_of(conn: KafkaConnection) -> str:
    """The first error a client of ``conn`` meets while asking for metadata (its error callback's text)."""
    errors: list[str] = []
    admin = AdminClient(admin_config(conn, extra={**QUIET, "error_cb": lambda e: errors.append(str(e))}))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=6)
    for _ in range(20):  # the error callback is served by poll
        admin.poll(0.25)
        if errors:
            break
    return " | ".join(errors)


@pytest.fixture
def secure_topic() -> Iterator[str]:
    """A fresh ``secure.*`` topic, created by alice (her ACLs include CREATE on the prefix) and deleted by
    the broker's own principal afterwards (nobody else may delete)."""
    name = f"secure.t-{uuid.uuid4().hex[:10]}"
    alice = AdminClient(admin_config(sasl("alice")))
    alice.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    yield name
    internal = AdminClient(admin_config(KafkaConnection(_env("SECURE_INTERNAL"))))
    internal.delete_topics([name])[name].result(timeout=30)


def _produce(
    conn: KafkaConnection, topic: str, values: list[bytes], *, idempotent: bool = True
) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    producer = Producer(producer_config(conn, idempotent=idempotent, extra=QUIET))
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(30)
    return outcomes


def _consume(conn: KafkaConnection, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        consumer_config(
            conn, group_id=f"secure.g-{uuid.uuid4().hex[:8]}", offset_reset="earliest", extra=QUIET
        )
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(60):
            for message in consumer.consume(num_messages=count, timeout=1):
                assert message.error() is None, message.error()
                values.append(message.value() or b"")
            if len(values) >= count:
                return values
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_alice_produces_and_consumes_over_sasl_ssl(secure_topic, mechanism):
    conn = sasl("alice", mechanism=mechanism)
    assert _produce(conn, secure_topic, [b"one", b"two"]) == [None, None]
    assert _consume(conn, secure_topic, 2) == [b"one", b"two"]


def test_alice_produces_with_her_client_certificate_and_reads_over_sasl(secure_topic):
    assert _produce(mtls("alice"), secure_topic, [b"by certificate"]) == [None]
    assert _consume(sasl("alice"), secure_topic, 1) == [b"by certificate"]


def test_bob_may_read_but_his_write_is_refused_by_the_topic_acl(secure_topic):
    _produce(sasl("alice"), secure_topic, [b"for bob"])
    assert _consume(sasl("bob"), secure_topic, 1) == [b"for bob"]
    # Not idempotent: an idempotent producer would be refused earlier, for IDEMPOTENT_WRITE on the cluster.
    [refused] = _produce(sasl("bob"), secure_topic, [b"from bob"], idempotent=False)
    assert refused is not None
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_wrong_password_fails_with_the_brokers_authentication_reason():
    failure = _failure_of(sasl("alice", secret=Secret("not-her-password")))
    assert "Authentication failed" in failure
    assert "SCRAM-SHA-512" in failure


def test_the_mtls_listener_refuses_a_client_without_a_certificate():
    conn = KafkaConnection(_env("MTLS"), security_protocol="SSL", ssl_ca_location=_env("CA"))
    assert _failure_of(conn)  # the handshake fails: the broker requires a client certificate


def test_a_broker_certificate_for_another_host_is_refused_unless_verification_is_off():
    wrong = _env("WRONG_HOST")
    failure = _failure_of(sasl("alice", bootstrap=wrong))
    assert "certificate verify failed" in failure
    # The same listener with the host check off connects: the refusal was the host name, nothing else.
    admin = AdminClient(admin_config(sasl("alice", bootstrap=wrong, verify_hostname=False), extra=QUIET))
    assert admin.list_topics(timeout=15).brokers


@pytest.mark.spark
@pytest.mark.parametrize("listener", ["sasl", "mtls"])
def test_spark_reads_a_secured_topic_with_the_boundarys_java_options(secure_topic, spark_session, listener):
    _produce(sasl("alice"), secure_topic, [b"a", b"b", b"c"])
    conn = sasl("alice") if listener == "sasl" else mtls("alice")
    frame = (
        spark_session.read.format("kafka")
        .options(**spark_kafka_options(conn))
        .option("subscribe", secure_topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    assert sorted(bytes(row.value) for row in frame.select("value").collect()) == [b"a", b"b", b"c"]
    # Where Spark shows a streaming plan (explain, its UI, the event log: the driver's source is a stream),
    # the source's options are listed, and the credentials among them are masked.
    stream = (
        spark_session.readStream.format("kafka")
        .options(**spark_kafka_options(conn))
        .option("subscribe", secure_topic)
        .load()
    )
    jvm = spark_session.sparkContext._jvm
    assert jvm is not None
    plan = jvm.PythonSQLUtils.explainString(stream._jdf.queryExecution(), "extended")
    shown = (
        [conn.sasl_password.reveal()]
        if conn.sasl_password
        else [Path(conn.ssl_key_location).read_text()[40:80]]
    )
    assert "kafka.bootstrap.servers" in plan or secure_topic in plan
    for secret in shown:
        assert secret not in plan
