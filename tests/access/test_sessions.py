"""Browser sessions: how long they last, and that a password change ends the other ones."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def test_a_log_in_session_lasts_twelve_hours_by_default_not_two_weeks():
    UserFactory(username="alice")
    client = Client()
    assert client.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302
    assert client.session.get_expiry_age() == 12 * 3600
    assert client.cookies["sessionid"]["max-age"] == 12 * 3600


def test_a_password_change_ends_the_users_other_sessions():
    bob = UserFactory(username="bob")
    laptop, phone = Client(), Client()
    for device in (laptop, phone):
        assert device.post("/login/", {"username": "bob", "password": PASSWORD}).status_code == 302
        assert device.get("/").status_code == 200

    bob.set_password("a-new-and-long-passphrase-42")
    bob.save()

    # every session signed with the old password hash is over, in pages and in the session-authenticated API
    for device in (laptop, phone):
        page = device.get("/")
        assert (page.status_code, page["Location"].split("?")[0]) == (302, "/login/")
        assert device.get("/api/pipelines/").status_code == 401
