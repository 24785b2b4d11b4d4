"""Request and response shapes of the pipeline, run, metrics and DSL endpoints."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from access.models import Team
from pipelines.dsl import ErrorHandling
from pipelines.models import Pipeline, PipelineRun


class ErrorHandlingSerializer(serializers.Serializer[ErrorHandling]):
    """``error_handling`` of a spec (DSL.md, "Errors")."""

    missing_field_behavior = serializers.ChoiceField(["error", "passthrough", "null"], default="error")
    null_value_behavior = serializers.ChoiceField(["passthrough", "error"], default="passthrough")

    def to_error_handling(self) -> ErrorHandling:
        return ErrorHandling(**self.validated_data)


class SampleMessageSerializer(serializers.Serializer[dict[str, Any]]):
    """A sample record. ``value``: JSON (serialized compactly) or a string taken as the raw value text;
    ``value_base64`` for raw bytes; ``key`` text; ``headers`` name -> text; ``timestamp`` epoch ms."""

    value = serializers.JSONField(required=False, allow_null=True)
    value_base64 = serializers.CharField(required=False)
    key = serializers.CharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    headers = serializers.DictField(
        child=serializers.CharField(allow_null=True, allow_blank=True, trim_whitespace=False), required=False
    )
    timestamp = serializers.IntegerField(required=False, allow_null=True, min_value=0)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "value" in attrs and "value_base64" in attrs:
            raise serializers.ValidationError({"value_base64": "give either value or value_base64, not both"})
        return attrs


class EvaluateRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dsl/evaluate/``."""

    kind = serializers.ChoiceField(["filter", "transform", "key_transform", "header_transform", "timestamp"])
    expr = serializers.CharField(max_length=10_000, trim_whitespace=False)
    message = SampleMessageSerializer()
    error_handling = ErrorHandlingSerializer(required=False)
    now = serializers.IntegerField(
        required=False, min_value=0, help_text="epoch ms for TIMESTAMP_AGE (default: now)"
    )


class ValidateRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dsl/validate/``: one expression and the parser to read it with."""

    kind = serializers.ChoiceField(["filter", "transform", "key_transform", "header_transform", "timestamp"])
    expr = serializers.CharField(max_length=10_000, trim_whitespace=False, allow_blank=True)


class ValidateResponseSerializer(serializers.Serializer[dict[str, Any]]):
    """Whether the expression parses: the normalized form, or the error with its 0-based position."""

    kind = serializers.CharField()
    ok = serializers.BooleanField()
    normalized = serializers.CharField(required=False)
    error_type = serializers.CharField(required=False)
    position = serializers.IntegerField(required=False)
    message = serializers.CharField(required=False)


class EvaluateResponseSerializer(serializers.Serializer[dict[str, Any]]):
    """The result, or the error type and message of an evaluation that failed."""

    kind = serializers.CharField()
    ok = serializers.BooleanField()
    result = serializers.JSONField(
        required=False, help_text="filter: bool; transform: JSON; key: text or null"
    )
    error_type = serializers.CharField(required=False)
    message = serializers.CharField(required=False)


class DryRunRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/pipelines/{name}/dry-run/``: sample messages, and optionally a draft spec to try instead
    of the current revision (what the editor sends before saving)."""

    messages = serializers.ListField(child=SampleMessageSerializer(), allow_empty=False, max_length=1000)
    spec = serializers.JSONField(required=False)
    now = serializers.IntegerField(required=False, min_value=0)


# --------------------------------------------------------------------------------------------- pipelines


class RunSerializer(serializers.ModelSerializer[PipelineRun]):
    """One driver attempt (``runs/`` and a pipeline's ``current_run``)."""

    revision = serializers.IntegerField(source="revision.number", read_only=True)

    class Meta:
        model = PipelineRun
        fields = [
            "run_id", "attempt", "state", "revision", "host", "pid", "spark_app_id", "started_at", "ended_at",
            "stop_requested_at", "exit_code", "error_type", "error_message", "last_heartbeat_at",
            "last_progress_at", "last_batch_id", "log_tail",
        ]  # fmt: skip
        read_only_fields = fields


class PipelineSerializer(serializers.ModelSerializer[Pipeline]):
    """A pipeline as read: desired and actual state, the current revision's number and spec, and the run
    that is active (or the last one)."""

    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    revision = serializers.IntegerField(source="current_revision.number", read_only=True, allow_null=True)
    spec = serializers.JSONField(source="current_revision.spec", read_only=True, allow_null=True)
    current_run = serializers.SerializerMethodField()

    class Meta:
        model = Pipeline
        fields = [
            "name", "description", "team", "desired_state", "state", "state_reason", "consecutive_failures",
            "next_restart_at", "revision", "spec", "current_run", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(RunSerializer(allow_null=True))
    def get_current_run(self, pipeline: Pipeline) -> dict[str, Any] | None:
        run = pipeline.runs.select_related("revision").order_by("-started_at", "-id").first()
        return dict(RunSerializer(run).data) if run is not None else None


class PipelineCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/pipelines/``: a new pipeline (revision 1) in a team where the caller is admin."""

    name = serializers.SlugField(max_length=63)
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="name", queryset=Team.objects.all()
    )
    description = serializers.CharField(required=False, allow_blank=True, default="")
    spec = serializers.JSONField()

    def validate_name(self, value: str) -> str:
        if Pipeline.objects.filter(name=value).exists():
            raise serializers.ValidationError("a pipeline with this name exists")
        return value


class PipelineUpdateSerializer(serializers.Serializer[dict[str, Any]]):
    """``PUT/PATCH /api/pipelines/{name}/``: a new spec makes a new revision (what the next start runs);
    ``comment`` says why; ``description`` changes in place."""

    spec = serializers.JSONField(required=False)
    comment = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    description = serializers.CharField(required=False, allow_blank=True)


class ActionSerializer(serializers.Serializer[dict[str, Any]]):
    """``start/``, ``stop/``, ``restart/``: an optional reason, kept in the audit log."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=1000, default="")


class PartitionLagSerializer(serializers.Serializer[dict[str, Any]]):
    """One source partition: processed end offset, latest offset and their difference."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    end_offset = serializers.IntegerField(allow_null=True)
    latest_offset = serializers.IntegerField()
    lag = serializers.IntegerField()


class MetricsSerializer(serializers.Serializer[dict[str, Any]]):
    """``GET /api/pipelines/{name}/metrics/``: lag per partition (from the last batches and from the Kafka
    consumer group), rates over the last ``rate_window_seconds``, totals, the last batch, firing alerts and,
    with ``?range=<seconds>``, a downsampled series."""

    pipeline = serializers.CharField()
    state = serializers.CharField()
    lag = serializers.IntegerField(allow_null=True)
    partitions = PartitionLagSerializer(many=True)
    consumer_group = serializers.DictField()
    rate_window_seconds = serializers.IntegerField()
    rates = serializers.DictField(child=serializers.FloatField())
    totals = serializers.DictField(child=serializers.IntegerField())
    last_batch = serializers.DictField(allow_null=True)
    alerts = serializers.ListField(child=serializers.DictField())
    bucket_seconds = serializers.IntegerField(
        required=False, help_text="width of each series point (with range)"
    )
    series = serializers.ListField(child=serializers.DictField(), required=False)
