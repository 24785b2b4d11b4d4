"""SSO-only mode: ``ConsoleBackend`` is Django's ModelBackend, refusing local passwords while
``STREAMFORGE_SSO_ONLY`` is on, except the break-glass admin's (``STREAMFORGE_SSO_BREAK_GLASS_USER``).

The sessions of SSO sign-ins name this backend too (``access.sso.adapters.AccountAdapter.login``), so a user
deactivated here is signed out at their next request whichever way they signed in.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.http import HttpRequest

logger = logging.getLogger("streamforge.sso")

#: Where the session of an SSO sign-in notes how it was made (``access.sso.signin.record_sso_session``).
SSO_SESSION_KEY = "streamforge_sso"


def is_break_glass(username: str) -> bool:
    """Whether ``username`` is the configured break-glass admin (never when none is configured)."""
    return bool(settings.SSO_BREAK_GLASS_USER) and username == settings.SSO_BREAK_GLASS_USER


def passwords_allowed_for(username: str) -> bool:
    """Whether a local password may sign ``username`` in: always, unless SSO-only mode is on; then only the
    break-glass admin."""
    return not settings.SSO_ONLY or is_break_glass(username)


class ConsoleBackend(ModelBackend):
    """ModelBackend that refuses every password in SSO-only mode but the break-glass admin's (a refusal
    counts as a failed log-in for django-axes, like a wrong password)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        """The user when the password is right and local passwords are allowed for them; None otherwise."""
        if username is not None and not passwords_allowed_for(username):
            logger.info("sso-only: refused a local password sign-in for %r", username)
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
