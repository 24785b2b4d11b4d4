"""Websocket consumers of live pipeline updates: ``/ws/pipelines/`` (every pipeline the user may see) and
``/ws/pipelines/<name>/`` (one pipeline). They only forward what ``pipelines.broadcast`` sends."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from pipelines.broadcast import ALL_PIPELINES_GROUP, pipeline_group
from pipelines.models import Pipeline
from streamforge_web.permissions import visible_teams


def _visible_names(user: Any) -> set[str]:
    return set(Pipeline.objects.filter(team__in=visible_teams(user)).values_list("name", flat=True))


class PipelineUpdatesConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Sends ``pipeline.progress``, ``pipeline.status`` and ``pipeline.alert`` messages as JSON to a
    signed-in user, for the pipelines of their teams only. An unknown or foreign pipeline closes with 4404."""

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
        self.group = pipeline_group(name) if name else ALL_PIPELINES_GROUP
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        """Leave the group joined on connect (if any)."""
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _forward(self, message: dict[str, Any]) -> None:
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
