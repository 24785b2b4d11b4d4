"""A pipeline on a named, secured Kafka cluster, end to end through the REST API with real Kafka, Spark, Redis
and the database: the admin adds the cluster (its password a reference to a mounted file) and tests it, a
pipeline on it runs under supervision and every source record is accounted for, its dead letters are
ingested beside the default cluster's in the same console, a fix is replayed onto the secured source topic,
its lag is read from its own cluster, and ``/metrics`` labels it. Then the known password is looked for
everywhere it must never be: API responses, specs and revisions, audit events, the driver's command line,
spec file and log, the state folder, Spark's event log, and every log line of the run.

The default cluster is the plaintext test broker; the named one is devstack's ``kafka-secure`` (a second
single-node cluster), reached over SASL_SSL with SCRAM-SHA-512 as alice. Its password file and CA lie in the
cluster's own folder of the credential directory (``cluster_credentials``), as references must.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from dlq.ingest import ClusterIngesters
from dlq.models import DeadLetter
from pipelines import progress, supervision
from pipelines.models import KafkaCluster, PipelineRevision, PipelineRun, PipelineTotals
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, admin_config, producer_config
from streamforge_web.celery import app as celery_app
from tests.dlq.conftest import dlq_headers
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all, produce
from tests.streamforge_core.test_secured_broker import _env, password, sasl

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]

EVENTS = Path(__file__).resolve().parents[2] / "demo" / "data" / "github-events-2021-07-21.ndjson"


def cluster_credentials(root: Path, cluster: str, *users: str) -> Path:
    """The credential folder of ``cluster`` under the credential directory ``root``: the secured broker's CA
    (``ca.pem``) and the password files of ``users`` (``<user>.password``), copied from devstack's."""
    folder = root / cluster
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(_env("CA"), folder / "ca.pem")
    for user in users:
        shutil.copy(Path(_env("SECRETS_DIR")) / f"{user}.password", folder / f"{user}.password")
    return folder


def api_for(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def tick() -> None:
    supervision.reconcile()
    progress.ingest()


def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tick()
        if value := predicate():
            return value
        time.sleep(1.0)
    runs = list(PipelineRun.objects.values("attempt", "state", "error_type", "error_message"))
    tail = PipelineRun.objects.order_by("-started_at").values_list("log_path", flat=True).first()
    log = Path(tail).read_text(errors="replace")[-3000:] if tail and Path(tail).exists() else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; runs={runs}\n{log}")


@pytest.fixture
def world(settings, tmp_path, monkeypatch):
    """Eager Celery, a private state folder and progress group, the secured cluster's credential folders
    allowed, Spark writing its event log into the test's folder, and afterwards every driver killed and
    every secured topic deleted."""
    suffix = uuid.uuid4().hex[:8]
    settings.STATE_DIR = tmp_path / "state"
    settings.CHECKPOINT_ROOT = str(tmp_path / "state" / "checkpoints")
    settings.SPARK_MASTER = "local[2]"
    settings.PROGRESS_CONSUMER_GROUP = f"test-{suffix}"
    settings.KAFKA_CREDENTIAL_DIRS = [str(tmp_path / "credentials")]
    folder = cluster_credentials(tmp_path / "credentials", "payments-secure", "alice")
    events = tmp_path / "spark-events"
    events.mkdir()
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))  # the driver inherits it from this process
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    progress.ensure_group(client, settings.PROGRESS_CONSUMER_GROUP)
    celery_app.conf.task_always_eager = True
    internal = AdminClient(admin_config(KafkaConnection(_env("SECURE_INTERNAL"))))
    topics = {
        "source": f"secure.src-{suffix}",
        "pushes": f"secure.pushes-{suffix}",
        "dlq": f"secure.dlq-{suffix}",
    }
    internal.create_topics([NewTopic(topics["source"], 2, 1)])[topics["source"]].result(timeout=30)
    yield {"suffix": suffix, "topics": topics, "events": events, "tmp": tmp_path, "folder": folder}
    celery_app.conf.task_always_eager = False
    for run in PipelineRun.objects.exclude(pid=None):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    supervision._children.clear()
    client.xgroup_destroy(c.PROGRESS_STREAM, settings.PROGRESS_CONSUMER_GROUP)
    existing = set(internal.list_topics(timeout=10).topics)
    doomed = sorted(set(topics.values()) & existing)
    if doomed:
        for future in internal.delete_topics(doomed).values():
            future.result(timeout=30)


def _corpus() -> list[tuple[bytes | None, bytes | None]]:
    lines = EVENTS.read_bytes().splitlines()[:200]
    broken = [b'{"id": "x", "type": "PushEvent", "actor": }', b"not json at all"]
    return [(str(i).encode(), line) for i, line in enumerate([*lines, *broken])]


def test_a_pipeline_on_a_named_secured_cluster_runs_is_worked_in_the_console_and_leaks_no_secret(
    world, kafka_bootstrap, make_topic, caplog, capfd
):
    caplog.set_level(logging.DEBUG)
    secret = password("alice").reveal()
    suffix, topics = world["suffix"], world["topics"]
    team = TeamFactory(name="payments")
    admin = member(team, Role.ADMIN, username="ada")
    operator = member(team, Role.OPERATOR, username="oti")
    api, ops = api_for(admin), api_for(operator)
    responses: list[str] = []

    def call(response, expected: int):
        responses.append(response.content.decode(errors="replace"))
        assert response.status_code == expected, responses[-1]
        return response.json() if response.content else None

    # An operator may not add a cluster; an admin may not store the password itself
    body = {
        "name": "payments-secure",
        "bootstrap_servers": _env("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "ssl_ca_location": str(world["folder"] / "ca.pem"),
    }
    call(
        ops.post("/api/clusters/", {**body, "password_ref": f"file:{world['folder']}/alice.password"}),
        403,
    )
    refused = call(api.post("/api/clusters/", {**body, "password_ref": secret}, format="json"), 400)
    assert "password_ref" in refused
    assert not KafkaCluster.objects.exists()

    # Given the admin adds the cluster with a reference to the mounted password file and tests it
    ref = f"file:{world['folder']}/alice.password"
    created = call(api.post("/api/clusters/", {**body, "password_ref": ref}, format="json"), 201)
    assert created["password_ref"] == ref
    checked = call(api.post("/api/clusters/payments-secure/test/"), 200)
    assert checked["ok"], checked
    assert checked["brokers"] == 1
    assert checked["cluster_id"]

    # and a pipeline on it, next to one on the default cluster
    spec = {
        "source": {"topics": [topics["source"]], "consumer_group": f"secure.g-{suffix}"},
        "destinations": [
            {"name": "pushes", "topic": topics["pushes"], "filter": "/type,==,PushEvent"},
        ],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
        "dlq": {"topic": topics["dlq"]},
    }
    pipeline = call(
        api.post(
            "/api/pipelines/",
            {"name": f"secure-{suffix}", "team": "payments", "cluster": "payments-secure", "spec": spec},
            format="json",
        ),
        201,
    )
    assert pipeline["cluster"] == "payments-secure"
    name = pipeline["name"]
    checked = call(api.post("/api/clusters/payments-secure/test/"), 200)
    # now with the pipeline's topics: alice may read the source; the others are made at its first start
    assert {(p["kind"], p["topic"]) for p in checked["problems"]} == {
        ("missing_topic", topics["pushes"]),
        ("missing_topic", topics["dlq"]),
    }
    assert "READ" in checked["operations"][topics["source"]]
    assert topics["source"] in checked["read"]
    assert topics["dlq"] in checked["write"]

    plain_dlq = make_topic("plain-dlq")
    plain = create_pipeline(
        actor=admin,
        name=f"plain-{suffix}",
        team=team,
        spec={
            "source": {"topics": [make_topic("plain-src")]},
            "destinations": [{"name": "all", "topic": "x"}],
            "dlq": {"topic": plain_dlq},
        },
    )

    # When it runs under supervision on 202 records (2 of them not JSON)
    records = _corpus()
    secure = sasl("alice")
    produce(secure, topics["source"], records, partitions=2)
    call(ops.post(f"/api/pipelines/{name}/start/", {"reason": "go"}, format="json"), 202)
    run = PipelineRun.objects.get(pipeline__name=name)
    cmdline = Path(f"/proc/{run.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()

    def caught_up():
        totals = PipelineTotals.objects.filter(pipeline__name=name).first()
        return totals if totals is not None and totals.consumed >= len(records) else None

    totals = until(caught_up, 300, "every record consumed on the secured cluster")
    # Then every source record is accounted for: produced, filtered or dead-lettered
    pushes = sum(1 for _, v in records[:-2] if json.loads(v)["type"] == "PushEvent")
    assert (totals.consumed, totals.produced, totals.dlq_records) == (len(records), pushes, 2)
    assert len(consume_all(secure, topics["pushes"], group_prefix="secure.reader-")) == pushes

    # and its lag is read from its own cluster's consumer group
    metrics = call(ops.get(f"/api/pipelines/{name}/metrics/"), 200)
    assert "error" not in metrics["consumer_group"], metrics["consumer_group"]
    assert metrics["consumer_group"]["lag"] == 0

    # and /metrics labels it with its cluster
    scrape = Client()
    scrape.force_login(admin)
    text = scrape.get("/metrics").content.decode()
    responses.append(text)
    assert f'streamforge_messages_consumed_total{{cluster="payments-secure",pipeline="{name}"}} 202.0' in text

    # When a record fails on the default cluster too, one ingester per cluster stores both
    producer = Producer(producer_config(KafkaConnection(kafka_bootstrap)))
    producer.produce(
        plain_dlq,
        value=b"{}",
        headers=dlq_headers(plain, error_type="Deserialization", message="bad", source_offset=0),
    )
    producer.flush(10)
    ingesters = ClusterIngesters(
        refresh_seconds=2, poll_timeout=0.5, instance_id="", group_id=f"secure.ingest-{suffix}"
    )
    ingesters.refresh()
    try:
        deadline = time.monotonic() + 90
        while DeadLetter.objects.count() < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        ingesters.close()
    listed = call(ops.get("/api/dlq/messages/"), 200)["results"]
    by_cluster = sorted((m["cluster"], m["pipeline"]) for m in listed)
    assert by_cluster == [
        ("default", f"plain-{suffix}"),
        ("payments-secure", name),
        ("payments-secure", name),
    ]

    # and a fixed dead letter of the secured cluster is replayed onto its secured source topic
    parked = next(m for m in listed if m["cluster"] == "payments-secure")
    fixed = {"id": "fixed", "type": "PushEvent", "actor": {"login": "x"}}
    fix = {"value": fixed, "reason": "typo"}
    call(ops.post(f"/api/dlq/messages/{parked['id']}/fix/", fix, format="json"), 201)
    replay = ops.post(f"/api/dlq/messages/{parked['id']}/replay/", {"reason": "fixed"}, format="json")
    replayed = call(replay, 201)
    arrived = [
        r
        for r in consume_all(secure, topics["source"], group_prefix="secure.reader-")
        if r.header(c.H_REPLAY_ID) == replayed["replay_id"]
    ]
    assert len(arrived) == 1
    assert json.loads(arrived[0].value or b"") == fixed

    call(ops.post(f"/api/pipelines/{name}/stop/", {"reason": "done"}, format="json"), 202)
    until(lambda: PipelineRun.objects.get(pk=run.pk).state == "stopped", 120, "the driver to stop")

    # Then the password is nowhere it must never be
    stored = [json.dumps(r.spec) for r in PipelineRevision.objects.all()]
    audit = [
        json.dumps([e.action, e.target_id, e.details, e.reason, e.before_digest, e.after_digest], default=str)
        for e in AuditEvent.objects.all()
    ]
    files = [
        p
        for p in world["tmp"].rglob("*")
        if p.is_file() and world["folder"] not in p.parents  # the mounted secret itself, in its folder
    ]
    assert any(p.name == "spec.json" for p in files)
    assert any(p.name == "driver.log" for p in files)
    assert any(world["events"].iterdir()), "Spark wrote no event log"
    captured = capfd.readouterr()
    places = {
        "API responses": "\n".join(responses),
        "stored specs": "\n".join(stored),
        "audit events": "\n".join(audit),
        "the driver's command line": cmdline,
        "log lines": "\n".join(r.getMessage() for r in caplog.records) + captured.out + captured.err,
        "the cluster row": json.dumps(list(KafkaCluster.objects.values()), default=str),
        **{str(p): p.read_bytes().decode(errors="replace") for p in files},
    }
    leaked = [where for where, text in places.items() if secret in text]
    assert not leaked, f"the password appears in {leaked}"


@pytest.mark.django_db
def test_the_connection_test_names_a_wrong_password_and_a_missing_acl(settings, monkeypatch, tmp_path):
    settings.KAFKA_CREDENTIAL_DIRS = [str(tmp_path)]
    wrong_folder = cluster_credentials(tmp_path, "wrong")
    reader_folder = cluster_credentials(tmp_path, "reader", "bob")
    admin = member(TeamFactory(name="payments"), Role.ADMIN, username="ada")
    api = APIClient()
    api.force_authenticate(admin)
    common = {
        "bootstrap_servers": _env("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
    }
    monkeypatch.setenv("STREAMFORGE_CLUSTER_WRONG_PASSWORD", "not-alices-password")
    wrong = {
        **common,
        "name": "wrong",
        "sasl_username": "alice",
        "password_ref": "env:STREAMFORGE_CLUSTER_WRONG_PASSWORD",
        "ssl_ca_location": str(wrong_folder / "ca.pem"),
    }
    assert api.post("/api/clusters/", wrong, format="json").status_code == 201
    found = api.post("/api/clusters/wrong/test/").json()
    assert found["ok"] is False
    assert [p["kind"] for p in found["problems"]] == ["authentication"]
    assert "alice" in found["problems"][0]["message"]
    assert "not-alices-password" not in json.dumps(found)

    # bob may read secure.* but not write it: a pipeline on his cluster is told which topic and operation
    reader = {
        **common,
        "name": "reader",
        "sasl_username": "bob",
        "password_ref": f"file:{reader_folder}/bob.password",
        "ssl_ca_location": str(reader_folder / "ca.pem"),
    }
    assert api.post("/api/clusters/", reader, format="json").status_code == 201
    suffix = uuid.uuid4().hex[:8]
    internal = AdminClient(admin_config(KafkaConnection(_env("SECURE_INTERNAL"))))
    made = [f"secure.in-{suffix}", f"secure.out-{suffix}", f"secure.dlq-{suffix}"]
    for future in internal.create_topics([NewTopic(t, 1, 1) for t in made]).values():
        future.result(timeout=30)
    try:
        spec = {
            "source": {"topics": [made[0]], "consumer_group": f"secure.g-{suffix}"},
            "destinations": [{"name": "out", "topic": made[1]}],
            "dlq": {"topic": made[2]},
        }
        created = api.post(
            "/api/pipelines/",
            {"name": f"p-{suffix}", "team": "payments", "cluster": "reader", "spec": spec},
            format="json",
        )
        assert created.status_code == 201, created.json()
        found = api.post("/api/clusters/reader/test/").json()
        assert {(p["kind"], p["message"]) for p in found["problems"]} == {
            ("authorization", f"not authorized to WRITE topic {made[1]}"),
            ("authorization", f"not authorized to WRITE topic {made[2]}"),
        }
    finally:
        for future in internal.delete_topics(made).values():
            future.result(timeout=30)
