"""A schema registry per Kafka cluster (issue #31): the registry settings of a named cluster are validated
(400 naming the field), audited like its other settings and never hold a secret; "Test connection" (API and
form) tries the typed registry against the real Apicurio of the test profile, bounded, saying why not; and
``GET /api/clusters/<name>/subjects/`` lists the subjects for those who may browse the cluster's topics."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from pipelines.clusters import is_verified
from pipelines.models import KafkaCluster
from pipelines.registries import TRY_TIMEOUT_SECONDS, registry_for
from pipelines.services import create_pipeline
from streamforge_core.schema_registry import RegistryConnection, SchemaRegistry
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.kafka, pytest.mark.registry, pytest.mark.django_db]

SECRET = "registry-s3cret-value"


def _api(role: Role, username: str) -> tuple[APIClient, Any]:
    api = APIClient()
    team: Any = TeamFactory(name=f"team-{username}")
    user = member(team, role, username=username)
    api.force_authenticate(user)
    return api, user


def _registry_url() -> str:
    url = os.environ.get("SCHEMA_REGISTRY_URL", "")
    assert url, "SCHEMA_REGISTRY_URL is not set: start the test profile's registry"
    return url


def test_registry_settings_are_validated_audited_and_never_a_secret(kafka_bootstrap, monkeypatch):
    monkeypatch.setenv("STREAMFORGE_CLUSTER_EU_REGISTRY_PASSWORD", SECRET)
    admin, admin_user = _api(Role.ADMIN, "ada")
    base = {"name": "eu", "bootstrap_servers": kafka_bootstrap, "security_protocol": "PLAINTEXT"}
    bad_bodies = [
        ({**base, "registry_url": "ftp://registry:8081"}, "registry_url"),
        ({**base, "registry_url": f"http://u:{SECRET}@registry:8081"}, "registry_url"),
        ({**base, "registry_url": "http://r:8081", "registry_username": "u", "registry_password_ref": SECRET},
         "registry_password_ref"),
        ({**base, "registry_url": "http://r:8081", "registry_username": "u",
          "registry_password_ref": "env:STREAMFORGE_CLUSTER_OTHER_REGISTRY_PASSWORD"}, "registry_password_ref"),
        ({**base, "registry_url": "http://r:8081", "registry_ca_location": "/etc/ssl/ca.pem"}, "registry_ca_location"),
        ({**base, "registry_username": "u"}, "registry_username"),
    ]  # fmt: skip
    for body, field in bad_bodies:
        answer = admin.post("/api/clusters/", body, format="json")
        assert answer.status_code == 400, (body, answer.content)
        assert field in answer.json(), (field, answer.json())
        assert SECRET not in answer.content.decode()
    assert not KafkaCluster.objects.exists()

    good = {
        **base,
        "registry_url": _registry_url(),
        "registry_username": "svc",
        "registry_password_ref": "env:STREAMFORGE_CLUSTER_EU_REGISTRY_PASSWORD",
    }
    created = admin.post("/api/clusters/", good, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["registry_password_ref"] == "env:STREAMFORGE_CLUSTER_EU_REGISTRY_PASSWORD"
    assert admin.post("/api/clusters/eu/test/").json()["verified"] is True
    connection = registry_for(KafkaCluster.objects.get(name="eu"))
    assert (connection.url, connection.username, connection.password) == (_registry_url(), "svc", SECRET)
    assert SECRET not in repr(connection)

    changed = admin.patch("/api/clusters/eu/", {"registry_url": _registry_url() + "/"}, format="json")
    assert changed.status_code == 200
    assert is_verified(KafkaCluster.objects.get(name="eu"))  # the brokers did not move
    update = AuditEvent.objects.get(action="kafka_cluster.update", target_id="eu")
    assert update.details["changed"] == ["registry_url"]
    shown = admin.get("/api/clusters/").content.decode()
    assert "registry_url" in shown
    assert SECRET not in shown
    page = Client()
    page.force_login(admin_user)
    listed = page.get("/clusters/").content.decode()
    assert f"registry {_registry_url()}/ as svc" in listed
    assert SECRET not in listed
    every_audit = json.dumps([e.details for e in AuditEvent.objects.all()])
    assert SECRET not in every_audit


def test_the_try_action_reaches_the_registry_or_says_why_within_the_bound(kafka_bootstrap, monkeypatch):
    monkeypatch.setenv("STREAMFORGE_CLUSTER_TRY_EU_REGISTRY_PASSWORD", SECRET)
    admin, _ = _api(Role.ADMIN, "ada")
    body = {
        "name": "try-eu",
        "bootstrap_servers": kafka_bootstrap,
        "security_protocol": "PLAINTEXT",
        "registry_url": _registry_url(),
        "registry_username": "svc",
        "registry_password_ref": "env:STREAMFORGE_CLUSTER_TRY_EU_REGISTRY_PASSWORD",
    }
    with SchemaRegistry(RegistryConnection(_registry_url())) as registry:
        count = len(registry.subjects())
    good = admin.post("/api/clusters/try/", body, format="json")
    assert good.status_code == 200, good.json()
    assert good.json()["ok"] is True
    assert good.json()["registry"]["ok"] is True
    assert good.json()["registry"]["verdict"].startswith("Registry reached: ")
    assert good.json()["registry"]["subjects"] >= count

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    down = admin.post("/api/clusters/try/", {**body, "registry_url": closed}, format="json").json()
    assert time.monotonic() - started < 2 * 3.0 + TRY_TIMEOUT_SECONDS + 2
    assert (down["ok"], down["registry"]["verdict"]) == (False, "Registry not reached")
    wrong_path = _registry_url().split("/apis/")[0] + "/nothing"
    not_api = admin.post("/api/clusters/try/", {**body, "registry_url": wrong_path}, format="json").json()
    assert not_api["registry"]["verdict"] == "Registry answered, but not with a Confluent-compatible API"
    without = admin.post("/api/clusters/try/", {**body, "registry_url": "", "registry_username": "",
                                                "registry_password_ref": ""}, format="json").json()  # fmt: skip
    assert without["registry"] is None

    # the cluster form's "Test connection" says the same, under the Kafka verdict
    page = Client()
    form_team: Any = TeamFactory(name="form-ops")
    page.force_login(member(form_team, Role.ADMIN, username="form-ada"))
    form = page.post("/clusters/new/", {**body, "action": "test", "verify_hostname": "on"}).content.decode()
    assert "Registry reached: " in form
    assert SECRET not in form

    events = list(AuditEvent.objects.filter(action="kafka_cluster.try_registry").order_by("sequence"))
    assert [(e.details["ok"], e.details["verdict"]) for e in events][:3] == [
        (True, good.json()["registry"]["verdict"]),
        (False, "Registry not reached"),
        (False, "Registry answered, but not with a Confluent-compatible API"),
    ]
    assert SECRET not in json.dumps([e.details for e in events])
    assert SECRET not in json.dumps([good.json(), down, not_api])
    assert not KafkaCluster.objects.filter(name="try-eu").exists()


def test_subjects_are_listed_for_those_who_may_browse_the_clusters_topics():
    tag = uuid.uuid4().hex[:8]
    schema = json.dumps({"type": "record", "name": f"S{tag}", "fields": [{"name": "a", "type": "int"}]})
    with SchemaRegistry(RegistryConnection(_registry_url())) as registry:
        schema_id = registry.register(f"subjects-{tag}-value", schema)

    admin, admin_user = _api(Role.ADMIN, "ada")
    listed = admin.get("/api/clusters/default/subjects/")
    assert listed.status_code == 200, listed.content
    mine = [s for s in listed.json() if s["name"] == f"subjects-{tag}-value"]
    assert mine == [
        {"name": f"subjects-{tag}-value", "version": 1, "schema_id": schema_id, "schema_type": "AVRO"}
    ]

    viewer, viewer_user = _api(Role.VIEWER, "vic")
    assert viewer.get("/api/clusters/default/subjects/").status_code == 404  # no pipeline on it: not theirs
    create_pipeline(
        actor=admin_user,
        name=f"p-{tag}",
        team=viewer_user.memberships.first().team,
        spec={
            "source": {"topics": [f"src-{tag}"]},
            "destinations": [{"name": "all", "topic": f"out-{tag}"}],
            "dlq": {"topic": f"dlq-{tag}"},
        },
    )
    assert any(
        s["name"] == f"subjects-{tag}-value" for s in viewer.get("/api/clusters/default/subjects/").json()
    )
    assert viewer.get("/api/clusters/").status_code == 403  # the rest of the cluster API stays admins'
    assert admin.get("/api/clusters/nosuch/subjects/").status_code == 404
