"""Per-team notification channels, the notifications queued for them and every delivery attempt.

A ``Channel`` is where a team hears about events (a signed webhook, a Slack incoming webhook, e-mail,
PagerDuty's Events API v2, a Microsoft Teams or a Discord webhook); a
``Notification`` is one message for one channel (one event, or a digest of many), unique per channel and
event key so an event is never sent twice to a channel; a ``DeliveryAttempt`` is one try at sending it,
kept as a row so retries and failures are data people can read. ``DigestWindow`` folds a storm of events of
one type into one digest per channel and window.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from access.models import Team


class ChannelKind(models.TextChoices):
    """How a channel delivers."""

    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack incoming webhook"
    EMAIL = "email", "E-mail"
    PAGERDUTY = "pagerduty", "PagerDuty (Events API v2)"
    TEAMS = "teams", "Microsoft Teams webhook"
    DISCORD = "discord", "Discord webhook"


class EventType(models.TextChoices):
    """The events a channel may subscribe to."""

    ALERT_FIRING = "alert.firing", "Alert firing"
    ALERT_RESOLVED = "alert.resolved", "Alert resolved"
    FAILURE_GROUP = "failure_group.created", "New failure group"
    PIPELINE_HALTED = "pipeline.halted", "Pipeline halted"
    PIPELINE_FAILED = "pipeline.failed", "Pipeline failed"
    APPROVAL_WAITING = "approval.waiting", "Approval waiting"
    BULK_FINISHED = "bulk.finished", "Bulk action finished"
    FIX_FORWARD = "fix_forward.found", "A new revision now passes parked dead letters"
    REDRIVE_PAUSED = "redrive.paused", "A redrive policy paused itself"
    BREAK_GLASS = "auth.break_glass_sign_in", "The break-glass admin signed in"
    TEST = "test", "Test message"


class Channel(models.Model):
    """One team's destination for notifications.

    ``url`` is the generic webhook's address, or PagerDuty's events endpoint (not secrets);
    ``secret_encrypted`` holds, encrypted with ``STREAMFORGE_NOTIFY_KEY`` (``notifications.sealing``), the
    webhook's signing secret, the PagerDuty routing (integration) key, or the Slack, Teams or Discord
    webhook URL (each itself a credential). ``console_url`` is this StreamForge's address as people open it
    (``https://streamforge.example.com``), for the links PagerDuty, Teams and Discord messages carry (none
    when blank). ``recipients`` are e-mail addresses; ``events`` the subscribed ``EventType`` values.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="notification_channels")
    name = models.SlugField(max_length=63)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    url = models.URLField(max_length=2000, blank=True)
    secret_encrypted = models.TextField(blank=True)
    secret_hint = models.CharField(max_length=64, blank=True, help_text="a masked form of the secret to show")
    recipients = models.JSONField(default=list, blank=True)
    events = models.JSONField(default=list, blank=True)
    console_url = models.URLField(
        max_length=500, blank=True, help_text="this StreamForge's address, for links in messages"
    )
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="one_channel_name_per_team")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.name}"


class NotificationState(models.TextChoices):
    """Where a notification is: waiting for (another) attempt, delivered, given up on, or folded into a
    digest (never sent on its own)."""

    PENDING = "pending", "Pending"
    RETRYING = "retrying", "Retrying"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    FOLDED = "folded", "Folded into a digest"


class Notification(models.Model):
    """One message for one channel: an event, or a digest of ``event_count`` events of one type. The
    unique (channel, event_key) is the de-duplication: a second send of the same event inserts nothing."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    event_key = models.CharField(max_length=255)
    title = models.CharField(max_length=500)
    text = models.TextField()
    data = models.JSONField(default=dict)
    is_digest = models.BooleanField(default=False)
    event_count = models.PositiveIntegerField(default=1)
    state = models.CharField(
        max_length=16, choices=NotificationState.choices, default=NotificationState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["channel", "event_key"], name="one_notification_per_event")
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_key} -> {self.channel_id}"


class DeliveryAttempt(models.Model):
    """One try at delivering a notification: the HTTP status (or SMTP outcome), the error, the start of the
    answer, how long it took."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    attempt = models.PositiveIntegerField()
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    response_excerpt = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of {self.notification_id}: {'ok' if self.ok else 'failed'}"


class DigestWindow(models.Model):
    """The rate limit of one channel for one event type: after an event is sent, events until
    ``closes_at`` are counted here (with a few examples) and sent as one digest when the window closes.
    Rows are locked (``select_for_update``) so several workers fold into one window."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="+")
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    opened_at = models.DateTimeField()
    closes_at = models.DateTimeField()
    folded = models.PositiveIntegerField(default=0)
    examples = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "event_type"], name="one_digest_window_per_type")
        ]

    def __str__(self) -> str:
        return f"{self.channel_id} {self.event_type} until {self.closes_at}"
