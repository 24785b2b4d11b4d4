"""Changes to people are audited however they are made: users, passwords, memberships, teams and API tokens,
through the admin site (the admin is the actor), management commands and code ("system"). No event ever holds
a password, a password hash or a token."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from access.models import AuditEvent, Membership, Role, Team
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def _events(*prefixes: str) -> list[tuple[str, str]]:
    return [
        (event.action, event.actor_name)
        for event in AuditEvent.objects.order_by("sequence")
        if event.action.startswith(prefixes)
    ]


@pytest.fixture
def root(client):
    admin = User.objects.create_superuser("root", "root@example.invalid", "a long admin password 1")
    client.force_login(admin)
    return admin


def test_a_user_created_changed_and_deleted_in_the_admin_site_is_audited_with_the_admin_as_actor(
    root, client
):
    added = client.post(
        "/admin/auth/user/add/",
        {
            "username": "newbie",
            "password1": "Correct horse 42!",
            "password2": "Correct horse 42!",
            "usable_password": "true",
        },
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    newbie = User.objects.get(username="newbie")
    changed = client.post(
        f"/admin/auth/user/{newbie.pk}/change/",
        {
            "username": "newbie",
            "email": "newbie@example.invalid",
            "is_active": "on",
            "is_staff": "on",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert changed.status_code == 302, changed.content.decode()[:2000]
    deleted = client.post(f"/admin/auth/user/{newbie.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert _events("user.") == [
        ("user.create", "system"),  # root, made by create_superuser outside any request
        ("user.create", "root"),
        ("user.change", "root"),
        ("user.delete", "root"),
    ]
    change = AuditEvent.objects.get(action="user.change")
    assert (change.target_type, change.target_id) == ("user", str(newbie.pk))
    assert change.details["changed"] == {
        "email": ["", "newbie@example.invalid"],
        "is_staff": [False, True],
    }


def test_a_password_change_is_audited_without_the_password(root, client):
    user = UserFactory(username="pat")
    answer = client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": "A brand new secret 77", "password2": "A brand new secret 77"},
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert _events("user.password") == [("user.password_change", "root")]
    user.refresh_from_db()
    everything = json.dumps(list(AuditEvent.objects.values()), default=str)
    assert "A brand new secret 77" not in everything
    assert user.password not in everything


def test_a_password_changed_by_the_management_command_is_audited_as_system(monkeypatch):
    UserFactory(username="pat")
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "Another secret 99 here")
    call_command("changepassword", "pat", stdout=StringIO())
    assert _events("user.password") == [("user.password_change", "system")]


def test_logging_in_is_not_a_user_change(client):
    UserFactory(username="pat")
    before = AuditEvent.objects.count()
    response = client.post("/login/", {"username": "pat", "password": PASSWORD})
    assert response.status_code == 302, "the login page did not accept the password"
    assert AuditEvent.objects.count() == before


def test_memberships_created_changed_and_deleted_are_audited():
    team = Team.objects.create(name="payments")
    user = UserFactory(username="mo")
    membership = Membership.objects.create(user=user, team=team, role=Role.VIEWER)
    membership.role = Role.ADMIN
    membership.save()
    membership.delete()
    assert _events("membership.") == [
        ("membership.create", "system"),
        ("membership.change", "system"),
        ("membership.delete", "system"),
    ]
    change = AuditEvent.objects.get(action="membership.change")
    assert change.details == {
        "user": "mo",
        "team": "payments",
        "role": "admin",
        "manages_team": False,
        "before": {"user": "mo", "team": "payments", "role": "viewer", "manages_team": False},
    }


def test_teams_created_renamed_and_deleted_are_audited():
    team = Team.objects.create(name="payments")
    team.name = "billing"
    team.save()
    team.delete()
    assert _events("team.") == [
        ("team.create", "system"),
        ("team.change", "system"),
        ("team.delete", "system"),
    ]


def test_api_tokens_created_and_deleted_are_audited_without_the_token():
    user = UserFactory(username="bot")
    token = Token.objects.create(user=user)
    key = token.key
    token.delete()
    assert _events("api_token.") == [("api_token.create", "system"), ("api_token.delete", "system")]
    assert key not in json.dumps(list(AuditEvent.objects.values()), default=str)
    assert {e.target_id for e in AuditEvent.objects.filter(action__startswith="api_token.")} == {str(user.pk)}


def test_a_token_made_by_the_drf_command_is_audited():
    UserFactory(username="bot")
    call_command("drf_create_token", "bot", stdout=StringIO())
    assert _events("api_token.") == [("api_token.create", "system")]
