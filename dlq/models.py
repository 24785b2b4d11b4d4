"""The parking lot: dead letters, their payload fixes and replays, approvals, bulk actions, failure groups,
runbooks and the extra DLQ topics an admin registers.

State changes that must happen at most once (replay, approve, bulk claims) are conditional UPDATEs or
``select_for_update`` in ``dlq.services``; the models only hold the data and the rules of one row.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from access.models import Team
from pipelines.models import KafkaCluster, Pipeline


class DlqTopic(models.Model):
    """An extra DLQ topic for the ingester to read, e.g. one written by Kafka Connect or Spring Kafka.

    Pipelines' own DLQ topics are read without registration; this row gives a foreign topic an owning team
    (for permissions) and optionally the pipeline whose source its records belong to. A topic name is unique
    per ``cluster`` (None: the installation's default cluster); with a pipeline, it is the pipeline's cluster.
    """

    topic = models.CharField(max_length=249)
    cluster = models.ForeignKey(
        KafkaCluster, on_delete=models.PROTECT, null=True, blank=True, related_name="dlq_topics"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="dlq_topics")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["topic"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "topic"], name="one_registration_per_cluster_topic"),
            models.UniqueConstraint(
                fields=["topic"],
                condition=models.Q(cluster__isnull=True),
                name="one_registration_per_default_cluster_topic",
            ),
        ]

    def __str__(self) -> str:
        return self.topic


class FailureGroup(models.Model):
    """Dead letters of one pipeline (or foreign DLQ topic) with the same error type and normalized error
    message. ``count`` and the seen-times are maintained by ingest in the same transaction as the rows."""

    key = models.CharField(max_length=64, unique=True, help_text="dlq.grouping.group_key")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="failure_groups")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    pipeline_name = models.CharField(max_length=63, blank=True)
    dlq_topic = models.CharField(max_length=249)
    error_type = models.CharField(max_length=128, db_index=True)
    signature = models.TextField(help_text="the error message with its varying parts replaced")
    sample_message = models.TextField(blank=True)
    count = models.PositiveBigIntegerField(default=0)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return f"{self.pipeline_name or self.dlq_topic}: {self.error_type}: {self.signature[:60]}"


class GroupHourlyCount(models.Model):
    """Arrivals of one failure group per UTC hour: the trend line, without counting millions of rows."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="hourly")
    hour = models.DateTimeField()
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "hour"], name="one_count_per_group_hour")]

    def __str__(self) -> str:
        return f"{self.group_id} @ {self.hour:%Y-%m-%d %H}:00: {self.count}"


class Status(models.TextChoices):
    """Where a dead letter is in its life.

    PARKED: waiting for an operator. REPLAYING: claimed by one replay, the produce is under way (or its
    outcome is in doubt after a crash, until ``services.resolve_in_doubt`` reads the target topic).
    REPLAYED: the broker acknowledged the replayed record. SKIPPED: closed with a reason, nothing produced.
    DELETED: payload erased after an approved delete request (the row stays for the audit trail).
    """

    PARKED = "parked", "Parked"
    REPLAYING = "replaying", "Replaying"
    REPLAYED = "replayed", "Replayed"
    SKIPPED = "skipped", "Skipped"
    DELETED = "deleted", "Deleted"


class DeadLetter(models.Model):
    """One record of a DLQ topic: exactly one row per (topic, topic id, partition, offset), however often
    ingest reads it. ``key``/``value``/``headers`` are the DLQ record's bytes as written; ``headers`` is a list of
    ``[name, base64-or-null]`` pairs (header values may be binary, e.g. Spring's big-endian ints).
    The payload to replay is the latest ``PayloadRevision`` if any, else ``value``.
    """

    # No single-column indexes on these: the composite indexes below start with them.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="dead_letters", db_index=False)
    pipeline = models.ForeignKey(
        Pipeline,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="dead_letters",
        db_index=False,
    )
    pipeline_name = models.CharField(
        max_length=63, blank=True, help_text="the DLQ topic's owning pipeline; kept on delete"
    )
    # What the record's own x-streamforge-pipeline header says. Anyone who can write to a DLQ topic can
    # write any header, so it never decides ownership or replay targets; a disagreement is a warning.
    claimed_pipeline = models.CharField(
        max_length=249,
        blank=True,
        db_default="",
        help_text="the x-streamforge-pipeline header as written (not trusted)",
    )
    ownership_warning = models.TextField(
        blank=True,
        db_default="",
        help_text="why the headers' claim of ownership was not followed (empty: they agree)",
    )
    group = models.ForeignKey(
        FailureGroup, on_delete=models.PROTECT, related_name="dead_letters", db_index=False
    )
    # DLQ coordinates: the cluster (None: the default) the ingester read the record from, where a replay goes
    cluster = models.ForeignKey(
        KafkaCluster, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    dlq_topic = models.CharField(max_length=249)
    dlq_topic_id = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text="Kafka's topic id: a deleted and recreated topic starts at offset 0 again with a new id",
    )
    dlq_partition = models.IntegerField()
    dlq_offset = models.BigIntegerField()
    dlq_timestamp = models.DateTimeField(null=True, blank=True)
    # source coordinates (None when the writer did not say)
    source_topic = models.CharField(max_length=249, blank=True)
    source_partition = models.IntegerField(null=True, blank=True)
    source_offset = models.BigIntegerField(null=True, blank=True)
    # the record
    key = models.BinaryField(null=True, blank=True)
    value = models.BinaryField(null=True, blank=True)
    headers = models.JSONField(default=list)
    value_size = models.PositiveIntegerField(default=0)
    key_text = models.CharField(max_length=200, blank=True, help_text="searchable key prefix")
    # the failure
    convention = models.CharField(max_length=16)
    error_type = models.CharField(max_length=128)
    error_message = models.TextField(blank=True)
    destination = models.CharField(max_length=128, blank=True)
    revision = models.PositiveIntegerField(
        null=True, blank=True, help_text="pipeline revision that failed it"
    )
    attempts = models.PositiveIntegerField(default=1)
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()
    replay_of = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="later_failures",
        db_index=False,  # the partial index below: most dead letters are no replay's failure
    )
    # the console's work
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PARKED)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    # A bulk action audits itself once, with its counts; each message it closed points back to it here.
    closed_by_bulk = models.ForeignKey(
        "BulkAction",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # bulk actions are not deleted; an index would be one more to update per claim
        help_text="the bulk action that replayed or skipped it (its audit event has the reason and counts)",
    )
    ingested_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dlq_topic", "dlq_topic_id", "dlq_partition", "dlq_offset"],
                name="one_row_per_dlq_record",
            )
        ]
        # The list is keyset-paginated on id (newest first) and usually filtered by one field: an index
        # (field, id) serves the filter and the order together, and further filters (status, time) are
        # checked along that index. (field, status, id) would need the status too, or a sort of every match.
        # Every status change rewrites the row and adds an entry to each index that takes the new version
        # (``status`` is indexed, so no update is HOT): a bulk replay changes each row twice, so an index
        # that only some rows need is partial, and no column has two.
        indexes = [
            models.Index(fields=["team", "id"], name="dl_team_id"),
            models.Index(fields=["pipeline_name", "id"], name="dl_pname_id"),
            models.Index(fields=["group", "id"], name="dl_group_id"),
            models.Index(fields=["error_type", "id"], name="dl_type_id"),
            models.Index(fields=["status", "id"], name="dl_status_id"),
            models.Index(fields=["dlq_topic", "id"], name="dl_topic_id"),
            models.Index(fields=["last_failed_at", "id"], name="dl_failed_at_id"),
            # Retention's "closed N days ago" (``retention.CLOSED``); parked and replaying rows are not in it.
            models.Index(
                fields=["status", "status_changed_at"],
                condition=models.Q(status__in=[Status.REPLAYED, Status.SKIPPED]),
                name="dl_closed_changed",
            ),
            # The search's key prefix: LIKE 'prefix%' on PostgreSQL (pattern ops also serve =); on SQLite the
            # operator class is ignored and the plain index serves its range (``filters._search``).
            models.Index(fields=["key_text"], opclasses=["varchar_pattern_ops"], name="dl_key_prefix"),
            models.Index(
                fields=["replay_of"], condition=models.Q(replay_of__isnull=False), name="dl_replay_of"
            ),
            # A source record's dead letters, one per destination it failed (the message page's siblings);
            # its leading column also serves SET_NULL when a pipeline goes.
            models.Index(fields=["pipeline", "source_offset", "source_partition"], name="dl_pipeline_source"),
            # PROTECT's check when a cluster is deleted; partial: the default cluster's rows are not in it
            models.Index(fields=["cluster"], condition=models.Q(cluster__isnull=False), name="dl_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.dlq_topic}/{self.dlq_partition}/{self.dlq_offset}"

    @property
    def coordinates(self) -> str:
        """``topic/partition/offset`` of the DLQ record (what ``x-streamforge-replay-of`` carries)."""
        return f"{self.dlq_topic}/{self.dlq_partition}/{self.dlq_offset}"


class StatusCount(models.Model):
    """A signed change in the number of dead letters per (failure group, pipeline, cluster, status): the
    console's status counts, the groups' parked counts and the overview's backlog are sums of these rows
    instead of counts over millions of dead letters.

    Written only by database triggers on ``dlq_deadletter`` (migration 0008): every insert, delete and
    change of one of the four columns adds rows, whichever code path (ORM, ``.update()``, COPY, retention)
    made it, and inside the same transaction, so a rollback takes its deltas with it. PostgreSQL's triggers
    are per statement (one grouped row per key and statement, via transition tables); SQLite's per row.
    ``dlq.counts.compact`` folds the rows into one per key. The ids are plain columns, not foreign keys:
    the rows must outlive what they count (a pipeline deleted, its dead letters set to NULL, adds deltas
    for its id that sum to zero).
    """

    group_id = models.BigIntegerField()
    pipeline_id = models.BigIntegerField(null=True)
    cluster_id = models.BigIntegerField(null=True)
    status = models.CharField(max_length=16)
    n = models.BigIntegerField(help_text="dead letters added (positive) or gone (negative)")

    class Meta:
        indexes = [models.Index(fields=["group_id", "status"], name="statuscount_group_status")]

    def __str__(self) -> str:
        return f"group {self.group_id} {self.status} {self.n:+d}"


class PayloadRevision(models.Model):
    """A fixed payload for a dead letter, numbered from 1 (the original value is revision 0, kept on the
    dead letter). ``dsl_check`` is what the pipeline's DSL says of the new payload: ``{"would_pass": bool,
    "destinations": [{"destination", "outcome", "error_type", "error_message"}...]}`` or ``{}`` when there
    is no pipeline to check against."""

    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.CASCADE, related_name="payload_revisions")
    number = models.PositiveIntegerField()
    value = models.BinaryField()
    diff = models.TextField(blank=True)
    reason = models.TextField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    dsl_check = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["dead_letter", "number"]
        constraints = [
            models.UniqueConstraint(fields=["dead_letter", "number"], name="one_payload_revision_number")
        ]

    def __str__(self) -> str:
        return f"{self.dead_letter} payload r{self.number}"


class ReplayState(models.TextChoices):
    """PENDING: claimed, being produced. PRODUCED: the broker acknowledged it. FAILED: the produce failed
    (the dead letter went back to PARKED). FAILED_AGAIN: the replayed record came back to a DLQ."""

    PENDING = "pending", "Pending"
    PRODUCED = "produced", "Produced"
    FAILED = "failed", "Failed"
    FAILED_AGAIN = "failed_again", "Failed again"


class Replay(models.Model):
    """One attempt to send a dead letter back to a topic. ``replay_id`` goes out in the
    ``x-streamforge-replay-id`` header, which is how a record that fails again is linked back here and how
    an attempt whose outcome is in doubt after a crash is found on the target topic."""

    replay_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.CASCADE, related_name="replays")
    payload_revision = models.ForeignKey(
        PayloadRevision,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # the partial index below: most replays send the dead letter's own payload
    )
    bulk = models.ForeignKey("BulkAction", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    target_topic = models.CharField(max_length=249)
    destinations = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="the pipeline destinations it is for (x-streamforge-replay-destinations); empty: every one",
    )
    state = models.CharField(max_length=16, choices=ReplayState.choices, default=ReplayState.PENDING)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    requested_at = models.DateTimeField(auto_now_add=True)
    idempotency_key = models.CharField(max_length=128, blank=True)
    produced_partition = models.IntegerField(null=True, blank=True)
    produced_offset = models.BigIntegerField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["dead_letter", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="one_replay_per_idempotency_key",
            )
        ]
        # Partial, so that recording an answer (PENDING -> PRODUCED rewrites the row) adds no entry to them:
        # only pending attempts are looked up by time (``replays.resolve_in_doubt``).
        indexes = [
            models.Index(
                fields=["requested_at"],
                condition=models.Q(state=ReplayState.PENDING),
                name="replay_pending_time",
            ),
            models.Index(
                fields=["payload_revision"],
                condition=models.Q(payload_revision__isnull=False),
                name="replay_revision",
            ),
        ]

    def __str__(self) -> str:
        return f"replay {self.replay_id} of {self.dead_letter}"


class ApprovalKind(models.TextChoices):
    """What an approval request asks for."""

    DELETE = "delete", "Delete a dead letter"
    BULK = "bulk", "Run a large bulk action"
    REDRIVE = "redrive", "Create or widen a redrive policy"
    OFFSETS = "offsets", "Move a pipeline past source offsets"


class ApprovalState(models.TextChoices):
    """PENDING until a different approver decides; CANCELLED when the requester withdrew it (a bulk action
    cancelled while awaiting approval) or its target went away. Only PENDING ever changes."""

    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


class ApprovalRequest(models.Model):
    """A second person's consent for a destructive or large action (four-eyes): whoever approves must hold
    the approver role in the target's team and must not be the requester."""

    kind = models.CharField(max_length=16, choices=ApprovalKind.choices)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    dead_letter = models.ForeignKey(
        DeadLetter, on_delete=models.CASCADE, null=True, blank=True, related_name="approvals"
    )
    bulk = models.ForeignKey(
        "BulkAction", on_delete=models.CASCADE, null=True, blank=True, related_name="approvals"
    )
    redrive_policy = models.ForeignKey(
        "RedrivePolicy", on_delete=models.CASCADE, null=True, blank=True, related_name="approvals"
    )
    offset_skip = models.ForeignKey(
        "OffsetSkip", on_delete=models.CASCADE, null=True, blank=True, related_name="approvals"
    )
    change = models.JSONField(
        default=dict, blank=True, help_text="redrive: the settings it asks for (field -> value)"
    )
    state = models.CharField(max_length=16, choices=ApprovalState.choices, default=ApprovalState.PENDING)
    reason = models.TextField()
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["dead_letter"],
                condition=models.Q(state="pending", kind="delete"),
                name="one_pending_delete_per_dead_letter",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} request #{self.pk} ({self.state})"


class BulkKind(models.TextChoices):
    """A bulk action replays, skips, deletes (erases) or fixes (``dlq.services.bulk_fix``: a JSON Patch or
    DSL transform per message) every parked message its filter selects; a delete always waits for a second
    person's approval, like a single one."""

    REPLAY = "replay", "Replay"
    SKIP = "skip", "Skip"
    DELETE = "delete", "Delete (erase)"
    FIX = "fix", "Fix (JSON Patch or DSL transform)"


class BulkState(models.TextChoices):
    """Where a bulk action is in its life. The allowed moves, who may make each and what it does are one
    table, ``dlq.services.bulk.BULK_TRANSITIONS``; every change of ``BulkAction.state`` goes through it.

    AWAITING_APPROVAL: large, waits for an approver other than its creator. QUEUED: sent to a worker.
    RUNNING: a worker is at it (a stale heartbeat lets another worker take over). PAUSED: stopped by an
    operator, the only state ``resume`` leaves. Ends, never left: COMPLETED, CANCELLED (by an operator,
    also the withdrawal of a request for approval), REJECTED (by an approver), FAILED (a worker refused it,
    e.g. it needed an approval it does not have)."""

    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"
    FAILED = "failed", "Failed"


BULK_ACTIVE_STATES = (BulkState.QUEUED, BulkState.RUNNING)
#: States a bulk action never leaves.
BULK_FINAL_STATES = (BulkState.COMPLETED, BulkState.CANCELLED, BulkState.REJECTED, BulkState.FAILED)


class BulkAction(models.Model):
    """Replay or skip every parked dead letter matching ``filters`` (``dlq.filters.MessageFilter`` JSON),
    frozen at creation to ids up to ``max_id``: messages parked later are not swept in.

    Progress is ``processed`` of ``total``; ``cursor`` is the last dead letter id handled, so a resumed run
    continues after it and each message is claimed (PARKED -> REPLAYING / SKIPPED) exactly once.
    ``rate_limit`` is messages per second (0: as fast as the broker takes them).
    ``approval_required``: it selected more than the approval threshold when created, so no worker runs it
    until an approver other than ``created_by`` approved its ``ApprovalRequest``.
    """

    kind = models.CharField(max_length=16, choices=BulkKind.choices)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+", null=True, blank=True)
    filters = models.JSONField(default=dict)
    max_id = models.BigIntegerField()
    target_topic = models.CharField(
        max_length=249, blank=True, help_text="replay: blank means the source topic"
    )
    reason = models.TextField()
    rate_limit = models.PositiveIntegerField(default=100)
    state = models.CharField(max_length=24, choices=BulkState.choices)
    approval_required = models.BooleanField(
        default=False, help_text="runs only after an approver other than its creator approved it"
    )
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    cursor = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid of the worker running it")
    runs = models.PositiveIntegerField(default=0, help_text="how many times a worker started or resumed it")
    fix = models.JSONField(
        default=dict, blank=True, help_text='fix: {"patch": [RFC 6902 operations]} or {"transform": "DSL"}'
    )
    fix_failures = models.JSONField(
        default=dict, blank=True, help_text="fix: messages left unchanged, per reason (reason -> count)"
    )
    left_out = models.JSONField(
        default=dict,
        blank=True,
        help_text="messages a pending delete request held, left untouched: dead-letter id -> reason",
    )
    redrive_policy = models.ForeignKey(
        "RedrivePolicy",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="runs",
        help_text="the redrive policy whose scheduled run this is (null: a person's own bulk action)",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"bulk {self.kind} #{self.pk} ({self.state} {self.processed}/{self.total})"

    def progress(self) -> dict[str, Any]:
        """Counts and fraction done (0..1) for progress bars and the API."""
        return {
            "total": self.total,
            "processed": self.processed,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "fraction": (self.processed / self.total) if self.total else 1.0,
        }


class RunbookAction(models.TextChoices):
    """Actions a runbook may offer from its page."""

    FIX = "fix", "Fix the payload"
    REPLAY = "replay", "Replay"
    SKIP = "skip", "Skip"
    REQUEST_DELETE = "request_delete", "Request delete"
    BULK_REPLAY = "bulk_replay", "Bulk replay"
    BULK_SKIP = "bulk_skip", "Bulk skip"
    BULK_FIX = "bulk_fix", "Bulk fix"


class Runbook(models.Model):
    """What to do about a failure: markdown text and the actions an on-call engineer may run from it.
    Attached to one failure group, or to an error type (every group of that type in the team)."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="runbooks")
    title = models.CharField(max_length=200)
    body = models.TextField(help_text="markdown")
    group = models.ForeignKey(
        FailureGroup, on_delete=models.CASCADE, null=True, blank=True, related_name="runbooks"
    )
    error_type = models.CharField(max_length=128, blank=True)
    actions = models.JSONField(default=list, help_text="RunbookAction values")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title"]

    def __str__(self) -> str:
        return self.title


class RetentionPolicy(models.Model):
    """How long closed dead letters of a team, or of one of its pipelines, are kept (``dlq.services.retention``).

    REPLAYED and SKIPPED rows are purged ``closed_days`` after they were closed (0: never); DELETED rows (payload
    already erased by an approved delete) at the next run when ``purge_deleted``. PARKED and REPLAYING rows are
    work, never purged. A pipeline's policy beats its team's; without either, ``STREAMFORGE_DLQ_RETENTION_DAYS``
    applies. The audit log keeps every event of a purged row.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    closed_days = models.PositiveIntegerField(
        help_text="days a replayed or skipped dead letter is kept; 0: forever"
    )
    purge_deleted = models.BooleanField(default=True, help_text="purge approved deletes at the next run")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "pipeline"], name="one_policy_per_team_pipeline"),
            models.UniqueConstraint(
                fields=["team"], condition=models.Q(pipeline__isnull=True), name="one_team_policy"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.pipeline_id or '*'}: {self.closed_days} d"


class RetentionRun(models.Model):
    """One run of the retention purge: when, how long, and how many rows of each status it purged."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    purged = models.JSONField(default=dict, help_text="{status: rows purged}")
    total = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"retention {self.started_at:%Y-%m-%d %H:%M}: {self.total} purged"

    @property
    def seconds(self) -> float:
        """How long the run took."""
        return round((self.finished_at - self.started_at).total_seconds(), 1)


class ErasedKind(models.TextChoices):
    """Which copy of an erased dead letter an ``ErasedRecord`` is."""

    DLQ = "dlq", "The DLQ record"
    SOURCE = "source", "The source record it names"
    REPLAY = "replay", "A record a replay of it produced"


class ErasedRecord(models.Model):
    """A Kafka record whose content an approved (four-eyes) delete erased from the console: the dead letter's
    DLQ record, the source record its headers name, and the records its replays produced. Kafka cannot erase
    one record, so these copies stay on their topics until retention removes them; the topic browser
    withholds the key, value and headers of every record listed here, and of destination records whose
    lineage names one, for everyone. Written by ``dlq.services.erasure.erase_payloads`` in the delete's
    transaction; kept when retention purges the dead letter's row (the topics may keep the record longer)."""

    cluster = models.ForeignKey(
        KafkaCluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+", db_index=False
    )
    topic = models.CharField(max_length=249)
    partition = models.IntegerField()
    offset = models.BigIntegerField()
    kind = models.CharField(max_length=8, choices=ErasedKind.choices)
    # A plain id, not a foreign key: retention purges erased dead letters' rows in chunks, and a foreign key
    # would make each chunk update (or scan) this table; the coordinates are what the browser needs.
    dead_letter_id = models.BigIntegerField(
        null=True, blank=True, help_text="the erased dead letter (its row may be purged)"
    )
    erased_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The browser asks for a page's offsets of one topic and partition at a time.
        indexes = [models.Index(fields=["topic", "partition", "offset"], name="erased_coordinates")]

    def __str__(self) -> str:
        return f"erased {self.kind} {self.topic}/{self.partition}/{self.offset}"


class ProducedTestMessage(models.Model):
    """A test message the console produced (``dlq.test_messages.produce_test_message``): where it landed and
    who sent it. "Test message by" in the topic browser and on the outcome page comes from these rows, never
    from the record's ``x-streamforge-test`` header, which any producer to the topic can write."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    cluster = models.ForeignKey(
        KafkaCluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+", db_index=False
    )
    topic = models.CharField(max_length=249)
    partition = models.IntegerField()
    offset = models.BigIntegerField()
    produced_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    produced_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["topic", "partition", "offset"], name="test_message_coordinates")]

    def __str__(self) -> str:
        return f"test message {self.topic}/{self.partition}/{self.offset}"


class FixForwardState(models.TextChoices):
    """Where a fix-forward scan is: waiting for a worker, running, finished, or stopped by an error."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class FixForwardScan(models.Model):
    """Which parked dead letters of ``pipeline`` its revision ``revision`` would now pass, where the revision
    that dead-lettered them (``DeadLetter.revision``) did not: the pipeline was wrong, not the data.

    Computed off the request path by a worker (``dlq.services.fix_forward.run_scan``), ``checked`` of
    ``total`` as it goes. Each dead letter the new revision passes at the destination it failed, and its own
    revision still fails there, is a candidate (``FixForwardCandidate``); ``still_failing`` fail under the new
    revision too; ``unchanged`` pass under both (their failure was not the revision's: a broker refusal, a
    retry that ran out); ``unknown`` carry no revision to compare with. ``groups`` gives those counts per
    destination, failure group and error type. A replay of exactly the candidates is a bulk replay whose
    filter names the scan (``MessageFilter.fix_forward``), under the bulk rules."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="fix_forward_scans")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    revision = models.PositiveIntegerField(help_text="the revision that went live")
    previous_revision = models.PositiveIntegerField(
        null=True, blank=True, help_text="the revision that ran before it (null: none known)"
    )
    trigger = models.CharField(max_length=32, help_text="revision_live (a restart applied it) or manual")
    state = models.CharField(max_length=16, choices=FixForwardState.choices, default=FixForwardState.QUEUED)
    total = models.PositiveIntegerField(default=0)
    checked = models.PositiveIntegerField(default=0)
    candidates = models.PositiveIntegerField(default=0)
    still_failing = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    unknown = models.PositiveIntegerField(default=0)
    groups = models.JSONField(default=list, blank=True)
    max_id = models.BigIntegerField(default=0, help_text="dead letters up to this id were scanned")
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["pipeline", "-id"], name="ffs_pipeline_id")]

    def __str__(self) -> str:
        return f"fix forward of {self.pipeline_id} to revision {self.revision} ({self.state})"


class FixForwardCandidate(models.Model):
    """A dead letter a fix-forward scan found the new revision passes (at ``destination``, the one it
    failed; blank: every destination, for a record that failed them all)."""

    scan = models.ForeignKey(FixForwardScan, on_delete=models.CASCADE, related_name="candidate_rows")
    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.CASCADE, related_name="+")
    destination = models.CharField(max_length=128, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scan", "dead_letter"], name="ffc_scan_dead_letter")]

    def __str__(self) -> str:
        return f"dead letter {self.dead_letter_id} of fix-forward scan {self.scan_id}"


class Claim(models.Model):
    """Someone is on it: ``claimed_by`` investigates a failure ``group`` or one ``dead_letter`` (exactly one of
    the two), with a ``note``. Open while ``released_at`` is null: released by hand (the claimer or a team
    admin) or on resolution (the dead letter is no longer parked, the group has none parked:
    ``dlq.services.claims.release_resolved``). At most one open claim per group and per dead letter; a
    dead letter shows its group's claim when it has none of its own."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    group = models.ForeignKey(
        FailureGroup, on_delete=models.CASCADE, null=True, blank=True, related_name="claims"
    )
    dead_letter = models.ForeignKey(
        DeadLetter, on_delete=models.CASCADE, null=True, blank=True, related_name="claims"
    )
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    release_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(group__isnull=True) ^ models.Q(dead_letter__isnull=True),
                name="claim_one_target",
            ),
            models.UniqueConstraint(
                fields=["group"], condition=models.Q(released_at__isnull=True, group__isnull=False),
                name="one_open_claim_per_group",
            ),
            models.UniqueConstraint(
                fields=["dead_letter"], condition=models.Q(released_at__isnull=True, dead_letter__isnull=False),
                name="one_open_claim_per_dead_letter",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        target = f"group {self.group_id}" if self.group_id else f"dead letter {self.dead_letter_id}"
        return f"claim of {target} by {self.claimed_by_id}"


class RedriveState(models.TextChoices):
    """AWAITING_APPROVAL: created, waits for an approver other than its creator. ACTIVE: runs on its
    schedule. PAUSED: stopped by an operator or by itself (its replays failed again above its threshold);
    ``resume`` makes it ACTIVE. REJECTED: its creation was refused; never runs. DELETED: retired by an
    operator; kept for the audit trail and its runs' pages."""

    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    REJECTED = "rejected", "Rejected"
    DELETED = "deleted", "Deleted"


class RedrivePolicy(models.Model):
    """Replay a pipeline's parked dead letters automatically (``dlq.services.redrive``): those of the
    ``error_types`` (or of one failure ``group``), parked at least ``delay_seconds``, replayed by this policy
    fewer than ``max_attempts`` times along their chain of failing again (``DeadLetter.replay_of``), at most
    ``max_per_run`` per run at ``rate_limit`` messages per second, a run at most every ``interval_seconds``,
    started only inside the UTC window ``window_start``..``window_end`` when one is set. Each run is a bulk
    replay (``BulkAction.redrive_policy``). The policy pauses itself when, among its replays of the last
    ``interval_seconds`` x 4 (at least ``pause_min_replays`` of them), the share that failed again is above
    ``pause_threshold`` (0..1); replays before ``active_since`` (its approval or last resume) do not count.
    Creating it, or any change that widens it, waits for an approver."""

    name = models.CharField(max_length=100)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="redrive_policies")
    error_types = models.JSONField(default=list, blank=True, help_text="error types it replays")
    group = models.ForeignKey(
        FailureGroup, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    destination = models.CharField(max_length=128, blank=True, help_text="blank: any destination")
    delay_seconds = models.PositiveIntegerField(default=300)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    rate_limit = models.PositiveIntegerField(default=10, help_text="messages per second while a run runs")
    max_per_run = models.PositiveIntegerField(default=500)
    interval_seconds = models.PositiveIntegerField(default=300)
    window_start = models.TimeField(null=True, blank=True, help_text="UTC; null: any time")
    window_end = models.TimeField(null=True, blank=True, help_text="UTC; a window may cross midnight")
    pause_threshold = models.FloatField(default=0.5)
    pause_min_replays = models.PositiveIntegerField(default=10)
    state = models.CharField(max_length=24, choices=RedriveState.choices)
    paused_reason = models.TextField(blank=True)
    active_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="approved or last resumed: replays before it do not count to pause it",
    )
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pipeline_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["pipeline", "name"], condition=~models.Q(state="deleted"), name="one_live_policy_name"
            )
        ]
        indexes = [models.Index(fields=["state", "next_run_at"], name="redrive_due")]

    def __str__(self) -> str:
        return f"redrive policy {self.name} of pipeline {self.pipeline_id} ({self.state})"


class OffsetSkipState(models.TextChoices):
    """REQUESTED: waits for an approver other than the requester. APPROVED: queued for a worker. APPLYING: a
    worker stops the pipeline, copies the skipped records to the DLQ and moves the positions (a re-run
    resumes from ``progress``). DONE: moved (and started again if it was running). REJECTED: never applied.
    FAILED: stopped with ``error``; the positions were not moved unless ``moved_at`` is set."""

    REQUESTED = "requested", "Requested"
    APPROVED = "approved", "Approved"
    APPLYING = "applying", "Applying"
    DONE = "done", "Done"
    REJECTED = "rejected", "Rejected"
    FAILED = "failed", "Failed"


#: The states in which an offset skip still holds its pipeline: one such request per pipeline at a time.
OFFSET_SKIP_OPEN_STATES = (OffsetSkipState.REQUESTED, OffsetSkipState.APPROVED, OffsetSkipState.APPLYING)


class OffsetSkip(models.Model):
    """Move a pipeline past source records without losing them (``dlq.services.offset_skips``): on one
    partition of a source topic past ``past_offset`` (the next position is ``past_offset + 1``), or on one or
    every partition to the first offset at or after ``to_time``. Before its Spark checkpoint and consumer
    group are moved, the records in between are copied to the pipeline's DLQ topic as ``Skipped`` dead
    letters. ``plan`` is the dry run shown to the approver (per partition: ``topic``, ``partition``,
    ``current``, ``target``, ``records``, ``direction``); ``result`` what was done (per partition the same
    keys, plus ``copied``: [from, to) offsets copied). ``progress`` maps ``"topic/partition"`` to the next
    offset still to copy, so a re-run after a crash does not copy a record twice (at most the chunk in
    flight). ``team`` is the pipeline's, decided by the server."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="offset_skips")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    topic = models.CharField(max_length=249, blank=True, help_text="blank: every source topic")
    partition = models.IntegerField(null=True, blank=True, help_text="null: every partition")
    past_offset = models.BigIntegerField(null=True, blank=True, help_text="skip up to and including it")
    to_time = models.DateTimeField(null=True, blank=True, help_text="move to the first record at or after")
    reason = models.TextField()
    state = models.CharField(
        max_length=16, choices=OffsetSkipState.choices, default=OffsetSkipState.REQUESTED
    )
    plan = models.JSONField(default=list, blank=True)
    result = models.JSONField(default=list, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    copied = models.BigIntegerField(default=0, help_text="records copied to the DLQ")
    was_running = models.BooleanField(default=False, help_text="stopped for the move; started again after")
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    moved_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["pipeline"],
                condition=models.Q(state__in=["requested", "approved", "applying"]),
                name="one_open_offset_skip_per_pipeline",
            ),
            models.CheckConstraint(
                condition=models.Q(past_offset__isnull=True) ^ models.Q(to_time__isnull=True),
                name="offset_skip_offset_or_time",
            ),
        ]

    def __str__(self) -> str:
        where = f"past {self.past_offset}" if self.past_offset is not None else f"to {self.to_time}"
        return f"offset skip #{self.pk} of {self.pipeline_id} {where} ({self.state})"
