"""Limits on guessing credentials: the client address every limit counts by, and API token authentication
that stops answering an address which sent too many wrong tokens.

Log-in lockouts are django-axes' (configured in settings, reported by ``access.lockout``); request rates per
user and per anonymous address are DRF's ``UserRateThrottle`` and ``AnonRateThrottle``. All of them count
the same address, ``client_ip``, so a client cannot look like several by writing its own
``X-Forwarded-For``.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import (
    AnonRateThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

from access.api_tokens import token_is_current

log = logging.getLogger(__name__)

#: What the Redis cache raises while Redis cannot be reached.
CACHE_ERRORS = (redis.RedisError, ConnectionError, TimeoutError)


class _FailOpen:
    """While the cache (Redis) cannot be reached, a rate limit lets requests through and says so in the log:
    the console stays usable during a Redis outage (the drivers and the database do not need Redis), and
    log-in lockouts, which live in the database, still hold."""

    def allow_request(self, request: Any, view: Any) -> bool:
        """DRF's rate check, or True (logged) when the cache does not answer."""
        try:
            return bool(super().allow_request(request, view))  # type: ignore[misc]
        except CACHE_ERRORS as exc:
            log.warning("API rate limit not applied, the cache is unreachable: %s", exc)
            return True


class AnonThrottle(_FailOpen, AnonRateThrottle):
    """Requests per anonymous client address (``anon`` rate), failing open while Redis is down."""


class UserThrottle(_FailOpen, UserRateThrottle):
    """Requests per signed-in user or token (``user`` rate), failing open while Redis is down."""


class DslThrottle(_FailOpen, ScopedRateThrottle):
    """Requests per user to the endpoints that evaluate DSL on a caller's input (``POST /api/dsl/evaluate/``,
    the dry runs): the ``dsl`` rate (``STREAMFORGE_API_RATE_DSL``), beside the ``user`` rate, failing open
    while Redis is down. A view opts in with ``throttle_scope = DSL_SCOPE``; past the rate, 429 with
    ``Retry-After`` (security review #28, finding 1)."""

    def get_rate(self) -> str | None:
        """Read the scope's rate when asked, not at import, so a changed setting applies."""
        rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES
        rate = rates.get(str(self.scope))
        return None if rate is None else str(rate)


#: The throttle scope of the DSL-evaluating endpoints (``DslThrottle``).
DSL_SCOPE = "dsl"

#: The throttles of a DSL-evaluating endpoint: the site's defaults and ``DslThrottle``.
DSL_THROTTLES = [AnonThrottle, UserThrottle, DslThrottle]


def client_ip(request: HttpRequest | Request) -> str:
    """The client's address: ``REMOTE_ADDR``, or behind ``STREAMFORGE_PROXY_COUNT`` proxies the
    ``X-Forwarded-For`` entry the outermost proxy appended (entries further left are the client's own
    words). The same rule as DRF's ``NUM_PROXIES``, so log-in lockouts and API throttles agree."""
    remote_addr = str(request.META.get("REMOTE_ADDR") or "")
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    proxies = int(settings.PROXY_COUNT)
    if proxies == 0 or not forwarded:
        return remote_addr
    addresses = [part.strip() for part in str(forwarded).split(",")]
    return addresses[-min(proxies, len(addresses))] or remote_addr


class FailedTokenThrottle(SimpleRateThrottle):
    """Counts wrong API tokens per client address in the cache (Redis), in fixed windows of the
    ``failed_token`` rate (``STREAMFORGE_API_RATE_FAILED_TOKEN``, e.g. ``10/minute``)."""

    scope = "failed_token"

    def __init__(self) -> None:
        super().__init__()
        self.limit, self.window = self.parse_rate(self.get_rate())

    def get_rate(self) -> str | None:
        """Read the rate when asked, not at import, so a changed setting applies."""
        rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES
        rate = rates.get(self.scope)
        return None if rate is None else str(rate)

    def get_cache_key(self, request: Any, view: Any) -> str:
        """One counter per client address."""
        return self.cache_format % {"scope": self.scope, "ident": client_ip(request)}

    def over_limit(self, request: Request) -> bool:
        """True when this address already sent as many wrong tokens as the window allows."""
        if self.limit is None:
            return False
        try:
            return int(self.cache.get(self.get_cache_key(request, None), 0)) >= self.limit
        except CACHE_ERRORS as exc:
            log.warning("wrong-token limit not applied, the cache is unreachable: %s", exc)
            return False

    def record_failure(self, request: Request) -> None:
        """Count one wrong token; the window starts with the first and lasts the rate's duration."""
        if self.window is None:
            return
        key = self.get_cache_key(request, None)
        try:
            self.cache.add(key, 0, timeout=self.window)
            try:
                self.cache.incr(key)
            except ValueError:  # the window expired between add and incr: this failure opens a new one
                self.cache.add(key, 1, timeout=self.window)
        except CACHE_ERRORS as exc:
            log.warning("wrong token not counted, the cache is unreachable: %s", exc)

    def window_seconds(self) -> int:
        """How long a client should wait before trying again (the whole window: an upper bound)."""
        return int(self.window or 60)


class ThrottledTokenAuthentication(TokenAuthentication):
    """DRF's ``Authorization: Token <key>`` authentication, which counts the wrong tokens each client
    address sends and, past the ``failed_token`` rate, answers 429 (with ``Retry-After``) to every token
    request from that address until the window ends, right tokens included: otherwise a guesser would
    learn which guess was right. Requests without a token header are not counted."""

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, Token] | None:
        """Refuse an address over the limit, else authenticate and count a failure."""
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        throttle = FailedTokenThrottle()
        if throttle.over_limit(request):
            raise exceptions.Throttled(
                wait=throttle.window_seconds(), detail="too many wrong API tokens from this address"
            )
        try:
            result: tuple[AbstractBaseUser, Token] | None = super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure(request)
            raise
        return result

    def authenticate_credentials(self, key: str) -> tuple[AbstractBaseUser, Token]:
        """DRF's check (the key exists, its user is active), and the token's binding: a token issued under
        a password its user no longer has is refused (``access.api_tokens.token_is_current``), so a
        password change ends every token, by whatever path it was made. Raises AuthenticationFailed."""
        token = Token.objects.select_related("user", "binding").filter(key=key).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        if not token_is_current(token, token.user):
            raise exceptions.AuthenticationFailed(
                "Token no longer valid: its user's password changed after it was issued."
            )
        return token.user, token
