"""Encryption at rest of channel secrets (webhook signing secrets, Slack webhook URLs).

Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) with a key derived by SHA-256 from
``settings.NOTIFY_KEY`` (``STREAMFORGE_NOTIFY_KEY``): a database dump or backup holds only ciphertext, and
the key lives in the processes' environment. Kafka clusters need no such thing (their passwords are
references to files or variables); a webhook secret is made by the server and must be stored somewhere.
"""

from __future__ import annotations

import base64
import hashlib
import secrets

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnreadable(Exception):
    """The stored ciphertext does not open with the current key (it was rotated, or the row was edited)."""


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"streamforge-notifications:" + settings.NOTIFY_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(plain: str) -> str:
    """The encrypted form of ``plain`` (ASCII text, safe to store)."""
    return _fernet().encrypt(plain.encode()).decode()


def unseal(sealed: str) -> str:
    """The text ``seal`` encrypted; SecretUnreadable when the key cannot open it."""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken as exc:
        raise SecretUnreadable("the channel's secret cannot be decrypted with the current key") from exc


def new_signing_secret() -> str:
    """A fresh webhook signing secret: ``whsec_`` and 32 random bytes, URL-safe base64."""
    return "whsec_" + secrets.token_urlsafe(32)


def mask(secret: str, *, keep: int = 4) -> str:
    """What people may see of a secret: its last ``keep`` characters after a fixed run of dots (never its
    length). For a URL, the scheme and host too (``https://hooks.slack.com/…abcd``)."""
    tail = secret[-keep:] if len(secret) > keep * 3 else ""
    if "://" in secret:
        scheme, rest = secret.split("://", 1)
        return f"{scheme}://{rest.split('/', 1)[0]}/…{tail}"
    return f"…{tail}"
