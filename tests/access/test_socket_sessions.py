"""Security review #28, finding 6 (credentials end when the person's access ends): an open websocket kept
streaming after its user's password changed. Sockets opened through the real session middleware, with a
real log-in's cookie, over the real Redis channel layer: after a password change or a deactivation the
socket is closed with 4401, when the browser next sends anything, before any further update is
forwarded, and within ``SESSION_RECHECK_SECONDS`` when nothing flows at all."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from access import socket_sessions
from access.models import Role
from dlq import broadcast as dlq_broadcast
from pipelines import broadcast
from pipelines.services import create_pipeline
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec
from tests.sockets import socket_for

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def team():
    return TeamFactory(name="data-platform")


@pytest.fixture
def operator(team):
    return member(team, Role.OPERATOR, username="olga")


def _change_password(user: Any) -> None:
    user.set_password("a brand new password 7")
    user.save()


def _deactivate(user: Any) -> None:
    user.is_active = False
    user.save()


def _status(name: str) -> broadcast.StatusUpdate:
    return {
        "type": "pipeline.status",
        "pipeline": name,
        "state": "running",
        "desired_state": "running",
        "reason": "",
        "run_id": None,
        "attempt": 1,
        "actions": ["stop", "restart"],
        "revision": 1,
        "running_revision": 1,
    }


async def _closed_with(communicator: Any, timeout: float) -> int | None:
    output = await communicator.receive_output(timeout=timeout)
    return output.get("code") if output["type"] == "websocket.close" else None


def test_a_quiet_socket_is_closed_within_the_recheck_interval_after_the_password_changes(
    operator, team, monkeypatch
):
    monkeypatch.setattr(socket_sessions, "SESSION_RECHECK_SECONDS", 0.5)

    async def scenario():
        communicator = await socket_for(operator, "/ws/pipelines/")
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_nothing(1.0)  # checked twice, still signed in: nothing happens
        await sync_to_async(_change_password)(operator)
        return await _closed_with(communicator, timeout=5)

    assert async_to_sync(scenario)() == socket_sessions.CLOSE_SIGNED_OUT


def test_a_message_from_the_browser_after_the_password_changes_closes_the_socket_at_once(operator):
    async def scenario():
        communicator = await socket_for(operator, "/ws/dlq/")
        connected, _ = await communicator.connect()
        assert connected
        await communicator.send_to(text_data='{"ping": 1}')
        await communicator.receive_nothing(0.3)  # still signed in: nothing happens
        await sync_to_async(_change_password)(operator)
        await communicator.send_to(text_data='{"ping": 2}')
        return await _closed_with(communicator, timeout=2)

    assert async_to_sync(scenario)() == socket_sessions.CLOSE_SIGNED_OUT


@pytest.mark.parametrize("change", [_change_password, _deactivate])
def test_no_update_is_forwarded_after_the_password_changes_or_the_user_is_deactivated(
    operator, team, monkeypatch, change
):
    create_pipeline(
        actor=member(team, Role.ADMIN, username="ada"), name="live", team=team, spec=github_spec()
    )
    monkeypatch.setattr(socket_sessions, "SESSION_RECHECK_SECONDS", 0.0)

    async def scenario():
        pipelines = await socket_for(operator, "/ws/pipelines/live/")
        dlq = await socket_for(operator, "/ws/dlq/")
        assert (await pipelines.connect())[0]
        assert (await dlq.connect())[0]
        await sync_to_async(broadcast.status)(_status("live"))
        before = await pipelines.receive_json_from(timeout=5)
        await sync_to_async(change)(operator)
        await sync_to_async(broadcast.status)(_status("live"))
        await sync_to_async(dlq_broadcast.message_changed)(
            team_id=team.pk, dead_letter_id=1, status="skipped", action="skip", actor="olga"
        )
        return before, await _closed_with(pipelines, timeout=5), await _closed_with(dlq, timeout=5)

    before, pipelines_closed, dlq_closed = async_to_sync(scenario)()
    assert before["pipeline"] == "live"
    assert pipelines_closed == dlq_closed == socket_sessions.CLOSE_SIGNED_OUT
