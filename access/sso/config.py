"""Identity providers from the environment: one ``OidcProvider`` per id in ``STREAMFORGE_OIDC_PROVIDERS``.

The library is django-allauth's OpenID Connect provider (``access.sso.provider``), chosen over
mozilla-django-oidc because it serves several identity providers at once (one ``SocialApp`` each), keeps the
identity as ``SocialAccount(provider, uid=sub)`` instead of matching users by e-mail, and verifies the ID token's
issuer, audience and expiry with PyJWT (mozilla-django-oidc 4 checks the signature and nonce only); we add
the nonce and make it check the signature on every path.

For an id ``okta`` (lower case letters, digits, ``-``; the variables use it upper-cased, ``-`` as ``_``):

| variable | meaning |
|---|---|
| STREAMFORGE_OIDC_OKTA_ISSUER | the issuer URL (``https://example.okta.com/oauth2/default``); discovery at ``<issuer>/.well-known/openid-configuration`` |
| STREAMFORGE_OIDC_OKTA_CLIENT_ID | the client id registered there |
| STREAMFORGE_OIDC_OKTA_CLIENT_SECRET_FILE | a file holding the client secret (a mounted secret: ``/run/secrets/okta``) ... |
| STREAMFORGE_OIDC_OKTA_CLIENT_SECRET_ENV | ... or the *name* of another variable holding it |
| STREAMFORGE_OIDC_OKTA_NAME | the button's label, "Sign in with <name>" (default: the id, capitalised) |
| STREAMFORGE_OIDC_OKTA_GROUPS_CLAIM | the claim listing the person's groups (default ``groups``) |
| STREAMFORGE_OIDC_OKTA_SCOPES | space-separated scopes (default ``openid profile email``) |

The secret is only ever a reference here: settings, ``diffsettings`` and the debug page hold a path or a
variable name; the value is read when a sign-in needs it (``SecretRef.resolve``) and handed to allauth's
in-memory ``SocialApp``, never saved. A ``..._CLIENT_SECRET`` variable holding the value itself is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

PROVIDERS_VARIABLE = "STREAMFORGE_OIDC_PROVIDERS"
_ID = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
DEFAULT_SCOPES = ("openid", "profile", "email")


@dataclass(frozen=True)
class SecretRef:
    """Where a secret is (``file``: a path, or ``env``: a variable's name), never the secret itself."""

    file: str = ""
    env: str = ""

    def resolve(self) -> str:
        """The secret's value, read now (stripped of surrounding whitespace). Raises ImproperlyConfigured
        when the file or variable is missing or empty, naming the reference, not the value."""
        if self.file:
            try:
                value = Path(self.file).read_text().strip()
            except OSError as exc:
                raise ImproperlyConfigured(
                    f"the client secret file {self.file} cannot be read: {exc}"
                ) from None
        else:
            value = os.environ.get(self.env, "").strip()
        if not value:
            raise ImproperlyConfigured(f"the client secret reference {self} is empty")
        return value

    def __str__(self) -> str:
        return f"file {self.file}" if self.file else f"variable {self.env}"


@dataclass(frozen=True)
class OidcProvider:
    """One identity provider: ``id`` names it in URLs (``/accounts/oidc/<id>/login/``), in group mappings and
    in the audit trail; ``issuer`` is where its discovery document is; ``secret`` a ``SecretRef``."""

    id: str
    name: str
    issuer: str
    client_id: str
    secret: SecretRef
    groups_claim: str = "groups"
    scopes: tuple[str, ...] = DEFAULT_SCOPES

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` of the issuer: the browser is sent there to sign in and to sign out, so
        the Content-Security-Policy's ``form-action`` must allow it."""
        parts = urlsplit(self.issuer)
        return f"{parts.scheme}://{parts.netloc}"


def _variable(provider_id: str, field: str) -> str:
    return f"STREAMFORGE_OIDC_{provider_id.upper().replace('-', '_')}_{field}"


def provider_from_env(provider_id: str, environ: Mapping[str, str]) -> OidcProvider:
    """The provider ``provider_id`` as its ``STREAMFORGE_OIDC_<ID>_*`` variables describe it. Raises
    ImproperlyConfigured naming the variable that is missing or wrong."""
    if not _ID.match(provider_id):
        raise ImproperlyConfigured(
            f"{PROVIDERS_VARIABLE}: {provider_id!r} is not an id (a-z first, then a-z, 0-9, -; at most 31)"
        )

    def get(field: str) -> str:
        return environ.get(_variable(provider_id, field), "").strip()

    if get("CLIENT_SECRET"):
        raise ImproperlyConfigured(
            f"{_variable(provider_id, 'CLIENT_SECRET')} holds a secret in clear: give "
            f"{_variable(provider_id, 'CLIENT_SECRET_FILE')} (a file) or "
            f"{_variable(provider_id, 'CLIENT_SECRET_ENV')} (another variable's name) instead"
        )
    issuer = get("ISSUER").rstrip("/")
    parts = urlsplit(issuer)
    if parts.scheme not in {"https", "http"} or not parts.netloc:
        raise ImproperlyConfigured(
            f"{_variable(provider_id, 'ISSUER')} must be an http(s) URL, got {issuer!r}"
        )
    client_id = get("CLIENT_ID")
    if not client_id:
        raise ImproperlyConfigured(f"{_variable(provider_id, 'CLIENT_ID')} must be set")
    secret_file, secret_env = get("CLIENT_SECRET_FILE"), get("CLIENT_SECRET_ENV")
    if bool(secret_file) == bool(secret_env):
        raise ImproperlyConfigured(
            f"give exactly one of {_variable(provider_id, 'CLIENT_SECRET_FILE')} and "
            f"{_variable(provider_id, 'CLIENT_SECRET_ENV')}"
        )
    scopes = tuple(get("SCOPES").split()) or DEFAULT_SCOPES
    if "openid" not in scopes:
        raise ImproperlyConfigured(f"{_variable(provider_id, 'SCOPES')} must include openid")
    return OidcProvider(
        id=provider_id,
        name=get("NAME") or provider_id.capitalize(),
        issuer=issuer,
        client_id=client_id,
        secret=SecretRef(file=secret_file, env=secret_env),
        groups_claim=get("GROUPS_CLAIM") or "groups",
        scopes=scopes,
    )


def providers_from_env(environ: Mapping[str, str]) -> tuple[OidcProvider, ...]:
    """Every provider named in ``STREAMFORGE_OIDC_PROVIDERS`` (comma-separated ids; none when unset), in
    that order. Raises ImproperlyConfigured for a malformed or repeated id or a provider's bad variable."""
    ids = [item.strip() for item in environ.get(PROVIDERS_VARIABLE, "").split(",") if item.strip()]
    if len(set(ids)) != len(ids):
        raise ImproperlyConfigured(f"{PROVIDERS_VARIABLE} names a provider twice: {ids}")
    return tuple(provider_from_env(provider_id, environ) for provider_id in ids)
