"""The cluster form's "Test connection" (issue #30 item 10): settings typed in the form are tried once
against the real secured broker (``kafka-secure``, SASL_SSL with SCRAM-SHA-512) before anything is saved,
within a few seconds; the page answers reached / brokers / authentication ok, or the reason (a wrong
password, a broker nobody listens on), keeps what was typed, never shows the password, saves and verifies
nothing, is admins' only and audited."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from access.models import AuditEvent, Role
from pipelines.clusters import TRY_TIMEOUT_SECONDS
from pipelines.models import KafkaCluster
from tests.factories import TeamFactory, member
from tests.streamforge_core.test_secured_broker import _env

pytestmark = [pytest.mark.kafka, pytest.mark.django_db]

WRONG = "not-alices-password"


@pytest.fixture
def secure_eu(tmp_path: Path, settings) -> dict[str, str]:
    """The form's fields for cluster ``secure-eu`` on the secured broker: alice's CA in the cluster's own
    credential folder, the password from the cluster's own variable (set by each test)."""
    folder = tmp_path / "credentials" / "secure-eu"
    folder.mkdir(parents=True)
    shutil.copy(_env("CA"), folder / "ca.pem")
    settings.KAFKA_CREDENTIAL_DIRS = [str(tmp_path / "credentials")]
    return {
        "name": "secure-eu",
        "bootstrap_servers": _env("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "password_ref": "env:STREAMFORGE_CLUSTER_SECURE_EU_PASSWORD",
        "ssl_ca_location": str(folder / "ca.pem"),
        "verify_hostname": "on",
        "action": "test",
    }


def _client(role: Role, username: str) -> Client:
    client = Client()
    team: Any = TeamFactory(name=f"team-{username}")
    client.force_login(member(team, role, username=username))
    return client


def test_a_typed_cluster_is_tried_before_saving_wrong_password_then_right(secure_eu, monkeypatch):
    admin = _client(Role.ADMIN, "ada")
    monkeypatch.setenv("STREAMFORGE_CLUSTER_SECURE_EU_PASSWORD", WRONG)
    started = time.monotonic()
    wrong = admin.post("/clusters/new/", secure_eu)
    assert time.monotonic() - started < 2 * TRY_TIMEOUT_SECONDS + 2
    page = wrong.content.decode()
    assert wrong.status_code == 200
    assert 'data-testid="cluster-try-verdict">Authentication failed<' in page
    assert "<strong>authentication</strong>" in page
    assert f'value="{secure_eu["bootstrap_servers"]}"' in page  # what was typed stays
    assert WRONG not in page

    password = (Path(_env("SECRETS_DIR")) / "alice.password").read_text().strip()
    monkeypatch.setenv("STREAMFORGE_CLUSTER_SECURE_EU_PASSWORD", password)
    right = admin.post("/clusters/new/", secure_eu).content.decode()
    assert 'data-testid="cluster-try-verdict">Reached: 1 broker, authentication ok<' in right
    assert "Cluster id <code>" in right
    assert password not in right
    assert not KafkaCluster.objects.filter(name="secure-eu").exists()  # a test saves nothing

    events = list(AuditEvent.objects.filter(action="kafka_cluster.try").order_by("sequence"))
    assert [(e.actor_name, e.target_id, e.details["ok"]) for e in events] == [
        ("ada", "secure-eu", False),
        ("ada", "secure-eu", True),
    ]
    assert events[0].details["problems"] == ["authentication"]
    assert not any(password in str(e.details) or WRONG in str(e.details) for e in events)


def test_a_broker_nobody_listens_on_is_not_reached_within_the_bound_and_only_admins_try(secure_eu):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    typed = {**secure_eu, "bootstrap_servers": closed}
    started = time.monotonic()
    answer = _client(Role.ADMIN, "ada").post("/clusters/new/", typed).content.decode()
    assert time.monotonic() - started < 2 * TRY_TIMEOUT_SECONDS + 2
    assert 'data-testid="cluster-try-verdict">' in answer
    assert "authentication ok" not in answer

    assert _client(Role.OPERATOR, "oti").post("/clusters/new/", typed).status_code == 403
    assert AuditEvent.objects.filter(action="kafka_cluster.try").count() == 1


def test_settings_that_do_not_validate_are_refused_beside_their_field_and_never_tried(secure_eu):
    typed = {**secure_eu, "password_ref": "env:KAFKA_SASL_PASSWORD"}  # not this cluster's variable
    answer = _client(Role.ADMIN, "ada").post("/clusters/new/", typed)
    assert answer.status_code == 400
    assert 'data-testid="field-error"' in answer.content.decode()
    assert not AuditEvent.objects.filter(action="kafka_cluster.try").exists()


def test_the_api_tries_settings_before_saving_too(secure_eu, monkeypatch):
    """``POST /api/clusters/try/``: the same answer as the form's (a wrong password named), 400 naming a
    missing name, 403 for a non-admin; nothing saved."""
    from rest_framework.test import APIClient

    monkeypatch.setenv("STREAMFORGE_CLUSTER_SECURE_EU_PASSWORD", WRONG)
    body = {k: v for k, v in secure_eu.items() if k not in ("action", "verify_hostname")}
    api = APIClient()
    api.force_authenticate(member(TeamFactory(name="api-ops"), Role.ADMIN, username="api-ada"))
    answer = api.post("/api/clusters/try/", body, format="json")
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["ok"], answer.json()["verdict"]) == (False, "Authentication failed")
    assert [p["kind"] for p in answer.json()["problems"]] == ["authentication"]
    assert WRONG not in answer.content.decode()
    nameless = api.post("/api/clusters/try/", {**body, "name": ""}, format="json")
    assert nameless.status_code == 400
    assert "name" in nameless.json()
    operator = APIClient()
    operator.force_authenticate(member(TeamFactory(name="api-data"), Role.OPERATOR, username="api-oti"))
    assert operator.post("/api/clusters/try/", body, format="json").status_code == 403
    assert not KafkaCluster.objects.filter(name="secure-eu").exists()
