"""An in-process OpenID Connect identity provider for the SSO unit tests: no network, no Keycloak.

``FakeIdP`` answers what allauth asks over ``requests`` (discovery, JWKS, the token endpoint, userinfo)
through ``session()``, which the tests put in place of ``SocialAccountAdapter.get_requests_session``. It
signs ID tokens with an RSA key of its own (PyJWT), checks the client secret and PKCE's code verifier at
the token endpoint, and lets a test bend the token (``claims`` overrides, another signing key) to prove
the console refuses it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

ISSUER = "https://idp.example.test"
CLIENT_ID = "streamforge-console"
CLIENT_SECRET = "in-process-idp-client-secret-4f1c9a"
KID = "test-key-1"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Response:
    """Just enough of ``requests.Response`` for allauth."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status_code = status
        self.text = json.dumps(body)
        self.content = self.text.encode()
        self.headers = {"content-type": "application/json"}
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            import requests

            raise requests.HTTPError(f"{self.status_code}")


@dataclass
class Pending:
    """An authorization the browser was sent to make: its nonce and PKCE challenge."""

    nonce: str
    challenge: str
    method: str


@dataclass
class FakeIdP:
    """The provider. ``subject``, ``groups``, ``claims`` (overrides merged into the ID token's claims) and
    ``signing_key`` (None: the published key) shape the next token it issues."""

    key: rsa.RSAPrivateKey = field(default_factory=new_key)
    subject: str = "sub-alice-0001"
    username: str = "alice"
    email: str = "alice@example.test"
    groups: list[str] = field(default_factory=lambda: ["sf-operators"])
    claims: dict[str, Any] = field(default_factory=dict)
    signing_key: rsa.RSAPrivateKey | None = None
    codes: dict[str, Pending] = field(default_factory=dict)
    token_requests: list[dict[str, Any]] = field(default_factory=list)

    # -------------------------------------------------------------- the browser's side of the flow
    def authorize(self, location: str) -> tuple[str, dict[str, str]]:
        """Take the console's redirect to the authorization endpoint; return a code and the query."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        assert location.startswith(f"{ISSUER}/authorize?")
        code = uuid.uuid4().hex
        self.codes[code] = Pending(
            query.get("nonce", ""), query.get("code_challenge", ""), query.get("code_challenge_method", "")
        )
        return code, query

    # -------------------------------------------------------------- tokens
    def id_token(self, nonce: str) -> str:
        now = int(time.time())
        body = {
            "iss": ISSUER,
            "aud": CLIENT_ID,
            "sub": self.subject,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            "jti": uuid.uuid4().hex,
            "preferred_username": self.username,
            "email": self.email,
            "email_verified": True,
            "groups": list(self.groups),
            **self.claims,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.signing_key or self.key, algorithm="RS256", headers={"kid": KID})

    def jwks(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": KID, "alg": "RS256", "use": "sig"}]}

    # -------------------------------------------------------------- requests' side
    def _get(self, url: str, **kwargs: Any) -> Response:
        if url == f"{ISSUER}/.well-known/openid-configuration":
            return Response(
                200,
                {
                    "issuer": ISSUER,
                    "authorization_endpoint": f"{ISSUER}/authorize",
                    "token_endpoint": f"{ISSUER}/token",
                    "userinfo_endpoint": f"{ISSUER}/userinfo",
                    "jwks_uri": f"{ISSUER}/jwks",
                    "end_session_endpoint": f"{ISSUER}/logout",
                    "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
                },
            )
        if url == f"{ISSUER}/jwks":
            return Response(200, self.jwks())
        if url == f"{ISSUER}/userinfo":
            return Response(
                200, {"sub": self.subject, "preferred_username": self.username, "email": self.email}
            )
        return Response(404, {"error": "not_found"})

    def _request(self, method: str, url: str, data: dict[str, Any] | None = None, **kwargs: Any) -> Response:
        if method.upper() == "GET":
            return self._get(url, **kwargs)
        assert url == f"{ISSUER}/token", url
        data = dict(data or {})
        self.token_requests.append(data)
        if data.get("client_id") != CLIENT_ID or data.get("client_secret") != CLIENT_SECRET:
            return Response(401, {"error": "invalid_client"})
        pending = self.codes.pop(str(data.get("code")), None)
        if pending is None:
            return Response(400, {"error": "invalid_grant"})
        verifier = str(data.get("code_verifier", ""))
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if pending.method != "S256" or digest != pending.challenge:
            return Response(400, {"error": "invalid_grant", "error_description": "PKCE verification failed"})
        return Response(
            200,
            {
                "access_token": uuid.uuid4().hex,
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": self.id_token(pending.nonce),
            },
        )

    def session(self) -> FakeSession:
        return FakeSession(self)


class FakeSession:
    """What ``get_requests_session()`` returns: a context manager with ``get`` and ``request``."""

    def __init__(self, idp: FakeIdP) -> None:
        self.idp = idp

    def __enter__(self) -> FakeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get(self, url: str, **kwargs: Any) -> Response:
        return self.idp._get(url, **kwargs)

    def post(self, url: str, data: dict[str, Any] | None = None, **kwargs: Any) -> Response:
        return self.idp._request("POST", url, data=data, **kwargs)

    def request(self, method: str, url: str, **kwargs: Any) -> Response:
        return self.idp._request(method, url, **kwargs)
