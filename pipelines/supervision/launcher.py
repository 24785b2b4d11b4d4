"""Launching and stopping a pipeline's driver, on a worker: ``start_pipeline`` claims the pipeline (a
conditional UPDATE to STARTING, so two workers or two beats racing to start one pipeline launch one
driver), ensures its topics and launches ``python -m pipelines.spark.driver`` as a child in its own process
session (so a worker restart does not take the driver with it and a kill can reach the whole group: driver,
JVM, Python workers); ``stop_pipeline`` asks it to stop gracefully.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import psutil
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access import audit
from pipelines.clusters import connection_for
from pipelines.models import ACTIVE_STATES, DesiredState, Pipeline, PipelineRun, PipelineState
from pipelines.supervision.exits import _end_run
from pipelines.supervision.processes import (
    _alive,
    _children,
    _kill_group,
    _signal_process,
    run_dir,
    runner_name,
)
from pipelines.supervision.status import announce_status
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import KafkaConnection, admin_config, connection_environment

log = logging.getLogger("pipelines.supervision")


def _state_dir() -> Path:
    return Path(settings.STATE_DIR)


def checkpoint_dir(pipeline_name: str) -> Path:
    """Where a pipeline's Spark checkpoint lives: kept across runs and revisions, so a restart resumes."""
    return _state_dir() / "checkpoints" / pipeline_name


def driver_command(run: PipelineRun, spec_file: Path, conn: KafkaConnection) -> list[str]:
    """The driver's command line for ``run`` on ``conn``'s cluster (master and jars from settings). Only the
    bootstrap servers of the connection appear: its credentials go in the environment (``_launch``)."""
    return [
        sys.executable, "-m", "pipelines.spark.driver",
        "--spec-file", str(spec_file),
        "--pipeline", run.pipeline.name,
        "--revision", str(run.revision.number),
        "--run-id", str(run.run_id),
        "--bootstrap", conn.bootstrap_servers,
        "--redis-url", settings.REDIS_URL,
        "--checkpoint-dir", str(checkpoint_dir(run.pipeline.name)),
        "--master", settings.SPARK_MASTER,
        "--jars", ",".join(settings.SPARK_JARS),
    ]  # fmt: skip


def _claim_start(pipeline: Pipeline, now: datetime) -> PipelineState | None:
    """Move the pipeline to STARTING if it is startable now; the state it came from, or None if another
    worker claimed it first or it is not startable (the conditional UPDATE is the lock)."""
    startable = Q(state=PipelineState.STOPPED) | Q(
        Q(next_restart_at__isnull=True) | Q(next_restart_at__lte=now), state=PipelineState.RESTARTING
    )
    previous = pipeline.state
    claimed = (
        Pipeline.objects.filter(startable, pk=pipeline.pk, state=previous, desired_state=DesiredState.RUNNING)
        .exclude(current_revision=None)
        .update(state=PipelineState.STARTING, state_reason="", next_restart_at=None)
    )
    return PipelineState(previous) if claimed == 1 else None


def start_pipeline(*, pipeline_id: int, now: datetime | None = None) -> PipelineRun | None:
    """Launch a driver for the pipeline's current revision, if it should run and nobody else is starting it.

    Returns the new run (state STARTING, pid set), or None when the pipeline is not meant to run, already has
    a driver, is waiting out a restart backoff, or another worker won the claim. Topics are ensured first;
    a failure to ensure them or to launch the process ends the run as a failure (restarted with backoff).
    ``now`` (default: the clock) decides whether a restart backoff has passed.
    """
    pipeline = Pipeline.objects.select_related("current_revision", "team", "cluster").get(pk=pipeline_id)
    # The claim and the run row commit together: nobody ever sees a STARTING pipeline without its run.
    with transaction.atomic():
        previous = _claim_start(pipeline, now or timezone.now())
        if previous is None:
            return None
        revision = pipeline.current_revision
        assert revision is not None  # the claim excludes pipelines without one
        last = pipeline.runs.order_by("-started_at", "-id").first()
        attempt = last.attempt + 1 if previous == PipelineState.RESTARTING and last is not None else 1
        run_id = uuid.uuid4()
        workdir = run_dir(pipeline.name, run_id)
        run = PipelineRun.objects.create(
            pipeline=pipeline,
            revision=revision,
            run_id=run_id,
            attempt=attempt,
            state=PipelineState.STARTING,
            host=runner_name(),
            log_path=str(workdir / "driver.log"),
        )
        audit.record(
            actor=None,
            action="pipeline.run.start",
            target_type="pipeline",
            target_id=pipeline.name,
            details={
                "run_id": str(run_id),
                "attempt": attempt,
                "revision": revision.number,
                "host": run.host,
            },
        )
    pipeline.state = PipelineState.STARTING
    announce_status(pipeline, run)
    try:
        conn = connection_for(pipeline.cluster)
    except ValueError as exc:  # an unreadable password or a broken cluster row: restarting cannot help
        log.warning("pipeline %s cannot connect to its cluster: %s", pipeline.name, exc)
        _end_run(run, exit_code=c.EXIT_CONFIG, error_type="Config", message=f"Kafka cluster: {exc}")
        return run
    try:
        _launch(run, workdir, conn)
    except Exception as exc:
        log.exception("could not launch the driver of %s", pipeline.name)
        _end_run(run, exit_code=c.EXIT_CRASHED, error_type="Launch", message=f"could not launch: {exc}")
        return run
    return run


#: Variables of the worker's environment a driver inherits, by exact name: where programs and the JVM are,
#: whose home, locale and time zone, temporary files, the Python environment, and Hadoop's settings for a
#: checkpoint root on HDFS or an object store (DESIGN.md "Scaling past one machine").
DRIVER_ENV_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "JAVA_HOME",
        "PYTHONPATH", "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "HADOOP_HOME", "HADOOP_CONF_DIR", "HADOOP_USER_NAME",
        # The host's sizing of its drivers (pipelines.spark.session: SIZING_ENV, CORES_ENV, CONF_ENV) and
        # glibc's malloc arenas (see DRIVER_ENV_DEFAULTS).
        "STREAMFORGE_DRIVER_SIZING", "STREAMFORGE_DRIVER_CORES", "STREAMFORGE_DRIVER_CONF", "MALLOC_ARENA_MAX",
    }
)  # fmt: skip
#: What a driver gets when the worker's environment does not say otherwise: at most 2 glibc malloc arenas per
#: process instead of 8 per core (every JVM and Python thread that mallocs may otherwise get its own 64 MB
#: arena reservation, part of which stays resident: mallopt(3) M_ARENA_MAX; issue #29's footprint).
DRIVER_ENV_DEFAULTS: Mapping[str, str] = {"MALLOC_ARENA_MAX": "2"}
#: ... and by prefix: locale categories and Spark's own settings (``SPARK_HOME``, ``SPARK_CONF_DIR``,
#: ``SPARK_LOCAL_IP``, ``SPARK_LOCAL_DIRS``, ``PYSPARK_PYTHON`` ...).
DRIVER_ENV_PREFIXES = ("LC_", "SPARK_", "PYSPARK_")
#: Words that keep a variable out even when its prefix lets it in: a secret never rides on a prefix.
_SECRET_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL", "_KEY")


def _inherited(name: str) -> bool:
    if name in DRIVER_ENV_NAMES:
        return True
    return name.startswith(DRIVER_ENV_PREFIXES) and not any(word in name.upper() for word in _SECRET_WORDS)


def driver_environment(environ: Mapping[str, str], conn: KafkaConnection) -> dict[str, str]:
    """The whole environment of a pipeline's driver, built from an allow-list (security review #28,
    finding 7): from the worker's ``environ`` only what ``DRIVER_ENV_NAMES`` and ``DRIVER_ENV_PREFIXES``
    let through, over ``DRIVER_ENV_DEFAULTS``; the state folder (``STREAMFORGE_STATE_DIR``); and the
    ``KAFKA_*`` variables of ``conn``, the pipeline's own cluster as ``pipelines.clusters.connection_for`` resolved it, its password
    included (``connection_environment``; readable by the driver's user only, never on its command line).

    Everything else stays behind: ``DJANGO_SECRET_KEY``, ``STREAMFORGE_AUDIT_KEY``, the notification key,
    ``DATABASE_URL``, the default cluster's and every other cluster's secrets, a cloud provider's keys.
    The driver imports nothing of Django and needs none of them."""
    env = {**DRIVER_ENV_DEFAULTS, **{name: value for name, value in environ.items() if _inherited(name)}}
    env.update(connection_environment(conn))
    env[replay_signing.KEY_ENV] = settings.REPLAY_KEY  # vouches for the console's replays (finding 4)
    env["STREAMFORGE_STATE_DIR"] = str(_state_dir())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _launch(run: PipelineRun, workdir: Path, conn: KafkaConnection) -> None:
    from confluent_kafka.admin import AdminClient

    from pipelines.spec import parse_spec
    from pipelines.topics import ensure_topics

    spec = parse_spec(run.revision.spec, pipeline_name=run.pipeline.name)
    plan = ensure_topics(AdminClient(admin_config(conn)), spec)
    for problem in plan.problems:
        log.warning("pipeline %s: %s", run.pipeline.name, problem)
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(run.revision.spec))
    checkpoint_dir(run.pipeline.name).parent.mkdir(parents=True, exist_ok=True)
    # The connection's security settings and password go in the driver's environment (readable by its user
    # only), never in its command line, where `ps` shows them to everyone; nothing else secret goes there.
    env = driver_environment(os.environ, conn)
    with Path(run.log_path).open("ab") as log_file:
        process = subprocess.Popen(
            driver_command(run, spec_file, conn),
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: outlives worker restarts, killable as one group
        )
    _children[process.pid] = process
    if settings.DRIVER_NICENESS:
        # Now, while the driver imports (it starts its JVM only after): the JVM and the Python workers inherit
        # it. os.setpriority on the group instead of a preexec_fn, which is unsafe in a threaded worker.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PGRP, process.pid, settings.DRIVER_NICENESS)
    try:
        created = psutil.Process(process.pid).create_time()
    except psutil.Error:
        created = None
    # Only onto a run that is still open: one ended meanwhile (a stop, or a judge) must not get a driver.
    stored = PipelineRun.objects.filter(pk=run.pk, ended_at=None).update(
        pid=process.pid, process_started_at=created
    )
    if not stored:
        log.warning(
            "run %s of %s ended while its driver was launched: stopping it", run.run_id, run.pipeline.name
        )
        _kill_group(process.pid)
        raise RuntimeError("the run ended while its driver was being launched")
    run.pid, run.process_started_at = process.pid, created


def stop_pipeline(*, pipeline_id: int) -> PipelineRun | None:
    """Ask the pipeline's active driver to stop gracefully: SIGTERM to the driver process only (it lets the
    running micro-batch finish and stops its own query and JVM; signalling the group would kill the JVM
    under it). ``reconcile`` records the end, or kills the group after ``DRIVER_STOP_TIMEOUT_SECONDS``.

    Returns the run now STOPPING, or None when no driver was starting or running. A driver on another host
    is only marked STOPPING here (see the module docstring).
    """
    run = (
        PipelineRun.objects.filter(pipeline_id=pipeline_id, state__in=ACTIVE_STATES)
        .select_related("pipeline")
        .first()
    )
    if run is None:
        Pipeline.objects.filter(
            pk=pipeline_id, desired_state=DesiredState.STOPPED, state=PipelineState.RESTARTING
        ).update(state=PipelineState.STOPPED, next_restart_at=None)
        return None
    if run.state != PipelineState.STOPPING:
        now = timezone.now()
        claimed = PipelineRun.objects.filter(
            pk=run.pk, state__in=(PipelineState.STARTING, PipelineState.RUNNING)
        ).update(state=PipelineState.STOPPING, stop_requested_at=now)
        if claimed != 1:
            return None
        Pipeline.objects.filter(pk=pipeline_id, state__in=ACTIVE_STATES).update(state=PipelineState.STOPPING)
        run.state, run.stop_requested_at = PipelineState.STOPPING, now
        audit.record(
            actor=None,
            action="pipeline.run.stop",
            target_type="pipeline",
            target_id=run.pipeline.name,
            details={"run_id": str(run.run_id), "pid": run.pid},
        )
        run.pipeline.state = PipelineState.STOPPING
        announce_status(run.pipeline, run)
    if run.pid is not None and run.host == runner_name() and _alive(run) is not False:
        _signal_process(run.pid, signal.SIGTERM)
    return run


def restart_pipeline(*, pipeline_id: int) -> PipelineRun | None:
    """Stop the active driver gracefully; once it has exited, ``reconcile`` (desired state RUNNING) starts
    the current revision again. With no active driver, start now. Returns the affected run."""
    stopping = stop_pipeline(pipeline_id=pipeline_id)
    if stopping is not None:
        return stopping
    return start_pipeline(pipeline_id=pipeline_id)
