"""Django app config for the dead-letter-queue console."""

from django.apps import AppConfig


class DlqConfig(AppConfig):
    """The DLQ console: parked messages, fixes, replays, approvals and failure groups."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "dlq"
    verbose_name = "Dead-letter queue"

    def ready(self) -> None:
        """Declare the audit targets this app records, each visible to the teams that own the object."""
        from access.audit import owned_by_visible_team, register_target
        from dlq.models import ApprovalRequest, BulkAction, DeadLetter, FixForwardScan, Runbook

        register_target("dead_letter", visible=owned_by_visible_team(DeadLetter))
        register_target("bulk", visible=owned_by_visible_team(BulkAction))
        register_target("approval", visible=owned_by_visible_team(ApprovalRequest))
        register_target("runbook", visible=owned_by_visible_team(Runbook))
        register_target("fix_forward", visible=owned_by_visible_team(FixForwardScan))

        from dlq.services.fix_forward import on_revision_live
        from pipelines.signals import revision_live

        revision_live.connect(
            on_revision_live, dispatch_uid="dlq.fix_forward"
        )  # fix forward on a new revision

        from dlq.selectors import parked_backlog
        from pipelines.backlog import register_backlog_counter

        register_backlog_counter(parked_backlog)  # the overview's DLQ backlog column

        from dlq.services.admin import registered_topic_owner
        from pipelines.dlq_owners import register_dlq_topic_claim

        register_dlq_topic_claim(registered_topic_owner)  # one owner per DLQ topic
