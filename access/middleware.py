"""``audit_actor``: remembers the request being served, so audit events recorded by model signals (people,
memberships, tokens changed through the admin site or any view) name who made the change."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse

_request: ContextVar[HttpRequest | None] = ContextVar("streamforge_audit_request", default=None)


def audit_actor(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware (after AuthenticationMiddleware): keeps the request in a context variable while it is
    served. The request, not its user, so a user that DRF authenticates later (a token) is seen too."""

    def middleware(request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return get_response(request)
        finally:
            _request.reset(token)

    return middleware


def current_actor() -> User | None:
    """The signed-in user of the request being served, or None (a worker, a management command, anonymous)."""
    request = _request.get()
    user = getattr(request, "user", None) if request is not None else None
    if isinstance(user, User) and user.is_authenticated:
        return user
    return None


@contextlib.contextmanager
def acting_as_system() -> Iterator[None]:
    """Within the block, ``current_actor()`` is None: changes the system makes on someone's behalf during a
    request (the memberships an identity provider's groups give at sign-in) are recorded as the system's."""
    token = _request.set(None)
    try:
        yield
    finally:
        _request.reset(token)
