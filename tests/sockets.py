"""Websockets as a browser opens them: through Channels' ``AuthMiddlewareStack`` (the stack
``streamforge_web.asgi`` serves) with the session cookie of a real log-in, so a consumer sees the session
Django wrote, and can check it again later (``access.socket_sessions``)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from streamforge_web.routing import websocket_urlpatterns


def _session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies[settings.SESSION_COOKIE_NAME].value)


async def socket_for(user: Any, path: str) -> WebsocketCommunicator:
    """A not yet connected websocket to ``path`` carrying ``user``'s session cookie (none for an anonymous
    ``user``)."""
    headers = []
    if user is not None and user.is_authenticated:
        cookie = await sync_to_async(_session_cookie)(user)
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)), path, headers=headers)
