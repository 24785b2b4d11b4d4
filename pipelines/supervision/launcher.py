"""Launching and stopping a pipeline's driver. ``start_pipeline`` (any process) places the pipeline and
claims it (``placement.place_and_claim``: a conditional UPDATE to STARTING that takes the lease, so two
workers or two beats racing to start one pipeline launch one driver), then has the owner launch it: in this
process when the chosen host is this process's runner, else through the ``pipelines.launch_run`` task on the
owner's queue. ``launch_claimed_run`` (only on the owner) writes the lease file, ensures the topics and
launches ``python -m pipelines.spark.driver`` as a child in its own process session (so a worker restart
does not take the driver with it and a kill can reach the whole group: driver, JVM, Python workers).
``stop_pipeline`` (any process) claims the run's stop in the database and has the owner signal the driver
(``signal_stop``), wherever it runs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

import psutil
from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access import audit
from pipelines.clusters import connection_for
from pipelines.models import ACTIVE_STATES, DesiredState, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.spark.fence import Lease, write_lease
from pipelines.supervision.exits import _end_run
from pipelines.supervision.placement import STARTABLE_STATES, place_and_claim, startable_q
from pipelines.supervision.processes import (
    _alive,
    _children,
    _kill_group,
    _signal_process,
    host_queue,
    lease_path,
    mark_signalled,
    run_dir,
    runner_name,
)
from pipelines.supervision.status import announce_status
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import KafkaConnection, admin_config, connection_environment
from streamforge_core.process_priority import lower_priority
from streamforge_core.schema_registry import RegistryConnection, registry_environment

log = logging.getLogger("pipelines.supervision")


def _state_dir() -> Path:
    return Path(settings.STATE_DIR)


def checkpoint_dir(pipeline_name: str) -> str:
    """Where a pipeline's Spark checkpoint lives: ``<CHECKPOINT_ROOT>/<name>``, kept across runs, revisions
    and hosts, so a restart (or a takeover on another runner) resumes. The root is a local path or any
    Hadoop URI every runner reaches (``file:///...``, ``hdfs://nn/...``, ``s3a://bucket/...``); Spark takes
    either form as ``checkpointLocation``."""
    return f"{str(settings.CHECKPOINT_ROOT).rstrip('/')}/{pipeline_name}"


def local_checkpoint_path(location: str) -> Path | None:
    """The local folder a checkpoint location names (a plain path or a ``file:`` URI), or None for a remote
    file system (``hdfs://``, ``s3a://`` ...), where Spark creates the folders itself."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # no scheme (or a Windows drive letter)
        return Path(location)
    return None


def driver_command(run: PipelineRun, spec_file: Path, conn: KafkaConnection) -> list[str]:
    """The driver's command line for ``run`` on ``conn``'s cluster (master and jars from settings). Only the
    bootstrap servers of the connection appear: its credentials go in the environment (``_launch``). A run
    claimed under a lease also gets ``--epoch N --lease-file PATH`` (its fence re-reads that file before
    each commit: ``pipelines.spark.fence``); on a ``spark://`` master, ``--driver-host`` and ``--cores-max``; a
    takeover (``is_takeover``) gets ``--no-warm-up``: its clock runs from the host's loss to the first batch
    committed elsewhere, and that batch starts the Python workers the warm-up would have; a host with a
    ``DRIVER_NICENESS`` passes ``--niceness N``, which the driver takes once its first batch is done (a
    takeover, which ``_launch`` leaves at the runner's priority until then)."""
    lease: list[str] = []
    if run.epoch is not None:
        lease = [
            "--epoch", str(run.epoch),
            "--lease-file", str(lease_path(run.pipeline.name, run.run_id)),
            "--fence-margin", str(settings.DRIVER_FENCE_MARGIN_SECONDS),
        ]  # fmt: skip
    # On a standalone cluster the driver stays on this runner (client mode) and its executors call back to
    # RUNNER_ADVERTISE_HOST; spark.cores.max keeps one application from taking every core of the cluster.
    cluster: list[str] = []
    if settings.SPARK_MASTER.startswith("spark://"):
        cluster = [
            "--driver-host", settings.RUNNER_ADVERTISE_HOST,
            "--cores-max", str(settings.SPARK_CORES_MAX),
        ]  # fmt: skip
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
        *lease,
        *cluster,
        *(["--no-warm-up"] if is_takeover(run) else []),
        *(["--niceness", str(settings.DRIVER_NICENESS)] if settings.DRIVER_NICENESS else []),
    ]  # fmt: skip


def is_takeover(run: PipelineRun) -> bool:
    """Whether ``run`` resumes a pipeline whose previous run ended because its lease expired (``HostLost``:
    the host crashed or was cut off), i.e. a failover rather than a start, restart or crash recovery."""
    previous = (
        PipelineRun.objects.filter(pipeline_id=run.pipeline_id, ended_at__isnull=False)
        .exclude(pk=run.pk)
        .order_by("-ended_at", "-pk")
        .values_list("error_type", flat=True)
        .first()
    )
    return previous == "HostLost"


def _claim_start(pipeline: Pipeline, now: datetime) -> PipelineState | None:
    """Move the pipeline to STARTING if it is startable now, without taking a lease; the state it came from,
    or None if another process claimed it first or it is not startable (the conditional UPDATE is the lock).
    ``placement.place_and_claim`` is the full claim, the lease included."""
    previous = pipeline.state
    if previous not in STARTABLE_STATES:
        return None
    claimed = (
        Pipeline.objects.filter(
            startable_q(now), pk=pipeline.pk, state=previous, desired_state=DesiredState.RUNNING
        )
        .exclude(current_revision=None)
        .update(state=PipelineState.STARTING, state_reason="", next_restart_at=None)
    )
    return PipelineState(previous) if claimed == 1 else None


def start_pipeline(*, pipeline_id: int, now: datetime | None = None) -> PipelineRun | None:
    """Place the pipeline, claim it, and have its new owner launch the driver of its current revision.

    Returns the new run (state STARTING), or None when the pipeline is not meant to run, already has a
    driver, is waiting out a restart backoff, another process won the claim, or it fits on no runner host
    (then it is PENDING: ``placement.place_and_claim``). When the chosen host is this process's runner (or
    no runner host is registered at all: one machine) the driver is launched here before returning (pid
    set); otherwise ``pipelines.launch_run`` goes to the owner's queue (``host_queue``) once committed.
    ``now`` (default: the clock) decides whether a restart backoff has passed.
    """
    run = place_and_claim(pipeline_id, now)
    if run is None:
        return None
    if run.host == runner_name():
        launch_claimed_run(run)
        return run
    task = current_app.signature("pipelines.launch_run", args=(str(run.run_id),))
    queue = host_queue(run.host)
    # robust: a broker hiccup must not undo a committed claim; the owner's agent launches its STARTING runs
    # without a pid on its own, and an unlaunched claim's lease expires and is placed again.
    transaction.on_commit(lambda: task.apply_async(queue=queue), robust=True)
    return run


#: Runs this process is launching right now, so a redelivered ``launch_run`` and the agent's fallback never
#: launch one run twice at once (guarded by ``_launching_lock``).
_launching: set[uuid.UUID] = set()
_launching_lock = threading.Lock()


def lease_of(run: PipelineRun) -> Lease | None:
    """The run's lease as the database holds it now, as its driver's lease file says it; None when the run
    has no epoch, its epoch is no longer the pipeline's, or the lease was released."""
    pipeline = Pipeline.objects.get(pk=run.pipeline_id)
    if run.epoch is None or pipeline.lease_epoch != run.epoch or pipeline.lease_expires_at is None:
        return None
    return Lease(
        pipeline=pipeline.name,
        run_id=str(run.run_id),
        epoch=run.epoch,
        host=run.host,
        expires_at_ms=int(pipeline.lease_expires_at.timestamp() * 1000),
    )


def launch_claimed_run(run: PipelineRun | uuid.UUID | str) -> PipelineRun | None:
    """Launch the driver of a claimed run on its owner: write its lease file (before the process exists, so
    its first fence check has a lease to read), ensure its topics and start the process.

    Refuses (None, nothing launched) unless the run is this process's (``run.host == runner_name()``), still
    open and STARTING with no pid (so a redelivered task is a no-op) and, when claimed under a lease, its
    epoch is still the pipeline's (a takeover since wins: the run then ends ``Fenced``). A failure to reach
    the cluster, ensure the topics or start the process ends the run as a failure (restarted with backoff).
    Returns the run (pid set unless that failed). Raises ``PipelineRun.DoesNotExist`` for an unknown id.
    """
    if not isinstance(run, PipelineRun):
        run = PipelineRun.objects.select_related("pipeline", "pipeline__cluster", "revision").get(run_id=run)
    with _launching_lock:
        if run.run_id in _launching:
            return None
        _launching.add(run.run_id)
    try:
        return _launch_claimed(run)
    finally:
        with _launching_lock:
            _launching.discard(run.run_id)


def _launch_claimed(run: PipelineRun) -> PipelineRun | None:
    name = run.pipeline.name
    if run.host != runner_name():
        log.warning("run %s of %s is %s's, not %s's: not launched", run.run_id, name, run.host, runner_name())
        return None
    if not PipelineRun.objects.filter(
        pk=run.pk, state=PipelineState.STARTING, ended_at=None, pid=None
    ).exists():
        return None
    workdir = run_dir(name, run.run_id)
    log_path = str(workdir / "driver.log")  # under this runner's state folder, whoever placed the run
    if run.log_path != log_path:
        PipelineRun.objects.filter(pk=run.pk).update(log_path=log_path)
        run.log_path = log_path
    if run.epoch is not None:
        lease = lease_of(run)
        if lease is None:
            log.warning("run %s of %s lost its lease (epoch %s) before launch", run.run_id, name, run.epoch)
            _end_run(
                run,
                exit_code=None,
                error_type="Fenced",
                message=f"its lease (epoch {run.epoch}) was taken over or released before the launch",
            )
            return None
        workdir.mkdir(parents=True, exist_ok=True)
        write_lease(lease_path(name, run.run_id), lease)
    try:
        conn = connection_for(run.pipeline.cluster)
    except ValueError as exc:  # an unreadable password or a broken cluster row: restarting cannot help
        log.warning("pipeline %s cannot connect to its cluster: %s", name, exc)
        _end_run(run, exit_code=c.EXIT_CONFIG, error_type="Config", message=f"Kafka cluster: {exc}")
        return run
    try:
        registry = _registry_of(run)
    except ValueError as exc:  # no registry, or one whose password cannot be read
        log.warning("pipeline %s cannot use its schema registry: %s", name, exc)
        _end_run(run, exit_code=c.EXIT_CONFIG, error_type="Config", message=f"Schema registry: {exc}")
        return run
    try:
        _launch(run, workdir, conn, registry)
    except Exception as exc:
        log.exception("could not launch the driver of %s", name)
        run.refresh_from_db(fields=["state"])  # a stop may have moved it on meanwhile
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
        "STREAMFORGE_RUNNER_NAME",  # tags the driver with its runner: the host agent's stray scan, crash-host
        # The host's sizing of its drivers (pipelines.spark.session: SIZING_ENV, CORES_ENV, CONF_ENV) and
        # glibc's malloc arenas (see DRIVER_ENV_DEFAULTS).
        "STREAMFORGE_DRIVER_SIZING", "STREAMFORGE_DRIVER_CORES", "STREAMFORGE_DRIVER_CONF", "MALLOC_ARENA_MAX",
        "STREAMFORGE_DRIVER_CLASS_ARCHIVE",  # the driver JVM's class archive (pipelines.spark.class_archive)
        "STREAMFORGE_EXECUTOR_CLASS_ARCHIVE",  # the cluster executors' one (a path on the workers' hosts)
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


def driver_environment(
    environ: Mapping[str, str], conn: KafkaConnection, registry: RegistryConnection | None = None
) -> dict[str, str]:
    """The whole environment of a pipeline's driver, built from an allow-list (security review #28,
    finding 7): from the worker's ``environ`` only what ``DRIVER_ENV_NAMES`` and ``DRIVER_ENV_PREFIXES``
    let through, over ``DRIVER_ENV_DEFAULTS``; the state folder (``STREAMFORGE_STATE_DIR``); and the
    ``KAFKA_*`` variables of ``conn``, the pipeline's own cluster as ``pipelines.clusters.connection_for`` resolved it, its password
    included (``connection_environment``; readable by the driver's user only, never on its command line);
    and, for a pipeline with registry formats, its cluster's schema registry as ``SCHEMA_REGISTRY_*``
    (``schema_registry.registry_environment``, the password the same way).

    Everything else stays behind: ``DJANGO_SECRET_KEY``, ``STREAMFORGE_AUDIT_KEY``, the notification key,
    ``DATABASE_URL``, the default cluster's and every other cluster's secrets, a cloud provider's keys.
    The driver imports nothing of Django and needs none of them."""
    env = {**DRIVER_ENV_DEFAULTS, **{name: value for name, value in environ.items() if _inherited(name)}}
    env.update(connection_environment(conn))
    if registry is not None:
        env.update(registry_environment(registry))
    env[replay_signing.KEY_ENV] = settings.REPLAY_KEY  # vouches for the console's replays (finding 4)
    env["STREAMFORGE_STATE_DIR"] = str(_state_dir())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _registry_of(run: PipelineRun) -> RegistryConnection | None:
    """The schema registry of the run's cluster when its revision reads or writes a registry format, else
    None. Raises ValueError (``registries.registry_for``) when it needs one that cannot be used."""
    from pipelines.registries import registry_for
    from pipelines.spec import parse_spec

    spec = parse_spec(run.revision.spec, pipeline_name=run.pipeline.name)
    if not spec.source.uses_registry and all(d.format == "json" for d in spec.destinations):
        return None
    return registry_for(run.pipeline.cluster)


def _launch(
    run: PipelineRun, workdir: Path, conn: KafkaConnection, registry: RegistryConnection | None = None
) -> None:
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
    local_checkpoint = local_checkpoint_path(checkpoint_dir(run.pipeline.name))
    if local_checkpoint is not None:
        local_checkpoint.parent.mkdir(parents=True, exist_ok=True)
    # The connection's security settings and password go in the driver's environment (readable by its user
    # only), never in its command line, where `ps` shows them to everyone; nothing else secret goes there.
    env = driver_environment(os.environ, conn, registry)
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
    if not is_takeover(run):
        # A start, a restart or a crash recovery runs at the host's niceness from the first instruction: twenty
        # drivers starting at once at full weight starved the control plane that promotes them (bench/FINDINGS.md
        # §20). Only a takeover starts at the runner's priority, lowering itself after its first batch (the
        # driver's ``--niceness``): its clock runs from the host's loss. On the group and its session rather
        # than in a preexec_fn, which is unsafe in a threaded worker; the JVM and Python workers inherit it.
        lower_priority(process.pid, settings.DRIVER_NICENESS)
    try:
        created = psutil.Process(process.pid).create_time()
    except psutil.Error:
        created = None
    # Only onto a run that is still open: one ended meanwhile (a stop, or a judge) must not get a driver.
    # ... and only once: a second launch of the same run (a redelivered task) stops its own process.
    stored = PipelineRun.objects.filter(
        pk=run.pk, ended_at=None, pid=None, state=PipelineState.STARTING
    ).update(pid=process.pid, process_started_at=created)
    if not stored:
        log.warning(
            "run %s of %s ended while its driver was launched: stopping it", run.run_id, run.pipeline.name
        )
        _kill_group(process.pid)
        raise RuntimeError("the run ended while its driver was being launched")
    run.pid, run.process_started_at = process.pid, created


def mark_stopping(*, pipeline_id: int, cause: str = "operator") -> PipelineRun | None:
    """Claim the stop of the pipeline's active run in the database, from any process: the run (and the
    pipeline) move to STOPPING with ``stop_cause`` = ``cause`` (``"operator"``, ``"restart"``, ``"drain"``)
    by a conditional UPDATE, audited ``pipeline.run.stop``. Nothing is signalled here: ``route_stop`` has
    the owner do that.

    Returns the STOPPING run (also one already STOPPING), or None when no driver was starting or running (a
    RESTARTING pipeline no longer wanted becomes STOPPED) or another process changed the run first.
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
    if run.state == PipelineState.STOPPING:
        return run
    now = timezone.now()
    claimed = PipelineRun.objects.filter(
        pk=run.pk, state__in=(PipelineState.STARTING, PipelineState.RUNNING)
    ).update(state=PipelineState.STOPPING, stop_requested_at=now, stop_cause=cause)
    if claimed != 1:
        return None
    Pipeline.objects.filter(pk=pipeline_id, state__in=ACTIVE_STATES).update(state=PipelineState.STOPPING)
    run.state, run.stop_requested_at, run.stop_cause = PipelineState.STOPPING, now, cause
    audit.record(
        actor=None,
        action="pipeline.run.stop",
        target_type="pipeline",
        target_id=run.pipeline.name,
        details={"run_id": str(run.run_id), "pid": run.pid, "host": run.host, "cause": cause},
    )
    run.pipeline.state = PipelineState.STOPPING
    announce_status(run.pipeline, run)
    return run


def route_stop(run: PipelineRun) -> bool:
    """Have the owner of a STOPPING run signal its driver, once the caller's transaction commits: this
    process when it is the run's runner, else ``pipelines.signal_stop`` on the owner's queue
    (``host_queue(run.host)``: Celery routing, a worker started with ``-Q <shared>,<own>`` reads it). False
    when the run is on a machine that is no registered runner host (a one-machine install's worker elsewhere):
    the caller falls back to a stop task on the shared queue. (If the message is lost, the owner's agent
    signals its STOPPING runs on its next tick; a lost owner's lease expires and the run ends stopped.)"""
    run_id = str(run.run_id)
    if run.host == runner_name():
        transaction.on_commit(lambda: signal_stop(run_id), robust=True)
        return True
    if not RunnerHost.objects.filter(name=run.host).exists():
        return False
    task = current_app.signature("pipelines.signal_stop", args=(run_id,))
    queue = host_queue(run.host)
    transaction.on_commit(lambda: task.apply_async(queue=queue), robust=True)
    return True


def signal_stop(run_id: uuid.UUID | str) -> bool:
    """On the run's owner: send its driver the graceful SIGTERM (to the driver process only: it lets the
    running micro-batch finish and stops its own query and JVM; signalling the group would kill the JVM
    under it). Once per run and process (``processes.mark_signalled``, shared with the agent's tick).

    True when signalled (or, for a run stopped before its driver was launched, ended here). Nothing happens
    (False) when the run is unknown, not STOPPING, not this process's (``run.host != runner_name()``),
    already signalled or its process is gone (the agent's tick or ``reconcile`` records the end).
    ``reconcile`` kills the group after ``DRIVER_STOP_TIMEOUT_SECONDS``."""
    run = PipelineRun.objects.select_related("pipeline").filter(run_id=run_id).first()
    if run is None or run.state != PipelineState.STOPPING or run.host != runner_name():
        return False
    if run.pid is None:
        with _launching_lock:
            launching = run.run_id in _launching
        if launching:  # its launch stores the pid only on a STARTING run, and stops the process otherwise
            return False
        ended = _end_run(
            run, exit_code=None, error_type="Stopped", message="stopped before its driver started"
        )
        return ended is not None
    if _alive(run) is False or not mark_signalled(run.run_id):
        return False
    _signal_process(run.pid, signal.SIGTERM)
    log.info("asked run %s of %s (pid %s) to stop", run.run_id, run.pipeline.name, run.pid)
    return True


def stop_pipeline(*, pipeline_id: int, cause: str = "operator") -> PipelineRun | None:
    """Ask the pipeline's active driver to stop gracefully, wherever it runs: claim the stop in the database
    (``mark_stopping``) and have its owner signal it (``route_stop``). ``reconcile`` records the end, or
    kills the group after ``DRIVER_STOP_TIMEOUT_SECONDS``.

    Returns the run now STOPPING, or None when no driver was starting or running. A driver on a machine that
    is no registered runner host and not this one is only marked STOPPING here.
    """
    run = mark_stopping(pipeline_id=pipeline_id, cause=cause)
    if run is not None and run.host == runner_name():
        signal_stop(run.run_id)  # the owner itself: now, not after an outer transaction
    elif run is not None:
        route_stop(run)
    return run


def restart_pipeline(*, pipeline_id: int) -> PipelineRun | None:
    """Stop the active driver gracefully; once it has exited, ``reconcile`` (desired state RUNNING) starts
    the current revision again. With no active driver, start now. Returns the affected run."""
    stopping = stop_pipeline(pipeline_id=pipeline_id, cause="restart")
    if stopping is not None:
        return stopping
    return start_pipeline(pipeline_id=pipeline_id)
