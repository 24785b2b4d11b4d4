"""Pipelines and their immutable, validated revisions."""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Case, ExpressionWrapper, Value, When
from django.db.models.functions import Now

from access.models import Team
from pipelines.spec import PipelineSpec, parse_spec


class DesiredState(models.TextChoices):
    """What the operator asked for; supervision makes the actual state follow it."""

    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"


class PipelineState(models.TextChoices):
    """The actual state of a pipeline's driver, as supervision last saw it (also each run's state).

    STARTING: a driver was launched and has not beaten yet. RUNNING: heartbeats arrive. STOPPING: asked to
    stop, the running micro-batch is finishing. STOPPED: ended on request. RESTARTING: the driver crashed or
    went silent and a new attempt follows after a backoff. FAILED: it crashed too often (a crash loop) and
    is left stopped until an operator starts it. HALTED: a non-recoverable error (Config, DslParse,
    DeadLetterQueue) stopped it; restarting cannot help, so it is never restarted automatically. PENDING:
    wanted running, but no runner host has a free slot with the labels it asks for (``state_reason`` says
    which hosts were considered and why each was passed over); placement retries every reconcile.
    """

    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    RESTARTING = "restarting", "Restarting"
    FAILED = "failed", "Failed"
    HALTED = "halted", "Halted"


#: States in which a driver process may be alive: at most one run of a pipeline is in one of these.
ACTIVE_STATES = (PipelineState.STARTING, PipelineState.RUNNING, PipelineState.STOPPING)


class KafkaCluster(models.Model):
    """A named Kafka cluster besides the installation's default one (which is not a row: it comes from the
    ``KAFKA_*`` environment, and a pipeline or DLQ topic with no cluster uses it).

    Holds how to connect, never a secret: the SASL password is a *reference* (``password_ref``:
    ``env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD`` or ``file:<credential dir>/<name>/<file>``), read each time a
    client is built, so a database dump, a backup or the admin's screen never holds it and a rotation needs
    no write here. The TLS files are paths to PEM files in the same folder. ``pipelines.clusters`` validates
    the whole and turns a row into a ``streamforge_core.kafka.KafkaConnection``.

    ``verified_fingerprint`` is the fingerprint of the connection settings an admin's test last passed on
    (``pipelines.clusters.settings_fingerprint``; empty: never, or changed since): the product connects to
    the cluster on its own only while it matches the row's settings. ``verified_at``/``verified_by`` say
    when and by whom.
    """

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True)
    bootstrap_servers = models.CharField(max_length=1000, help_text="comma-separated host:port list")
    security_protocol = models.CharField(max_length=16, default="PLAINTEXT")
    sasl_mechanism = models.CharField(max_length=16, blank=True)
    sasl_username = models.CharField(max_length=255, blank=True)
    password_ref = models.CharField(
        max_length=1000,
        blank=True,
        help_text="env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD or file:<path>; never the password itself",
    )
    ssl_ca_location = models.CharField(max_length=1000, blank=True)
    ssl_certificate_location = models.CharField(max_length=1000, blank=True)
    ssl_key_location = models.CharField(max_length=1000, blank=True)
    verify_hostname = models.BooleanField(default=True)
    # The cluster's schema registry (Confluent-compatible API; ``pipelines.registries``): empty URL, none.
    # Its basic-auth password is a reference like ``password_ref`` (its own variable or a file in the
    # cluster's credential folder), and its mTLS files lie in that folder too.
    registry_url = models.CharField(max_length=1000, blank=True)
    registry_username = models.CharField(max_length=255, blank=True)
    registry_password_ref = models.CharField(max_length=1000, blank=True)
    registry_ca_location = models.CharField(max_length=1000, blank=True)
    registry_certificate_location = models.CharField(max_length=1000, blank=True)
    registry_key_location = models.CharField(max_length=1000, blank=True)
    verified_fingerprint = models.CharField(max_length=64, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    verified_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


#: The name the default cluster (``KAFKA_*`` environment, no row) goes by in the UI, the API and metrics.
DEFAULT_CLUSTER_NAME = "default"


class RunnerHostState(models.TextChoices):
    """A runner host's state, derived from its heartbeat and its drain flag (``RunnerHost.objects.with_state``).

    UP: beating, takes new pipelines. DRAINING: beating, an admin asked for its pipelines to move off; takes
    none. LOST: no heartbeat for ``HOST_LOST_SECONDS``; its leases expire and its pipelines start elsewhere.
    """

    UP = "up", "Up"
    DRAINING = "draining", "Draining"
    LOST = "lost", "Lost"


class RunnerHostQuerySet(models.QuerySet["RunnerHost"]):
    def with_state(self) -> RunnerHostQuerySet:
        """Annotates ``state`` (a ``RunnerHostState`` value), judged against the database's clock (``now()``),
        so every web, beat and runner process agrees whatever its own clock says."""
        lost_before = ExpressionWrapper(
            Now() - timedelta(seconds=settings.HOST_LOST_SECONDS), output_field=models.DateTimeField()
        )
        return self.annotate(
            state=Case(
                When(last_heartbeat_at__lt=lost_before, then=Value(RunnerHostState.LOST.value)),
                When(draining=True, then=Value(RunnerHostState.DRAINING.value)),
                default=Value(RunnerHostState.UP.value),
                output_field=models.CharField(),
            )
        )


class RunnerHost(models.Model):
    """A runner: a Celery worker with a stable ``name`` (``STREAMFORGE_RUNNER_NAME``) that launches and
    supervises pipeline drivers on its machine. It reads the shared queue and its own ``queue``; its agent
    upserts this row at start and moves ``last_heartbeat_at`` (the database's ``now()``) every
    ``HOST_TICK_SECONDS``. ``slots`` and ``memory_mb`` are its capacity (each driver takes one slot and
    ``DRIVER_MEMORY_MB``); a pipeline's placement labels must all be among ``labels``. ``draining`` is an
    admin's request to move its pipelines off (it outlives the host going lost and coming back); ``lost_at``
    is set once per loss, by the reconcile that noticed it."""

    name = models.SlugField(max_length=63, unique=True)
    queue = models.CharField(max_length=200)
    slots = models.PositiveIntegerField()
    memory_mb = models.PositiveIntegerField()
    labels = models.JSONField(default=list, blank=True)
    advertise_host = models.CharField(max_length=255)
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    draining = models.BooleanField(default=False)
    drain_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    drain_requested_at = models.DateTimeField(null=True, blank=True)
    lost_at = models.DateTimeField(null=True, blank=True)

    objects = RunnerHostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Pipeline(models.Model):
    """A named Kafka-to-Kafka pipeline owned by a team. Its behaviour is its ``current_revision``'s spec;
    ``desired_state`` is what operators asked for, ``state`` what supervision last saw. It reads and writes
    one Kafka ``cluster`` (None: the installation's default), fixed at creation: offsets, checkpoints and
    transactions mean nothing on another cluster."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="pipelines")
    cluster = models.ForeignKey(
        KafkaCluster, on_delete=models.PROTECT, null=True, blank=True, related_name="pipelines"
    )
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.STOPPED
    )
    current_revision = models.ForeignKey(
        "PipelineRevision", on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    # Supervision bookkeeping (pipelines.supervision): ``state`` is the actual state, and a conditional
    # UPDATE of it is the claim that makes a start happen at most once. ``consecutive_failures`` drives the
    # restart backoff (reset once a run processes a batch).
    state = models.CharField(max_length=16, choices=PipelineState.choices, default=PipelineState.STOPPED)
    state_reason = models.TextField(blank=True, help_text="why the pipeline is in this state (last error)")
    consecutive_failures = models.PositiveIntegerField(default=0)
    next_restart_at = models.DateTimeField(null=True, blank=True)
    # The lease: the runner host that may run this pipeline's driver, until ``lease_expires_at`` (the
    # database's clock), under ``lease_epoch``. Claimed with a conditional UPDATE that adds 1 to the epoch,
    # so a takeover always has a higher epoch than the run it replaces; the epoch never goes back, and a
    # driver whose run's epoch is not the pipeline's stops before committing (pipelines.spark.fence).
    lease_host = models.ForeignKey(
        RunnerHost, on_delete=models.PROTECT, null=True, blank=True, related_name="leases"
    )
    lease_epoch = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    placement_labels = models.JSONField(
        default=list, blank=True, help_text="labels a runner host must all have to run this pipeline"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["lease_host", "lease_expires_at"])]

    def __str__(self) -> str:
        return self.name


class RevisionIsImmutable(Exception):
    """Raised on any attempt to change or delete a saved PipelineRevision."""


class PipelineRevision(models.Model):
    """One validated spec of a pipeline, numbered from 1. Never changed or deleted once saved: a change to
    a pipeline is a new revision, and the runs, metrics and dead letters of the old one keep pointing at it."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    comment = models.CharField(max_length=500, blank=True)
    diff = models.TextField(blank=True, help_text="unified diff of the spec against the previous revision")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pipeline", "-number"]
        constraints = [models.UniqueConstraint(fields=["pipeline", "number"], name="one_revision_number")]

    def __str__(self) -> str:
        return f"{self.pipeline.name} r{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise RevisionIsImmutable(f"revision {self} is immutable; create a new revision instead")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise RevisionIsImmutable(f"revision {self} is immutable and cannot be deleted")

    @cached_property
    def parsed(self) -> PipelineSpec:
        """The stored spec as the typed ``PipelineSpec`` (parsed once per instance). Every saved revision was
        validated before it was stored, so this raises ``SpecError`` only if the rules have tightened since."""
        return parse_spec(self.spec, pipeline_name=self.pipeline.name)


class PipelineRun(models.Model):
    """One driver attempt: which revision ran where (host, pid, Spark application), how it ended and why.

    ``run_id`` is handed to the driver (``--run-id``) and comes back on its heartbeats, progress events and
    exit report, so each of them is attributed to exactly this attempt. ``exit_code`` follows
    ``streamforge_core.contract`` (0 stopped, 1 crashed, 2 Config/DslParse, 3 DeadLetterQueue; negative: killed
    by that signal). ``log_tail`` keeps the end of the driver's log once the run has ended.
    """

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="runs")
    revision = models.ForeignKey(PipelineRevision, on_delete=models.PROTECT, related_name="runs")
    run_id = models.UUIDField(unique=True)
    attempt = models.PositiveIntegerField(help_text="1 for an operator's start, +1 per automatic restart")
    state = models.CharField(max_length=16, choices=PipelineState.choices, default=PipelineState.STARTING)
    host = models.CharField(max_length=255, help_text="the runner host's name")
    epoch = models.BigIntegerField(
        null=True, blank=True, help_text="the pipeline's lease epoch this run was claimed under"
    )
    stop_cause = models.CharField(
        max_length=16, blank=True, help_text='who asked it to stop: "operator", "restart", "drain" or ""'
    )
    pid = models.PositiveIntegerField(null=True, blank=True)
    process_started_at = models.FloatField(
        null=True, blank=True, help_text="the process's start time (epoch s): tells a reused pid apart"
    )
    spark_app_id = models.CharField(max_length=128, blank=True)
    log_path = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error_type = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_progress_at = models.DateTimeField(null=True, blank=True)
    last_batch_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["pipeline", "state"])]

    def __str__(self) -> str:
        return f"{self.pipeline.name} attempt {self.attempt} ({self.state})"


class MetricSample(models.Model):
    """The progress of one micro-batch of one run, as the driver reported it (``type: progress`` event).

    Counts are records of that batch. ``destinations`` maps destination name to
    ``{"produced", "filtered", "dead_lettered"}``; ``dead_lettered_by_type`` maps error type to records;
    ``offsets`` maps topic -> partition -> ``{"start", "end", "latest"}`` (end exclusive); ``lag`` is the
    sum over partitions of ``latest - end`` right after the batch. ``time_ms`` is epoch milliseconds.
    """

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="metric_samples")
    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="metric_samples")
    batch_id = models.BigIntegerField()
    time_ms = models.BigIntegerField(db_index=True)
    duration_ms = models.FloatField()
    consumed = models.BigIntegerField()
    already_committed = models.BigIntegerField(default=0)
    lost = models.BigIntegerField(default=0)
    produced = models.BigIntegerField(help_text="sum over destinations")
    filtered = models.BigIntegerField(help_text="sum over destinations")
    dead_lettered = models.BigIntegerField(help_text="sum over destinations")
    dlq_records = models.BigIntegerField(help_text="records written to the DLQ topic")
    retries = models.BigIntegerField(default=0)
    dlq_retries = models.BigIntegerField(default=0)
    group_commit_failed = models.BooleanField(default=False)
    lag = models.BigIntegerField(null=True, blank=True)
    destinations = models.JSONField(default=dict)
    dead_lettered_by_type = models.JSONField(default=dict)
    offsets = models.JSONField(default=dict)

    class Meta:
        ordering = ["-time_ms"]
        constraints = [models.UniqueConstraint(fields=["run", "batch_id"], name="one_sample_per_batch")]
        indexes = [models.Index(fields=["pipeline", "time_ms"])]

    def __str__(self) -> str:
        return f"{self.pipeline_id} batch {self.batch_id}"


class PartitionProgress(models.Model):
    """Where a pipeline stands on one source partition: the newest processed end offset and the partition's
    latest offset at that moment (from the last batch that touched it). ``lag = latest - end``."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="partitions")
    topic = models.CharField(max_length=249)
    partition = models.PositiveIntegerField()
    end_offset = models.BigIntegerField()
    latest_offset = models.BigIntegerField()
    lag = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["topic", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "topic", "partition"], name="one_row_per_partition")
        ]

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}: lag {self.lag}"


class AlertSeverity(models.TextChoices):
    """How urgent a firing alert is (the Prometheus rules' ``severity`` label)."""

    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class Alert(models.Model):
    """One alert rule firing (or having fired) for one pipeline, as evaluated by the beat.

    A rule that keeps firing updates the same row (``last_seen_at``, ``value``); it is resolved
    (``resolved_at`` set) the first evaluation it no longer holds; a new firing is a new row.
    """

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="alerts")
    rule = models.CharField(max_length=64)
    severity = models.CharField(max_length=16, choices=AlertSeverity.choices)
    summary = models.TextField()
    value = models.FloatField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["pipeline", "rule"],
                condition=models.Q(resolved_at__isnull=True),
                name="one_firing_alert_per_rule",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} on {self.pipeline_id}"


class PipelineTotals(models.Model):
    """Running totals of a pipeline since it was created, added to as progress events are stored.

    These back the Prometheus counters (``/metrics``), which must never go down: metric samples are deleted
    after the retention period, these totals are not. ``commits_failed`` counts batches whose offsets were
    not committed (a consumer-group commit that failed, or a run that ended in the middle of a batch).
    """

    pipeline = models.OneToOneField(Pipeline, on_delete=models.CASCADE, related_name="totals")
    batches = models.BigIntegerField(default=0)
    consumed = models.BigIntegerField(default=0)
    produced = models.BigIntegerField(default=0)
    filtered = models.BigIntegerField(default=0)
    dead_lettered = models.BigIntegerField(default=0)
    dlq_records = models.BigIntegerField(default=0)
    retries = models.BigIntegerField(default=0)
    lost = models.BigIntegerField(default=0)
    commits_succeeded = models.BigIntegerField(default=0)
    commits_failed = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"totals of {self.pipeline_id}"
