"""Django app configuration for notifications."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Per-team notification channels (webhook, Slack, e-mail) fed by the other apps' signals."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "notifications"

    def ready(self) -> None:
        """Connect the receivers of the pipelines' and DLQ's signals, and say who reads channels' audit."""
        from access import audit
        from notifications import events
        from notifications.models import Channel

        events.connect()
        audit.register_target("notification_channel", visible=audit.owned_by_visible_team(Channel))
