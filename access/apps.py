"""Django app config for access: people (teams, memberships, roles) and the audit trail."""

from django.apps import AppConfig


class AccessConfig(AppConfig):
    """Teams, memberships and roles, permission checks, and the append-only audit log."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "access"
    verbose_name = "People and audit"

    def ready(self) -> None:
        """Audit every change to people, memberships, teams and API tokens (``access.people_audit``)."""
        from access import checks, people_audit  # noqa: F401  # importing checks registers them

        people_audit.connect()
