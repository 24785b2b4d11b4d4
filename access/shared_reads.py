"""Shared reads: a list view computed once for everyone who sees the same teams, kept for about a second.

Twenty operators watching the overview ask for the same rows twenty times a second; under load each asking
costs the web tens of milliseconds of CPU (issue #29's density row). A shared read keeps a view's result in
the site cache (Redis, shared by every web process) under the view's name, a variant (the query string, say)
and the set of teams the caller sees, for ``settings.SHARED_READ_SECONDS``. So:

- nobody is shown another team set's result: the key is the exact set of teams the caller sees now
  (``permissions.visible_teams``: every team for an admin), so a membership change takes effect on the next
  request;
- a result is at most ``SHARED_READ_SECONDS`` old. Changes the system makes (a driver's batch, supervision
  moving a pipeline to RUNNING) show that much later; the live websocket pushes them as before;
- whoever has just changed something sees it at once: every unsafe request (POST, PUT, PATCH, DELETE) of a
  signed-in user marks them as a writer (``remember_writes``, a middleware), and a writer's reads skip the
  shared result for ``SHARED_READ_SECONDS + 1`` seconds; what they compute replaces it.

``SHARED_READ_SECONDS = 0`` turns sharing off (every read computes). While the cache cannot be reached,
every read computes and nothing fails: the console stays usable during a Redis outage, as its rate limits do
(``access.throttling``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from access.permissions import AnyUser, visible_teams
from access.throttling import CACHE_ERRORS

log = logging.getLogger(__name__)

T = TypeVar("T")

_PREFIX = "shared-read"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


@dataclass(frozen=True)
class SharedRead(Generic[T]):
    """A view's result and ``version``: an id of the computation that made it (32 hex digits), the same for
    every reader served from it, or ``""`` when the result is not shared (sharing off, the cache
    unreachable). ``shared_fragment`` renders each shared computation once."""

    value: T
    version: str


def _writer_key(user_id: int) -> str:
    return f"{_PREFIX}:wrote:{user_id}"


def team_set_key(user: AnyUser) -> str:
    """What a user's reads are shared under: a digest of the ids of the teams ``permissions.visible_teams``
    gives them (every team for an admin), or ``none``. The rule of who sees what stays in one place."""
    ids = sorted(visible_teams(user).values_list("id", flat=True))
    if not ids:
        return "none"
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:32]


def note_write(user: AnyUser) -> None:
    """Mark ``user`` as a writer for ``SHARED_READ_SECONDS + 1`` seconds: their reads compute afresh, so
    they see their own change. Nothing for an anonymous user or while sharing is off."""
    seconds = int(settings.SHARED_READ_SECONDS)
    if seconds > 0 and user.is_authenticated:
        try:
            cache.set(_writer_key(user.pk), 1, timeout=seconds + 1)
        except CACHE_ERRORS as exc:  # nothing is shared while the cache is down: nothing to skip either
            log.warning("shared reads: could not mark a writer, the cache is unreachable: %s", exc)


def shared_read(user: AnyUser, view: str, compute: Callable[[], T], *, variant: str = "") -> SharedRead[T]:
    """``compute()``'s result for ``user``, shared with everyone who sees the same teams for
    ``SHARED_READ_SECONDS`` (see the module docstring). ``view`` names the view, ``variant`` what else the
    result depends on (a query string, an absolute URL). One cache round trip on a hit; on a miss, or for a
    writer, ``compute()`` runs and its result is stored. Whatever ``compute`` raises propagates and nothing
    is stored. The value must pickle."""
    seconds = int(settings.SHARED_READ_SECONDS)
    if seconds <= 0 or not user.is_authenticated:
        return SharedRead(compute(), "")
    digest = hashlib.sha256(variant.encode()).hexdigest()[:24]
    key = f"{_PREFIX}:{view}:{digest}:{team_set_key(user)}"
    try:
        found = cache.get_many([key, _writer_key(user.pk)])
    except CACHE_ERRORS as exc:
        log.warning("shared reads: computing %s for this request, the cache is unreachable: %s", view, exc)
        return SharedRead(compute(), "")
    shared = found.get(key)
    if isinstance(shared, SharedRead) and _writer_key(user.pk) not in found:
        return shared
    fresh = SharedRead(compute(), uuid.uuid4().hex)
    try:
        cache.set(key, fresh, timeout=seconds)
    except CACHE_ERRORS as exc:
        log.warning("shared reads: could not share %s, the cache is unreachable: %s", view, exc)
        return SharedRead(fresh.value, "")
    return fresh


def shared_fragment(read: SharedRead[T], name: str, render: Callable[[], str]) -> str:
    """``render()``'s text (a page's fragment made from ``read.value``), rendered once per shared computation:
    kept under ``name`` and ``read.version`` for ``SHARED_READ_SECONDS + 1`` seconds, so every reader served
    from that computation gets the same text. Renders every time for an unshared read or while the cache is
    unreachable. ``render`` must depend on ``read.value`` alone."""
    if not read.version:
        return render()
    key = f"{_PREFIX}:fragment:{name}:{read.version}"
    try:
        text = cache.get(key)
    except CACHE_ERRORS:
        return render()
    if isinstance(text, str):
        return text
    text = render()
    with contextlib.suppress(*CACHE_ERRORS):
        cache.set(key, text, timeout=int(settings.SHARED_READ_SECONDS) + 1)
    return text


def remember_writes(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware: after an unsafe request (POST, PUT, PATCH, DELETE) by a signed-in user, whatever its
    answer, ``note_write`` them. It reads the user after the view, so a token user (DRF authenticates in the
    view and sets it on the request) counts too."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if request.method not in _SAFE_METHODS:
            user = getattr(request, "user", None)
            if user is not None and user.is_authenticated:
                note_write(user)
        return response

    return middleware
