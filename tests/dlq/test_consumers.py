"""The DLQ console's websocket, through the real Redis channel layer: only the user's current teams."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from access.models import Membership, Role
from dlq import broadcast, consumers
from tests.factories import TeamFactory, member
from tests.sockets import socket_for

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _changed(team_id: int, dead_letter_id: int) -> None:
    broadcast.message_changed(
        team_id=team_id, dead_letter_id=dead_letter_id, status="skipped", action="skip", actor="olga"
    )


async def _connect(user):
    communicator = await socket_for(user, "/ws/dlq/")
    connected, _ = await communicator.connect()
    assert connected
    await communicator.receive_nothing(0.2)
    return communicator


def test_the_dlq_socket_stops_forwarding_a_teams_messages_once_its_user_leaves_that_team(monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0, raising=False)
    payments, platform = TeamFactory(name="payments"), TeamFactory(name="platform")
    leaver = member(payments, Role.OPERATOR, username="lee")
    Membership.objects.create(user=leaver, team=platform, role=Role.VIEWER)

    async def scenario():
        communicator = await _connect(leaver)
        await sync_to_async(Membership.objects.filter(user=leaver, team=payments).delete)()
        await sync_to_async(_changed)(payments.pk, 1)
        await sync_to_async(_changed)(platform.pk, 2)
        message = await communicator.receive_json_from(timeout=5)
        nothing_else = await communicator.receive_nothing(0.3)
        await communicator.disconnect()
        return message, nothing_else

    message, nothing_else = async_to_sync(scenario)()
    assert message == {"type": "dlq.message", "id": 2, "status": "skipped", "action": "skip", "actor": "olga"}
    assert nothing_else


def test_the_dlq_socket_of_a_deactivated_user_is_closed_4403(monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0, raising=False)
    team = TeamFactory(name="payments")
    leaver = member(team, Role.OPERATOR, username="lee")

    async def scenario():
        communicator = await _connect(leaver)
        leaver.is_active = False
        await sync_to_async(leaver.save)()
        await sync_to_async(_changed)(team.pk, 1)
        output = await communicator.receive_output(timeout=5)
        await communicator.wait()
        return output

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4403}
