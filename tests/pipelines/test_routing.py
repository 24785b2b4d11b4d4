"""Every action reaches the driver wherever it runs (issue #29 item 3, design note §3.6): a process without
a runner name (a web process, here the test) starts a pipeline on runner ``runner-b`` and stops it; the
launch and the stop travel through ``runner-b``'s own Celery queue to a real worker process that reads only
that queue, and the stand-in driver it launched gets the SIGTERM and ends STOPPED.

Real PostgreSQL, Redis (broker) and a Celery worker subprocess; the driver is ``fake_driver.py``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.db.models.functions import Now
from django.utils import timezone

from access.models import Role
from pipelines import supervision
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.services import create_pipeline
from pipelines.supervision import launcher, processes
from streamforge_web.celery import app as celery_app
from streamforge_web.tasks import ping
from tests.database import child_database_url
from tests.factories import member
from tests.pipelines.conftest import github_spec

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("runner_worker.py")


def _wait(predicate, timeout: float, what: str, log_path: Path, tick=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} not reached in {timeout}s; worker log:\n{log_path.read_text()[-4000:]}")


@pytest.fixture
def runner_b(transactional_db, settings, tmp_path):
    """Runner ``runner-b``: its ``RunnerHost`` row and a real Celery worker (``runner_worker.py``, fake
    drivers) reading only ``host_queue("runner-b")`` of this test's own queue prefix, its state folder under
    ``tmp_path``. Stopped (TERM, then KILL) afterwards, with every driver it left."""
    if django_settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("a second process shares the database: PostgreSQL (STREAMFORGE_DB=postgres)")
    prefix = f"routing-{uuid.uuid4().hex[:10]}"
    settings.CELERY_TASK_DEFAULT_QUEUE = prefix
    settings.RUNNER_NAME = None  # this process is a web process: no runner of its own
    settings.LEASE_TTL_SECONDS = 600  # no agent renews in this test; the lease must outlast it
    settings.HOST_LOST_SECONDS = 600  # nor beats: the test moves the heartbeat itself
    queue = processes.host_queue("runner-b")
    state = tmp_path / "runner-b"
    now = timezone.now()
    RunnerHost.objects.create(
        name="runner-b",
        queue=queue,
        slots=2,
        memory_mb=4096,
        advertise_host="127.0.0.1",
        started_at=now,
        last_heartbeat_at=now,
    )
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "STREAMFORGE_RUNNER_NAME": "runner-b",
        "STREAMFORGE_CELERY_QUEUE": prefix,
        "STREAMFORGE_STATE_DIR": str(state),
        "STREAMFORGE_CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
        "STREAMFORGE_HOST_LOST_SECONDS": "600",
    }
    log_path = tmp_path / "runner-b.log"
    with log_path.open("ab") as log:
        worker = subprocess.Popen(
            [sys.executable, str(RUNNER), "run", queue],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            ping.apply_async(queue=queue).get(timeout=60)
        except Exception as error:
            raise AssertionError(f"runner-b did not answer a ping; see {log_path}") from error
        yield queue, state, log_path
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        for pid in PipelineRun.objects.exclude(pid=None).values_list("pid", flat=True):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.killpg(pid, signal.SIGKILL)
        redis.Redis.from_url(django_settings.REDIS_URL).delete(queue)


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_stop_asked_of_a_process_without_a_runner_reaches_the_driver_on_runner_b(
    runner_b, team, monkeypatch
):
    queue, state, log_path = runner_b
    assert celery_app.conf.task_always_eager is False
    sent: list[tuple[str, str]] = []
    real_signature = celery_app.signature

    def spying_signature(name, *args, **kwargs):
        signature = real_signature(name, *args, **kwargs)
        real_apply = signature.apply_async

        def apply_async(*a, **kw):
            sent.append((name, kw.get("queue")))
            return real_apply(*a, **kw)

        signature.apply_async = apply_async
        return signature

    monkeypatch.setattr(launcher.current_app, "signature", spying_signature)
    admin = member(team, Role.ADMIN, username="ada")
    operator = member(team, Role.OPERATOR, username="oti")
    pipeline = create_pipeline(actor=admin, name="routed", team=team, spec=github_spec())
    Pipeline.objects.filter(pk=pipeline.pk).update(desired_state=DesiredState.RUNNING)

    def keep_runner_b_beating():  # what its agent does; this worker has none yet
        RunnerHost.objects.filter(name="runner-b").update(last_heartbeat_at=Now())

    # Placement here (no runner name), the launch on runner-b through its queue.
    keep_runner_b_beating()
    run = supervision.start_pipeline(pipeline_id=pipeline.pk)
    assert run is not None
    assert (run.host, run.epoch) == ("runner-b", 1)
    assert ("pipelines.launch_run", queue) in sent
    _wait(
        lambda: PipelineRun.objects.filter(pk=run.pk).exclude(pid=None).exists(),
        30,
        "the driver launched on runner-b",
        log_path,
        keep_runner_b_beating,
    )
    run.refresh_from_db()
    lease = json.loads((state / "runs" / "routed" / str(run.run_id) / "lease.json").read_text())
    assert (lease["epoch"], lease["host"], lease["run_id"], lease["state"]) == (
        1,
        "runner-b",
        str(run.run_id),
        "held",
    )
    os.kill(run.pid, 0)  # alive: a child of the worker, on this machine
    beats = redis.Redis.from_url(django_settings.REDIS_URL)

    def beating() -> bool:  # its SIGTERM handler is in place once it beats
        raw = beats.get(f"streamforge:heartbeat:{pipeline.name}")
        return raw is not None and json.loads(raw)["run_id"] == str(run.run_id)

    _wait(beating, 30, "the driver's first heartbeat", log_path, keep_runner_b_beating)

    supervision.request_stop(actor=operator, pipeline=Pipeline.objects.get(pk=pipeline.pk))
    assert ("pipelines.signal_stop", queue) in sent
    assert PipelineRun.objects.get(pk=run.pk).stop_cause == "operator"

    def runner_b_reconciles():  # the agent's tick on runner-b reaps its drivers; until then, its reconcile
        keep_runner_b_beating()
        celery_app.signature("pipelines.reconcile").apply_async(queue=queue)

    _wait(
        lambda: PipelineRun.objects.get(pk=run.pk).state == PipelineState.STOPPED,
        40,
        "the run ended STOPPED",
        log_path,
        runner_b_reconciles,
    )
    run.refresh_from_db()
    assert (run.exit_code, run.error_type) == (0, "Stopped"), "the driver stopped on its SIGTERM, not killed"
    pipeline.refresh_from_db()
    assert (pipeline.state, pipeline.lease_host_id) == (PipelineState.STOPPED, None)
    assert timezone.now() - run.stop_requested_at < timedelta(seconds=60)
