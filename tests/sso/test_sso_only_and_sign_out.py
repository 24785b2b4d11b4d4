"""SSO-only mode (local passwords off but the break-glass admin's, whose sign-ins are audited and logged),
signing out through the provider (RP-initiated logout), and the client secret kept out of every response,
log line, audit event, stored account and settings dump."""

from __future__ import annotations

import json
import logging
from io import StringIO
from urllib.parse import parse_qs, urlsplit

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.test import Client

from access.models import AuditEvent, Role, SsoGroupMapping
from notifications import channels, dispatch
from notifications.models import Notification
from tests.factories import PASSWORD, TeamFactory, UserFactory
from tests.sso.idp import CLIENT_ID, CLIENT_SECRET, ISSUER

pytestmark = pytest.mark.django_db


@pytest.fixture
def sso_only(settings, idp):
    settings.SSO_ONLY = True
    settings.SSO_BREAK_GLASS_USER = "root"


def test_sso_only_mode_refuses_local_passwords(sso_only):
    UserFactory(username="alice")
    client = Client()
    page = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert page.status_code == 200
    assert b"Local passwords are off here" in page.content
    assert "_auth_user_id" not in client.session


def test_the_break_glass_admin_still_signs_in_with_a_password_audited_logged_and_notified(
    sso_only, caplog, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True
    monkeypatch.setattr(dispatch, "enqueue_delivery", lambda notification_id: None)
    watching, quiet = TeamFactory(name="security"), TeamFactory(name="quiet")
    for team, events in ((watching, ["auth.break_glass_sign_in"]), (quiet, ["bulk.finished"])):
        channels.create_channel(
            actor=UserFactory(is_superuser=True), team=team, name="hook", kind="webhook", events=events,
            url="http://127.0.0.1:9/hook",
        )  # fmt: skip
    root = UserFactory(username="root", is_superuser=True)
    client = Client()
    with (
        caplog.at_level(logging.WARNING, logger="streamforge.sso"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert client.post("/login/", {"username": "root", "password": PASSWORD}).status_code == 302
    [sent] = Notification.objects.filter(event_type="auth.break_glass_sign_in")
    assert (sent.channel.team, sent.title, sent.data["username"]) == (
        watching,
        "Break-glass sign-in: root",
        "root",
    )
    assert client.session["_auth_user_id"] == str(root.pk)
    event = AuditEvent.objects.get(action="auth.break_glass_sign_in")
    assert event.actor_id == root.pk
    assert event.details["username"] == "root"
    assert "break-glass sign-in: root" in caplog.text


def test_the_log_in_page_offers_the_provider_and_folds_the_password_form_away(sso_only):
    page = Client().get("/login/").content.decode()
    assert "Sign in with Test IdP" in page
    assert 'action="/accounts/oidc/test/login/"' in page
    assert "Break-glass sign-in" in page


def test_without_sso_only_a_password_sign_in_is_not_a_break_glass_event(settings, idp):
    settings.SSO_BREAK_GLASS_USER = "root"
    UserFactory(username="root", is_superuser=True)
    assert Client().post("/login/", {"username": "root", "password": PASSWORD}).status_code == 302
    assert not AuditEvent.objects.filter(action="auth.break_glass_sign_in").exists()


def test_sign_out_after_sso_ends_the_providers_session_too(sign_in):
    client = Client()
    sign_in(client)
    assert "_auth_user_id" in client.session
    out = client.post("/logout/")
    assert out.status_code == 302
    target = urlsplit(out["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{ISSUER}/logout"
    query = {k: v[0] for k, v in parse_qs(target.query).items()}
    assert query["client_id"] == CLIENT_ID
    assert query["post_logout_redirect_uri"] == "http://testserver/login/"
    assert query["id_token_hint"].count(".") == 2  # the sign-in's ID token (a JWT)
    assert client.get("/").status_code == 302
    assert Session.objects.count() == 0


def test_sign_out_after_a_password_sign_in_stays_here():
    UserFactory(username="alice")
    client = Client()
    client.post("/login/", {"username": "alice", "password": PASSWORD})
    out = client.post("/logout/")
    assert (out.status_code, out["Location"]) == (302, "/login/")


def test_the_client_secret_is_in_no_response_log_audit_event_account_or_settings_dump(idp, sign_in, caplog):
    SsoGroupMapping.objects.create(
        provider="test", group="sf-operators", team=TeamFactory(name="ops"), role=Role.OPERATOR
    )
    client = Client()
    bodies = []
    with caplog.at_level(logging.DEBUG):
        start = client.post("/accounts/oidc/test/login/")
        bodies.append(start.content.decode() + start["Location"])
        code, query = idp.authorize(start["Location"])
        back = client.get("/accounts/oidc/test/login/callback/", {"code": code, "state": query["state"]})
        bodies.append(back.content.decode() + back.get("Location", ""))
        for url in ("/", "/account/", "/api/users/me/", "/sso/no-team/"):
            bodies.append(client.get(url).content.decode())
        bodies.append(client.post("/logout/")["Location"])
    assert idp.token_requests[-1]["client_secret"] == CLIENT_SECRET  # it was used ...
    assert not any(CLIENT_SECRET in body for body in bodies)  # ... and shown nowhere
    assert CLIENT_SECRET not in caplog.text
    for event in AuditEvent.objects.all():
        assert CLIENT_SECRET not in json.dumps(event.details) + event.reason
    for account in SocialAccount.objects.all():
        assert CLIENT_SECRET not in json.dumps(account.extra_data)
    for session in Session.objects.all():
        assert CLIENT_SECRET not in json.dumps(session.get_decoded())
    dump = StringIO()
    call_command("diffsettings", "--all", stdout=dump)
    assert "SSO_PROVIDERS" in dump.getvalue()
    assert CLIENT_SECRET not in dump.getvalue()
