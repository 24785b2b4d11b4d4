"""Security review #28, finding 2: a cluster's secrets serve that cluster only.

Every reference a named cluster holds (its password's variable or file, its CA, certificate and key) must be
named for that cluster (``env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD``, files under ``<credential dir>/<name>/``);
SASL/PLAIN is refused without TLS; and nothing the product opens on its own (DLQ ingest, ``/readyz``, lag
reads, a pipeline's start) connects to a cluster until an admin's connection test passed on its current
settings. ``/readyz`` tells anonymous callers ready or not and nothing else, from a cached probe.

On the real stack: the secured broker (``kafka-secure``) for the admin's test, the plaintext test broker, and
a TCP listener on a loopback port that records every connection attempt made to it.
"""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection as db_connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from dlq.ingest import ClusterIngesters, dlq_topics, store_batch
from dlq.models import DeadLetter
from pipelines import supervision
from pipelines.clusters import is_verified
from pipelines.models import KafkaCluster, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from streamforge_web.health import readiness
from tests.dlq.conftest import dlq_headers
from tests.factories import TeamFactory, member
from tests.streamforge_core.test_secured_broker import _env
from tests.tcp_gate import relay

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


class ConnectionRecorder:
    """A TCP listener on a loopback port that records the time of every connection made to it. Without
    ``forward_to`` it closes each connection at once (a broker that is never reached); with it (a loopback
    ``host:port``) it relays the bytes both ways, a proxy that counts connections to a real broker."""

    def __init__(self, forward_to: str | None = None) -> None:
        self.forward_to = forward_to
        self.accepted: list[float] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(time.monotonic())
            if self.forward_to is None:
                conn.close()
                continue
            host, port = self.forward_to.rsplit(":", 1)
            assert host.startswith("127."), "tests only relay to loopback"
            upstream = socket.create_connection((host, int(port)), timeout=5)
            for source, sink in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=relay, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(5)


@pytest.fixture
def recorder() -> Iterator[ConnectionRecorder]:
    listener = ConnectionRecorder()
    yield listener
    listener.close()


@pytest.fixture
def admin():
    return member(TeamFactory(name="ops"), Role.ADMIN, username="ada")


@pytest.fixture
def api(admin) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin)
    return client


@pytest.fixture
def root(tmp_path: Path, settings) -> Path:
    """The credential directory: one folder per cluster (``prod-eu``, ``other``), and a file at its top."""
    base = tmp_path / "credentials"
    for folder in ("prod-eu", "other"):
        (base / folder).mkdir(parents=True)
        (base / folder / "pw").write_text(f"{folder}-password\n")
    (base / "pw").write_text("top-level\n")
    settings.KAFKA_CREDENTIAL_DIRS = [str(base)]
    return base


def _sasl(**overrides):
    return {
        "name": "prod-eu",
        "bootstrap_servers": "127.0.0.1:19093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "streamforge",
        "password_ref": "env:STREAMFORGE_CLUSTER_PROD_EU_PASSWORD",
        **overrides,
    }


FOREIGN = [
    ("password_ref", "env:KAFKA_SASL_PASSWORD"),  # the default cluster's password
    ("password_ref", "env:KAFKA_PROD_EU_PASSWORD"),  # any KAFKA_ variable
    ("password_ref", "env:STREAMFORGE_CLUSTER_OTHER_PASSWORD"),  # another cluster's variable
    ("password_ref", "env:STREAMFORGE_CLUSTER_PROD_PASSWORD"),  # a prefix of this cluster's name
    ("password_ref", "env:DJANGO_SECRET_KEY"),
    ("password_ref", "file:{root}/pw"),  # the credential directory itself, no cluster's folder
    ("password_ref", "file:{root}/other/pw"),  # another cluster's folder
    ("password_ref", "file:{root}/prod-eu/../other/pw"),
    ("password_ref", "file:{root}/prod-eu/link"),  # a link out of the cluster's folder
    ("ssl_ca_location", "{root}/other/pw"),
    ("ssl_certificate_location", "{root}/pw"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "ref"), FOREIGN)
def test_a_reference_not_named_for_its_cluster_is_refused_at_the_api_and_in_the_form(
    field, ref, root, api, admin
):
    """Finding 2: a cluster's references may only name its own variable or files in its own folder."""
    (root / "prod-eu" / "link").symlink_to(root / "other" / "pw")
    values = _sasl(**{field: ref.format(root=root)})
    if field == "ssl_certificate_location":
        values["ssl_key_location"] = f"{root}/prod-eu/pw"
    refused = api.post("/api/clusters/", values, format="json")
    assert refused.status_code == 400, refused.content
    reasons = " ".join(refused.json()[field])
    assert "prod-eu" in reasons or "PROD_EU" in reasons, reasons  # the reason names what it must be
    browser = Client()
    browser.force_login(admin)
    page = browser.post("/clusters/new/", {**values, "verify_hostname": "on"})
    assert page.status_code == 400
    shown = " ".join(re.findall(r'data-testid="field-error">([^<]*)<', page.content.decode()))
    assert "prod-eu" in shown or "PROD_EU" in shown, shown
    assert not KafkaCluster.objects.exists()


@pytest.mark.django_db
def test_a_reference_named_for_its_cluster_is_accepted(root, api):
    assert api.post("/api/clusters/", _sasl(), format="json").status_code == 201
    changed = api.patch(
        "/api/clusters/prod-eu/",
        {"password_ref": f"file:{root}/prod-eu/pw", "ssl_ca_location": f"{root}/prod-eu/pw"},
        format="json",
    )
    assert changed.status_code == 200, changed.json()


@pytest.mark.django_db
def test_sasl_plain_without_tls_is_refused_at_the_api_and_in_the_form(root, api, admin):
    """Finding 2: PLAIN over SASL_PLAINTEXT would send the password in clear to whoever listens."""
    plain = _sasl(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN")
    refused = api.post("/api/clusters/", plain, format="json")
    assert refused.status_code == 400
    assert "TLS" in " ".join(refused.json()["sasl_mechanism"])
    browser = Client()
    browser.force_login(admin)
    page = browser.post("/clusters/new/", {**plain, "verify_hostname": "on"})
    assert page.status_code == 400
    assert "in clear" in " ".join(re.findall(r'data-testid="field-error">([^<]*)<', page.content.decode()))
    scram = api.post("/api/clusters/", {**plain, "sasl_mechanism": "SCRAM-SHA-256"}, format="json")
    assert scram.status_code == 201
    assert api.patch("/api/clusters/prod-eu/", {"sasl_mechanism": "PLAIN"}, format="json").status_code == 400
    tls = api.patch(
        "/api/clusters/prod-eu/", {"sasl_mechanism": "PLAIN", "security_protocol": "SASL_SSL"}, format="json"
    )
    assert tls.status_code == 200


def _ingesters() -> ClusterIngesters:
    return ClusterIngesters(
        refresh_seconds=1,
        retry_seconds=0.5,
        poll_timeout=0.5,
        instance_id="",
        group_id=f"test-ingest-{uuid.uuid4().hex[:8]}",
    )


def _refresh_for(ingesters: ClusterIngesters, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        ingesters.refresh()


def _ingest_for_a_while(seconds: float) -> None:
    ingesters = _ingesters()
    ingesters.refresh()
    try:
        _refresh_for(ingesters, seconds)
    finally:
        ingesters.close()


def _pipeline_on(cluster: KafkaCluster, admin) -> Pipeline:
    suffix = uuid.uuid4().hex[:8]
    return create_pipeline(
        actor=admin,
        name=f"p-{suffix}",
        team=admin.memberships.first().team,
        spec={
            "source": {"topics": [f"src-{suffix}"]},
            "destinations": [{"name": "all", "topic": f"out-{suffix}"}],
            "dlq": {"topic": f"dlq-{suffix}"},
        },
        cluster=cluster,
    )


def _dead_letter_on(pipeline: Pipeline) -> int:
    """A dead letter of ``pipeline`` stored as DLQ ingest would (no Kafka involved): its id."""
    assert pipeline.current_revision is not None
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    record = Record(
        topic=topic,
        partition=0,
        offset=0,
        key=b"k",
        value=b"{}",
        headers=dlq_headers(pipeline, error_type="Deserialization", message="bad", source_offset=0),
        timestamp_ms=None,
        topic_id=f"id-{pipeline.name}",
    )
    cluster_id = pipeline.cluster_id
    assert store_batch([record], dlq_topics(cluster_id), cluster_id).inserted == 1
    return DeadLetter.objects.get(pipeline=pipeline).pk


def _product_clients(api: APIClient, pipeline: Pipeline) -> None:
    """What the product opens on its own: DLQ ingest, /readyz (anonymous and the admin's), the readiness
    check and the consumer-group lag of a pipeline on the cluster."""
    _ingest_for_a_while(4)
    Client().get("/readyz")
    readiness()
    api.get(f"/api/pipelines/{pipeline.name}/metrics/")


@pytest.mark.django_db(transaction=True)
def test_dlq_ingest_readyz_and_lag_never_connect_to_a_cluster_no_admin_has_tested(
    recorder, api, admin, settings
):
    """Finding 2: a new cluster is not connected to by anything the product does on its own."""
    settings.READINESS_TIMEOUT_SECONDS = 1
    settings.READINESS_CACHE_SECONDS = 0
    created = api.post(
        "/api/clusters/",
        {"name": "rogue", "bootstrap_servers": recorder.address, "security_protocol": "PLAINTEXT"},
        format="json",
    )
    assert created.status_code == 201
    pipeline = _pipeline_on(KafkaCluster.objects.get(name="rogue"), admin)

    _product_clients(api, pipeline)

    # and what people ask for on it: the topic browser, a test message, a replay of a dead letter
    source = pipeline.current_revision.spec["source"]["topics"][0]
    base = f"/api/pipelines/{pipeline.name}"
    overview = api.get(f"{base}/topics/{source}/")
    browse = api.get(f"{base}/topics/{source}/messages/")
    sent = api.post(f"{base}/test-messages/", {"value": "{}", "reason": "try"}, format="json")
    letter = _dead_letter_on(pipeline)
    replay = api.post(f"/api/dlq/messages/{letter}/replay/", {"reason": "retry"}, format="json")

    assert recorder.accepted == [], f"{len(recorder.accepted)} connection(s) to the untested cluster"
    assert api.get("/api/clusters/rogue/").json()["verified"] is False
    lag = api.get(f"/api/pipelines/{pipeline.name}/metrics/").json()["consumer_group"]
    assert "not been tested" in lag["error"]
    assert "not been tested" in overview.json()["error"]
    assert (browse.status_code, sent.status_code) == (503, 503), (browse.content, sent.content)
    assert "not been tested" in browse.json()["detail"]
    assert "not been tested" in sent.json()["detail"]
    assert "not been tested" in replay.content.decode(), replay.content
    # and a start halts with reason Config instead of launching a driver against it
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state="running")
    run = supervision.start_pipeline(pipeline_id=pipeline.pk)
    assert run is not None
    run = PipelineRun.objects.get(pk=run.pk)
    assert (run.error_type, run.pid) == ("Config", None)
    assert "not been tested" in run.error_message
    assert Pipeline.objects.get(pk=pipeline.pk).state == PipelineState.HALTED
    assert recorder.accepted == []


@pytest.mark.django_db(transaction=True)
def test_a_tested_cluster_that_changes_is_not_connected_to_until_an_admin_tests_it_again(
    recorder, api, admin, settings, kafka_bootstrap
):
    """Finding 2: a passing test approves the settings it tested; a change to them withdraws it."""
    settings.READINESS_TIMEOUT_SECONDS = 1
    settings.READINESS_CACHE_SECONDS = 0
    body = {"name": "east", "bootstrap_servers": kafka_bootstrap, "security_protocol": "PLAINTEXT"}
    assert api.post("/api/clusters/", body, format="json").status_code == 201
    tested = api.post("/api/clusters/east/test/").json()
    assert tested["ok"], tested
    verified = api.get("/api/clusters/east/").json().get("verified")
    east = KafkaCluster.objects.get(name="east")
    pipeline = _pipeline_on(east, admin)

    # DLQ ingest reads the tested cluster; then its servers change under the running ingester
    running = _ingesters()
    running.refresh()
    try:
        _refresh_for(running, 2)
        reading = east.pk in running.ingesters
        changed = api.patch("/api/clusters/east/", {"bootstrap_servers": recorder.address}, format="json")
        assert changed.status_code == 200
        _refresh_for(running, 4)
    finally:
        running.close()
    assert reading

    _product_clients(api, pipeline)

    assert recorder.accepted == [], f"{len(recorder.accepted)} connection(s) to the changed cluster"
    assert (tested["verified"], verified, changed.json()["verified"]) == (True, True, False)
    # The admin's test is the one thing that connects, and it fails: the cluster stays unverified
    failed = api.post("/api/clusters/east/test/").json()
    assert failed["ok"] is False
    assert failed["verified"] is False
    assert recorder.accepted, "the admin's test connects"
    assert api.get("/api/clusters/east/").json()["verified"] is False


@pytest.mark.django_db(transaction=True)
def test_the_admins_test_of_the_secured_cluster_is_audited_and_alone_lets_clients_connect(
    api, admin, settings, tmp_path, monkeypatch
):
    """Finding 2 on kafka-secure (SASL_SSL, SCRAM-SHA-512): the cluster's files in its own folder, an
    operator may not test, a failing test verifies nothing, the admin's passing test is audited and lets
    clients connect, and a change of user withdraws it."""
    base = tmp_path / "credentials"
    folder = base / "secure-eu"
    folder.mkdir(parents=True)
    shutil.copy(Path(_env("SECRETS_DIR")) / "alice.password", folder / "alice.password")
    shutil.copy(_env("CA"), folder / "ca.pem")
    settings.KAFKA_CREDENTIAL_DIRS = [str(base)]
    monkeypatch.setenv("STREAMFORGE_CLUSTER_SECURE_EU_PASSWORD", "not-alices-password")
    body = {
        "name": "secure-eu",
        "bootstrap_servers": _env("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "password_ref": "env:STREAMFORGE_CLUSTER_SECURE_EU_PASSWORD",
        "ssl_ca_location": str(folder / "ca.pem"),
    }
    created = api.post("/api/clusters/", body, format="json")
    assert created.status_code == 201, created.json()
    operator = APIClient()
    operator.force_authenticate(member(TeamFactory(name="data"), Role.OPERATOR, username="oti"))
    assert operator.post("/api/clusters/secure-eu/test/").status_code == 403

    wrong = api.post("/api/clusters/secure-eu/test/").json()
    assert wrong["ok"] is False
    assert wrong["verified"] is False
    assert [p["kind"] for p in wrong["problems"]] == ["authentication"]

    api.patch("/api/clusters/secure-eu/", {"password_ref": f"file:{folder}/alice.password"}, format="json")
    passed = api.post("/api/clusters/secure-eu/test/").json()
    assert passed["ok"], passed
    assert passed["verified"], passed
    shown = api.get("/api/clusters/secure-eu/").json()
    assert shown["verified"] is True
    events = list(
        AuditEvent.objects.filter(action="kafka_cluster.test", target_id="secure-eu").order_by("sequence")
    )
    assert [(e.actor_name, e.details["ok"], e.details["verified"]) for e in events] == [
        ("ada", False, False),
        ("ada", True, True),
    ]
    # now the product's own clients reach it: readiness checks it, DLQ ingest takes it up
    settings.READINESS_CACHE_SECONDS = 0
    assert readiness()["checks"]["kafka:secure-eu"]["ok"] is True
    ingesters = _ingesters()
    ingesters.refresh()
    try:
        _refresh_for(ingesters, 2)
        assert KafkaCluster.objects.get(name="secure-eu").pk in ingesters.ingesters
    finally:
        ingesters.close()

    assert (
        api.patch("/api/clusters/secure-eu/", {"sasl_username": "bob"}, format="json").json()["verified"]
        is False
    )
    check = readiness()["checks"]["kafka:secure-eu"]
    assert check["ok"] is False
    assert "not been tested" in check["error"]


@pytest.mark.django_db(transaction=True)
def test_anonymous_readyz_says_ready_or_not_and_nothing_else_while_admins_see_details(
    recorder, api, admin, settings
):
    """Finding 2: an anonymous probe learns neither cluster names nor error strings."""
    settings.READINESS_TIMEOUT_SECONDS = 1
    settings.READINESS_CACHE_SECONDS = 0
    api.post(
        "/api/clusters/",
        {"name": "payments-eu", "bootstrap_servers": recorder.address, "security_protocol": "PLAINTEXT"},
        format="json",
    )
    real = settings.KAFKA_BOOTSTRAP_SERVERS
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # nothing listens: the default cluster fails
    anonymous = Client().get("/readyz")
    assert anonymous.status_code == 503
    assert anonymous.json() == {"status": "not ready"}
    settings.KAFKA_BOOTSTRAP_SERVERS = real
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}
    browser = Client()
    browser.force_login(admin)
    detailed = browser.get("/readyz").json()
    assert detailed["status"] == "ready"
    assert "kafka:payments-eu" in detailed["checks"]
    assert "not been tested" in detailed["checks"]["kafka:payments-eu"]["error"]
    assert recorder.accepted == []


@pytest.mark.django_db(transaction=True)
def test_readyz_probes_kafka_at_most_once_per_cache_period_under_many_requests(settings, kafka_bootstrap):
    """Finding 2: requests to /readyz do not open a Kafka client each; one probe per cache period."""
    proxy = ConnectionRecorder(forward_to=kafka_bootstrap)
    try:
        settings.KAFKA_BOOTSTRAP_SERVERS = proxy.address
        settings.READINESS_CACHE_SECONDS = 30
        statuses: list[int] = []

        def ask(times: int) -> None:
            client = Client()
            for _ in range(times):
                statuses.append(client.get("/readyz").status_code)
            db_connection.close()  # this thread's own

        threads = [threading.Thread(target=ask, args=(10,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert statuses == [200] * 80
        assert len(proxy.accepted) == 1, f"{len(proxy.accepted)} probes for 80 requests in one cache period"

        time.sleep(1.2)
        settings.READINESS_CACHE_SECONDS = 1  # the cached probe is older than that: the next request probes
        assert Client().get("/readyz").status_code == 200
        assert len(proxy.accepted) == 2
    finally:
        proxy.close()


@pytest.fixture
def back_to_the_latest_migrations():
    """Migrate the test database forward to every app's latest migration after the test."""
    yield
    executor = MigrationExecutor(db_connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_leaves_clusters_whose_references_are_not_their_own_unverified(
    root, back_to_the_latest_migrations
):
    """Finding 2: a cluster stored before the rules that points at another's secret, or sends PLAIN in
    clear, is not connected to after the upgrade; one whose settings obey them keeps working."""
    executor = MigrationExecutor(db_connection)
    before = [("pipelines", "0003_kafka_clusters")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("pipelines", "KafkaCluster")
    sasl = {
        "bootstrap_servers": "127.0.0.1:19093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "u",
    }
    old.objects.create(name="steals-default", password_ref="env:KAFKA_SASL_PASSWORD", **sasl)
    old.objects.create(name="other-folder", password_ref=f"file:{root}/other/pw", **sasl)
    old.objects.create(
        name="prod-eu",
        password_ref=f"file:{root}/prod-eu/pw",
        **{**sasl, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
    )
    (root / "bound").mkdir()
    old.objects.create(name="bound", password_ref=f"file:{root}/bound/pw", **sasl)
    old.objects.create(name="plain", bootstrap_servers="127.0.0.1:19092", security_protocol="PLAINTEXT")

    executor = MigrationExecutor(db_connection)
    after = [("pipelines", "0004_kafka_cluster_verification")]
    executor.migrate(after)

    # the model as of 0004 (later migrations add columns the table does not have yet)
    upgraded = executor.loader.project_state(after).apps.get_model("pipelines", "KafkaCluster")
    verified = {row.name: is_verified(row) for row in upgraded.objects.all()}
    assert verified == {
        "steals-default": False,
        "other-folder": False,
        "prod-eu": False,
        "bound": True,
        "plain": True,
    }
