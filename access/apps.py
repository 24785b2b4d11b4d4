"""Django app config for access: people (teams, memberships, roles) and the audit trail."""

from django.apps import AppConfig


class AccessConfig(AppConfig):
    """Teams, memberships and roles, permission checks, and the append-only audit log."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "access"
    verbose_name = "People and audit"

    def ready(self) -> None:
        """Record each log-in lockout django-axes declares in the audit log, and audit every change to
        people, memberships, teams and API tokens (``access.people_audit``); bind API tokens to their user's
        credentials (``access.api_tokens.connect``); audit break-glass password sign-ins in SSO-only mode
        (``access.sso.signin``)."""
        from axes.signals import user_locked_out

        from access.lockout import record_lockout

        user_locked_out.connect(record_lockout, dispatch_uid="access.record_lockout")

        from access import api_tokens, checks, people_audit  # noqa: F401  # importing checks registers them

        people_audit.connect()
        api_tokens.connect()

        from django.contrib.auth.signals import user_logged_in

        from access.sso.signin import audit_password_sign_in

        user_logged_in.connect(audit_password_sign_in, dispatch_uid="access.sso.audit_password_sign_in")
