"""A secured KafkaConnection's client settings, for librdkafka and for the Java client (Spark), its checks, and
the KAFKA_* environment it is read from and handed to a child in (pure logic; the real broker is
``test_secured_broker.py``)."""

from __future__ import annotations

import pytest

from streamforge_core.kafka import (
    KafkaConnection,
    Secret,
    connection_environment,
    connection_from_environment,
    producer_config,
    spark_kafka_options,
)


def scram(**overrides) -> KafkaConnection:
    fields = {
        "bootstrap_servers": "kafka-1:9096",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "sasl_password": Secret('p"w\\d'),
        "ssl_ca_location": "/etc/kafka/ca.pem",
    }
    return KafkaConnection(**{**fields, **overrides})


def test_plaintext_adds_nothing_to_the_bootstrap_servers():
    conn = KafkaConnection("127.0.0.1:9092")
    assert conn.client_settings() == {"bootstrap.servers": "127.0.0.1:9092"}
    assert spark_kafka_options(conn) == {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_sasl_ssl_gives_librdkafka_its_names_and_verifies_the_host_by_default():
    settings = producer_config(scram())
    assert {k: settings[k] for k in settings if k.startswith(("security", "sasl", "ssl"))} == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "https",
    }


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_spark_gets_the_java_names_with_the_credentials_in_a_quoted_jaas_line(mechanism, module):
    options = spark_kafka_options(scram(sasl_mechanism=mechanism))
    assert options["kafka.sasl.mechanism"] == mechanism
    # JAAS quoting: the quote and the backslash inside the password are escaped.
    assert options["kafka.sasl.jaas.config"] == f'{module} required username="alice" password="p\\"w\\\\d";'
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == "/etc/kafka/ca.pem"
    assert options["kafka.ssl.endpoint.identification.algorithm"] == "https"


def test_a_client_certificate_goes_to_librdkafka_as_files_and_to_java_as_inline_pem(tmp_path):
    cert, key = tmp_path / "alice.crt", tmp_path / "alice.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n")
    conn = KafkaConnection(
        "kafka-1:9094",
        security_protocol="SSL",
        ssl_ca_location="/ca.pem",
        ssl_certificate_location=str(cert),
        ssl_key_location=str(key),
        verify_hostname=False,
    )
    assert conn.client_settings()["ssl.certificate.location"] == str(cert)
    assert conn.client_settings()["ssl.key.location"] == str(key)
    assert conn.client_settings()["ssl.endpoint.identification.algorithm"] == "none"
    java = conn.java_client_settings()
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == cert.read_text()
    assert java["ssl.keystore.key"] == key.read_text()
    assert java["ssl.endpoint.identification.algorithm"] == ""  # Java's way of saying "do not check"
    assert "hostname verification OFF" in conn.describe()


def test_the_password_is_in_no_repr_and_no_description():
    conn = scram()
    for text in (repr(conn), str(conn), conn.describe(), repr(conn.sasl_password)):
        assert 'p"w' not in text
    assert conn.describe() == "kafka-1:9096, SASL_SSL, SCRAM-SHA-512 as alice"


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"security_protocol": "TLS"}, "security_protocol must be one of"),
        ({"sasl_mechanism": "GSSAPI"}, "sasl_mechanism must be one of"),
        ({"sasl_password": None}, "needs sasl_username and sasl_password"),
        ({"security_protocol": "SSL"}, "SASL settings were given"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "ssl_ca_location": "/ca.pem"},
            "TLS files were given",
        ),
        (
            {"ssl_certificate_location": "/alice.crt"},
            "needs both ssl_certificate_location and ssl_key_location",
        ),
    ],
)
def test_an_incomplete_or_unknown_combination_is_refused_naming_the_field(overrides, problem):
    with pytest.raises(ValueError, match=problem):
        scram(**overrides)


def test_the_environment_holds_the_password_or_names_a_file_with_it(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    base = {
        "KAFKA_BOOTSTRAP_SERVERS": "b:9096",
        "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "KAFKA_SASL_MECHANISM": "scram-sha-256",
        "KAFKA_SASL_USERNAME": "svc",
    }
    from_file = connection_from_environment({**base, "KAFKA_SASL_PASSWORD_FILE": str(secret)})
    assert from_file.sasl_password == Secret("from-a-file")
    assert (from_file.security_protocol, from_file.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-256")
    inline = connection_from_environment({**base, "KAFKA_SASL_PASSWORD": "in-env"}, bootstrap_servers="o:1")
    assert (inline.bootstrap_servers, inline.sasl_password) == ("o:1", Secret("in-env"))
    with pytest.raises(ValueError, match="needs KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE"):
        connection_from_environment(base)
    with pytest.raises(ValueError, match="KAFKA_SASL_PASSWORD_FILE: cannot read"):
        connection_from_environment({**base, "KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="KAFKA_SSL_VERIFY_HOSTNAME must be true or false"):
        connection_from_environment(
            {**base, "KAFKA_SASL_PASSWORD": "x", "KAFKA_SSL_VERIFY_HOSTNAME": "maybe"}
        )
    assert connection_from_environment({"KAFKA_BOOTSTRAP_SERVERS": "p:9092"}) == KafkaConnection("p:9092")


def test_a_connection_handed_to_a_child_in_its_environment_comes_back_the_same():
    conn = scram(verify_hostname=False)
    env = connection_environment(conn)
    assert env["KAFKA_SASL_PASSWORD"] == 'p"w\\d'  # in the child's environment, never its command line
    assert connection_from_environment(env) == conn
