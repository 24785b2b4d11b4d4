"""What one sign-in through an identity provider does here, and the audit of password sign-ins in SSO-only mode.

``complete_sign_in`` (called by ``access.sso.adapters.AccountAdapter.login``, after the ID token, state and
nonce held) applies the person's groups (``access.sso.mapping.apply_groups``) as the system, then the
session is made, then one audit event ``auth.sso_sign_in`` records who the provider said the person was:
its id, the subject, the groups it sent and the roles they gave. The session notes the provider and the
raw ID token (``SSO_SESSION_KEY``) for RP-initiated logout (``access.sso.logout``).

``audit_password_sign_in`` (Django's ``user_logged_in``, connected in ``AccessConfig.ready()``): in SSO-only
mode, a password sign-in can only be the break-glass admin's; each one is an audit event
``auth.break_glass_sign_in`` and a WARNING log line on ``streamforge.sso``, for whoever watches the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from allauth.socialaccount.models import SocialLogin
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from access import audit, signals
from access.middleware import acting_as_system
from access.sso.backends import SSO_SESSION_KEY, is_break_glass
from access.sso.config import OidcProvider
from access.sso.mapping import AUDITED_GROUPS, Applied, apply_groups
from access.sso.provider import ID_TOKEN_ATTRIBUTE

logger = logging.getLogger("streamforge.sso")

#: The request attribute marking a sign-in made through a provider (so ``audit_password_sign_in`` skips it).
SSO_REQUEST_FLAG = "_streamforge_sso_sign_in"


def claims(sociallogin: SocialLogin) -> dict[str, Any]:
    """The sign-in's claims: the verified ID token's, with the userinfo endpoint's filling in what it lacks."""
    data = sociallogin.account.extra_data or {}
    merged: dict[str, Any] = dict(data.get("userinfo") or {})
    merged.update(data.get("id_token") or {})
    return merged


def groups_from(found: dict[str, Any], claim: str) -> list[str]:
    """The groups named by ``claim`` (a list of strings, or one string), sorted, without blanks."""
    value = found.get(claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({str(item) for item in value if isinstance(item, str | int) and str(item).strip()})


def complete_sign_in(
    request: HttpRequest,
    *,
    user: User,
    provider: OidcProvider,
    sociallogin: SocialLogin,
    login: Callable[[], None],
) -> Applied:
    """Apply ``user``'s groups at ``provider``, call ``login`` (which makes the session), then record the
    sign-in and note it in the session, which lasts ``settings.SSO_SESSION_HOURS``. Returns what the groups
    gave."""
    found = claims(sociallogin)
    groups = groups_from(found, provider.groups_claim)
    with acting_as_system():
        applied = apply_groups(user=user, provider=provider.id, groups=groups)
    setattr(request, SSO_REQUEST_FLAG, True)
    login()
    subject = str(sociallogin.account.uid)
    audit.record(
        actor=user,
        action="auth.sso_sign_in",
        target_type="user",
        target_id=user.pk,
        details={
            "provider": provider.id,
            "issuer": provider.issuer,
            "subject": subject,
            "username": user.get_username(),
            "groups": groups[:AUDITED_GROUPS],
            "roles": applied.roles,
            "default_team": applied.defaulted,
        },
    )
    request.session.set_expiry(settings.SSO_SESSION_HOURS * 3600)
    request.session[SSO_SESSION_KEY] = {
        "provider": provider.id,
        "id_token": getattr(sociallogin, ID_TOKEN_ATTRIBUTE, ""),
    }
    logger.info("sso sign-in: %s subject %s as %s, roles %s", provider.id, subject, user, applied.roles)
    return applied


def audit_password_sign_in(sender: Any, request: HttpRequest | None, user: User, **kwargs: Any) -> None:
    """Receiver of ``user_logged_in``: a password sign-in of the break-glass admin in SSO-only mode is
    audited (``auth.break_glass_sign_in``, with the client address), logged at WARNING and announced
    (``access.signals.break_glass_sign_in``: every team's channels subscribed to it are notified)."""
    from access.throttling import client_ip

    if request is None or getattr(request, SSO_REQUEST_FLAG, False):
        return
    if not settings.SSO_ONLY or not is_break_glass(user.get_username()):
        return
    address = client_ip(request)
    audit.record(
        actor=user,
        action="auth.break_glass_sign_in",
        target_type="user",
        target_id=user.pk,
        reason="local password sign-in while SSO-only mode is on",
        details={"username": user.get_username(), "ip_address": address},
    )
    logger.warning("break-glass sign-in: %s signed in with a local password from %s", user, address)
    payload = {"username": user.get_username(), "ip_address": address, "at": timezone.now().isoformat()}
    transaction.on_commit(lambda: signals.break_glass_sign_in.send_robust(sender=None, **payload))
