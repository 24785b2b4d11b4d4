"""Websocket consumers of live pipeline updates: ``/ws/pipelines/`` (every pipeline the user may see) and
``/ws/pipelines/<name>/`` (one pipeline). They only forward what ``pipelines.broadcast`` sends.

A socket lives for hours, and the user's teams may change meanwhile: before forwarding, each socket reads
again which pipelines its user may see whenever its last look is older than ``ACCESS_RECHECK_SECONDS``. A
user who lost the pipeline a socket follows, or was deactivated, has the socket closed with 4403. The
session that opened the socket is checked too (``access.socket_sessions``): a password change, a
deactivation or a sign-out closes the socket with 4401 within ``SESSION_RECHECK_SECONDS``, traffic or not."""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from access.permissions import visible_teams
from access.socket_sessions import SessionBoundConsumer
from pipelines.broadcast import ALL_PIPELINES_GROUP, pipeline_group
from pipelines.models import Pipeline

log = logging.getLogger(__name__)

#: How stale a socket's idea of what its user may see can get: a push re-reads it when older (two small
#: queries), so a removed member stops receiving within this time, without queries on every batch's
#: progress message of every pipeline on every open socket.
ACCESS_RECHECK_SECONDS = 5.0

#: Close code for a socket whose user lost access while it was open (4401 is "not signed in").
CLOSE_ACCESS_LOST = 4403


def _visible_names(user: Any) -> set[str] | None:
    """The names of the pipelines the user may see now; None when the user was deactivated or deleted."""
    if not get_user_model().objects.filter(pk=user.pk, is_active=True).exists():
        return None
    return set(Pipeline.objects.filter(team__in=visible_teams(user)).values_list("name", flat=True))


class PipelineUpdatesConsumer(SessionBoundConsumer):
    """Sends ``pipeline.progress``, ``pipeline.status`` and ``pipeline.alert`` messages as JSON to a
    signed-in user, for the pipelines of their teams only. An anonymous socket closes with 4401, an unknown or
    foreign pipeline with 4404; when the channel layer (Redis) cannot be reached the socket closes with 1011
    and the browser reconnects with backoff."""

    async def connect(self) -> None:
        """Join the list group or one pipeline's group after the visibility check."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.visible: set[str] = await database_sync_to_async(_visible_names)(user) or set()
        name = self.scope["url_route"]["kwargs"].get("name")
        if name is not None and name not in self.visible:
            await self.close(code=4404)
            return
        self.visible_checked = time.monotonic()
        group = pipeline_group(name) if name else ALL_PIPELINES_GROUP
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except Exception as exc:  # Redis blipped: refuse this socket cleanly; the client retries
            log.warning("websocket could not join %s: %s", group, exc)
            await self.close(code=1011)
            return
        self.group = group
        await self.accept()
        await self.watch_session()

    async def disconnect(self, code: int) -> None:
        """Leave the group joined on connect (if any), stop checking the session."""
        await super().disconnect(code)
        if hasattr(self, "group"):
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception as exc:  # the group membership expires by itself in the layer
                log.warning("websocket could not leave %s: %s", self.group, exc)

    async def _forward(self, message: dict[str, Any]) -> None:
        if not await self.session_holds():
            return
        if time.monotonic() - self.visible_checked >= ACCESS_RECHECK_SECONDS:
            visible = await database_sync_to_async(_visible_names)(self.scope["user"])
            followed = self.scope["url_route"]["kwargs"].get("name")
            if visible is None or (followed is not None and followed not in visible):
                await self.close(code=CLOSE_ACCESS_LOST)
                return
            self.visible, self.visible_checked = visible, time.monotonic()
        if message.get("pipeline") in self.visible:
            await self.send_json(message)

    async def pipeline_progress(self, message: dict[str, Any]) -> None:
        """A batch's progress (``broadcast.ProgressUpdate``)."""
        await self._forward(message)

    async def pipeline_status(self, message: dict[str, Any]) -> None:
        """A state change (``broadcast.StatusUpdate``)."""
        await self._forward(message)

    async def pipeline_alert(self, message: dict[str, Any]) -> None:
        """An alert that started or stopped firing (``broadcast.AlertUpdate``)."""
        await self._forward(message)
