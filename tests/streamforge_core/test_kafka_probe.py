"""The connection test (``streamforge_core.kafka_probe``) on the real brokers: one clear answer per failure,
each of the kind that decides whether a pipeline halts (Config) or retries."""

from __future__ import annotations

import socket
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from streamforge_core.kafka import KafkaConnection, Secret
from streamforge_core.kafka_probe import probe
from tests.streamforge_core.test_secured_broker import _env, sasl, secure_topic  # noqa: F401  # the fixture

pytestmark = [pytest.mark.kafka]


def _kinds(report) -> list[tuple[str, str]]:
    return [(p.kind, p.message) for p in report.problems]


def test_a_principal_with_its_acls_passes_and_the_cluster_is_described(secure_topic):  # noqa: F811
    report = probe(sasl("alice"), read=[secure_topic], write=[secure_topic], timeout=5)
    assert report.ok, _kinds(report)
    assert report.brokers == 1
    assert report.cluster_id
    assert {"READ", "WRITE", "DESCRIBE"} <= set(report.operations[secure_topic])


def test_a_missing_write_acl_is_named_with_its_topic(secure_topic):  # noqa: F811
    report = probe(sasl("bob"), read=[secure_topic], write=[secure_topic], timeout=5)
    assert _kinds(report) == [("authorization", f"not authorized to WRITE topic {secure_topic}")]
    assert report.config_problems() == report.problems


def test_a_wrong_password_is_an_authentication_failure_with_the_brokers_reason():
    [(kind, message)] = _kinds(probe(sasl("alice", secret=Secret("nope")), timeout=4))
    assert kind == "authentication"
    assert "authentication as alice failed" in message
    assert "invalid credentials" in message


def test_a_certificate_for_another_host_is_named_as_a_hostname_mismatch():
    [(kind, message)] = _kinds(probe(sasl("alice", bootstrap=_env("WRONG_HOST")), timeout=4))
    assert kind == "tls"
    assert "does not name the host" in message


def test_an_mtls_listener_without_a_client_certificate_says_so():
    conn = KafkaConnection(_env("MTLS"), security_protocol="SSL", ssl_ca_location=_env("CA"))
    [(kind, message)] = _kinds(probe(conn, timeout=4))
    assert kind == "tls"
    assert "client certificate" in message


def test_a_closed_port_is_unreachable_and_not_a_config_problem():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = probe(KafkaConnection(f"127.0.0.1:{port}"), timeout=3)
    [(kind, message)] = _kinds(report)
    assert kind == "unreachable"
    assert "Connection refused" in message
    assert report.config_problems() == []


@pytest.mark.django_db
def test_the_command_checks_the_installations_cluster_and_fails_naming_each_problem(kafka_bootstrap):
    out = StringIO()
    call_command("kafka_check", stdout=out)
    assert "cluster " in out.getvalue()
    assert out.getvalue().rstrip().endswith("ok")
    with pytest.raises(CommandError, match="missing_topic: topic no-such-topic-x1 does not exist"):
        call_command("kafka_check", "--write", "no-such-topic-x1", stdout=StringIO())
