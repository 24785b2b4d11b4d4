"""Websockets that end with the session that opened them (security review #28, finding 6).

A socket is authenticated once, when it connects, by the Django session Channels reads from the cookie
(``streamforge_web.asgi``), and then lives for hours. Django itself ends a session at the next HTTP request
once the user's password changed (the session holds a hash of the password hash that no longer matches), the
user was deactivated, or they signed out; a socket sends no request and would go on streaming. So every
socket re-reads its session from the session store and checks it as Django's own ``get_user`` does (the
auth hash with its key fallbacks, an active user, the same user): on every message the browser sends, before
forwarding a message when the last check is older than ``SESSION_RECHECK_SECONDS``, and every
``SESSION_RECHECK_SECONDS`` while nothing flows. A session that no longer holds closes the socket with 4401
(not signed in), which the browser's ``live.js`` treats as final.
"""

from __future__ import annotations

import asyncio
import time
from importlib import import_module
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth

#: How long a socket may outlive its session at most, in seconds.
SESSION_RECHECK_SECONDS = 5.0

#: Close code for a socket whose session ended (the code a socket that was never signed in gets).
CLOSE_SIGNED_OUT = 4401


class _SessionHolder:
    """What ``django.contrib.auth.get_user`` reads from a request: its session."""

    def __init__(self, session: Any) -> None:
        self.session = session


def session_is_current(scope: dict[str, Any]) -> bool:
    """Whether the session of a websocket ``scope`` still signs in the user the socket was opened for: it
    still exists in the session store, its auth hash matches the user's password as it is now, and the user
    is active (Django's ``get_user``, which also flushes a session whose hash no longer matches). False for
    a scope without a session or a signed-in user. Reads the database (call it off the event loop)."""
    user, session = scope.get("user"), scope.get("session")
    if user is None or not user.is_authenticated or session is None or not session.session_key:
        return False
    fresh = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session.session_key)
    current = auth.get_user(_SessionHolder(fresh))  # type: ignore[arg-type]  # reads .session only
    return bool(current.is_authenticated and current.pk == user.pk)


class SessionBoundConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """A JSON websocket consumer closed with 4401 when its session ends (see the module docstring).
    Subclasses call ``watch_session`` once accepted, ``session_holds`` before forwarding a message, and
    ``stop_watching_session`` on disconnect. Messages from the browser are not read (these sockets only
    push); each one re-checks the session."""

    _session_checked = 0.0
    _session_ended = False
    _session_watch: asyncio.Task[None] | None = None

    async def watch_session(self) -> None:
        """Start the periodic check, from now."""
        self._session_checked = time.monotonic()
        self._session_watch = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while not self._session_ended:
            await asyncio.sleep(SESSION_RECHECK_SECONDS)
            await self.session_holds(force=True)

    async def session_holds(self, *, force: bool = False) -> bool:
        """True while the session holds; re-checked when ``force`` or the last check is older than
        ``SESSION_RECHECK_SECONDS``. On the first failure the socket is closed with ``CLOSE_SIGNED_OUT``."""
        if self._session_ended:
            return False
        if not force and time.monotonic() - self._session_checked < SESSION_RECHECK_SECONDS:
            return True
        holds = bool(await database_sync_to_async(session_is_current)(self.scope))
        self._session_checked = time.monotonic()
        if not holds and not self._session_ended:
            self._session_ended = True
            await self.close(code=CLOSE_SIGNED_OUT)
        return holds

    def stop_watching_session(self) -> None:
        """Cancel the periodic check (on disconnect)."""
        self._session_ended = True
        if self._session_watch is not None and self._session_watch is not asyncio.current_task():
            self._session_watch.cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **_: Any) -> None:
        """A message from the browser: nothing is read from it (it is not even decoded), but the session is
        checked again."""
        await self.session_holds(force=True)

    async def disconnect(self, code: int) -> None:
        """Stop the periodic check; subclasses leave their groups and call this too."""
        self.stop_watching_session()
