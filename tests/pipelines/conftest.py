"""Fixtures for the pipelines tests: a team, its people, and a GitHub-events spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from access.models import Role
from tests.factories import TeamFactory, member

EVENTS = Path(__file__).resolve().parents[2] / "demo" / "data" / "github-events-2021-07-21.ndjson"


@pytest.fixture(scope="session")
def github_events() -> list[bytes]:
    """The 800 real GitHub events, one raw JSON line each (bytes, as they would sit in Kafka)."""
    return EVENTS.read_bytes().splitlines()


@pytest.fixture(scope="session")
def github_event_objects(github_events) -> list[dict]:
    return [json.loads(line) for line in github_events]


def github_spec(
    source: str = "github.events",
    pushes: str = "github.pushes",
    prs: str = "github.pull_requests",
    dlq: str = "github.events.dlq",
) -> dict:
    """Two destinations over GitHub events: pushes (EXTRACT the actor's login) and pull requests (CONSTRUCT)."""
    return {
        "source": {"topics": [source]},
        "destinations": [
            {
                "name": "pushes",
                "topic": pushes,
                "filter": "/type,==,PushEvent",
                "transform": "EXTRACT:/actor/login,login",
            },
            {
                "name": "pull-requests",
                "topic": prs,
                "filter": "/type,==,PullRequestEvent",
                "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:merged=/payload/pull_request/merged",
                "key_transform": "/repo",  # key forms read the transformed value
            },
        ],
        "dlq": {"topic": dlq},
    }


@pytest.fixture
def team():
    return TeamFactory(name="data-platform")


@pytest.fixture
def admin_user(team):
    return member(team, Role.ADMIN, username="ada")


@pytest.fixture
def viewer(team):
    return member(team, Role.VIEWER, username="vic")
