"""Fixtures of the SSO tests: the in-process identity provider, configured as the console's provider
``test``, and ``sign_in`` to run the whole authorization code flow through the Django test client."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.test import Client

from access.sso.adapters import SocialAccountAdapter
from access.sso.config import OidcProvider, SecretRef
from tests.sso.idp import CLIENT_ID, CLIENT_SECRET, ISSUER, FakeIdP

SECRET_VARIABLE = "SF_TEST_IDP_SECRET"


@pytest.fixture
def idp(settings, monkeypatch) -> FakeIdP:
    provider = FakeIdP()
    monkeypatch.setenv(SECRET_VARIABLE, CLIENT_SECRET)
    settings.SSO_PROVIDERS = (
        OidcProvider(
            id="test",
            name="Test IdP",
            issuer=ISSUER,
            client_id=CLIENT_ID,
            secret=SecretRef(env=SECRET_VARIABLE),
        ),
    )
    monkeypatch.setattr(SocialAccountAdapter, "get_requests_session", lambda self: provider.session())
    return provider


class SignIn:
    """The outcome of one run of the flow: the callback's response and the authorization query."""

    def __init__(self, response, query) -> None:
        self.response = response
        self.query = query

    @property
    def location(self) -> str:
        return str(urlsplit(self.response.get("Location", "")).path)


@pytest.fixture
def sign_in(idp):
    def run(client: Client | None = None, *, state: str | None = None) -> SignIn:
        client = client or Client()
        start = client.post("/accounts/oidc/test/login/")
        assert start.status_code == 302, start.content[:500]
        code, query = idp.authorize(start["Location"])
        response = client.get(
            "/accounts/oidc/test/login/callback/", {"code": code, "state": state or query["state"]}
        )
        return SignIn(response, query)

    return run
