"""allauth's adapters for StreamForge (``SOCIALACCOUNT_ADAPTER``, ``ACCOUNT_ADAPTER``).

``SocialAccountAdapter`` builds allauth's ``SocialApp`` of each configured provider in memory, at the moment
a sign-in needs it, with the client secret read from its reference (``access.sso.config``): no app or secret
is ever in the database. It checks the nonce, opens just-in-time sign-up (the identity is the provider's
subject: ``SocialAccount(provider, uid)``, never an e-mail), and audits refused sign-ins. ``AccountAdapter``
applies the groups and audits each sign-in (``access.sso.signin``), sends a person in no team to the page
that says so, and opens no local sign-up.
"""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp, SocialLogin
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from access import audit
from access.permissions import in_a_team
from access.sso.config import OidcProvider
from access.sso.provider import NONCE_STATE_KEY
from access.sso.signin import complete_sign_in

logger = logging.getLogger("streamforge.sso")

#: The allauth provider every configured identity provider is an app of.
ALLAUTH_PROVIDER = "openid_connect"
#: The request attribute carrying the sign-in from ``pre_social_login`` to ``AccountAdapter.login``.
_SOCIALLOGIN = "_streamforge_sociallogin"
#: The backend an SSO session is made with (also the one checking local passwords).
SESSION_BACKEND = "access.sso.backends.ConsoleBackend"


def configured(provider_id: str) -> OidcProvider | None:
    """The configured provider ``provider_id``, or None."""
    return next((p for p in settings.SSO_PROVIDERS if p.id == provider_id), None)


def social_app(provider: OidcProvider) -> SocialApp:
    """allauth's (unsaved) app for ``provider``, its secret read now from the reference. Raises
    ImproperlyConfigured when the reference is empty or unreadable."""
    return SocialApp(
        provider=ALLAUTH_PROVIDER,
        provider_id=provider.id,
        name=provider.name,
        client_id=provider.client_id,
        secret=provider.secret.resolve(),
        settings={
            "server_url": provider.issuer,
            "oauth_pkce_enabled": True,
            "fetch_userinfo": True,
            "scope": list(provider.scopes),
        },
    )


def _refuse(request: HttpRequest, *, provider: str, reason: str) -> ImmediateHttpResponse:
    record_refusal(provider=provider, reason=reason)
    response = render(
        request, "socialaccount/authentication_error.html", {"provider_id": provider}, status=403
    )
    return ImmediateHttpResponse(response)


def record_refusal(*, provider: str, reason: str) -> None:
    """One audit event ``auth.sso_refused`` and a WARNING line for a sign-in through ``provider`` that was
    refused (``reason`` names the check; never a token)."""
    logger.warning("sso sign-in through %s refused: %s", provider, reason)
    audit.record(
        actor=None,
        action="auth.sso_refused",
        target_type="sso_provider",
        target_id=provider,
        reason=reason[:500],
        details={"provider": provider},
    )


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    """Apps from the environment, the nonce check, just-in-time users, refusals audited."""

    def list_apps(
        self, request: HttpRequest | None, provider: str | None = None, client_id: str | None = None
    ) -> list[SocialApp]:
        """The configured providers' apps (``provider`` matches allauth's provider or our id), never any
        from the database."""
        return [
            social_app(p)
            for p in settings.SSO_PROVIDERS
            if provider in (None, ALLAUTH_PROVIDER, p.id) and client_id in (None, p.client_id)
        ]

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        """Just-in-time users: whoever the provider vouches for gets a user here (with no team until a
        group of theirs is mapped, or the default team)."""
        return True

    def is_auto_signup_allowed(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        """Never a sign-up form: the user is made from the claims."""
        return True

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        """Refuse the sign-in unless the verified ID token carries the nonce this sign-in sent; keep the
        sign-in for ``AccountAdapter.login``."""
        provider = sociallogin.account.provider
        id_token = (sociallogin.account.extra_data or {}).get("id_token") or {}
        expected = (sociallogin.state or {}).get(NONCE_STATE_KEY)
        if not expected or id_token.get("nonce") != expected:
            raise _refuse(request, provider=provider, reason="the ID token's nonce is not this sign-in's")
        setattr(request, _SOCIALLOGIN, sociallogin)

    def on_authentication_error(
        self,
        request: HttpRequest,
        provider: Any,
        error: Any = None,
        exception: BaseException | None = None,
        extra_context: dict[str, Any] | None = None,
    ) -> None:
        """Audit and log the refusal (an invalid or forged ID token, a lost state, the provider's error)."""
        provider_id = getattr(getattr(provider, "app", None), "provider_id", "") or str(provider)
        reason = (
            f"{error or 'error'}: {type(exception).__name__ if exception else ''} {exception or ''}".strip()
        )
        cause = exception.__cause__ if exception is not None else None
        if cause is not None:
            reason += f" ({type(cause).__name__}: {cause})"
        record_refusal(provider=provider_id, reason=reason)


class AccountAdapter(DefaultAccountAdapter):
    """No local sign-up; SSO sign-ins apply groups, are audited, and land on the no-team page when the
    person has no team."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        """allauth's own sign-up pages are not mounted; no local account is made through it."""
        return False

    def login(self, request: HttpRequest, user: AbstractBaseUser) -> None:
        """For a sign-in through a provider: apply the groups, make the session, audit it
        (``access.sso.signin.complete_sign_in``)."""
        sociallogin: SocialLogin | None = getattr(request, _SOCIALLOGIN, None)
        provider = configured(sociallogin.account.provider) if sociallogin is not None else None
        user.backend = SESSION_BACKEND  # type: ignore[attr-defined]
        if sociallogin is None or provider is None or not isinstance(user, User):
            super().login(request, user)
            return
        complete_sign_in(
            request,
            user=user,
            provider=provider,
            sociallogin=sociallogin,
            login=lambda: super(AccountAdapter, self).login(request, user),
        )

    def post_login(self, request: HttpRequest, user: AbstractBaseUser, **kwargs: Any) -> HttpResponse:
        """allauth's, but a person in no team goes to the page that says so, whatever ``next`` was."""
        if not in_a_team(user):
            kwargs["redirect_url"] = reverse("sso-no-team")
        response: HttpResponse = super().post_login(request, user, **kwargs)
        return response
