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
            "scheme",
            "key_id",
        ]


class ChainReportSerializer(serializers.Serializer[dict[str, Any]]):
    """The verification result (``access.audit.ChainReport``): ``status`` ok, broken (at ``broken_at``) or
    unverified (an anchor could not be read or is behind; ``problem`` says which); ``ok`` only for ok."""

    status = serializers.ChoiceField(choices=["ok", "broken", "unverified"])
    ok = serializers.BooleanField()
    events = serializers.IntegerField()
    broken_at = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()
    anchor = serializers.ChoiceField(choices=["checked", "none", "behind", "unavailable"])
    legacy_events = serializers.IntegerField(help_text="events hashed before the audit key existed")
    anchored = serializers.IntegerField(allow_null=True, help_text="newest sequence in the Kafka anchor")
