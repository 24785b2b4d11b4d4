"""Response shapes of the audit endpoints."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from access.models import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    """One audit event as stored (digests, not contents, of what changed)."""

    class Meta:
        model = AuditEvent
        fields = [
            "sequence",
            "created_at",
            "actor_name",
            "action",
            "target_type",
            "target_id",
            "reason",
            "before_digest",
            "after_digest",
            "details",
            "request_id",
            "prev_hash",
            "hash",
        ]


class ChainReportSerializer(serializers.Serializer[dict[str, Any]]):
    """The verification result."""

    ok = serializers.BooleanField()
    events = serializers.IntegerField()
    broken_at = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()
    anchor = serializers.CharField()
