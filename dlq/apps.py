"""Django app config for the dead-letter-queue console."""

from django.apps import AppConfig


class DlqConfig(AppConfig):
    """The DLQ console: parked messages, fixes, replays, approvals, failure groups and the audit log."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "dlq"
    verbose_name = "Dead-letter queue"

    def ready(self) -> None:
        from dlq.pages import parked_backlog
        from pipelines.backlog import register_backlog_counter

        register_backlog_counter(parked_backlog)  # the overview's DLQ backlog column
