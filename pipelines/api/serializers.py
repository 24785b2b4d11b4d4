"""Request and response shapes of the pipeline and DSL endpoints."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from pipelines.dsl import ErrorHandling


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
