"""Group mappings in the REST API and on the People page (admins only, each change audited), ending a
person's sessions and token at once, and the configuration of providers from the environment."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.authtoken.models import Token

from access.models import AuditEvent, Role, SsoGroupMapping
from access.sso.config import SecretRef, providers_from_env
from tests.factories import PASSWORD, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client():
    admin = UserFactory(username="root", is_superuser=True)
    client = Client()
    client.force_login(admin)
    return client


def test_an_admin_maps_a_group_changes_its_role_and_removes_it_each_audited(idp, admin_client):
    TeamFactory(name="ops")
    created = admin_client.post(
        "/api/sso/group-mappings/",
        {"provider": "test", "group": "sf-operators", "team": "ops", "role": "operator"},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    mapping_id = created.json()["id"]
    listed = admin_client.get("/api/sso/group-mappings/").json()
    assert [(m["provider"], m["group"], m["team"], m["role"]) for m in listed] == [
        ("test", "sf-operators", "ops", "operator")
    ]
    changed = admin_client.patch(
        f"/api/sso/group-mappings/{mapping_id}/", {"role": "approver"}, content_type="application/json"
    )
    assert changed.json()["role"] == "approver"
    assert admin_client.delete(f"/api/sso/group-mappings/{mapping_id}/").status_code == 204
    actions = list(
        AuditEvent.objects.filter(target_type="sso_mapping")
        .order_by("sequence")
        .values_list("action", flat=True)
    )
    assert actions == ["sso_mapping.create", "sso_mapping.change", "sso_mapping.delete"]
    assert not SsoGroupMapping.objects.exists()


def test_a_mapping_names_a_configured_provider_and_is_not_made_twice(idp, admin_client):
    TeamFactory(name="ops")
    body = {"provider": "okta", "group": "g", "team": "ops", "role": "viewer"}
    refused = admin_client.post("/api/sso/group-mappings/", body, content_type="application/json")
    assert (refused.status_code, list(refused.json())) == (400, ["provider"])
    body["provider"] = "test"
    assert (
        admin_client.post("/api/sso/group-mappings/", body, content_type="application/json").status_code
        == 201
    )
    again = admin_client.post("/api/sso/group-mappings/", body, content_type="application/json")
    assert (again.status_code, list(again.json())) == (400, ["group"])


def test_only_admins_see_or_change_group_mappings(idp):
    team = TeamFactory(name="ops")
    team_admin = UserFactory(username="lead")
    MembershipFactory(user=team_admin, team=team, role=Role.APPROVER, manages_team=True)
    client = Client()
    client.force_login(team_admin)
    assert client.get("/api/sso/group-mappings/").status_code == 403
    body = {"provider": "test", "group": "g", "team": "ops", "role": "viewer"}
    assert client.post("/api/sso/group-mappings/", body, content_type="application/json").status_code == 403
    assert b"Identity provider groups" not in client.get("/people/").content


def test_the_people_page_shows_the_mappings_and_the_form_to_add_one(idp, admin_client):
    team = TeamFactory(name="ops")
    SsoGroupMapping.objects.create(provider="test", group="sf-operators", team=team, role=Role.OPERATOR)
    page = admin_client.get("/people/")
    assert page.status_code == 200
    assert b'data-testid="sso-mapping-test-sf-operators-ops"' in page.content
    assert b'data-testid="create-sso-mapping"' in page.content


def test_the_providers_endpoint_shows_no_secret_nor_its_reference(idp, admin_client):
    answer = admin_client.get("/api/sso/group-mappings/providers/")
    assert answer.json() == [
        {"id": "test", "name": "Test IdP", "issuer": "https://idp.example.test", "groups_claim": "groups"}
    ]


def test_an_admin_ends_a_persons_sessions_and_token_at_once(admin_client):
    bob = UserFactory(username="bob")
    laptop, phone = Client(), Client()
    for device in (laptop, phone):
        assert device.post("/login/", {"username": "bob", "password": PASSWORD}).status_code == 302
    Token.objects.create(user=bob)
    ended = admin_client.post("/api/users/bob/end-sessions/")
    assert ended.json() == {"sessions": 2, "token": True}
    for device in (laptop, phone):
        assert device.get("/").status_code == 302
    assert not Token.objects.filter(user=bob).exists()
    assert admin_client.get("/").status_code == 200  # the admin's own session is another user's
    event = AuditEvent.objects.get(action="user.end_sessions")
    assert event.details == {"username": "bob", "sessions": 2, "token": True}
    assert Session.objects.count() == 1


def test_a_non_admin_cannot_end_someone_elses_sessions():
    UserFactory(username="bob")
    carol = UserFactory(username="carol")
    client = Client()
    client.force_login(carol)
    assert client.post("/api/users/bob/end-sessions/").status_code == 403


def test_a_client_secret_given_in_clear_is_refused_at_start():
    environ = {
        "STREAMFORGE_OIDC_PROVIDERS": "okta",
        "STREAMFORGE_OIDC_OKTA_ISSUER": "https://example.okta.com/oauth2/default",
        "STREAMFORGE_OIDC_OKTA_CLIENT_ID": "abc",
        "STREAMFORGE_OIDC_OKTA_CLIENT_SECRET": "s3cr3t-in-clear",
    }
    with pytest.raises(ImproperlyConfigured, match="CLIENT_SECRET_FILE") as refused:
        providers_from_env(environ)
    assert "s3cr3t-in-clear" not in str(refused.value)


def test_providers_come_from_the_environment_with_a_secret_reference(tmp_path):
    secret = tmp_path / "okta-secret"
    secret.write_text("the-secret-value\n")
    environ = {
        "STREAMFORGE_OIDC_PROVIDERS": "okta, entra",
        "STREAMFORGE_OIDC_OKTA_ISSUER": "https://example.okta.com/oauth2/default/",
        "STREAMFORGE_OIDC_OKTA_CLIENT_ID": "abc",
        "STREAMFORGE_OIDC_OKTA_CLIENT_SECRET_FILE": str(secret),
        "STREAMFORGE_OIDC_OKTA_SCOPES": "openid profile email groups",
        "STREAMFORGE_OIDC_ENTRA_ISSUER": "https://login.microsoftonline.com/tenant-id/v2.0",
        "STREAMFORGE_OIDC_ENTRA_CLIENT_ID": "def",
        "STREAMFORGE_OIDC_ENTRA_CLIENT_SECRET_ENV": "ENTRA_SECRET",
        "STREAMFORGE_OIDC_ENTRA_NAME": "Microsoft",
    }
    okta, entra = providers_from_env(environ)
    assert (okta.id, okta.name, okta.issuer, okta.groups_claim) == (
        "okta",
        "Okta",
        "https://example.okta.com/oauth2/default",
        "groups",
    )
    assert okta.scopes == ("openid", "profile", "email", "groups")
    assert okta.secret == SecretRef(file=str(secret))
    assert okta.secret.resolve() == "the-secret-value"
    assert "the-secret-value" not in repr(okta)
    assert (entra.name, entra.origin, entra.secret) == (
        "Microsoft",
        "https://login.microsoftonline.com",
        SecretRef(env="ENTRA_SECRET"),
    )
    with pytest.raises(ImproperlyConfigured, match="ENTRA_SECRET"):
        entra.secret.resolve()
