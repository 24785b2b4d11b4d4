"""Pipelines and their immutable, validated revisions."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models

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
    DeadLetterQueue) stopped it; restarting cannot help, so it is never restarted automatically.
    """

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
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

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
    host = models.CharField(max_length=255)
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
