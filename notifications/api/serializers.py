"""Serializers of the notifications API: channels as people may see them (secrets masked), the create and
update inputs, delivery attempts."""

from __future__ import annotations

from rest_framework import serializers

from notifications.channels import SUBSCRIBABLE
from notifications.models import Channel, ChannelKind, DeliveryAttempt


class ChannelSerializer(serializers.ModelSerializer[Channel]):
    """A channel; ``secret_hint`` is the masked signing secret, routing key or Slack, Teams or Discord URL,
    never the secret; ``url`` is a webhook's address or PagerDuty's events endpoint."""

    team = serializers.CharField(source="team.name", read_only=True)

    class Meta:
        model = Channel
        fields = [
            "id",
            "team",
            "name",
            "kind",
            "url",
            "secret_hint",
            "console_url",
            "recipients",
            "events",
            "enabled",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class CreatedChannelSerializer(ChannelSerializer):
    """A new channel; a webhook's ``signing_secret`` is in this answer only, never again."""

    signing_secret = serializers.CharField(allow_null=True, read_only=True)

    class Meta(ChannelSerializer.Meta):
        fields = [*ChannelSerializer.Meta.fields, "signing_secret"]
        read_only_fields = fields


class ChannelCreateSerializer(serializers.Serializer[None]):
    """Input of a new channel: ``url`` for a webhook; ``slack_url``, ``teams_url`` or ``discord_url`` for
    Slack, Teams or Discord; ``routing_key`` (and optionally ``url``, the events endpoint) for PagerDuty;
    ``recipients`` for e-mail; ``console_url`` for links in PagerDuty, Teams and Discord messages."""

    team = serializers.CharField(max_length=63)
    name = serializers.CharField(max_length=63)
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE), max_length=20)
    url = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    slack_url = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    teams_url = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    discord_url = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    routing_key = serializers.CharField(max_length=64, required=False, default="", allow_blank=True)
    console_url = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
    recipients = serializers.ListField(
        child=serializers.CharField(max_length=254), required=False, default=list, max_length=50
    )
    enabled = serializers.BooleanField(required=False, default=True)


class ChannelUpdateSerializer(serializers.Serializer[None]):
    """Changes to a channel; every field optional."""

    events = serializers.ListField(
        child=serializers.ChoiceField(choices=SUBSCRIBABLE), required=False, max_length=20
    )
    enabled = serializers.BooleanField(required=False)
    url = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    slack_url = serializers.CharField(max_length=2000, required=False)
    teams_url = serializers.CharField(max_length=2000, required=False)
    discord_url = serializers.CharField(max_length=2000, required=False)
    routing_key = serializers.CharField(max_length=64, required=False)
    console_url = serializers.CharField(max_length=500, required=False, allow_blank=True)
    recipients = serializers.ListField(
        child=serializers.CharField(max_length=254), required=False, max_length=50
    )


class DeliverySerializer(serializers.ModelSerializer[DeliveryAttempt]):
    """One delivery attempt with its notification's event."""

    channel = serializers.CharField(source="channel.name", read_only=True)
    event_type = serializers.CharField(source="notification.event_type", read_only=True)
    event_key = serializers.CharField(source="notification.event_key", read_only=True)
    title = serializers.CharField(source="notification.title", read_only=True)
    is_digest = serializers.BooleanField(source="notification.is_digest", read_only=True)
    event_count = serializers.IntegerField(source="notification.event_count", read_only=True)
    notification_state = serializers.CharField(source="notification.state", read_only=True)

    class Meta:
        model = DeliveryAttempt
        fields = [
            "id",
            "channel",
            "event_type",
            "event_key",
            "title",
            "is_digest",
            "event_count",
            "notification_state",
            "attempt",
            "ok",
            "status_code",
            "error",
            "response_excerpt",
            "duration_ms",
            "created_at",
        ]
        read_only_fields = fields
