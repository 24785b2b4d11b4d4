"""Security review #28, finding 7 (lows): a Spark driver's environment is built from an allow-list. A pipeline
on a named secured cluster is started through the real launch path (the REST API, supervision's launcher,
``python -m pipelines.spark.driver`` with real Spark, Kafka and Redis); the environment of the driver and of
every process under it (the JVM, Python workers) is read from ``/proc/<pid>/environ`` while it runs: the
worker's Django secret key, audit and notification keys, database URL, the default cluster's password and
another cluster's are not there; its own cluster's password is; and the pipeline still moves every record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from django.conf import settings as django_settings

from access.models import Role
from pipelines.models import PipelineRun, PipelineTotals
from pipelines.supervision import launcher
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all, produce
from tests.pipelines.test_named_cluster import _corpus, api_for, until, world  # noqa: F401  # world: a fixture
from tests.streamforge_core.test_secured_broker import _env, password, sasl

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]

#: Secrets of the worker's environment that no driver may hold (names and made-up values).
WORKER_SECRETS = {
    "DJANGO_SECRET_KEY": "django-secret-key-0d1f7c",
    "STREAMFORGE_AUDIT_KEY": "audit-key-5b2e90",
    "STREAMFORGE_NOTIFY_KEY": "notify-key-77a1c3",
    "KAFKA_SASL_PASSWORD": "default-cluster-password-c4e5",
    "KAFKA_OTHER_CLUSTER_PASSWORD": "other-cluster-password-9f0a",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-3e3e3e",
    "SPARK_AUTH_SECRET_TOKEN": "a-secret-riding-on-spark-prefix",
}


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.decode(errors="replace").split("=", 1) for entry in raw.split(b"\0") if b"=" in entry)


def test_a_driver_gets_only_allowed_variables_and_its_own_clusters_secret_and_still_runs(
    world,  # noqa: F811  # the fixture imported above
    monkeypatch,
):
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    database_url = os.environ["DATABASE_URL"]  # the test stack's, with its password
    suffix, topics = world["suffix"], world["topics"]
    team = TeamFactory(name="payments")
    admin, operator = member(team, Role.ADMIN, username="ada"), member(team, Role.OPERATOR, username="oti")
    api, ops = api_for(admin), api_for(operator)
    created = api.post(
        "/api/clusters/",
        {
            "name": "payments-secure",
            "bootstrap_servers": _env("SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "alice",
            "password_ref": f"file:{world['folder']}/alice.password",
            "ssl_ca_location": str(world["folder"] / "ca.pem"),
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert api.post("/api/clusters/payments-secure/test/").json()["ok"]
    spec = {
        "source": {"topics": [topics["source"]], "consumer_group": f"secure.g-{suffix}"},
        "destinations": [{"name": "pushes", "topic": topics["pushes"], "filter": "/type,==,PushEvent"}],
        "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
        "dlq": {"topic": topics["dlq"]},
    }
    made = api.post(
        "/api/pipelines/",
        {"name": f"env-{suffix}", "team": "payments", "cluster": "payments-secure", "spec": spec},
        format="json",
    )
    assert made.status_code == 201, made.content
    name = made.json()["name"]
    records = _corpus()
    secure = sasl("alice")
    produce(secure, topics["source"], records, partitions=2)

    started = ops.post(f"/api/pipelines/{name}/start/", {"reason": "go"}, format="json")
    assert started.status_code == 202, started.content
    run = PipelineRun.objects.get(pipeline__name=name)
    assert run.pid is not None
    driver = environ_of(run.pid)

    def caught_up():
        totals = PipelineTotals.objects.filter(pipeline__name=name).first()
        return totals if totals is not None and totals.consumed >= len(records) else None

    # Read the JVM's and the Python workers' too, once they exist (the run has consumed every record).
    totals = until(caught_up, 300, "every record consumed by the driver with the allow-listed environment")
    below = []
    for child in psutil.Process(run.pid).children(recursive=True):
        try:
            below.append(environ_of(child.pid))
        except (ProcessLookupError, FileNotFoundError):
            continue  # a short-lived helper (a shell, a daemon's fork) ended between listing and reading

    for env in (driver, *below):
        dumped = json.dumps(env)
        for secret_name, value in WORKER_SECRETS.items():
            if secret_name != "KAFKA_SASL_PASSWORD":
                assert secret_name not in env, secret_name
            assert value not in dumped, secret_name
        assert "DATABASE_URL" not in env
        assert database_url not in dumped
        assert "DJANGO_SETTINGS_MODULE" not in env
    assert below, "the driver's JVM runs under it"
    # Its own cluster's connection, and what Spark and Python need, are there.
    assert driver["KAFKA_SASL_PASSWORD"] == password("alice").reveal()
    assert driver["KAFKA_SASL_USERNAME"] == "alice"
    assert driver["KAFKA_BOOTSTRAP_SERVERS"] == _env("SASL_SSL")
    assert driver["STREAMFORGE_STATE_DIR"] == str(django_settings.STATE_DIR)
    assert driver["SPARK_CONF_DIR"] == os.environ["SPARK_CONF_DIR"]
    assert (driver["PATH"], driver["LANG"], driver["TZ"]) == (os.environ["PATH"], "C.UTF-8", "UTC")
    unexpected = {
        key
        for key in driver
        if key not in launcher.DRIVER_ENV_NAMES
        and not key.startswith(launcher.DRIVER_ENV_PREFIXES)
        and not key.startswith("KAFKA_")
        and key not in ("STREAMFORGE_STATE_DIR", "PYTHONUNBUFFERED", "STREAMFORGE_REPLAY_KEY")
    }
    assert unexpected == set()
    # the replay key vouches for the console's replays (finding 4); it is not the secret key it derives from
    assert driver["STREAMFORGE_REPLAY_KEY"] == django_settings.REPLAY_KEY
    assert django_settings.SECRET_KEY not in driver["STREAMFORGE_REPLAY_KEY"]
    # and the pipeline ran: every record accounted for, the pushes on the destination topic
    pushes = sum(1 for _, v in records[:-2] if json.loads(v)["type"] == "PushEvent")
    assert (totals.consumed, totals.produced, totals.dlq_records) == (len(records), pushes, 2)
    assert len(consume_all(secure, topics["pushes"], group_prefix="secure.reader-")) == pushes
