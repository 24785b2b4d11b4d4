"""Websocket consumers of live pipeline updates: ``/ws/pipelines/`` (every pipeline the user may see) and
``/ws/pipelines/<name>/`` (one pipeline). They only forward what ``pipelines.broadcast`` sends."""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from access.permissions import visible_teams
from pipelines.broadcast import ALL_PIPELINES_GROUP, pipeline_group
from pipelines.models import Pipeline

log = logging.getLogger(__name__)

#: A message for a pipeline this socket does not know re-reads the user's pipelines at most this often, so
#: a pipeline created after the overview opened shows up, without a query per foreign message.
VISIBILITY_REFRESH_SECONDS = 10.0


def _visible_names(user: Any) -> set[str]:
    return set(Pipeline.objects.filter(team__in=visible_teams(user)).values_list("name", flat=True))


class PipelineUpdatesConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
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
        self.visible: set[str] = await database_sync_to_async(_visible_names)(user)
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

    async def disconnect(self, code: int) -> None:
        """Leave the group joined on connect (if any)."""
        if hasattr(self, "group"):
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception as exc:  # the group membership expires by itself in the layer
                log.warning("websocket could not leave %s: %s", self.group, exc)

    async def _forward(self, message: dict[str, Any]) -> None:
        name = message.get("pipeline")
        if (
            name not in self.visible
            and self.group == ALL_PIPELINES_GROUP
            and time.monotonic() - self.visible_checked > VISIBILITY_REFRESH_SECONDS
        ):
            self.visible = await database_sync_to_async(_visible_names)(self.scope["user"])
            self.visible_checked = time.monotonic()
        if name in self.visible:
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
