"""Managing people through the REST API (``/api/users/``, ``/api/teams/``, ``/api/teams/{name}/members/``):
admins may do everything, a team admin manages only their own team's non-admin members up to approver,
operators and viewers may only look, other teams are invisible (404), bad input is a 400 naming the field, and
every change lands in the audit log."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.test import APIClient

from access.models import AuditEvent, Membership, Role, Team
from tests.factories import PASSWORD, MembershipFactory, TeamFactory, UserFactory, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_team():
    return TeamFactory(name="search")


@pytest.fixture
def team_admin(team):
    user = UserFactory(username="tess")
    MembershipFactory(user=user, team=team, role=Role.OPERATOR, manages_team=True)
    return user


@pytest.fixture
def operator(team):
    return member(team, Role.OPERATOR, username="olga")


def logs_in(client, username: str, password: str) -> bool:
    """Whether the log-in form accepts these credentials (it redirects on success)."""
    return bool(client.post("/login/", {"username": username, "password": password}).status_code == 302)


def post(client: APIClient, url: str, body: dict[str, object]) -> Response:
    return client.post(url, body, format="json")


def patch(client: APIClient, url: str, body: dict[str, object]) -> Response:
    return client.patch(url, body, format="json")


def api(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def _actions(prefix: str) -> list[tuple[str, str]]:
    return [
        (e.action, e.actor_name)
        for e in AuditEvent.objects.order_by("sequence")
        if e.action.startswith(prefix)
    ]


# ---------------------------------------------------------------------------------------------- admins


def test_an_admin_creates_a_user_who_can_log_in_and_the_password_is_not_in_the_audit_log(admin, client):
    answer = api(admin).post(
        "/api/users/",
        {"username": "newbie", "password": "a long fresh secret 42", "email": "n@example.invalid"},
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["username"] == "newbie"
    assert "password" not in answer.json()
    assert logs_in(client, "newbie", "a long fresh secret 42")
    event = AuditEvent.objects.get(action="user.create", details__username="newbie")
    assert event.actor_name == "ada"
    assert "a long fresh secret 42" not in str(event.details)
    assert "password" not in event.details


def test_an_admin_lists_users_and_reads_one(admin, operator):
    answer = api(admin).get("/api/users/")
    assert answer.status_code == 200
    names = [row["username"] for row in answer.json()["results"]]
    assert names == ["ada", "olga"]
    olga = api(admin).get("/api/users/olga/").json()
    assert olga["memberships"] == [{"team": "payments", "role": "operator", "manages_team": False}]
    assert olga["is_admin"] is False


def test_an_admin_creates_and_renames_a_team(admin):
    created = api(admin).post("/api/teams/", {"name": "billing", "description": "invoices"})
    assert created.status_code == 201, created.content
    renamed = patch(api(admin), "/api/teams/billing/", {"name": "invoicing"})
    assert renamed.status_code == 200, renamed.content
    assert Team.objects.filter(name="invoicing", description="invoices").exists()
    assert _actions("team.") == [("team.create", "system"), ("team.create", "ada"), ("team.change", "ada")]


def test_an_admin_grants_the_admin_role_and_makes_a_team_admin(admin, operator):
    answer = patch(api(admin), "/api/teams/payments/members/olga/", {"role": "admin", "manages_team": True})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"username": "olga", "is_active": True, "role": "admin", "manages_team": True}
    change = AuditEvent.objects.get(action="membership.change")
    assert change.actor_name == "ada"
    assert change.details["before"]["role"] == "operator"
    assert change.details["manages_team"] is True


def test_an_admin_deactivates_a_user_who_then_cannot_log_in_nor_use_their_token(admin, operator, client):
    token = Token.objects.create(user=operator)
    answer = patch(api(admin), "/api/users/olga/", {"is_active": False})
    assert answer.status_code == 200, answer.content
    assert answer.json()["is_active"] is False
    assert User.objects.filter(username="olga").exists()  # never deleted
    assert not Token.objects.filter(user=operator).exists()
    assert not logs_in(client, "olga", PASSWORD)
    refused = APIClient().get("/api/users/me/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert refused.status_code == 401
    assert _actions("user.change") == [("user.change", "ada")]
    assert _actions("api_token.delete") == [("api_token.delete", "ada")]
    assert token.key not in str(list(AuditEvent.objects.values_list("details", flat=True)))


def test_a_deactivated_users_session_no_longer_works(admin, operator, client):
    client.force_login(operator)
    assert client.get("/account/").status_code == 200
    patch(api(admin), "/api/users/olga/", {"is_active": False})
    assert client.get("/account/").status_code == 302  # back to the log-in page


def test_an_admin_cannot_deactivate_themselves(admin):
    answer = patch(api(admin), "/api/users/ada/", {"is_active": False})
    assert answer.status_code == 400
    assert "is_active" in answer.json()


# ---------------------------------------------------------------------------------------------- team admins


def test_a_team_admin_adds_a_member_changes_their_role_and_removes_them(team_admin):
    UserFactory(username="newbie")
    client = api(team_admin)
    added = post(client, "/api/teams/payments/members/", {"username": "newbie", "role": "operator"})
    assert added.status_code == 201, added.content
    changed = patch(client, "/api/teams/payments/members/newbie/", {"role": "approver"})
    assert changed.status_code == 200, changed.content
    flagged = patch(client, "/api/teams/payments/members/newbie/", {"manages_team": True})
    assert flagged.json()["manages_team"] is True
    removed = client.delete("/api/teams/payments/members/newbie/")
    assert removed.status_code == 204
    assert not Membership.objects.filter(user__username="newbie").exists()
    assert [a for a in _actions("membership.") if a[1] == "tess"] == [
        ("membership.create", "tess"),
        ("membership.change", "tess"),
        ("membership.change", "tess"),
        ("membership.delete", "tess"),
    ]


def test_a_team_admin_cannot_grant_the_admin_role(team_admin, operator):
    client = api(team_admin)
    UserFactory(username="newbie")
    members = "/api/teams/payments/members/"
    assert post(client, members, {"username": "newbie", "role": "admin"}).status_code == 403
    assert patch(client, f"{members}olga/", {"role": "admin"}).status_code == 403
    assert Membership.objects.get(user=operator).role == Role.OPERATOR


def test_a_team_admin_cannot_touch_an_admins_membership_nor_their_own(team_admin, admin):
    client = api(team_admin)
    assert patch(client, "/api/teams/payments/members/ada/", {"role": "viewer"}).status_code == 403
    assert client.delete("/api/teams/payments/members/ada/").status_code == 403
    assert patch(client, "/api/teams/payments/members/tess/", {"role": "approver"}).status_code == 403
    assert Membership.objects.get(user=admin).role == Role.ADMIN


def test_a_team_admin_cannot_manage_another_team_nor_users_nor_teams(team_admin, other_team):
    member(other_team, Role.VIEWER, username="sam")
    UserFactory(username="newbie")
    client = api(team_admin)
    assert client.get("/api/teams/search/members/").status_code == 404
    assert post(client, "/api/teams/search/members/", {"username": "newbie"}).status_code == 404
    assert client.delete("/api/teams/search/members/sam/").status_code == 404
    assert post(client, "/api/users/", {"username": "x"}).status_code == 403
    assert post(client, "/api/teams/", {"name": "mine"}).status_code == 403
    assert patch(client, "/api/teams/payments/", {"description": "x"}).status_code == 403


# ---------------------------------------------------------------------------------------------- operators and viewers


@pytest.mark.parametrize("who", ["operator", "viewer"])
def test_operators_and_viewers_may_look_but_not_change(who, request, admin, other_team):
    user = request.getfixturevalue(who)
    UserFactory(username="newbie")
    client = api(user)
    assert client.get("/api/teams/").json()["results"][0]["name"] == "payments"
    assert [m["username"] for m in client.get("/api/teams/payments/members/").json()] == [
        "ada",
        user.username,
    ]
    assert client.get("/api/users/me/").json()["username"] == user.username
    assert client.get("/api/users/").status_code == 403
    assert client.get("/api/users/ada/").status_code == 403
    assert patch(client, "/api/users/ada/", {"is_active": False}).status_code == 403
    assert post(client, "/api/teams/payments/members/", {"username": "newbie"}).status_code == 403
    assert patch(client, "/api/teams/payments/members/ada/", {"role": "viewer"}).status_code == 403
    assert client.delete("/api/teams/payments/members/ada/").status_code == 403
    assert client.get("/api/teams/search/").status_code == 404
    assert client.get("/api/teams/search/members/").status_code == 404
    assert not AuditEvent.objects.filter(actor_name=user.username).exists()


def test_anonymous_callers_are_refused():
    assert APIClient().get("/api/users/me/").status_code in (401, 403)
    assert APIClient().get("/api/teams/").status_code in (401, 403)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/users/", {"username": "bad name!"}, "username"),
        ("/api/users/", {"username": "ada"}, "username"),
        ("/api/users/", {"username": "me"}, "username"),
        ("/api/users/", {"username": "x1", "password": "123"}, "password"),
        ("/api/users/", {"username": "x2", "email": "not an email"}, "email"),
        ("/api/users/", {}, "username"),
        ("/api/teams/", {"name": "Not A Slug"}, "name"),
        ("/api/teams/", {"name": "payments"}, "name"),
        ("/api/teams/", {"description": "no name"}, "name"),
        ("/api/teams/payments/members/", {"username": "nobody"}, "username"),
        ("/api/teams/payments/members/", {"username": "ada"}, "username"),
        ("/api/teams/payments/members/", {"username": "olga", "role": "boss"}, "role"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(admin, url, body, field):
    UserFactory(username="olga")
    answer = post(api(admin), url, body)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()


def test_a_bad_role_or_flag_in_a_change_is_a_400(admin, operator):
    client = api(admin)
    assert "role" in patch(client, "/api/teams/payments/members/olga/", {"role": 7}).json()
    bad_flag = patch(client, "/api/users/olga/", {"is_active": "perhaps"})
    assert bad_flag.status_code == 400
    assert "is_active" in bad_flag.json()


def test_a_deactivated_user_cannot_be_added_to_a_team(admin, other_team):
    UserFactory(username="gone", is_active=False)
    answer = post(api(admin), "/api/teams/payments/members/", {"username": "gone"})
    assert answer.status_code == 400
    assert "username" in answer.json()


def test_unknown_users_and_members_are_404(admin):
    client = api(admin)
    assert client.get("/api/users/nobody/").status_code == 404
    assert patch(client, "/api/teams/payments/members/nobody/", {"role": "viewer"}).status_code == 404
    assert client.delete("/api/tokens/nobody/").status_code == 404
