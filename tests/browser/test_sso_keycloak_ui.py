"""Issue #33's acceptance through a real identity provider: Keycloak, started by devstack's test profile
(``devstack --profile test up keycloak``) with the realm ``devstack/conf/keycloak-realm.json`` (alice in
``sf-operators``), and the console of this run configured with it as the provider ``keycloak``.

In Chromium: an admin maps the group ``sf-operators`` to the operator role in ``ops`` on the People page;
the console's "Sign in with Keycloak" -> Keycloak's own log-in page -> back signed in with the
role ``sf-operators`` maps to; sign-out ends the Keycloak session too; alice removed from the group in
Keycloak (its admin REST API) -> her next sign-in gives no role and the page that says so; alice disabled
in Keycloak -> refused there, not signed in here. Then the client secret is looked for everywhere it must
not be: the pages, the web's log, the audit trail, a settings dump.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.test import Client

from access.models import AuditEvent, Membership, Role, SsoGroupMapping
from tests.browser.conftest import REPO, AsgiServer, screenshot
from tests.database import child_database_url
from tests.factories import TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.keycloak]

REALM = "streamforge"
ALICE_PASSWORD = "alice-keycloak-pw"


def _keycloak() -> tuple[str, str, str]:
    url = os.environ.get("KEYCLOAK_URL")
    if not url:
        pytest.fail(
            "KEYCLOAK_URL is not set: start the test profile's Keycloak (devstack --profile test up keycloak)"
        )
    return url, os.environ["KEYCLOAK_CLIENT_SECRET_FILE"], os.environ["KEYCLOAK_ADMIN_PASSWORD_FILE"]


class KeycloakAdmin:
    """Keycloak's admin REST API as the master realm's bootstrap admin."""

    def __init__(self, url: str, password_file: str) -> None:
        self.url = url
        body = urllib.parse.urlencode(
            {
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": Path(password_file).read_text().strip(),
            }
        ).encode()
        token_url = f"{url}/realms/master/protocol/openid-connect/token"
        with urllib.request.urlopen(token_url, data=body, timeout=30) as response:  # noqa: S310
            self.token = json.load(response)["access_token"]

    def call(self, method: str, path: str, body: object = None) -> object:
        request = urllib.request.Request(  # noqa: S310
            f"{self.url}/admin/realms/{REALM}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            text = response.read()
        return json.loads(text) if text else None

    def user_id(self, username: str) -> str:
        users = self.call("GET", f"/users?username={username}&exact=true")
        assert isinstance(users, list)
        return str(users[0]["id"])

    def group_id(self, name: str) -> str:
        groups = self.call("GET", f"/groups?search={name}&exact=true")
        assert isinstance(groups, list)
        return str(next(g["id"] for g in groups if g["name"] == name))

    def set_in_group(self, username: str, group: str, member: bool) -> None:
        self.call(
            "PUT" if member else "DELETE", f"/users/{self.user_id(username)}/groups/{self.group_id(group)}"
        )

    def set_enabled(self, username: str, enabled: bool) -> None:
        user_id = self.user_id(username)
        user = self.call("GET", f"/users/{user_id}")
        assert isinstance(user, dict)
        self.call("PUT", f"/users/{user_id}", {**user, "enabled": enabled})

    def end_sessions(self, username: str) -> None:
        self.call("POST", f"/users/{self.user_id(username)}/logout")


@pytest.fixture(scope="module")
def keycloak_console(django_db_setup, tmp_path_factory):
    """The web of this run with Keycloak as its identity provider ``keycloak`` (its own server: the shared
    one of the browser tests has no provider)."""
    url, secret_file, _admin = _keycloak()
    server = AsgiServer(child_database_url(), tmp_path_factory.mktemp("sso") / "web.log")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "STREAMFORGE_OIDC_PROVIDERS": "keycloak",
            "STREAMFORGE_OIDC_KEYCLOAK_NAME": "Keycloak",
            "STREAMFORGE_OIDC_KEYCLOAK_ISSUER": f"{url}/realms/{REALM}",
            "STREAMFORGE_OIDC_KEYCLOAK_CLIENT_ID": "streamforge-console",
            "STREAMFORGE_OIDC_KEYCLOAK_CLIENT_SECRET_FILE": secret_file,
        }.items():
            patch.setenv(name, value)
        server.start()
    yield server
    server.stop()


@pytest.fixture
def keycloak_admin():
    url, _secret, admin_file = _keycloak()
    admin = KeycloakAdmin(url, admin_file)
    admin.set_in_group("alice", "sf-operators", member=True)
    admin.set_enabled("alice", enabled=True)
    admin.end_sessions("alice")
    yield admin
    admin.set_in_group("alice", "sf-operators", member=True)  # as the realm file has her, for a rerun
    admin.set_enabled("alice", enabled=True)


def _map_the_group_on_the_people_page(chromium, console_url: str) -> None:
    """As an admin (a real session), map Keycloak's sf-operators to the operator role in ops on /people/."""
    admin: Any = UserFactory(username="root", is_superuser=True)
    client = Client()
    client.force_login(admin)
    context = chromium.new_context(base_url=console_url)
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": console_url,
            }
        ]
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto("/people/")
    form = page.get_by_test_id("create-sso-mapping")
    form.locator("select[name=provider]").select_option("keycloak")
    form.locator("input[name=group]").fill("sf-operators")
    form.locator("select[name=team]").select_option("ops")
    form.locator("select[name=role]").select_option("operator")
    form.get_by_test_id("sso-mapping-submit").click()
    page.get_by_test_id("sso-mapping-keycloak-sf-operators-ops").wait_for()
    screenshot(page, "sso-people-group-mapping")
    context.close()


def _sign_in_through_keycloak(page, console_url: str, keycloak_url: str) -> None:
    page.goto(f"{console_url}/login/")
    page.get_by_role("button", name="Sign in with Keycloak").click()
    page.wait_for_url(
        re.compile(re.escape(keycloak_url) + r"/realms/streamforge/protocol/openid-connect/auth")
    )
    page.fill("#username", "alice")
    page.fill("#password", ALICE_PASSWORD)
    page.click("#kc-login")


def test_sign_in_through_keycloak_follows_the_group_and_the_account(
    chromium, keycloak_console, keycloak_admin, browser_env
):
    keycloak_url, secret_file, _ = _keycloak()
    team = TeamFactory(name="ops")
    console = keycloak_console.url
    _map_the_group_on_the_people_page(chromium, console)
    mapping = SsoGroupMapping.objects.get()
    assert (mapping.provider, mapping.group, mapping.team, mapping.role) == (
        "keycloak",
        "sf-operators",
        team,
        "operator",
    )
    assert AuditEvent.objects.filter(action="sso_mapping.create").exists()
    seen: list[str] = []

    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.on(
        "response",
        lambda response: seen.append(
            response.text() if "html" in response.headers.get("content-type", "") else ""
        ),
    )

    # 1. Sign in: Keycloak's page, then back here with the role the group maps to.
    _sign_in_through_keycloak(page, console, keycloak_url)
    page.wait_for_url(f"{console}/")
    assert "ops · operator" in page.get_by_test_id("roles").inner_text()
    screenshot(page, "sso-keycloak-signed-in")
    account = SocialAccount.objects.get(provider="keycloak")
    assert account.uid == keycloak_admin.user_id("alice")  # the subject is Keycloak's user id
    membership = Membership.objects.get(user=account.user)
    assert (membership.team, membership.role, membership.sso) == (team, Role.OPERATOR, True)
    event = AuditEvent.objects.filter(action="auth.sso_sign_in").latest("sequence")
    assert (event.details["provider"], event.details["subject"]) == ("keycloak", account.uid)
    assert event.details["groups"] == ["sf-operators"]

    # 2. Sign out: here and at Keycloak (RP-initiated logout), back on our log-in page.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{console}/login/")
    # Keycloak's session is gone too: signing in again asks for the password
    page.get_by_role("button", name="Sign in with Keycloak").click()
    page.wait_for_url(re.compile(re.escape(keycloak_url)))
    assert page.locator("#password").is_visible()

    # 3. Removed from the group in Keycloak: the next sign-in gives no role, and a page says so.
    keycloak_admin.set_in_group("alice", "sf-operators", member=False)
    page.goto(f"{console}/login/")
    _sign_in_through_keycloak(page, console, keycloak_url)
    page.wait_for_url(f"{console}/sso/no-team/")
    assert "none of your groups" in page.get_by_test_id("sso-no-team").inner_text()
    assert not Membership.objects.filter(user=account.user).exists()
    screenshot(page, "sso-keycloak-no-team")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{console}/login/")

    # 4. Disabled in Keycloak: refused there, not signed in here.
    keycloak_admin.set_enabled("alice", enabled=False)
    _sign_in_through_keycloak(page, console, keycloak_url)
    page.wait_for_load_state()
    assert "disabled" in page.content().lower()
    assert page.url.startswith(keycloak_url)
    page.goto(f"{console}/")
    assert page.url.startswith(f"{console}/login/")
    context.close()

    # 5. The client secret is nowhere it must not be.
    secret = Path(secret_file).read_text().strip()
    assert len(secret) >= 20
    assert not any(secret in text for text in seen)
    assert secret not in keycloak_console.log_path.read_text(errors="replace")
    for audit_event in AuditEvent.objects.all():
        assert secret not in json.dumps(audit_event.details) + audit_event.reason
    dump = subprocess.run(
        [sys.executable, "manage.py", "diffsettings", "--all"],
        cwd=REPO,
        env={
            **os.environ,
            "DJANGO_DEBUG": "true",
            "STREAMFORGE_OIDC_PROVIDERS": "keycloak",
            "STREAMFORGE_OIDC_KEYCLOAK_ISSUER": f"{keycloak_url}/realms/{REALM}",
            "STREAMFORGE_OIDC_KEYCLOAK_CLIENT_ID": "streamforge-console",
            "STREAMFORGE_OIDC_KEYCLOAK_CLIENT_SECRET_FILE": secret_file,
        },
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "SSO_PROVIDERS" in dump.stdout
    assert secret_file in dump.stdout  # the reference is there ...
    assert secret not in dump.stdout + dump.stderr  # ... the secret is not
