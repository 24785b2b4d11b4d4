"""Security review #28, finding 6 (credentials end when the person's access ends): API tokens survived a
password change, a deactivation done outside the people API came back with the same token on
reactivation, and DRF's token admin listed every full key to superusers. A token is bound to its user's
password when issued and refused once that changes, by any path; saving an inactive user deletes their
tokens; the token admin is gone."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def answers(key: str) -> int:
    return with_key(key).get("/api/users/me/").status_code


@pytest.fixture
def key(viewer) -> str:
    """The viewer's token, issued as the tokens API issues it, working."""
    client = APIClient()
    client.force_login(viewer)
    issued = client.post("/api/tokens/me/").json()["key"]
    assert answers(issued) == 200
    return str(issued)


@pytest.fixture
def root() -> Client:
    """The Django admin site, signed in as a superuser."""
    client = Client()
    client.force_login(
        User.objects.create_superuser("root", "root@example.invalid", "a long admin password 1")
    )
    return client


def _admin_change(root: Client, user: User, **fields: str) -> None:
    data = {
        "username": user.username,
        "email": user.email,
        "date_joined_0": "2026-01-01",
        "date_joined_1": "0:00",
        "is_active": "on",
    }
    data.update(fields)
    answer = root.post(f"/admin/auth/user/{user.pk}/change/", data)
    assert answer.status_code == 302, answer.content.decode()[:1000]


def test_a_token_is_refused_after_set_password_and_save(viewer, key):
    viewer.set_password("a brand new password 7")
    viewer.save()

    assert answers(key) == 401
    assert not Token.objects.filter(user=viewer).exists()


def test_a_token_is_refused_after_a_password_change_that_no_signal_sees(viewer, key):
    User.objects.filter(pk=viewer.pk).update(password=make_password("changed behind the ORM's back 3"))

    assert answers(key) == 401


def test_a_token_is_refused_after_a_password_change_in_the_admin_site(root, viewer, key):
    changed = root.post(
        f"/admin/auth/user/{viewer.pk}/password/",
        {
            "password1": "Another fine password 5",
            "password2": "Another fine password 5",
            "usable_password": "true",
        },
    )

    assert changed.status_code == 302, changed.content.decode()[:1000]
    assert answers(key) == 401


def test_a_token_is_refused_after_manage_py_changepassword(viewer, key, monkeypatch):
    from django.contrib.auth.management.commands import changepassword

    monkeypatch.setattr(changepassword.getpass, "getpass", lambda *args, **kwargs: "A typed-in password 8")
    call_command("changepassword", viewer.username, stdout=io.StringIO())

    assert answers(key) == 401
    assert not Token.objects.filter(user=viewer).exists()


def test_a_user_deactivated_and_reactivated_in_the_admin_site_does_not_get_the_token_back(root, viewer, key):
    _admin_change(root, viewer)  # active
    assert answers(key) == 200  # a save that changes neither password nor activity keeps the token

    _admin_change(root, viewer, is_active="")
    _admin_change(root, viewer, is_active="on")

    assert answers(key) == 401
    assert not Token.objects.filter(user=viewer).exists()


def test_a_user_deactivated_and_reactivated_through_the_orm_does_not_get_the_token_back(viewer, key):
    viewer.is_active = False
    viewer.save()
    viewer.is_active = True
    viewer.save()

    assert answers(key) == 401


def test_a_log_in_keeps_the_token_and_a_new_token_after_a_password_change_works(viewer, key):
    logged_in = Client().post("/login/", {"username": viewer.username, "password": PASSWORD})
    assert logged_in.status_code == 302  # which saved last_login
    assert answers(key) == 200

    viewer.set_password("a brand new password 7")
    viewer.save()
    client = APIClient()
    client.force_login(viewer)
    fresh = client.post("/api/tokens/me/").json()["key"]

    assert (answers(key), answers(fresh)) == (401, 200)


def test_the_token_admin_is_gone_and_no_admin_page_shows_a_key(root, viewer, key):
    assert root.get("/admin/authtoken/tokenproxy/").status_code == 404
    assert root.get("/admin/authtoken/token/").status_code == 404
    index = root.get("/admin/").content.decode()
    assert "tokenproxy" not in index.lower()
    assert key not in root.get(f"/admin/auth/user/{viewer.pk}/change/").content.decode()
