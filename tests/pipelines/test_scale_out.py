"""Scale-out: the same pipeline on a Spark standalone cluster (a master and one worker started with the
installed pyspark's own ``spark-class``, ``devstack.spark_cluster``), chosen only by ``SPARK_MASTER=spark://...``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import Role
from devstack.config import PORT_OFFSET_VARIABLE
from devstack.spark_cluster import standalone_cluster
from pipelines import progress, supervision
from pipelines.models import PipelineRun
from streamforge_core import contract as c
from streamforge_web.celery import app as celery_app
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all, produce

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]

#: The cluster's ports, moved by the stack's port offset like every other test service's.
_OFFSET = int(os.environ.get(PORT_OFFSET_VARIABLE, "").strip() or 0)
MASTER_PORT, MASTER_UI, WORKER_UI = 17077 + _OFFSET, 18080 + _OFFSET, 18081 + _OFFSET


@pytest.fixture
def spark_cluster(tmp_path, monkeypatch):
    """A standalone master and a 1-core, 1 GB worker (``devstack.spark_cluster``: pyspark's own
    ``spark-class`` from a home with a RELEASE marker), each in its own process group, killed afterwards.
    The driver (it inherits ``SPARK_*``) binds and advertises 127.0.0.1, so executors reach it on loopback
    rather than at the address the host name resolves to."""
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    with standalone_cluster(
        tmp_path, MASTER_PORT, MASTER_UI, (WORKER_UI,), cores=1, memory="1g", timeout=120
    ) as master:
        yield master


def test_a_pipeline_runs_on_a_standalone_cluster_by_setting_spark_master(
    spark_cluster, settings, tmp_path, make_topic, kafka_admin, kafka_bootstrap
):
    settings.STATE_DIR = tmp_path
    settings.CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    settings.SPARK_MASTER = spark_cluster
    settings.PROGRESS_CONSUMER_GROUP = f"test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    progress.ensure_group(client, settings.PROGRESS_CONSUMER_GROUP)
    celery_app.conf.task_always_eager = True
    team = TeamFactory(name="data-platform")
    admin, operator = member(team, Role.ADMIN, username="ada"), member(team, Role.OPERATOR, username="oti")
    source = make_topic("cluster-src", partitions=2)
    out = f"cluster-out-{uuid.uuid4().hex[:8]}"
    spec = {
        "source": {"topics": [source]},
        "destinations": [{"name": "all", "topic": out, "transform": "EXTRACT:/id,id"}],
        "dlq": {"topic": f"{out}.dlq"},
    }
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=admin)[0].key}")
    ops = APIClient()
    ops.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=operator)[0].key}")
    try:
        assert (
            api.post(
                "/api/pipelines/", {"name": "clustered", "team": "data-platform", "spec": spec}, format="json"
            ).status_code
            == 201
        )
        produce(
            kafka_bootstrap,
            source,
            [(None, json.dumps({"id": i}).encode()) for i in range(2000)],
            partitions=2,
        )
        assert ops.post("/api/pipelines/clustered/start/").status_code == 202
        # Generous: on a busy 2-core machine the executor's JVM alone took 3 minutes to start.
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            supervision.reconcile()
            progress.ingest()
            body = ops.get("/api/pipelines/clustered/metrics/").json()
            if body["totals"]["consumed"] >= 2000 and body["lag"] == 0:
                break
            time.sleep(1)
        else:
            run = PipelineRun.objects.get(pipeline__name="clustered")
            raise AssertionError(f"not caught up: {body}\n{Path(run.log_path).read_text()[-3000:]}")
        run = PipelineRun.objects.get(pipeline__name="clustered")
        assert run.spark_app_id.startswith("app-"), "a standalone application id, not local-..."
        arrived = {json.loads(r.value)["id"] for r in consume_all(kafka_bootstrap, out)}
        assert arrived == set(range(2000))
        ops.post("/api/pipelines/clustered/stop/")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and PipelineRun.objects.get(pk=run.pk).state != "stopped":
            supervision.reconcile()
            time.sleep(1)
        assert PipelineRun.objects.get(pk=run.pk).exit_code == 0
    finally:
        celery_app.conf.task_always_eager = False
        for pid in PipelineRun.objects.exclude(pid=None).values_list("pid", flat=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        supervision._children.clear()
        client.xgroup_destroy(c.PROGRESS_STREAM, settings.PROGRESS_CONSUMER_GROUP)
        existing = set(kafka_admin.list_topics(timeout=10).topics)
        doomed = [t for t in (out, f"{out}.dlq") if t in existing]
        if doomed:
            for future in kafka_admin.delete_topics(doomed).values():
                future.result(timeout=30)
