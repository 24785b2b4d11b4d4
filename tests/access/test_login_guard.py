"""Password guessing: log-in lockout (django-axes) and throttled API tokens, counted in the real Redis."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from access.models import AuditEvent
from tests.factories import PASSWORD, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def _log_in(client: Client, username: str, password: str):
    return client.post("/login/", {"username": username, "password": password})


def test_a_user_name_is_locked_out_after_the_failure_limit_and_the_right_password_then_fails(settings):
    settings.AXES_FAILURE_LIMIT = 5
    alice = UserFactory(username="alice")
    client = Client()
    for _ in range(4):
        assert _log_in(client, "alice", "wrong-guess").status_code == 200
    locked = _log_in(client, "alice", "wrong-guess")
    assert locked.status_code == 429
    assert "Too many failed attempts: try again in 15 minutes." in locked.content.decode()

    # the right password no longer helps during the cool-off
    right = _log_in(client, "alice", PASSWORD)
    assert right.status_code == 429
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302  # still sent to the log-in page

    # one audit event for the lockout, not one per refused try
    events = AuditEvent.objects.filter(action="auth.locked_out")
    assert [(e.target_type, e.target_id, e.details["ip_address"]) for e in events] == [
        ("user", "alice", "127.0.0.1")
    ]
    assert alice.pk  # the account itself is untouched: an admin can unlock it early (axes_reset)


def test_a_lockout_holds_one_address_only_so_no_one_can_lock_a_colleague_out_from_elsewhere(settings):
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="bob")
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(3):
        _log_in(attacker, "bob", "nope")
    assert _log_in(attacker, "bob", PASSWORD).status_code == 429
    bob = Client(REMOTE_ADDR="198.51.100.7")
    assert _log_in(bob, "bob", PASSWORD).status_code == 302


def test_behind_a_proxy_the_lockout_counts_the_address_the_proxy_saw_not_the_one_the_client_wrote(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.PROXY_COUNT = 1
    UserFactory(username="carol")
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for forged in ("1.1.1.1", "2.2.2.2", "3.3.3.3"):
        # the client writes its own X-Forwarded-For; the proxy appends the real address
        Client(**proxy, HTTP_X_FORWARDED_FOR=f"{forged}, 203.0.113.50").post(
            "/login/", {"username": "carol", "password": "nope"}
        )
    locked = Client(**proxy, HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.50")
    assert _log_in(locked, "carol", PASSWORD).status_code == 429
    event = AuditEvent.objects.get(action="auth.locked_out")
    assert event.details["ip_address"] == "203.0.113.50"


def test_wrong_api_tokens_from_one_address_are_answered_429_past_the_limit_even_for_a_right_token():
    # the default failed_token rate: 10/minute
    owner = UserFactory(username="dave")
    good = Token.objects.create(user=owner).key
    guesser = APIClient(REMOTE_ADDR="203.0.113.77")
    statuses = []
    for attempt in range(10):
        guesser.credentials(HTTP_AUTHORIZATION=f"Token {attempt:040x}")
        statuses.append(guesser.get("/api/pipelines/").status_code)
    assert statuses == [401] * 10
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {good}")
    refused = guesser.get("/api/pipelines/")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == 60
    # another address is not affected
    other = APIClient(REMOTE_ADDR="198.51.100.8")
    other.credentials(HTTP_AUTHORIZATION=f"Token {good}")
    assert other.get("/api/pipelines/").status_code == 200


def test_a_signed_in_user_is_throttled_past_the_user_rate(monkeypatch):
    # DRF's throttles read their rates once, at import: set this one the way the setting would have
    monkeypatch.setattr(
        UserRateThrottle, "THROTTLE_RATES", {**UserRateThrottle.THROTTLE_RATES, "user": "3/minute"}
    )
    client = APIClient()
    client.force_authenticate(UserFactory(username="erin"))
    assert [client.get("/api/pipelines/").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_the_api_stays_usable_while_the_rate_limit_cache_is_unreachable(settings):
    # Nothing listens on port 1: every cache call fails as it does while Redis is down.
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}}
    client = APIClient()
    client.force_authenticate(UserFactory(username="fay"))
    assert client.get("/api/pipelines/").status_code == 200
    token = Token.objects.create(user=UserFactory(username="gus")).key
    with_token = APIClient()
    with_token.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert with_token.get("/api/pipelines/").status_code == 200
    with_token.credentials(HTTP_AUTHORIZATION="Token wrong")
    assert with_token.get("/api/pipelines/").status_code == 401
