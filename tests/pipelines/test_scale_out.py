"""Scale-out: the same pipeline on a Spark standalone cluster (a master and one worker started with the
installed pyspark's own ``spark-class``, ``devstack.spark_cluster``), chosen only by ``SPARK_MASTER=spark://...``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any, cast

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
from pipelines.spark import archive_dump
from pipelines.supervision.spark_apps import kill_application
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


#: A client-mode application on the cluster that prints its id once its executor is up, then idles.
_APPLICATION = """
import sys, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.master(sys.argv[1]).appName("frozen-driver").config("spark.cores.max", "1").getOrCreate()
spark.range(10).count()  # an executor took the worker's core
print(spark.sparkContext.applicationId, flush=True)
time.sleep(600)
"""


def _master_state(ui_port: int) -> dict[str, Any]:
    """The standalone master's state (its UI's ``/json/``: ``activeapps``, ``completedapps``, ``coresused``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=10) as answer:
        return cast(dict[str, Any], json.loads(answer.read()))


def test_a_frozen_drivers_application_is_killed_on_the_master_and_frees_its_cores(spark_cluster, settings):
    """A SIGSTOPped driver keeps its application, and its executor's core, on the master (its sockets
    look alive); ``kill_application`` (what a reconcile calls for a run it ends ``HostLost``) removes both."""
    settings.SPARK_MASTER = spark_cluster
    settings.SPARK_MASTER_UI_URL = f"http://127.0.0.1:{MASTER_UI}"
    driver = subprocess.Popen(
        [sys.executable, "-c", _APPLICATION, spark_cluster],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        app_id = cast(IO[str], driver.stdout).readline().strip()
        assert app_id.startswith("app-"), app_id
        os.killpg(driver.pid, signal.SIGSTOP)
        time.sleep(5)
        state = _master_state(MASTER_UI)
        assert [a["id"] for a in state["activeapps"]] == [app_id], "a frozen driver keeps its application"
        assert state["coresused"] == 1

        assert kill_application(app_id)

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = _master_state(MASTER_UI)
            if not state["activeapps"] and state["coresused"] == 0:
                break
            time.sleep(0.5)
        assert (state["activeapps"], state["coresused"]) == ([], 0), state
        assert app_id in [a["id"] for a in state["completedapps"]]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)


def test_nothing_is_asked_without_a_standalone_master_or_its_ui(settings):
    settings.SPARK_MASTER, settings.SPARK_MASTER_UI_URL = "local[*]", "http://127.0.0.1:1"
    assert not kill_application("app-20261128000000-0001")
    settings.SPARK_MASTER, settings.SPARK_MASTER_UI_URL = "spark://127.0.0.1:7077", ""
    assert not kill_application("app-20261128000000-0001")
    settings.SPARK_MASTER_UI_URL = "file:///etc/passwd"
    assert not kill_application("app-20261128000000-0001")


#: A client-mode application through ``build_session`` (so it gets the archive options of its environment)
#: that runs one job on its executor, prints its application id, then idles.
_ARCHIVED_APPLICATION = """
import os, sys, time
from pipelines.spark.session import build_session
spark = build_session(
    app_name="archived-executor", master=sys.argv[1], jars=os.environ["STREAMFORGE_SPARK_JARS"].split(","),
    conf={"spark.cores.max": "1"},
)
spark.range(10).count()
print("application", spark.sparkContext.applicationId, flush=True)
time.sleep(600)
"""


def test_the_executors_class_archive_is_dumped_on_the_cluster_and_mapped_by_later_executors(
    spark_cluster, tmp_path
):
    """``python -m pipelines.spark.archive_dump --executor-master`` leaves a complete archive (its executor
    ends itself so HotSpot finishes writing, no half-written file of the replacement executor stays), and an
    executor of a driver whose environment names it maps it (HotSpot ignores an archive it cannot use, so
    ``/proc/<pid>/maps`` is the proof)."""
    archive = tmp_path / "cds" / "executor.jsa"
    archive.parent.mkdir()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("STREAMFORGE_EXECUTOR_CLASS_ARCHIVE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.spark.archive_dump", str(archive), "--executor-master", spark_cluster,
         "--jars", env["STREAMFORGE_SPARK_JARS"]],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert archive.is_file()
    assert archive.stat().st_size > 10_000_000
    assert sorted(p.name for p in archive.parent.iterdir()) == ["executor.jsa"]

    driver = subprocess.Popen(
        [sys.executable, "-c", _ARCHIVED_APPLICATION, spark_cluster],
        env={**env, "STREAMFORGE_EXECUTOR_CLASS_ARCHIVE": str(archive)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True,
    )  # fmt: skip
    try:
        # The driver's log shares its stdout: the id is the line the application marks.
        lines = (line.split() for line in cast(IO[str], driver.stdout))
        app_id = next(words[1] for words in lines if words[:1] == ["application"])
        assert app_id.startswith("app-"), app_id
        executors = archive_dump.executor_processes(app_id)
        assert len(executors) == 1
        assert str(archive) in Path(f"/proc/{executors[0].pid}/maps").read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
