"""Named Kafka clusters: the rules a cluster's settings obey (passwords only as references bound to the
cluster), their administration over the API, the pages and the command (admin only, audited), and what
follows a pipeline's cluster: DLQ topic ownership per cluster, readiness, and a launch whose password cannot
be read. The verification flow itself (an admin's test against real brokers) is test_cluster_secrets.py's;
here ``approve`` records it directly where a test is about what comes after it."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from dlq.ingest import dlq_topics, store_batch
from dlq.models import FailureGroup
from dlq.services.admin import register_topic
from dlq.services.errors import InvalidRequest
from pipelines import clusters, supervision
from pipelines.models import KafkaCluster, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline, delete_pipeline
from pipelines.spec import SpecError
from streamforge_core.kafka import Record
from streamforge_web.health import readiness
from tests.dlq.conftest import dlq_headers
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def creds(tmp_path, settings):
    """The credential folders of clusters prod-eu and west (a password file each) in a credential directory
    allowed by settings; another folder beside it, not allowed."""
    root = tmp_path / "secrets"
    for name in ("prod-eu", "west"):
        (root / name).mkdir(parents=True)
        (root / name / "pw").write_text("s3cret-value\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "pw").write_text("other\n")
    settings.KAFKA_CREDENTIAL_DIRS = [str(root)]
    return root / "prod-eu", outside


def approve(row: KafkaCluster) -> None:
    """Record an admin's passing test of ``row``'s current settings (what ``check_cluster`` stores)."""
    KafkaCluster.objects.filter(pk=row.pk).update(verified_fingerprint=clusters.settings_fingerprint(row))


@pytest.fixture
def admin():
    return member(TeamFactory(name="ops"), Role.ADMIN, username="ada")


def _sasl(**overrides):
    name = overrides.get("name", "prod-eu")
    return {
        "name": name,
        "bootstrap_servers": "kafka-1.example.com:9093,kafka-2.example.com:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "streamforge",
        "password_ref": f"env:{clusters.password_variable(name)}",
        **overrides,
    }


def test_a_complete_sasl_cluster_is_valid():
    assert clusters.validate(_sasl()) == {}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"password_ref": "hunter2"}, "password_ref"),  # a password instead of a reference
        ({"password_ref": "env:DJANGO_SECRET_KEY"}, "password_ref"),  # not the cluster's variable
        ({"password_ref": "env:KAFKA_SASL_PASSWORD"}, "password_ref"),  # the default cluster's
        ({"password_ref": "env:kafka_lower"}, "password_ref"),
        ({"password_ref": ""}, "password_ref"),
        ({"sasl_username": ""}, "sasl_username"),
        ({"sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
        ({"security_protocol": "PLAINTEXT"}, "sasl_mechanism"),  # SASL settings without SASL
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, "sasl_mechanism"),  # in clear
        ({"bootstrap_servers": "kafka.example.com"}, "bootstrap_servers"),  # no port
        ({"bootstrap_servers": "kafka.example.com:99999"}, "bootstrap_servers"),
        ({"bootstrap_servers": " , "}, "bootstrap_servers"),
        ({"name": "default"}, "name"),  # the environment's cluster
        ({"name": "Prod EU"}, "name"),
    ],
)
def test_a_wrong_setting_is_named_with_its_reason(overrides, field):
    errors = clusters.validate(_sasl(**overrides))
    assert field in errors, errors
    assert all(errors[field])


def test_referenced_files_must_lie_in_the_clusters_folder_even_through_dot_dot_or_a_link(creds, tmp_path):
    allowed, outside = creds
    assert clusters.reference_problem(f"file:{allowed}/pw", "prod-eu") is None
    assert clusters.reference_problem(f"file:{allowed}/pw", "west")  # prod-eu's folder, not west's
    for ref in (
        f"file:{outside}/pw",
        f"file:{allowed}/../../elsewhere/pw",
        f"file:{allowed}/../west/pw",
        f"file:{allowed}/../pw",
        "file:relative/pw",
        "file:/etc/shadow",
        f"file:{allowed}/p\x00w",  # the manage.py and service paths have no serializer to refuse a NUL
    ):
        assert clusters.reference_problem(ref, "prod-eu"), ref
    (allowed / "link").symlink_to(outside / "pw")
    assert clusters.reference_problem(f"file:{allowed}/link", "prod-eu")
    errors = clusters.validate(_sasl(password_ref=f"file:{allowed}/pw", ssl_ca_location=str(outside / "pw")))
    assert list(errors) == ["ssl_ca_location"]
    assert clusters.validate(_sasl(ssl_certificate_location=f"{allowed}/pw"))["ssl_key_location"]


def test_a_password_is_read_from_its_reference_each_time_and_never_shown(creds, monkeypatch, admin):
    allowed, _ = creds
    row = clusters.save_cluster(actor=admin, values=_sasl(password_ref=f"file:{allowed}/pw"))
    approve(row)
    first = clusters.connection_for(row)
    assert first.sasl_password is not None
    assert first.sasl_password.reveal() == "s3cret-value"
    assert "s3cret" not in repr(first) + first.describe()
    (allowed / "pw").write_text("rotated\n")
    rotated = clusters.connection_for(row).sasl_password
    assert rotated is not None
    assert rotated.reveal() == "rotated"
    row = clusters.save_cluster(
        actor=admin, values={"password_ref": "env:STREAMFORGE_CLUSTER_PROD_EU_PASSWORD"}, cluster=row
    )
    with pytest.raises(clusters.ClusterNotVerified, match="not been tested"):  # a change withdraws it
        clusters.connection_for(row)
    approve(row)
    monkeypatch.delenv("STREAMFORGE_CLUSTER_PROD_EU_PASSWORD", raising=False)
    with pytest.raises(clusters.CredentialUnavailable, match="STREAMFORGE_CLUSTER_PROD_EU_PASSWORD"):
        clusters.connection_for(row)


def test_only_admins_manage_clusters_and_every_change_is_audited(admin):
    operator = member(TeamFactory(name="data"), Role.OPERATOR, username="oti")
    with pytest.raises(clusters.PermissionDenied):
        clusters.save_cluster(actor=operator, values=_sasl())
    row = clusters.save_cluster(actor=admin, values=_sasl())
    clusters.save_cluster(actor=admin, values={"sasl_username": "svc-streamforge"}, cluster=row)
    clusters.delete_cluster(actor=admin, cluster=row)
    events = list(AuditEvent.objects.filter(target_type="kafka_cluster").order_by("sequence"))
    assert [e.action for e in events] == [
        "kafka_cluster.create",
        "kafka_cluster.update",
        "kafka_cluster.delete",
    ]
    assert events[1].details == {"changed": ["sasl_username"]}
    assert all(e.actor_name == "ada" for e in events)


def test_the_api_lists_creates_changes_and_deletes_clusters_for_admins_only(admin):
    api = APIClient()
    api.force_authenticate(admin)
    operator = APIClient()
    operator.force_authenticate(member(TeamFactory(name="data"), Role.OPERATOR, username="oti"))
    assert operator.get("/api/clusters/").status_code == 403
    assert operator.post("/api/clusters/", _sasl(), format="json").status_code == 403

    refused = api.post("/api/clusters/", _sasl(password_ref="hunter2"), format="json")
    assert refused.status_code == 400
    assert "password_ref" in refused.json()
    assert b"hunter2" not in refused.content  # the refusal explains without echoing it

    created = api.post("/api/clusters/", _sasl(), format="json")
    assert created.status_code == 201, created.json()
    assert api.post("/api/clusters/", _sasl(), format="json").status_code == 400  # the name is taken
    listed = api.get("/api/clusters/").json()
    assert [c["name"] for c in listed] == ["default", "prod-eu"]
    assert listed[0]["from_environment"] is True

    changed = api.patch("/api/clusters/prod-eu/", {"verify_hostname": False}, format="json")
    assert changed.status_code == 200
    assert changed.json()["verify_hostname"] is False
    assert api.patch("/api/clusters/prod-eu/", {"name": "other"}, format="json").status_code == 400
    assert api.patch("/api/clusters/default/", {"description": "x"}, format="json").status_code == 400
    assert api.get("/api/clusters/nope/").status_code == 404

    team = TeamFactory(name="payments")
    create_pipeline(
        actor=admin,
        name="orders",
        team=team,
        spec={"source": {"topics": ["orders"]}, "destinations": [{"name": "all", "topic": "orders-out"}]},
        cluster=KafkaCluster.objects.get(name="prod-eu"),
    )
    in_use = api.delete("/api/clusters/prod-eu/")
    assert in_use.status_code == 409
    assert "orders" in in_use.json()["detail"]
    delete_pipeline(actor=admin, pipeline=Pipeline.objects.get(name="orders"))
    assert api.delete("/api/clusters/prod-eu/").status_code == 204
    assert not KafkaCluster.objects.exists()


def test_a_pipeline_names_its_cluster_and_dlq_topics_are_owned_per_cluster(admin):
    team = admin.memberships.first().team
    east = clusters.save_cluster(actor=admin, values=_sasl(name="east"))
    spec = {
        "source": {"topics": ["orders"]},
        "destinations": [{"name": "all", "topic": "orders-out"}],
        "dlq": {"topic": "orders-dlq"},
    }
    api = APIClient()
    api.force_authenticate(admin)
    unknown = api.post(
        "/api/pipelines/", {"name": "x", "team": "ops", "cluster": "west", "spec": spec}, format="json"
    )
    assert unknown.status_code == 400
    assert "cluster" in unknown.json()
    on_default = api.post("/api/pipelines/", {"name": "orders", "team": "ops", "spec": spec}, format="json")
    assert on_default.json()["cluster"] == "default"
    # The same DLQ topic name on another cluster is another topic ...
    on_east = api.post(
        "/api/pipelines/",
        {"name": "orders-east", "team": "ops", "cluster": "east", "spec": spec},
        format="json",
    )
    assert on_east.status_code == 201, on_east.json()
    assert Pipeline.objects.get(name="orders-east").cluster == east
    # ... but on the same cluster it still has one owner
    with pytest.raises(SpecError, match="orders-dlq"):
        create_pipeline(actor=admin, name="orders-east-2", team=team, spec=spec, cluster=east)
    with pytest.raises(InvalidRequest, match="orders-dlq"):
        register_topic(actor=admin, topic="orders-dlq", team=team, cluster=east)
    registered = register_topic(actor=admin, topic="connect-dlq", team=team, cluster=east)
    assert register_topic(actor=admin, topic="connect-dlq", team=team).cluster is None  # the default's own
    with pytest.raises(InvalidRequest, match="another Kafka cluster"):
        register_topic(
            actor=admin, topic="x-dlq", team=team, pipeline=Pipeline.objects.get(name="orders"), cluster=east
        )
    assert registered.cluster == east


def test_readiness_reports_an_unreachable_named_cluster_as_degraded_not_failing(admin, settings):
    settings.READINESS_TIMEOUT_SECONDS = 1
    clusters.save_cluster(
        actor=admin,
        values={"name": "gone", "bootstrap_servers": "127.0.0.1:9", "security_protocol": "PLAINTEXT"},
    )
    result = readiness()
    assert result["checks"]["kafka"]["ok"], result  # the test broker, the default cluster
    assert result["checks"]["kafka:gone"]["ok"] is False
    assert result["degraded"] == ["kafka:gone"]
    assert result["status"] == "ready"
    assert "kafka:gone" not in result["failing"]


@pytest.mark.django_db(transaction=True)
def test_a_pipeline_whose_cluster_password_cannot_be_read_halts_with_reason_config(admin, monkeypatch):
    monkeypatch.delenv("STREAMFORGE_CLUSTER_PROD_EU_PASSWORD", raising=False)
    cluster = clusters.save_cluster(actor=admin, values=_sasl())
    approve(cluster)
    pipeline = create_pipeline(
        actor=admin,
        name="orders",
        team=admin.memberships.first().team,
        spec={"source": {"topics": ["orders"]}, "destinations": [{"name": "all", "topic": "orders-out"}]},
        cluster=cluster,
    )
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state="running")
    run = supervision.start_pipeline(pipeline_id=pipeline.pk)
    assert run is not None
    run = PipelineRun.objects.get(pk=run.pk)
    assert (run.error_type, run.pid) == ("Config", None)
    assert "STREAMFORGE_CLUSTER_PROD_EU_PASSWORD" in run.error_message
    assert Pipeline.objects.get(pk=pipeline.pk).state == PipelineState.HALTED


def test_the_pages_let_an_admin_add_test_and_delete_a_cluster(admin, creds):
    allowed, _ = creds
    browser = Client()
    browser.force_login(admin)
    page = browser.get("/clusters/")
    assert page.status_code == 200
    assert b"default" in page.content
    form = {**_sasl(name="west", password_ref="hunter2"), "verify_hostname": "on"}
    refused = browser.post("/clusters/new/", form)
    assert refused.status_code == 400
    assert b"never the password" in refused.content
    form["password_ref"] = f"file:{allowed}/pw"  # prod-eu's folder
    refused = browser.post("/clusters/new/", form)
    assert refused.status_code == 400
    assert b"own credential folder" in refused.content
    form["password_ref"] = f"file:{allowed.parent}/west/pw"
    assert browser.post("/clusters/new/", form).status_code == 302
    assert KafkaCluster.objects.get(name="west").verify_hostname is True
    tested = browser.post("/clusters/default/test/")
    assert tested.status_code == 200
    assert b'data-testid="cluster-check"' in tested.content
    assert browser.post("/clusters/west/delete/", {"confirm_name": "wrong"}).status_code == 302
    assert KafkaCluster.objects.filter(name="west").exists()  # not confirmed: kept
    browser.post("/clusters/west/delete/", {"confirm_name": "west"})
    assert not KafkaCluster.objects.filter(name="west").exists()
    stranger = Client()
    stranger.force_login(member(TeamFactory(name="data"), Role.OPERATOR, username="oti"))
    assert stranger.get("/clusters/").status_code == 403
    assert stranger.post("/clusters/default/test/").status_code == 403


def test_the_command_adds_lists_and_removes_clusters_as_a_named_admin(admin):
    with pytest.raises(CommandError, match="--as"):
        call_command("kafka_cluster", "add", "north", "--bootstrap-servers", "k:9092")
    with pytest.raises(CommandError, match="password_ref"):
        call_command(
            "kafka_cluster", "add", "north", "--as", "ada", "--bootstrap-servers", "k:9093",
            "--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "u",
            "--password-ref", "hunter2",
        )  # fmt: skip
    call_command("kafka_cluster", "add", "north", "--as", "ada", "--bootstrap-servers", "k:9092")
    out = io.StringIO()
    call_command("kafka_cluster", "list", stdout=out)
    assert "north: k:9092 PLAINTEXT, 0 pipeline(s)" in out.getvalue()
    call_command("kafka_cluster", "remove", "north", "--as", "ada")
    assert not KafkaCluster.objects.exists()
    actions = list(
        AuditEvent.objects.filter(target_id="north").order_by("sequence").values_list("action", flat=True)
    )
    assert actions == ["kafka_cluster.create", "kafka_cluster.delete"]
    assert json.dumps(list(AuditEvent.objects.values("details")), default=str).count("hunter2") == 0
    assert os.environ.get("STREAMFORGE_CLUSTER_NORTH_PASSWORD") is None


def test_dead_letters_of_two_clusters_share_one_console_and_filter_by_cluster(admin):
    """One topic name on two clusters is two topics: their records are two rows, two failure groups, and the
    console's cluster filter tells them apart (the real-broker version: test_named_cluster.py)."""
    team = admin.memberships.first().team
    east = clusters.save_cluster(actor=admin, values=_sasl(name="east"))
    spec = {
        "source": {"topics": ["orders"]},
        "destinations": [{"name": "all", "topic": "orders-out"}],
        "dlq": {"topic": "orders-dlq"},
    }
    here = create_pipeline(actor=admin, name="orders", team=team, spec=spec)
    there = create_pipeline(actor=admin, name="orders-east", team=team, spec=spec, cluster=east)
    for pipeline, cluster_id in ((here, None), (there, east.pk)):
        record = Record(
            topic="orders-dlq",
            partition=0,
            offset=7,
            key=b"k",
            value=b"{}",
            headers=dlq_headers(pipeline, error_type="Deserialization", message="bad", source_offset=7),
            timestamp_ms=None,
            topic_id=f"id-{pipeline.name}",
        )
        assert store_batch([record], dlq_topics(cluster_id), cluster_id).inserted == 1
    api = APIClient()
    api.force_authenticate(admin)
    everything = api.get("/api/dlq/messages/").json()["results"]
    assert sorted((m["cluster"], m["pipeline"]) for m in everything) == [
        ("default", "orders"),
        ("east", "orders-east"),
    ]
    assert [m["cluster"] for m in api.get("/api/dlq/messages/?cluster=east").json()["results"]] == ["east"]
    assert [m["pipeline"] for m in api.get("/api/dlq/messages/?cluster=default").json()["results"]] == [
        "orders"
    ]
    assert FailureGroup.objects.count() == 2
    page = Client()
    page.force_login(admin)
    listed = page.get("/dlq/?cluster=east")
    assert listed.status_code == 200
    assert b'<option value="east" selected>' in listed.content
