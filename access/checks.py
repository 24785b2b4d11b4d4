"""System checks for the audit chain's key (``manage.py check --deploy``); registered when ``AccessConfig.ready()``
imports this module."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

MIN_KEY_LENGTH = 32


@register(Tags.security, deploy=True)
def audit_key_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The audit key must be long and must not be the secret key (which more code and people get to see)."""
    key = str(settings.AUDIT_KEY)
    problems: list[CheckMessage] = []
    if len(key) < MIN_KEY_LENGTH:
        problems.append(
            Warning(
                f"STREAMFORGE_AUDIT_KEY has fewer than {MIN_KEY_LENGTH} characters.",
                hint="Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'",
                id="access.W001",
            )
        )
    if key == str(settings.SECRET_KEY):
        problems.append(
            Warning(
                "STREAMFORGE_AUDIT_KEY is the same as DJANGO_SECRET_KEY.",
                hint="Give the audit chain its own key so either can be rotated or shared without the other.",
                id="access.W002",
            )
        )
    return problems
