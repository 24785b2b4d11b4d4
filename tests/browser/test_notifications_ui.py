"""The notifications page in a real Chromium against a really running daphne: a team admin adds a webhook
channel pointing at a receiver this test runs, sees its signing secret once, sends a test and sees the
delivery row with the receiver's 200; the receiver got one request signed with that secret.

"Send test" delivers in the web request itself (``notifications.channels.send_test`` calls
``delivery.attempt`` at once, no Celery task), so no worker is involved: the daphne process posts to the
receiver, which the browser tests' server may reach on 127.0.0.1 (``STREAMFORGE_NOTIFY_ALLOW_PRIVATE`` in
``AsgiServer.start``)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from access.models import AuditEvent, Role
from notifications.models import Channel, DeliveryAttempt, Notification
from tests.browser.conftest import screenshot
from tests.browser.test_csp import Watcher
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.notifications.conftest import receiver  # noqa: F401  # the fixture

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]


def test_a_team_admin_adds_a_webhook_sees_its_secret_once_and_sends_a_signed_test(
    open_page,
    browser_env,
    asgi_server,
    receiver,  # noqa: F811
):
    team = TeamFactory(name="notify-browser")
    admin = MembershipFactory(
        team=team, role=Role.OPERATOR, manages_team=True, user=UserFactory(username="notify-browser-admin")
    ).user

    page = open_page(admin)
    watcher = Watcher(page, asgi_server.url)
    page.goto(f"/notifications/{team.name}/")
    page.get_by_test_id("channel-new").locator("summary").click()
    name = page.get_by_label("Name", exact=True)
    name.fill("ops hook!")  # the browser checks the name's pattern before posting
    assert name.evaluate("input => input.validity.patternMismatch") is True
    name.fill("ops-hook")
    assert name.evaluate("input => input.validity.valid") is True
    page.get_by_label("Kind", exact=True).select_option("webhook")
    page.get_by_label("Webhook URL", exact=True).fill(
        "ftp://example.com/hook"
    )  # a URL the browser lets through
    events = page.get_by_test_id("channel-new").locator('input[name="events"]')
    events.first.uncheck()
    page.get_by_test_id("channel-create").click()

    # Refused by the server: the form is open again with everything as typed, the reason beside it.
    expect(page.get_by_test_id("channel-error")).to_contain_text("url: an http:// or https:// URL")
    expect(page.get_by_label("Name", exact=True)).to_have_value("ops-hook")
    expect(page.get_by_label("Kind", exact=True)).to_have_value("webhook")
    expect(page.get_by_label("Webhook URL", exact=True)).to_have_value("ftp://example.com/hook")
    expect(page.get_by_label("Webhook URL", exact=True)).to_have_attribute("aria-invalid", "true")
    expect(events.first).not_to_be_checked()
    expect(events.nth(1)).to_be_checked()
    screenshot(page, "notifications-refused-form-kept")
    assert not Channel.objects.filter(team=team).exists()
    page.get_by_label("Webhook URL", exact=True).fill(receiver.url)
    page.get_by_test_id("channel-create").click()

    revealed = page.get_by_test_id("signing-secret")
    expect(revealed).to_be_visible()
    secret = (revealed.locator(".mono").text_content() or "").strip()
    assert secret.startswith("whsec_")
    receiver.signing_secret = secret
    row = page.locator('tr[data-channel="ops-hook"]')
    expect(row).to_contain_text(receiver.url)
    screenshot(page, "notifications-webhook-added")
    channel = Channel.objects.get(team=team, name="ops-hook")
    assert channel.kind == "webhook"
    assert secret not in channel.secret_encrypted

    page.reload()  # shown once: gone after a reload, only its hint remains
    expect(page.get_by_test_id("signing-secret")).to_have_count(0)
    assert secret not in page.content()
    expect(row).to_contain_text(channel.secret_hint)

    page.get_by_test_id("send-test-ops-hook").click()
    delivery = page.get_by_test_id("delivery-row")
    expect(delivery).to_have_count(1)
    expect(delivery.get_by_test_id("delivery-status")).to_have_text("ok 200")
    expect(delivery).to_contain_text("ops-hook")
    expect(delivery).to_contain_text("Test message for ops-hook")
    screenshot(page, "notifications-test-sent")

    assert len(receiver.requests) == 1
    assert receiver.bad_signatures == 0
    headers, _ = receiver.requests[0]
    body = receiver.bodies()[0]
    assert headers["x-streamforge-event"] == body["event"] == "test"
    assert body["team"] == team.name
    assert body["title"] == "Test message for ops-hook"
    attempt = DeliveryAttempt.objects.get(channel=channel)
    assert (attempt.ok, attempt.status_code, attempt.notification.event_type) == (True, 200, "test")
    assert Notification.objects.filter(channel=channel).count() == 1
    assert AuditEvent.objects.filter(action="notification_channel.test", actor_name=admin.username).exists()
    # The refused form's POST answered 400 (and Chromium logs that): deliberate, nothing else went wrong.
    refused = f"{asgi_server.url}/notifications/{team.name}/channels"
    assert [p for p in watcher.problems() if refused not in p] == []


def test_a_team_admin_adds_a_discord_channel_whose_url_stays_masked_and_sends_a_test(
    open_page,
    browser_env,
    asgi_server,
    receiver,  # noqa: F811
):
    """Issue #32, item 6 in the browser: the Discord kind's own field, its URL (a credential) masked on the
    page, a test delivered as an embed that mentions nobody."""
    team = TeamFactory(name="notify-discord")
    admin = MembershipFactory(
        team=team, role=Role.OPERATOR, manages_team=True, user=UserFactory(username="notify-discord-admin")
    ).user
    hook = f"{receiver.url}/api/webhooks/77/DISCORDTOKENBROWSER0"

    page = open_page(admin)
    watcher = Watcher(page, asgi_server.url)
    page.goto(f"/notifications/{team.name}/")
    page.get_by_test_id("channel-new").locator("summary").click()
    page.get_by_label("Name", exact=True).fill("ops-discord")
    page.get_by_label("Kind", exact=True).select_option("discord")
    page.get_by_label("Discord webhook URL (kept encrypted)").fill(hook)
    page.get_by_test_id("channel-create").click()

    row = page.locator('tr[data-channel="ops-discord"]')
    expect(row).to_contain_text("Discord webhook")
    expect(row).to_contain_text("/…SER0")  # scheme, host and the URL's last four characters
    assert "DISCORDTOKENBROWSER0" not in page.content()
    page.get_by_test_id("send-test-ops-discord").click()
    expect(page.get_by_test_id("delivery-row").get_by_test_id("delivery-status")).to_have_text("ok 200")

    [body] = receiver.bodies()
    assert body["allowed_mentions"] == {"parse": []}
    assert body["embeds"][0]["title"] == "Test message for ops-discord"
    assert Channel.objects.get(team=team, name="ops-discord").kind == "discord"
    assert watcher.problems() == []
