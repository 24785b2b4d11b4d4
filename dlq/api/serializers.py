"""Request and response shapes of the DLQ console API (``/api/dlq/``)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    BulkKind,
    DeadLetter,
    DlqTopic,
    FailureGroup,
    FixForwardScan,
    PayloadRevision,
    ReplayState,
    Runbook,
    RunbookAction,
    Status,
)
from dlq.services import (
    MASK,
    ApprovalSummary,
    BulkPreview,
    DestinationOutcome,
    DlqCoordinates,
    DraftCheck,
    FailedRevision,
    MessageInspection,
    PayloadCheck,
    PayloadRevisionView,
    ProducedAt,
    RecordFormatView,
    RenderedBytes,
    RenderedHeader,
    ReplaySummary,
    Sibling,
    SourceCoordinates,
    replay_filters,
    revision_diff,
    runbooks_for,
)
from dlq.services.claims import ClaimView
from pipelines.models import DEFAULT_CLUSTER_NAME
from pipelines.spec import DestinationConfig
from streamforge_core.text import UNENCODABLE, unencodable_path


class ClaimSerializer(serializers.Serializer[ClaimView]):
    """Who is on it: ``by`` (user name), ``since`` (UTC), ``note``, ``on`` (``message`` or ``group``)."""

    by = serializers.CharField()
    since = serializers.DateTimeField()
    note = serializers.CharField(allow_blank=True)
    on = serializers.ChoiceField(["message", "group"])


class ClaimRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../claim/``: an optional note (at most 500 characters)."""

    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class DeadLetterListSerializer(serializers.ModelSerializer[DeadLetter]):
    """One row of the message list: coordinates, the failure, status. No payload (see the detail)."""

    def get_cluster(self, obj: DeadLetter) -> str:
        return obj.cluster.name if obj.cluster is not None else DEFAULT_CLUSTER_NAME

    pipeline = serializers.CharField(source="pipeline_name")
    cluster = serializers.SerializerMethodField(
        help_text="the Kafka cluster it was read from (and replays to)"
    )
    error_message = serializers.SerializerMethodField()
    claim = serializers.SerializerMethodField(help_text="who is on it: its own claim, else its group's")

    class Meta:
        model = DeadLetter
        fields = [
            "id",
            "status",
            "claim",
            "pipeline",
            "cluster",
            "error_type",
            "error_message",
            "destination",
            "group",
            "dlq_topic",
            "dlq_partition",
            "dlq_offset",
            "source_topic",
            "source_partition",
            "source_offset",
            "key_text",
            "value_size",
            "attempts",
            "convention",
            "first_failed_at",
            "last_failed_at",
            "replay_of",
        ]

    def get_error_message(self, obj: DeadLetter) -> str:
        """The first 300 characters (the detail has all of it)."""
        return obj.error_message[:300]

    @extend_schema_field({"type": "object", "nullable": True, "description": "by, since, note, on"})
    def get_claim(self, obj: DeadLetter) -> dict[str, str] | None:
        """From the ``claims`` context (``dlq.services.claims.claims_for`` of the page); None: nobody."""
        shown = self.context.get("claims", {}).get(obj.pk)
        return shown.as_json() if shown is not None else None

    def to_representation(self, instance: DeadLetter) -> dict[str, Any]:
        """The row; ``key_text`` masked for teams in the ``key_masked_teams`` context (see
        ``dlq.services.key_masked_teams``)."""
        data: dict[str, Any] = super().to_representation(instance)
        if instance.team_id in self.context.get("key_masked_teams", ()) and data.get("key_text"):
            data["key_text"] = MASK
        return data


@extend_schema_field({"description": "a JSON value, or a string taken as the raw payload text"})
class PayloadField(serializers.Field):  # type: ignore[type-arg]
    """A new payload: a JSON value (stored compactly), or a string taken as the raw text."""

    def to_internal_value(self, data: Any) -> bytes:
        bad = unencodable_path(data)
        if bad is not None:  # the JSON parser refuses this already; the field holds on its own too
            raise serializers.ValidationError(
                f"{bad}: {UNENCODABLE}" if bad != "non_field_errors" else UNENCODABLE
            )
        if isinstance(data, str):
            return data.encode("utf-8")
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def to_representation(self, value: Any) -> Any:
        return value


class FixSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../fix/``: ``value`` (JSON or raw text) or ``value_base64`` (raw bytes), and a reason. For a
    pipeline that reads a registry format, ``value`` is the decoded record's JSON, framed again with the
    record's writer schema, or with ``schema_version`` of its subject (checked for compatibility)."""

    value = PayloadField(required=False)
    value_base64 = serializers.CharField(required=False)
    reason = serializers.CharField(max_length=2000)
    schema_version = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return _one_payload(attrs)


def _one_payload(attrs: dict[str, Any]) -> dict[str, Any]:
    """Exactly one of ``value`` / ``value_base64``, as bytes in ``value``."""
    if ("value" in attrs) == ("value_base64" in attrs):
        raise serializers.ValidationError({"value": "give exactly one of value or value_base64"})
    if "value_base64" in attrs:
        try:
            attrs["value"] = base64.b64decode(attrs.pop("value_base64"), validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError({"value_base64": "is not valid base64"}) from None
    return attrs


class CheckSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../check/``: a draft payload, ``value`` (JSON or raw text) or ``value_base64``, and for a
    registry-format pipeline an optional ``schema_version`` (as for a fix); nothing is stored."""

    value = PayloadField(required=False)
    value_base64 = serializers.CharField(required=False)
    schema_version = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return _one_payload(attrs)


class ReplaySerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../replay/``. ``idempotency_key`` (or the ``Idempotency-Key`` header) makes a retried request
    return the first one's replay instead of a conflict."""

    target_topic = serializers.CharField(required=False, allow_blank=True, max_length=249, default="")
    idempotency_key = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    force = serializers.BooleanField(required=False, default=False)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class SiblingReplayRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../replay-with-siblings/``: a required reason; ``force`` replays even where the current
    revision would dead-letter again."""

    reason = serializers.CharField(max_length=2000)
    force = serializers.BooleanField(required=False, default=False)


class SiblingReplaySerializer(serializers.Serializer[Any]):
    """What was done for one of the record's dead letters (``dlq.services.SiblingReplay``)."""

    id = serializers.IntegerField()
    destination = serializers.CharField()
    fixed = serializers.BooleanField(help_text="the payload was copied onto it as its fix")
    replay_id = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(help_text="why it was not replayed; empty when it was")


class ReasonSerializer(serializers.Serializer[dict[str, Any]]):
    """A required reason (skip, delete request)."""

    reason = serializers.CharField(max_length=2000)


class OptionalReasonSerializer(serializers.Serializer[dict[str, Any]]):
    """An optional reason (approve, reject, pause, cancel, resume)."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class ReplayResultSerializer(serializers.Serializer[Any]):
    """Where a replayed record landed."""

    replay_id = serializers.UUIDField()
    state = serializers.CharField()
    target_topic = serializers.CharField()
    destinations = serializers.CharField(
        help_text="the pipeline destinations the replayed record is for (comma-separated); empty: every one"
    )
    partition = serializers.IntegerField(source="produced_partition", allow_null=True)
    offset = serializers.IntegerField(source="produced_offset", allow_null=True)
    dead_letter = serializers.IntegerField(source="dead_letter_id")


class ApprovalSerializer(serializers.ModelSerializer[ApprovalRequest]):
    """A four-eyes request and its decision."""

    requested_by = serializers.CharField(source="requested_by.username")
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True, default=None)
    team = serializers.CharField(source="team.name")

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "kind",
            "state",
            "team",
            "dead_letter",
            "bulk",
            "reason",
            "requested_by",
            "requested_at",
            "decided_by",
            "decided_at",
            "decision_reason",
        ]


class RunbookSerializer(serializers.ModelSerializer[Runbook]):
    """A runbook: markdown ``body`` and the ``actions`` it offers; attached to ``group`` or ``error_type``."""

    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    actions = serializers.ListField(child=serializers.ChoiceField(RunbookAction.values), default=list)

    class Meta:
        model = Runbook
        fields = ["id", "team", "title", "body", "group", "error_type", "actions", "updated_at"]
        read_only_fields = ["id", "team", "updated_at"]


class RunbookWriteSerializer(serializers.Serializer[dict[str, Any]]):
    """Create or replace a runbook. ``team`` is needed when it is attached only to an error type."""

    team = serializers.CharField(required=False)
    title = serializers.CharField(max_length=200)
    body = serializers.CharField(allow_blank=True)
    group = serializers.PrimaryKeyRelatedField(
        queryset=FailureGroup.objects.all(), required=False, allow_null=True
    )
    error_type = serializers.CharField(required=False, allow_blank=True, default="")
    actions = serializers.ListField(child=serializers.ChoiceField(RunbookAction.values), default=list)


class TrendPointSerializer(serializers.Serializer[dict[str, Any]]):
    """Arrivals of a failure group in one hour (``hour``: the hour's start, ISO-8601)."""

    hour = serializers.CharField()
    count = serializers.IntegerField()


class FailureGroupSerializer(serializers.ModelSerializer[FailureGroup]):
    """A failure group with its total count, parked count, hourly trend (last 24 h) and runbooks."""

    pipeline = serializers.CharField(source="pipeline_name")
    parked = serializers.IntegerField(read_only=True)
    trend = serializers.SerializerMethodField()
    runbooks = serializers.SerializerMethodField()
    claim = serializers.SerializerMethodField(help_text="who is on it; null: nobody")

    class Meta:
        model = FailureGroup
        fields = [
            "id",
            "pipeline",
            "dlq_topic",
            "error_type",
            "signature",
            "sample_message",
            "count",
            "parked",
            "first_seen",
            "last_seen",
            "trend",
            "runbooks",
            "claim",
        ]

    @extend_schema_field({"type": "object", "nullable": True, "description": "by, since, note, on"})
    def get_claim(self, obj: FailureGroup) -> dict[str, str] | None:
        """Who is on the group, from the ``claims`` context (``dlq.services.group_claims``); None: nobody."""
        shown = self.context.get("claims", {}).get(obj.pk)
        return shown.as_json() if shown is not None else None

    @extend_schema_field(TrendPointSerializer(many=True))
    def get_trend(self, obj: FailureGroup) -> list[dict[str, Any]]:
        """``[{"hour": iso, "count": n}]`` for the last 24 hours that had arrivals."""
        trends: dict[int, list[dict[str, Any]]] = self.context.get("trends", {})
        return trends.get(obj.pk, [])

    @extend_schema_field(RunbookSerializer(many=True))
    def get_runbooks(self, obj: FailureGroup) -> list[dict[str, Any]]:
        """The runbooks for this group (attached to it or to its error type)."""
        return RunbookSerializer(runbooks_for(obj), many=True).data  # type: ignore[return-value]


class BulkCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dlq/bulk/``: ``dry_run: true`` only counts (and says whether approval is needed)."""

    kind = serializers.ChoiceField(BulkKind.values)
    filters = serializers.DictField(default=dict)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    rate_limit = serializers.IntegerField(min_value=0, max_value=10_000, default=100)
    target_topic = serializers.CharField(required=False, allow_blank=True, max_length=249, default="")
    dry_run = serializers.BooleanField(default=False)


class BulkProgressSerializer(serializers.Serializer[dict[str, Any]]):
    """A bulk action's counts so far and the fraction done (0..1; 1 when it selected nothing)."""

    total = serializers.IntegerField()
    processed = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    fraction = serializers.FloatField()


class FailingReasonSerializer(serializers.Serializer[Any]):
    """How many selected messages would fail again at one destination (or the replay's target topic) with
    one error type, and the first one's error message."""

    destination = serializers.CharField()
    error_type = serializers.CharField()
    error_message = serializers.CharField()
    count = serializers.IntegerField()


class BulkPreviewSerializer(serializers.Serializer[BulkPreview]):
    """``POST /api/dlq/bulk/`` with ``dry_run``: parked messages the filter selects, per team name, and
    whether creating the action would wait for an approver (more than ``approval_threshold``)."""

    count = serializers.IntegerField()
    teams = serializers.DictField(child=serializers.IntegerField())
    needs_approval = serializers.BooleanField()
    approval_threshold = serializers.IntegerField()
    # A replay's dry run: ``would_fail`` of the first ``checked`` would fail again, grouped by where and why.
    checked = serializers.IntegerField()
    would_fail = serializers.IntegerField()
    failing = FailingReasonSerializer(many=True)
    failing_ids = serializers.ListField(child=serializers.IntegerField())
    passing_ids = serializers.ListField(child=serializers.IntegerField())
    # Of ``count``, held by a pending delete request: the run leaves them out (``BulkAction.left_out``).
    held = serializers.IntegerField()
    held_ids = serializers.ListField(child=serializers.IntegerField())


class BulkFiltersSerializer(serializers.Serializer[dict[str, Any]]):
    """The message filter of a bulk action, as stored: only the fields that were set (see
    ``dlq.filters.MessageFilter``)."""

    pipeline = serializers.CharField(required=False)
    error_type = serializers.CharField(required=False)
    group = serializers.IntegerField(required=False)
    status = serializers.ChoiceField(Status.choices, required=False)
    topic = serializers.CharField(required=False)
    since = serializers.CharField(required=False, help_text="ISO-8601; last failure at or after")
    until = serializers.CharField(required=False, help_text="ISO-8601; last failure before")
    q = serializers.CharField(required=False, help_text="key prefix or error message substring")
    cluster = serializers.CharField(required=False, help_text="Kafka cluster name")
    destination = serializers.CharField(
        required=False,
        help_text="the destination that failed (records that failed every destination match any)",
    )
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        max_length=1000,
        help_text="only these dead letters (an operator's selection)",
    )


@extend_schema_field(BulkFiltersSerializer)
class BulkFiltersField(serializers.JSONField):
    """A bulk action's stored filter, returned as stored (``BulkFiltersSerializer`` documents its shape)."""


class BulkSerializer(serializers.ModelSerializer[BulkAction]):
    """A bulk action with its progress."""

    filters = BulkFiltersField(read_only=True)
    created_by = serializers.CharField(source="created_by.username")
    team = serializers.CharField(source="team.name", allow_null=True, default=None)
    progress = serializers.SerializerMethodField()

    class Meta:
        model = BulkAction
        fields = [
            "id",
            "kind",
            "state",
            "approval_required",
            "team",
            "filters",
            "target_topic",
            "reason",
            "rate_limit",
            "total",
            "processed",
            "succeeded",
            "failed",
            "progress",
            "last_error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "runs",
            "fix",
            "fix_failures",
            "left_out",
            "redrive_policy",
        ]

    @extend_schema_field(BulkProgressSerializer)
    def get_progress(self, obj: BulkAction) -> dict[str, Any]:
        """Counts and the fraction done."""
        return obj.progress()


class DlqTopicSerializer(serializers.ModelSerializer[DlqTopic]):
    """An extra DLQ topic the ingester reads, on its Kafka cluster."""

    cluster = serializers.SerializerMethodField()

    def get_cluster(self, obj: DlqTopic) -> str:
        return obj.cluster.name if obj.cluster is not None else DEFAULT_CLUSTER_NAME

    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    pipeline: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = DlqTopic
        fields = ["id", "topic", "cluster", "team", "pipeline", "description", "created_at"]


class DlqTopicCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Register a topic for a team (by name), optionally tied to a pipeline (by name)."""

    topic = serializers.CharField(max_length=249)
    team = serializers.CharField()
    pipeline = serializers.CharField(required=False, allow_blank=True, default="")
    description = serializers.CharField(required=False, allow_blank=True, default="")
    cluster = serializers.CharField(
        required=False, default=DEFAULT_CLUSTER_NAME, help_text="its Kafka cluster"
    )


# ------------------------------------------------------------------------------------------ inspection


class RenderedBytesSerializer(serializers.Serializer[RenderedBytes]):
    """A key or value as the console shows it: pretty JSON (masked paths replaced), text, a hex dump
    (offset, 16 bytes in hex, their ASCII), nothing, ``withheld`` from a masked viewer (``text`` then
    says ``withheld: not JSON, N bytes, sha256 <hex>`` for a payload, ``withheld: key, N bytes`` for a
    key), or ``too_deep``: JSON nested deeper than 128 levels, too deep to display (``text`` is then the
    stored bytes as they are, undecoded); ``size`` in bytes."""

    encoding = serializers.ChoiceField(["json", "text", "hex", "null", "withheld", "too_deep"])
    text = serializers.CharField()
    size = serializers.IntegerField()


class RenderedHeaderSerializer(serializers.Serializer[RenderedHeader]):
    """A Kafka header: ``value`` as text, or as plain hex digits when not UTF-8, or null, or the mask for
    a header named in ``STREAMFORGE_DLQ_MASKED_HEADERS`` (viewers)."""

    name = serializers.CharField()
    encoding = serializers.ChoiceField(["text", "hex", "null", "masked"])
    value = serializers.CharField(allow_null=True)


class DlqCoordinatesSerializer(serializers.Serializer[DlqCoordinates]):
    """Where the dead letter was read from."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    timestamp = serializers.DateTimeField(allow_null=True)


class SourceCoordinatesSerializer(serializers.Serializer[SourceCoordinates]):
    """The record that failed, as the DLQ headers name it (empty / null when they do not)."""

    topic = serializers.CharField()
    partition = serializers.IntegerField(allow_null=True)
    offset = serializers.IntegerField(allow_null=True)


class FailedDestinationSerializer(serializers.Serializer[DestinationConfig]):
    """A destination as configured in the revision that failed the message (DSL expressions as text)."""

    name = serializers.CharField()
    topic = serializers.CharField()
    filter = serializers.CharField(allow_null=True)
    transform = serializers.CharField(allow_null=True)
    key_transform = serializers.CharField(allow_null=True)
    headers = serializers.DictField(child=serializers.CharField())
    header_transforms = serializers.DictField(child=serializers.CharField())
    timestamp = serializers.CharField()


class FailedRevisionSerializer(serializers.Serializer[FailedRevision]):
    """The pipeline revision that dead-lettered the message and the failing destination in it."""

    number = serializers.IntegerField()
    destination = FailedDestinationSerializer(allow_null=True)


class DestinationOutcomeSerializer(serializers.Serializer[DestinationOutcome]):
    """What one destination would do with the payload."""

    destination = serializers.CharField()
    topic = serializers.CharField()
    outcome = serializers.ChoiceField(["produced", "filtered", "dead_lettered"])
    error_type = serializers.CharField(allow_null=True)
    error_message = serializers.CharField(allow_null=True)


class PayloadCheckSerializer(serializers.Serializer[PayloadCheck]):
    """The DSL check of a payload against a pipeline revision. An empty object when there was nothing to
    check against (a foreign DLQ's message, or a pipeline without a revision), hence no required field."""

    would_pass = serializers.BooleanField(required=False)
    revision = serializers.IntegerField(required=False)
    destinations = DestinationOutcomeSerializer(many=True, required=False)


def _check_json(check: PayloadCheck | None) -> dict[str, Any]:
    """A check as the API shows it: ``{}`` when there is none."""
    return PayloadCheckSerializer(check).data if check is not None else {}


class CheckResultSerializer(serializers.Serializer[DraftCheck]):
    """What a fix with this payload would give: the DSL check, the diff against the original, and whether
    it equals the current payload."""

    check = serializers.SerializerMethodField()
    diff = serializers.CharField()
    unchanged = serializers.BooleanField()

    @extend_schema_field(PayloadCheckSerializer)
    def get_check(self, obj: DraftCheck) -> dict[str, Any]:
        """The check, ``{}`` when there is nothing to check against."""
        return _check_json(obj.check)


class FixResultSerializer(serializers.Serializer[PayloadRevision]):
    """A stored fix: its revision number, its diff against the previous payload, and its DSL check."""

    payload_revision = serializers.IntegerField(source="number")
    diff = serializers.CharField()
    check = serializers.SerializerMethodField()

    @extend_schema_field(PayloadCheckSerializer)
    def get_check(self, obj: PayloadRevision) -> dict[str, Any]:
        """The check stored with the fix, ``{}`` when there was nothing to check against."""
        return _check_json(PayloadCheck.from_json(obj.dsl_check))


class PayloadRevisionViewSerializer(serializers.Serializer[PayloadRevisionView]):
    """One stored fix of the message (diffs masked for viewers)."""

    number = serializers.IntegerField()
    author = serializers.CharField()
    created_at = serializers.DateTimeField()
    reason = serializers.CharField()
    value = RenderedBytesSerializer()
    diff = serializers.CharField()
    check = serializers.SerializerMethodField()

    @extend_schema_field(PayloadCheckSerializer)
    def get_check(self, obj: PayloadRevisionView) -> dict[str, Any]:
        """The check stored with the fix, ``{}`` when there was nothing to check against."""
        return _check_json(obj.check)


class ProducedAtSerializer(serializers.Serializer[ProducedAt]):
    """Where a replayed record landed."""

    partition = serializers.IntegerField(allow_null=True)
    offset = serializers.IntegerField()


class ReplaySummarySerializer(serializers.Serializer[ReplaySummary]):
    """One replay attempt of the message and its outcome."""

    replay_id = serializers.CharField()
    state = serializers.ChoiceField(ReplayState.choices)
    target_topic = serializers.CharField()
    destinations = serializers.CharField(
        help_text="the pipeline destinations the replayed record is for (comma-separated); empty: every one"
    )
    requested_by = serializers.CharField()
    requested_at = serializers.DateTimeField()
    produced = ProducedAtSerializer(allow_null=True)
    error = serializers.CharField()
    bulk = serializers.IntegerField(allow_null=True)


class ApprovalSummarySerializer(serializers.Serializer[ApprovalSummary]):
    """An approval request about the message."""

    id = serializers.IntegerField()
    kind = serializers.ChoiceField(ApprovalKind.choices)
    state = serializers.ChoiceField(ApprovalState.choices)
    requested_by = serializers.CharField()


class SiblingSerializer(serializers.Serializer[Sibling]):
    """Another dead letter of the same source record, at another destination of the pipeline."""

    id = serializers.IntegerField()
    destination = serializers.CharField()
    error_type = serializers.CharField()
    status = serializers.ChoiceField(Status.choices)


class RecordFormatViewSerializer(serializers.Serializer[RecordFormatView]):
    """How a registry-format payload was read (``dlq.services.RecordFormatView``)."""

    format = serializers.CharField(help_text="avro, protobuf or json_schema: the pipeline's source.format")
    decoded = serializers.BooleanField(help_text="read with its writer schema: value is the decoded record")
    schema_id = serializers.IntegerField(allow_null=True, help_text="the writer schema's registry id")
    subject = serializers.CharField(help_text="the writer schema's subject, when the registry names one")
    version = serializers.IntegerField(allow_null=True, help_text="its version in that subject")
    error = serializers.CharField(help_text="why it did not decode; empty when it did")


class MessageInspectionSerializer(serializers.Serializer[MessageInspection]):
    """``GET /api/dlq/messages/<id>/``: everything about one dead letter (``dlq.services.inspect_message``).
    For viewers, values at ``STREAMFORGE_DLQ_MASKED_PATHS`` are masked (in diffs too) and payloads that are
    not JSON withheld; masked headers and keys are hidden as configured."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField(Status.choices)
    dlq = DlqCoordinatesSerializer()
    source = SourceCoordinatesSerializer()  # type: ignore[assignment]  # the JSON key; DRF pops declared fields
    pipeline = serializers.CharField(help_text="the DLQ topic's owning pipeline (empty: none)")
    team = serializers.CharField()
    claimed_pipeline = serializers.CharField(
        help_text="what the record's x-streamforge-pipeline header says; never used for ownership"
    )
    ownership_warning = serializers.CharField(
        help_text="why the header's claim was not followed; empty when it agrees with the owner"
    )
    convention = serializers.CharField()
    error_type = serializers.CharField()
    error_message = serializers.CharField()
    destination = serializers.CharField()
    revision = FailedRevisionSerializer(allow_null=True)
    attempts = serializers.IntegerField()
    first_failed_at = serializers.DateTimeField()
    last_failed_at = serializers.DateTimeField()
    group = serializers.IntegerField()
    headers = RenderedHeaderSerializer(many=True)
    key = RenderedBytesSerializer()
    value = RenderedBytesSerializer(
        help_text="for a pipeline that reads a registry format, the decoded record (value_format says how)"
    )
    value_format = RecordFormatViewSerializer(
        allow_null=True, help_text="how a registry-format payload was read; null for a json pipeline"
    )
    payload_revisions = PayloadRevisionViewSerializer(many=True)
    replays = ReplaySummarySerializer(many=True)
    replay_of = serializers.IntegerField(allow_null=True)
    later_failures = serializers.ListField(child=serializers.IntegerField())
    siblings = SiblingSerializer(
        many=True,
        help_text="dead letters of the same source record at other destinations; each replay goes to its "
        "own destination only, so replaying all of them writes every destination once",
    )
    approvals = ApprovalSummarySerializer(many=True)
    claim = ClaimSerializer(
        allow_null=True, help_text="who is on it: its own claim, else its group's; null: nobody"
    )


# ------------------------------------------------------------------------------------------ retention


class RetentionPolicySerializer(serializers.Serializer[Any]):
    """A retention policy: the team, the pipeline (null: the whole team), how many days replayed and skipped
    dead letters are kept (0: forever) and whether approved deletes are purged at the next run."""

    team = serializers.CharField(source="team.name")
    pipeline = serializers.CharField(source="pipeline.name", allow_null=True, default=None)
    closed_days = serializers.IntegerField(min_value=0, max_value=3650)
    purge_deleted = serializers.BooleanField(default=True)


class RetentionRunSerializer(serializers.Serializer[Any]):
    """One purge run: when, how long (seconds), rows purged in all and per status."""

    started_at = serializers.DateTimeField()
    seconds = serializers.FloatField()
    total = serializers.IntegerField()
    purged = serializers.DictField(child=serializers.IntegerField())


class RetentionSerializer(serializers.Serializer[Any]):
    """``GET /api/dlq/retention/``: the default (days), the policies of the caller's teams, the last runs."""

    default_days = serializers.IntegerField()
    policies = RetentionPolicySerializer(many=True)
    runs = RetentionRunSerializer(many=True)


class RetentionPolicyWriteSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dlq/retention/``: set a team's policy, or a pipeline's (by name)."""

    team = serializers.CharField()
    pipeline = serializers.CharField(required=False, allow_blank=True, default="")
    closed_days = serializers.IntegerField(min_value=0, max_value=3650)
    purge_deleted = serializers.BooleanField(required=False, default=True)


# ---------------------------------------------------------------------------------------------- bulk fix


class BulkFixCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dlq/bulk/fix/``: a fix for every parked message ``filters`` selects. ``fix`` is
    ``{"patch": [RFC 6902 operations]}`` or ``{"transform": "DSL transform"}``; ``dry_run: true`` stores
    nothing and answers the count, the approval and ``sample`` messages fixed in memory."""

    filters = serializers.DictField(default=dict)
    fix = serializers.JSONField(
        help_text='{"patch": [{"op": "copy", "from": "/payload/distinct_size", "path": "/payload/size"}]} '
        'or {"transform": "CONSTRUCT:actor=/actor/login"}'
    )
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    rate_limit = serializers.IntegerField(min_value=0, max_value=10_000, default=100)
    dry_run = serializers.BooleanField(default=False)
    sample = serializers.IntegerField(min_value=1, max_value=20, default=5)


class FixSampleSerializer(serializers.Serializer[Any]):
    """One sampled message of a bulk fix preview: its diff (current -> fixed) and the check of the fixed
    payload, or ``error``: why the fix does not apply to it (it would be left unchanged)."""

    dead_letter_id = serializers.IntegerField()
    coordinates = serializers.CharField()
    diff = serializers.CharField()
    check = serializers.SerializerMethodField()
    error = serializers.CharField()

    @extend_schema_field(PayloadCheckSerializer)
    def get_check(self, obj: Any) -> dict[str, Any]:
        """The check, ``{}`` when there is none."""
        return _check_json(obj.check)


class BulkFixPreviewSerializer(serializers.Serializer[Any]):
    """A bulk fix's dry run: the count, whether it would wait for an approver, and the sample."""

    count = serializers.IntegerField()
    needs_approval = serializers.BooleanField()
    approval_threshold = serializers.IntegerField()
    samples = FixSampleSerializer(many=True)
    held = serializers.IntegerField(help_text="of count, held by a pending delete request: left unchanged")


class FixForwardSerializer(serializers.ModelSerializer[FixForwardScan]):
    """A fix-forward scan: which parked dead letters the pipeline's live revision now passes, with its
    progress, the counts per destination / failure group / error type (``groups``), the diff from the
    revision before it, and the filter that replays exactly its candidates through ``POST /api/dlq/bulk/``."""

    pipeline = serializers.CharField(source="pipeline.name")
    team = serializers.CharField(source="team.name")
    requested_by = serializers.CharField(source="requested_by.username", allow_null=True, default=None)
    revision_diff = serializers.SerializerMethodField()
    replay_filters = serializers.SerializerMethodField()

    class Meta:
        model = FixForwardScan
        fields = [
            "id", "pipeline", "team", "revision", "previous_revision", "trigger", "state", "total", "checked",
            "candidates", "still_failing", "unchanged", "unknown", "groups", "error", "requested_by",
            "created_at", "started_at", "finished_at", "revision_diff", "replay_filters",
        ]  # fmt: skip
        read_only_fields = fields

    def get_revision_diff(self, scan: FixForwardScan) -> str:
        """The unified diff of the spec from ``previous_revision`` to ``revision`` (empty without one)."""
        return revision_diff(scan)

    def get_replay_filters(self, scan: FixForwardScan) -> dict[str, Any]:
        """The bulk replay filter of exactly the scan's candidates."""
        return replay_filters(scan)


class FixForwardCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dlq/fix-forward/``: scan a pipeline's parked dead letters against its current revision."""

    pipeline = serializers.SlugField(max_length=63)
