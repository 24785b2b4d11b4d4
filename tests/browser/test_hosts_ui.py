"""The Hosts page in a real browser: its rows follow the runners without a reload, and a refresh never
wipes a drain form an admin has open."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import expect

from pipelines.host_views import REFRESH_SECONDS
from pipelines.models import RunnerHost
from tests.factories import runner_host

#: Long enough for one live refresh to have happened, with room for a busy machine.
AFTER_A_REFRESH_MS = (REFRESH_SECONDS + 5) * 1000


def test_the_hosts_page_follows_a_lost_host_and_a_new_one_without_a_reload(open_page, admin_user):
    runner_host("ui-runner-a")
    page = open_page(admin_user)
    page.goto("/hosts/")
    expect(page.get_by_test_id("host-state-ui-runner-a")).to_have_text("up")

    RunnerHost.objects.filter(name="ui-runner-a").update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=10)
    )
    runner_host("ui-runner-b")
    expect(page.get_by_test_id("host-state-ui-runner-a")).to_have_text("lost", timeout=AFTER_A_REFRESH_MS)
    expect(page.get_by_test_id("host-state-ui-runner-b")).to_have_text("up", timeout=AFTER_A_REFRESH_MS)
    expect(page.get_by_test_id("hosts-refreshed")).to_contain_text("refreshed at")

    # An open drain form is kept as typed: the refresh waits until it is closed.
    row = page.locator('tr[data-host="ui-runner-b"]')
    row.get_by_text("Drain", exact=True).click()
    page.locator("#drain-reason-ui-runner-b").fill("kernel patch")
    RunnerHost.objects.filter(name="ui-runner-b").delete()
    page.wait_for_timeout(AFTER_A_REFRESH_MS)
    expect(page.locator("#drain-reason-ui-runner-b")).to_have_value("kernel patch")
    row.get_by_text("Drain", exact=True).click()  # closes the form
    expect(page.locator('tr[data-host="ui-runner-b"]')).to_have_count(0, timeout=AFTER_A_REFRESH_MS)
