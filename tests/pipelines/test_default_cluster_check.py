"""Security review #28, finding 2: SASL PLAIN without TLS is refused for the default cluster too (its
settings come from the environment, so the refusal is a system check that fails ``manage.py check``)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from pipelines.checks import default_cluster_plain_over_plaintext_check


def test_plain_over_plaintext_for_the_default_cluster_fails_the_checks(monkeypatch):
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "sasl_plaintext")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "PLAIN")
    [problem] = default_cluster_plain_over_plaintext_check()
    assert problem.id == "pipelines.E001"
    with pytest.raises(SystemCheckError, match="in clear"):
        call_command("check")


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("PLAINTEXT", ""), ("", "")],
)
def test_tls_or_another_mechanism_passes(monkeypatch, protocol, mechanism):
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", protocol)
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", mechanism)
    assert default_cluster_plain_over_plaintext_check() == []
