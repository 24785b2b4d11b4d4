"""Request and response shapes of the DLQ console API (``/api/dlq/``)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dlq.models import (
    ApprovalRequest,
    BulkAction,
    BulkKind,
    DeadLetter,
    DlqTopic,
    FailureGroup,
    Runbook,
    RunbookAction,
)


class DeadLetterListSerializer(serializers.ModelSerializer[DeadLetter]):
    """One row of the message list: coordinates, the failure, status. No payload (see the detail)."""

    pipeline = serializers.CharField(source="pipeline_name")
    error_message = serializers.SerializerMethodField()

    class Meta:
        model = DeadLetter
        fields = [
            "id",
            "status",
            "pipeline",
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


@extend_schema_field({"description": "a JSON value, or a string taken as the raw payload text"})
class PayloadField(serializers.Field):  # type: ignore[type-arg]
    """A new payload: a JSON value (stored compactly), or a string taken as the raw text."""

    def to_internal_value(self, data: Any) -> bytes:
        if isinstance(data, str):
            return data.encode("utf-8")
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def to_representation(self, value: Any) -> Any:
        return value


class FixSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../fix/``: ``value`` (JSON or raw text) or ``value_base64`` (raw bytes), and a reason."""

    value = PayloadField(required=False)
    value_base64 = serializers.CharField(required=False)
    reason = serializers.CharField(max_length=2000)

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
    """``POST .../check/``: a draft payload, ``value`` (JSON or raw text) or ``value_base64``; nothing is
    stored."""

    value = PayloadField(required=False)
    value_base64 = serializers.CharField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return _one_payload(attrs)


class CheckResultSerializer(serializers.Serializer[dict[str, Any]]):
    """What a fix with this payload would give: the DSL check, the diff against the original, and whether
    it equals the current payload."""

    check = serializers.DictField()
    diff = serializers.CharField()
    unchanged = serializers.BooleanField()


class ReplaySerializer(serializers.Serializer[dict[str, Any]]):
    """``POST .../replay/``. ``idempotency_key`` (or the ``Idempotency-Key`` header) makes a retried request
    return the first one's replay instead of a conflict."""

    target_topic = serializers.CharField(required=False, allow_blank=True, max_length=249, default="")
    idempotency_key = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    force = serializers.BooleanField(required=False, default=False)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


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


class FailureGroupSerializer(serializers.ModelSerializer[FailureGroup]):
    """A failure group with its total count, parked count, hourly trend (last 24 h) and runbooks."""

    pipeline = serializers.CharField(source="pipeline_name")
    parked = serializers.IntegerField(read_only=True)
    trend = serializers.SerializerMethodField()
    runbooks = serializers.SerializerMethodField()

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
        ]

    def get_trend(self, obj: FailureGroup) -> list[dict[str, Any]]:
        """``[{"hour": iso, "count": n}]`` for the last 24 hours that had arrivals."""
        trends: dict[int, list[dict[str, Any]]] = self.context.get("trends", {})
        return trends.get(obj.pk, [])

    def get_runbooks(self, obj: FailureGroup) -> list[dict[str, Any]]:
        """The runbooks for this group (attached to it or to its error type)."""
        from dlq.services import runbooks_for

        return RunbookSerializer(runbooks_for(obj), many=True).data  # type: ignore[return-value]


class BulkCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dlq/bulk/``: ``dry_run: true`` only counts (and says whether approval is needed)."""

    kind = serializers.ChoiceField(BulkKind.values)
    filters = serializers.DictField(default=dict)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    rate_limit = serializers.IntegerField(min_value=0, max_value=10_000, default=100)
    target_topic = serializers.CharField(required=False, allow_blank=True, max_length=249, default="")
    dry_run = serializers.BooleanField(default=False)


class BulkSerializer(serializers.ModelSerializer[BulkAction]):
    """A bulk action with its progress."""

    created_by = serializers.CharField(source="created_by.username")
    team = serializers.CharField(source="team.name", allow_null=True, default=None)
    progress = serializers.SerializerMethodField()

    class Meta:
        model = BulkAction
        fields = [
            "id",
            "kind",
            "state",
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
        ]

    def get_progress(self, obj: BulkAction) -> dict[str, Any]:
        """Counts and the fraction done."""
        return obj.progress()


class DlqTopicSerializer(serializers.ModelSerializer[DlqTopic]):
    """An extra DLQ topic the ingester reads."""

    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    pipeline: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = DlqTopic
        fields = ["id", "topic", "team", "pipeline", "description", "created_at"]


class DlqTopicCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Register a topic for a team (by name), optionally tied to a pipeline (by name)."""

    topic = serializers.CharField(max_length=249)
    team = serializers.CharField()
    pipeline = serializers.CharField(required=False, allow_blank=True, default="")
    description = serializers.CharField(required=False, allow_blank=True, default="")
