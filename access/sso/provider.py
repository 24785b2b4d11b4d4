"""allauth's OpenID Connect provider, made strict (``SOCIALACCOUNT_PROVIDERS["openid_connect"]["provider_class"]``).

What allauth does already: the authorization code flow, a random ``state`` per redirect kept in the session
and required back on the callback, PKCE (S256, ``oauth_pkce_enabled`` in each app's settings), and the ID
token's issuer, audience (our client id) and expiry checked with PyJWT.

What this adds:

* a **nonce** per redirect, sent to the provider and kept in the same stashed state as ``state``; the ID
  token must carry it back (checked in ``access.sso.adapters.SocialAccountAdapter.pre_social_login``, where
  the state and the token meet), so a token minted for another sign-in cannot be replayed into this one;
* the ID token's **signature** verified against the provider's JWKS on every path (allauth skips it when the
  token came straight from the token endpoint, which OpenID Connect Core allows; we do not rely on that);
* an ID token is **required** (a provider answering without one is refused), and its raw form is kept on the
  ``SocialLogin`` (``ID_TOKEN_ATTRIBUTE``) for RP-initiated logout's ``id_token_hint``; it is never saved
  in the database (tokens are not stored: ``SOCIALACCOUNT_STORE_TOKENS`` is off).
"""

from __future__ import annotations

import secrets
from typing import Any

from allauth.socialaccount.internal import jwtkit
from allauth.socialaccount.models import SocialApp, SocialLogin, SocialToken
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.http import Http404, HttpRequest, HttpResponse

#: The attribute of a ``SocialLogin`` that holds the raw ID token of the sign-in (``id_token_hint``).
ID_TOKEN_ATTRIBUTE = "streamforge_id_token"  # noqa: S105 - an attribute name
#: The key of the stashed redirect state holding the nonce.
NONCE_STATE_KEY = "nonce"


class StrictOIDCAdapter(OpenIDConnectOAuth2Adapter):
    """The OAuth2 adapter of ``StrictOIDCProvider``: requires an ID token and always verifies its signature."""

    def _decode_id_token(self, app: SocialApp, id_token: str) -> dict[str, Any]:
        """The ID token's claims once its signature (the provider's JWKS, the ``kid`` of its header), issuer,
        audience and expiry hold; OAuth2Error otherwise."""
        claims: dict[str, Any] = jwtkit.verify_and_decode(
            credential=id_token,
            keys_url=self.openid_config["jwks_uri"],
            issuer=self.openid_config["issuer"],
            audience=app.client_id,
            lookup_kid=jwtkit.lookup_kid_jwk,
            verify_signature=True,
        )
        return claims

    def complete_login(
        self, request: HttpRequest, app: SocialApp, token: SocialToken, **kwargs: Any
    ) -> SocialLogin:
        """allauth's, refusing a token response without an ID token (OAuth2Error), and keeping the raw ID
        token on the returned login (``ID_TOKEN_ATTRIBUTE``)."""
        raw = (kwargs.get("response") or {}).get("id_token")
        if not raw:
            raise OAuth2Error("the identity provider sent no ID token")
        login: SocialLogin = super().complete_login(request, app, token, **kwargs)
        setattr(login, ID_TOKEN_ATTRIBUTE, raw)
        return login


class StrictOIDCProvider(OpenIDConnectProvider):
    """allauth's OpenID Connect provider with a nonce per sign-in and ``StrictOIDCAdapter``; scopes from the
    app's settings (``scope``: ``STREAMFORGE_OIDC_<ID>_SCOPES``)."""

    oauth2_adapter_class = StrictOIDCAdapter

    def get_scope(self) -> list[str]:
        """The scopes configured for this provider, else OpenID Connect's ``openid profile email``."""
        configured = self.app.settings.get("scope")
        return list(configured) if configured else list(self.get_default_scope())

    def redirect(
        self, request: HttpRequest, process: Any, next_url: str | None = None, data: Any = None, **kwargs: Any
    ) -> HttpResponse:
        """The redirect to the provider's authorization endpoint, with a fresh nonce in its parameters and
        in the stashed state (beside PKCE's code verifier)."""
        nonce = secrets.token_urlsafe(32)
        auth_params = dict(kwargs.pop("auth_params", None) or self.get_auth_params())
        auth_params["nonce"] = nonce
        response: HttpResponse = super().redirect(
            request, process, next_url, data, auth_params=auth_params, **{NONCE_STATE_KEY: nonce}, **kwargs
        )
        return response


def login_view(request: HttpRequest, provider_id: str) -> HttpResponse:
    """``POST /accounts/oidc/<id>/login/``: redirect to the provider (allauth's view over ``StrictOIDCAdapter``;
    allauth's own URL module would build its stock adapter). 404 for a provider that is not configured."""
    try:
        response: HttpResponse = OAuth2LoginView.adapter_view(StrictOIDCAdapter(request, provider_id))(
            request
        )
    except SocialApp.DoesNotExist:
        raise Http404("no such identity provider") from None
    return response


def callback_view(request: HttpRequest, provider_id: str) -> HttpResponse:
    """``GET /accounts/oidc/<id>/login/callback/``: the redirect URI registered with the provider; checks the
    state, exchanges the code (with PKCE's verifier), verifies the ID token, signs the person in."""
    try:
        response: HttpResponse = OAuth2CallbackView.adapter_view(StrictOIDCAdapter(request, provider_id))(
            request
        )
    except SocialApp.DoesNotExist:
        raise Http404("no such identity provider") from None
    return response
