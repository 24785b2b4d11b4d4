"""Signing out: the session here, and the identity provider's too where it supports RP-initiated logout
(OpenID Connect RP-Initiated Logout 1.0: an ``end_session_endpoint`` in its discovery document).

``/logout/`` (POST, the header's button) ends the Django session; when it was an SSO sign-in, the browser is
then sent to the provider's end-session endpoint with ``id_token_hint`` (the sign-in's ID token, so the
provider ends that session without asking), ``client_id`` and ``post_logout_redirect_uri`` (our log-in
page, which must be registered with the provider). A provider without the endpoint, or one that cannot be
reached, leaves the person on our log-in page, signed out here.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

import requests
from django.contrib.auth import logout
from django.core.cache import cache
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.sso.adapters import SocialAccountAdapter, configured
from access.sso.backends import SSO_SESSION_KEY
from access.sso.config import OidcProvider

logger = logging.getLogger("streamforge.sso")

#: How long a provider's end-session endpoint is remembered (seconds).
DISCOVERY_CACHE_SECONDS = 3600


def end_session_endpoint(provider: OidcProvider) -> str:
    """The provider's ``end_session_endpoint`` from its discovery document (cached an hour), "" when it has
    none or cannot be reached (logged)."""
    key = f"sso:end-session:{provider.id}:{provider.issuer}"
    found: Any = cache.get(key)
    if found is not None:
        return str(found)
    try:
        with SocialAccountAdapter().get_requests_session() as session:
            response = session.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=5)
            response.raise_for_status()
            found = str(response.json().get("end_session_endpoint") or "")
    except (requests.RequestException, ValueError) as exc:
        logger.warning("sso: no end-session endpoint from %s: %s", provider.id, exc)
        return ""
    cache.set(key, found, DISCOVERY_CACHE_SECONDS)
    return str(found)


@require_POST
def sign_out(request: HttpRequest) -> HttpResponseRedirect:
    """``POST /logout/``: end the session; after an SSO sign-in, continue to the provider's sign-out."""
    noted = request.session.get(SSO_SESSION_KEY) or {}
    logout(request)
    login_url = request.build_absolute_uri(reverse("login"))
    provider = configured(str(noted.get("provider", "")))
    endpoint = end_session_endpoint(provider) if provider is not None else ""
    if provider is None or not endpoint:
        return HttpResponseRedirect(reverse("login"))
    params = {"client_id": provider.client_id, "post_logout_redirect_uri": login_url}
    if noted.get("id_token"):
        params["id_token_hint"] = str(noted["id_token"])
    return HttpResponseRedirect(f"{endpoint}?{urlencode(params)}")
