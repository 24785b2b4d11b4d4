"""The people pages in a real Chromium against a really running daphne: an admin adds a member to a team from
``/people/``, and a user creates an API token on ``/account/`` whose key is displayed once, with a copy
button, and never again (after a reload only its first characters)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from access.api_tokens import PREFIX_LENGTH
from access.models import AuditEvent, Membership, Role
from tests.browser.conftest import screenshot
from tests.browser.test_csp import Watcher
from tests.factories import TeamFactory, UserFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]


def test_an_admin_adds_a_member_and_the_new_member_creates_a_token_shown_once(
    open_page, browser_env, asgi_server
):
    team = TeamFactory(name="people-browser")
    admin = member(team, Role.ADMIN, username="people-browser-admin")
    newbie = UserFactory(username="people-browser-newbie")

    page = open_page(admin)
    watcher = Watcher(page, asgi_server.url)
    page.goto("/people/")
    form = page.get_by_test_id("add-member-people-browser")
    form.get_by_test_id("add-member-username").fill(newbie.username)
    form.get_by_test_id("add-member-role").select_option("operator")
    form.get_by_test_id("add-member-submit").click()
    row = page.get_by_test_id(f"member-people-browser-{newbie.username}")
    expect(row).to_be_visible()
    expect(page.get_by_test_id(f"role-people-browser-{newbie.username}")).to_have_value("operator")
    screenshot(page, "people-member-added")
    assert Membership.objects.get(user=newbie, team=team).role == Role.OPERATOR
    assert AuditEvent.objects.filter(action="membership.create", actor_name=admin.username).exists()
    assert watcher.problems() == []

    page = open_page(newbie)
    watcher = Watcher(page, asgi_server.url)
    page.goto("/")
    page.get_by_test_id("user").click()  # the user name in the header leads to the account page
    expect(page.get_by_test_id("token-none")).to_be_visible()
    # The key is shown by people.js: a click before its deferred script has run would submit the form itself.
    page.wait_for_load_state("load")
    page.get_by_test_id("token-create").click()
    expect(page.get_by_test_id("token-new")).to_be_visible()
    key = page.get_by_test_id("token-key")
    expect(key).to_have_text(Token.objects.get(user=newbie).key)
    expect(page.get_by_test_id("token-copy")).to_be_visible()
    shown = key.text_content() or ""
    expect(page.get_by_test_id("token-prefix")).to_have_text(f"{shown[:PREFIX_LENGTH]}…")
    screenshot(page, "account-token-created")

    page.reload()
    expect(page.get_by_test_id("token-prefix")).to_have_text(f"{shown[:PREFIX_LENGTH]}…")
    expect(page.get_by_test_id("token-new")).to_be_hidden()
    assert shown not in page.content()
    assert watcher.problems() == []
