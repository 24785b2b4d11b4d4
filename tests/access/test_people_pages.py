"""The people pages: ``/people/`` for admins and team admins (with the controls each may use), ``/account/``
for everyone (the token's prefix, never its key); the header links to them."""

from __future__ import annotations

import pytest

from access.models import Role
from tests.factories import MembershipFactory, TeamFactory, UserFactory, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return TeamFactory(name="payments")


def test_the_people_page_is_refused_to_operators_and_has_no_nav_link_for_them(team, client):
    client.force_login(member(team, Role.OPERATOR, username="olga"))
    assert client.get("/people/").status_code == 403
    assert 'data-testid="nav-people"' not in client.get("/account/").content.decode()


def test_a_team_admin_sees_their_team_with_controls_but_none_on_admins_or_themselves(team, client):
    member(team, Role.ADMIN, username="ada")
    member(team, Role.VIEWER, username="vic")
    member(TeamFactory(name="search"), Role.VIEWER, username="sam")
    tess = UserFactory(username="tess")
    MembershipFactory(user=tess, team=team, role=Role.OPERATOR, manages_team=True)
    client.force_login(tess)
    page = client.get("/people/").content.decode()
    assert 'data-testid="nav-people"' in page
    assert 'data-testid="add-member-payments"' in page
    assert 'data-testid="remove-payments-vic"' in page
    assert 'data-testid="remove-payments-ada"' not in page
    assert 'data-testid="remove-payments-tess"' not in page
    assert 'data-testid="team-search"' not in page
    assert "sam" not in page  # another team's people are not listed, not even as add-member suggestions
    assert 'value="admin"' not in page  # cannot grant it
    assert 'data-testid="create-user"' not in page


def test_an_admin_sees_every_team_user_and_the_create_forms(team, client):
    client.force_login(member(team, Role.ADMIN, username="ada"))
    member(TeamFactory(name="search"), Role.VIEWER, username="sam")
    page = client.get("/people/").content.decode()
    for testid in ("team-search", "create-user", "create-team", "user-sam", "deactivate-sam"):
        assert f'data-testid="{testid}"' in page
    assert 'data-testid="deactivate-ada"' not in page
