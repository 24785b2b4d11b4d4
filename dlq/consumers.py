"""``/ws/dlq/``: live DLQ console updates (arrivals per failure group, status changes, bulk progress) for
the teams the signed-in user may see. It only forwards what ``dlq.broadcast`` sends."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from access.permissions import visible_teams
from dlq.broadcast import team_group


def _team_ids(user: Any) -> list[int]:
    return list(visible_teams(user).values_list("pk", flat=True))


class DlqUpdatesConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Joins one group per visible team; an anonymous socket is closed with 4401 and gets nothing."""

    async def connect(self) -> None:
        """Check the user, then join their teams' groups."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.groups_joined = [team_group(pk) for pk in await database_sync_to_async(_team_ids)(user)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        """Leave the groups joined on connect."""
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def dlq_arrived(self, message: dict[str, Any]) -> None:
        """New dead letters (``broadcast.ArrivalUpdate``)."""
        await self.send_json(message)

    async def dlq_message(self, message: dict[str, Any]) -> None:
        """A dead letter changed status (``broadcast.MessageUpdate``)."""
        await self.send_json(message)

    async def dlq_bulk(self, message: dict[str, Any]) -> None:
        """A bulk action's progress (``broadcast.BulkUpdate``)."""
        await self.send_json(message)
