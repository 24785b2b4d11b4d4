"""``/ws/dlq/``: live DLQ console updates (arrivals per failure group, status changes, bulk progress) for
the teams the signed-in user may see. It only forwards what ``dlq.broadcast`` sends.

The user's teams may change while the console is open: before forwarding, the socket reads them again
whenever its last look is older than ``ACCESS_RECHECK_SECONDS``, leaves the groups of teams it lost (and
drops their messages), joins new ones, and closes with 4403 when the user was deactivated. The session that
opened the socket is checked too (``access.socket_sessions``): a password change, a deactivation or a
sign-out closes the socket with 4401 within ``SESSION_RECHECK_SECONDS``, traffic or not."""

from __future__ import annotations

import time
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from access.permissions import visible_teams
from access.socket_sessions import SessionBoundConsumer
from dlq.broadcast import team_group

#: How stale a socket's idea of its user's teams can get (see ``pipelines.consumers``).
ACCESS_RECHECK_SECONDS = 5.0

#: Close code for a socket whose user lost access while it was open.
CLOSE_ACCESS_LOST = 4403


def _team_ids(user: Any) -> set[int] | None:
    """The ids of the teams the user may see now; None when the user was deactivated or deleted."""
    if not get_user_model().objects.filter(pk=user.pk, is_active=True).exists():
        return None
    return set(visible_teams(user).values_list("pk", flat=True))


class DlqUpdatesConsumer(SessionBoundConsumer):
    """Joins one group per visible team; an anonymous socket is closed with 4401 and gets nothing."""

    async def connect(self) -> None:
        """Check the user, then join their teams' groups."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.team_ids: set[int] = await database_sync_to_async(_team_ids)(user) or set()
        self.teams_checked = time.monotonic()
        self.groups_joined = [team_group(pk) for pk in sorted(self.team_ids)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.watch_session()

    async def disconnect(self, code: int) -> None:
        """Leave the groups joined on connect, stop checking the session."""
        await super().disconnect(code)
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _recheck(self) -> bool:
        """Re-read the user's teams and follow them; False (socket closed) when the user lost all access."""
        team_ids = await database_sync_to_async(_team_ids)(self.scope["user"])
        if team_ids is None:
            await self.close(code=CLOSE_ACCESS_LOST)
            return False
        for pk in self.team_ids - team_ids:
            await self.channel_layer.group_discard(team_group(pk), self.channel_name)
        for pk in team_ids - self.team_ids:
            await self.channel_layer.group_add(team_group(pk), self.channel_name)
        self.team_ids, self.teams_checked = team_ids, time.monotonic()
        self.groups_joined = [team_group(pk) for pk in sorted(team_ids)]
        return True

    async def _forward(self, message: dict[str, Any]) -> None:
        if not await self.session_holds():
            return
        if time.monotonic() - self.teams_checked >= ACCESS_RECHECK_SECONDS and not await self._recheck():
            return
        payload = dict(message)
        if payload.pop("team_id", None) in self.team_ids:
            await self.send_json(payload)

    async def dlq_arrived(self, message: dict[str, Any]) -> None:
        """New dead letters (``broadcast.ArrivalUpdate``)."""
        await self._forward(message)

    async def dlq_message(self, message: dict[str, Any]) -> None:
        """A dead letter changed status (``broadcast.MessageUpdate``)."""
        await self._forward(message)

    async def dlq_bulk(self, message: dict[str, Any]) -> None:
        """A bulk action's progress (``broadcast.BulkUpdate``)."""
        await self._forward(message)
