"""API tokens (``/api/tokens/me/``, ``/api/tokens/{username}/``): every user creates, rotates and revokes their
own; the key is answered once, at creation, and afterwards only its first characters; a rotated key stops
working at once; admins revoke anyone's; no audit event ever holds a key."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.api_tokens import PREFIX_LENGTH
from access.models import AuditEvent, Role
from tests.factories import member

pytestmark = pytest.mark.django_db


def signed_in(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _all_details() -> str:
    return str(list(AuditEvent.objects.values_list("details", "reason")))


def test_a_token_key_is_shown_once_and_then_only_its_prefix(viewer):
    client = signed_in(viewer)
    assert client.get("/api/tokens/me/").json() == {"exists": False, "prefix": None, "created": None}
    created = client.post("/api/tokens/me/")
    assert created.status_code == 201, created.content
    key = created.json()["key"]
    assert key == Token.objects.get(user=viewer).key
    shown = client.get("/api/tokens/me/").json()
    assert shown["exists"] is True
    assert shown["prefix"] == key[:PREFIX_LENGTH]
    assert key not in str(shown)
    assert key not in client.get("/api/users/me/").content.decode()
    assert with_key(key).get("/api/users/me/").json()["username"] == "vic"


def test_the_account_page_shows_the_prefix_never_the_key(viewer, client):
    key = Token.objects.create(user=viewer).key
    client.force_login(viewer)
    page = client.get("/account/").content.decode()
    assert key[:PREFIX_LENGTH] in page
    assert key not in page


def test_rotating_a_token_invalidates_the_old_key(viewer):
    client = signed_in(viewer)
    old = client.post("/api/tokens/me/").json()["key"]
    new = with_key(old).post("/api/tokens/me/").json()["key"]  # rotated by a script holding the old key
    assert new != old
    assert with_key(old).get("/api/users/me/").status_code == 401
    assert with_key(new).get("/api/users/me/").status_code == 200


def test_revoking_ones_own_token(viewer):
    client = signed_in(viewer)
    key = client.post("/api/tokens/me/").json()["key"]
    assert client.delete("/api/tokens/me/").status_code == 204
    assert with_key(key).get("/api/users/me/").status_code == 401
    assert client.get("/api/tokens/me/").json()["exists"] is False


def test_an_admin_revokes_anyones_token_and_others_cannot(viewer, admin, team):
    other = member(team, Role.OPERATOR, username="olga")
    key = Token.objects.create(user=other).key
    assert signed_in(viewer).delete("/api/tokens/olga/").status_code == 403
    assert with_key(key).get("/api/users/me/").status_code == 200
    assert signed_in(admin).delete("/api/tokens/olga/").status_code == 204
    assert with_key(key).get("/api/users/me/").status_code == 401


def test_token_changes_are_audited_without_the_key(viewer, admin):
    client = signed_in(viewer)
    first = client.post("/api/tokens/me/").json()["key"]
    second = client.post("/api/tokens/me/").json()["key"]
    signed_in(admin).delete("/api/tokens/vic/")
    # A user's own token deletion names them as "by" (people_audit: the actor of a deletion that may take
    # the user with it is recorded by name only).
    events = [
        (e.action, e.details.get("by", e.actor_name), e.details["username"])
        for e in AuditEvent.objects.order_by("sequence")
        if e.action.startswith("api_token.")
    ]
    assert events == [
        ("api_token.create", "vic", "vic"),
        ("api_token.delete", "vic", "vic"),
        ("api_token.create", "vic", "vic"),
        ("api_token.delete", "ada", "vic"),
    ]
    assert first not in _all_details()
    assert second not in _all_details()
    assert first[:PREFIX_LENGTH] not in _all_details()
