"""Live pipeline updates over websockets, through the real Redis channel layer."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from access.models import Role
from pipelines import broadcast
from pipelines.services import create_pipeline
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec
from tests.sockets import socket_for

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


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


async def _connect(user, path):
    communicator = await socket_for(user, path)
    connected, code = await communicator.connect()
    return communicator, connected, code


def test_a_pipelines_page_receives_the_status_of_its_pipeline(admin_user, viewer, team):
    create_pipeline(actor=admin_user, name="live", team=team, spec=github_spec())

    async def scenario():
        communicator, connected, _ = await _connect(viewer, "/ws/pipelines/live/")
        assert connected
        await communicator.receive_nothing(0.2)
        await sync_to_async(broadcast.status)(_status("live"))
        message = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return message

    message = async_to_sync(scenario)()
    assert (message["type"], message["pipeline"], message["state"]) == ("pipeline.status", "live", "running")


def test_another_teams_user_cannot_follow_a_pipeline(admin_user, team):
    create_pipeline(actor=admin_user, name="live", team=team, spec=github_spec())
    stranger = member(TeamFactory(name="other-team"), Role.OPERATOR, username="eve")

    async def scenario():
        _communicator, connected, code = await _connect(stranger, "/ws/pipelines/live/")
        return connected, code

    assert async_to_sync(scenario)() == (False, 4404)


def test_an_anonymous_socket_is_closed_before_joining_anything(admin_user, team):
    from django.contrib.auth.models import AnonymousUser

    create_pipeline(actor=admin_user, name="live", team=team, spec=github_spec())

    async def scenario():
        results = []
        for path in ("/ws/pipelines/", "/ws/pipelines/live/"):
            _communicator, connected, code = await _connect(AnonymousUser(), path)
            results.append((connected, code))
        return results

    assert async_to_sync(scenario)() == [(False, 4401), (False, 4401)]


def test_the_list_socket_forwards_only_the_users_teams_pipelines(admin_user, team):
    create_pipeline(actor=admin_user, name="mine", team=team, spec=github_spec())
    other_team = TeamFactory(name="other-team")
    create_pipeline(actor=admin_user, name="theirs", team=other_team, spec=github_spec(dlq="theirs.dlq"))
    operator = member(team, Role.OPERATOR, username="oti")

    async def scenario():
        communicator, connected, _ = await _connect(operator, "/ws/pipelines/")
        assert connected
        await communicator.receive_nothing(0.2)
        await sync_to_async(broadcast.status)(_status("theirs"))
        await sync_to_async(broadcast.status)(_status("mine"))
        message = await communicator.receive_json_from(timeout=5)
        nothing_else = await communicator.receive_nothing(0.3)
        await communicator.disconnect()
        return message, nothing_else

    message, nothing_else = async_to_sync(scenario)()
    assert message["pipeline"] == "mine"
    assert nothing_else


def test_a_socket_is_refused_cleanly_when_redis_is_down(admin_user, viewer, team, settings, private_redis):
    create_pipeline(actor=admin_user, name="live", team=team, spec=github_spec())
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [private_redis.url]},
        }
    }
    private_redis.stop()  # the layer's Redis is gone: joining the group fails

    async def scenario():
        from channels.layers import channel_layers

        channel_layers.backends.clear()  # pick up the test's layer settings
        _communicator, connected, code = await _connect(viewer, "/ws/pipelines/live/")
        return connected, code

    try:
        assert async_to_sync(scenario)() == (False, 1011)
    finally:
        from channels.layers import channel_layers

        channel_layers.backends.clear()


def test_a_socket_following_a_pipeline_is_closed_4403_once_its_user_leaves_the_team(
    admin_user, team, monkeypatch
):
    from access.models import Membership
    from pipelines import consumers

    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0, raising=False)
    create_pipeline(actor=admin_user, name="live", team=team, spec=github_spec())
    leaver = member(team, Role.OPERATOR, username="lee")

    async def scenario():
        communicator, connected, _ = await _connect(leaver, "/ws/pipelines/live/")
        assert connected
        await communicator.receive_nothing(0.2)
        await sync_to_async(Membership.objects.filter(user=leaver).delete)()
        await sync_to_async(broadcast.status)(_status("live"))
        output = await communicator.receive_output(timeout=5)
        await communicator.wait()
        return output

    output = async_to_sync(scenario)()
    assert output == {"type": "websocket.close", "code": 4403}


def test_the_list_socket_stops_forwarding_a_teams_pipelines_once_its_user_leaves_that_team(
    admin_user, team, monkeypatch
):
    from access.models import Membership
    from pipelines import consumers

    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0, raising=False)
    create_pipeline(actor=admin_user, name="mine", team=team, spec=github_spec())
    other_team = TeamFactory(name="other-team")
    create_pipeline(actor=admin_user, name="kept", team=other_team, spec=github_spec(dlq="kept.dlq"))
    leaver = member(team, Role.OPERATOR, username="lee")
    Membership.objects.create(user=leaver, team=other_team, role=Role.VIEWER)

    async def scenario():
        communicator, connected, _ = await _connect(leaver, "/ws/pipelines/")
        assert connected
        await communicator.receive_nothing(0.2)
        await sync_to_async(Membership.objects.filter(user=leaver, team=team).delete)()
        await sync_to_async(broadcast.status)(_status("mine"))
        await sync_to_async(broadcast.status)(_status("kept"))
        message = await communicator.receive_json_from(timeout=5)
        nothing_else = await communicator.receive_nothing(0.3)
        await communicator.disconnect()
        return message, nothing_else

    message, nothing_else = async_to_sync(scenario)()
    assert message["pipeline"] == "kept"
    assert nothing_else
