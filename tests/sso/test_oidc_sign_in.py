"""Signing in through an OpenID Connect provider (the in-process one of ``tests/sso/idp.py``): the
authorization code flow with state, nonce and PKCE; who the person is (provider + subject); which team roles
their groups give, at every sign-in; and every way a token is refused."""

from __future__ import annotations

import time

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import User
from django.test import Client

from access.models import AuditEvent, Membership, Role, SsoGroupMapping
from tests.factories import TeamFactory, UserFactory
from tests.sso.idp import CLIENT_ID, new_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops_team():
    team = TeamFactory(name="ops")
    SsoGroupMapping.objects.create(provider="test", group="sf-operators", team=team, role=Role.OPERATOR)
    return team


def signed_in_user(client: Client) -> User | None:
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def test_the_redirect_carries_state_nonce_and_a_pkce_s256_challenge(idp, sign_in, ops_team):
    result = sign_in()
    query = result.query
    assert query["response_type"] == "code"
    assert query["client_id"] == CLIENT_ID
    assert set(query["scope"].split()) >= {"openid", "profile", "email"}
    assert len(query["state"]) >= 12
    assert len(query["nonce"]) >= 32
    assert query["code_challenge_method"] == "S256"
    assert query["code_challenge"]
    # the token request proved the verifier behind the challenge (the fake provider checks it)
    assert idp.token_requests[-1]["code_verifier"]


def test_a_first_sign_in_creates_the_user_with_the_role_their_group_maps_to(sign_in, ops_team):
    client = Client()
    result = sign_in(client)
    assert (result.response.status_code, result.location) == (302, "/")
    user = signed_in_user(client)
    assert user is not None
    account = SocialAccount.objects.get(user=user)
    assert (account.provider, account.uid) == ("test", "sub-alice-0001")
    assert not user.has_usable_password()
    membership = Membership.objects.get(user=user)
    assert (membership.team, membership.role, membership.sso) == (ops_team, Role.OPERATOR, True)
    event = AuditEvent.objects.filter(action="auth.sso_sign_in").get()
    assert event.details["provider"] == "test"
    assert event.details["subject"] == "sub-alice-0001"
    assert event.details["issuer"] == "https://idp.example.test"
    assert event.details["roles"] == {"ops": "operator"}
    assert client.get("/").status_code == 200


def test_an_sso_session_lasts_the_configured_hours(sign_in, ops_team, settings):
    settings.SSO_SESSION_HOURS = 2
    client = Client()
    sign_in(client)
    assert client.session.get_expiry_age() == 2 * 3600


def test_the_identity_is_provider_and_subject_never_the_email(idp, sign_in, ops_team):
    local = UserFactory(username="alice", email="alice@example.test")
    client = Client()
    sign_in(client)
    user = signed_in_user(client)
    assert user is not None
    assert user.pk != local.pk
    # the same e-mail with another subject is another person
    idp.subject = "sub-somebody-else"
    other = Client()
    sign_in(other)
    assert signed_in_user(other).pk not in {local.pk, user.pk}
    # and the first subject again is the first user
    idp.subject = "sub-alice-0001"
    again = Client()
    sign_in(again)
    assert signed_in_user(again).pk == user.pk


def test_leaving_the_group_loses_the_role_at_the_next_sign_in(idp, sign_in, ops_team):
    admins = TeamFactory(name="platform")
    SsoGroupMapping.objects.create(provider="test", group="sf-admins", team=admins, role=Role.APPROVER)
    idp.groups = ["sf-operators", "sf-admins"]
    client = Client()
    sign_in(client)
    user = signed_in_user(client)
    assert dict(Membership.objects.filter(user=user).values_list("team__name", "role")) == {
        "ops": "operator",
        "platform": "approver",
    }
    idp.groups = ["sf-admins"]
    sign_in(Client())
    assert dict(Membership.objects.filter(user=user).values_list("team__name", "role")) == {
        "platform": "approver"
    }
    assert AuditEvent.objects.filter(action="membership.delete", actor=None).exists()


def test_the_strongest_mapped_role_wins_and_hand_granted_memberships_stay(idp, sign_in, ops_team):
    SsoGroupMapping.objects.create(provider="test", group="sf-leads", team=ops_team, role=Role.APPROVER)
    idp.groups = ["sf-operators", "sf-leads"]
    client = Client()
    sign_in(client)
    user = signed_in_user(client)
    assert Membership.objects.get(user=user).role == Role.APPROVER
    other = TeamFactory(name="other")
    Membership.objects.create(user=user, team=other, role=Role.VIEWER)  # granted by an admin
    idp.groups = []
    result = sign_in(Client())
    assert list(Membership.objects.filter(user=user).values_list("team__name", flat=True)) == ["other"]
    assert result.location == "/"


def test_a_person_in_no_mapped_group_gets_no_team_and_a_page_that_says_so(idp, sign_in, ops_team):
    idp.groups = ["sales"]
    client = Client()
    result = sign_in(client)
    assert result.location == "/sso/no-team/"
    page = client.get("/sso/no-team/")
    assert page.status_code == 200
    assert b"none of your groups" in page.content
    assert not Membership.objects.exists()


def test_the_configured_default_team_catches_a_person_in_no_mapped_group(idp, sign_in, ops_team, settings):
    TeamFactory(name="newcomers")
    settings.SSO_DEFAULT_TEAM = "newcomers"
    settings.SSO_DEFAULT_ROLE = "viewer"
    idp.groups = ["sales"]
    client = Client()
    assert sign_in(client).location == "/"
    membership = Membership.objects.get(user=signed_in_user(client))
    assert (membership.team.name, membership.role) == ("newcomers", "viewer")


REFUSED = {
    "forged (signed by another key under the provider's key id)": {"signing_key": "other"},
    "expired": {"claims": {"exp": int(time.time()) - 60, "iat": int(time.time()) - 400}},
    "for another audience": {"claims": {"aud": "some-other-client"}},
    "from another issuer": {"claims": {"iss": "https://evil.example.test"}},
    "minted for another sign-in (nonce)": {"claims": {"nonce": "not-this-sign-ins-nonce"}},
    "without a nonce": {"claims": {"nonce": None}},
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_an_id_token_that_does_not_hold_is_refused(idp, sign_in, ops_team, case):
    bend = REFUSED[case]
    if bend.get("signing_key") == "other":
        idp.signing_key = new_key()
    idp.claims = dict(bend.get("claims", {}))
    client = Client()
    result = sign_in(client)
    assert signed_in_user(client) is None
    assert result.response.status_code in {401, 403}
    assert b"Sign-in refused" in result.response.content
    assert not User.objects.exists()
    event = AuditEvent.objects.filter(action="auth.sso_refused").get()
    assert event.details == {"provider": "test"}
    assert client.get("/").status_code == 302


def test_a_callback_with_a_state_this_browser_never_sent_is_refused(sign_in, ops_team):
    client = Client()
    result = sign_in(client, state="forged-state-value")
    assert signed_in_user(client) is None
    assert b"Sign-in refused" in result.response.content
    assert not User.objects.exists()


def test_a_deactivated_user_is_not_signed_in_even_when_the_provider_vouches(idp, sign_in, ops_team):
    client = Client()
    sign_in(client)
    user = signed_in_user(client)
    User.objects.filter(pk=user.pk).update(is_active=False)
    fresh = Client()
    result = sign_in(fresh)
    assert signed_in_user(fresh) is None
    assert result.location == "/sso/inactive/"
