"""People of one team ("payments") in each role, shared by the people and token tests."""

from __future__ import annotations

import pytest

from access.models import Role
from tests.factories import TeamFactory, member


@pytest.fixture
def team():
    return TeamFactory(name="payments")


@pytest.fixture
def admin(team):
    return member(team, Role.ADMIN, username="ada")


@pytest.fixture
def viewer(team):
    return member(team, Role.VIEWER, username="vic")
