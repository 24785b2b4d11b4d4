"""Redrive policies in Chromium (issue #32, 2): an operator creates a policy from its page with a window and a
short delay; it waits; an approver approves it on the approvals page; the beat's tick starts a run, which a
worker runs; the policy's page lists it and links to the run's own page with its audit events; the operator
pauses the policy from its page."""

# ruff: noqa: F811  # the fixtures are test_dlq_ui's, imported by name

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from dlq import services
from dlq.models import DeadLetter, RedrivePolicy
from dlq.services import redrive
from tests.browser.conftest import screenshot
from tests.browser.test_dlq_ui import people, pipeline, store, team  # noqa: F401
from tests.dlq.conftest import EVENTS

pytestmark = [pytest.mark.browser, pytest.mark.kafka]


def test_a_policy_is_created_approved_run_and_paused_in_the_browser(
    open_page, asgi_server, people, pipeline, monkeypatch
):
    sent: list[int] = []
    monkeypatch.setattr(redrive, "enqueue_bulk", lambda bulk: sent.append(bulk.pk))
    events = EVENTS.read_bytes().splitlines()[:3]
    parked = store(
        pipeline, [(f"t-{i}".encode(), e, "RetryExhausted", "broker timed out") for i, e in enumerate(events)]
    )
    DeadLetter.objects.filter(pk__in=[d.pk for d in parked]).update(
        last_failed_at=timezone.now() - timedelta(minutes=5)
    )

    page = open_page(people["operator"])
    page.goto(f"/pipelines/{pipeline.name}/")
    page.get_by_test_id("link-redrive").click()
    form = page.get_by_test_id("redrive-create")
    form.locator("#rp-name").fill("transient-nightly")
    form.locator("#rs-delay").fill("60")
    form.locator("#rs-attempts").fill("0")
    page.get_by_test_id("redrive-submit").click()
    expect(page.get_by_test_id("redrive-error")).to_have_text("max_attempts: an integer from 1 to 20")
    form.locator("#rs-attempts").fill("2")
    page.get_by_test_id("redrive-submit").click()
    expect(page.get_by_test_id("redrive-state")).to_have_text("awaiting approval")
    expect(page.get_by_test_id("redrive-pending")).to_contain_text("waits for an approver")
    expect(page.get_by_test_id("redrive-description")).to_contain_text(
        "RetryExhausted after 60 s, at most 2 attempts"
    )
    screenshot(page, "dlq-redrive-awaiting")
    policy = RedrivePolicy.objects.get(name="transient-nightly")

    approver = open_page(people["approver"])
    approver.goto("/dlq/approvals/")
    row = approver.locator("[data-testid=approval-row]", has_text="redrive policy transient-nightly")
    expect(row).to_contain_text("create")
    row.get_by_test_id("approve").click()
    approver.locator("#confirm-submit").click()
    expect(approver.locator("[data-testid=approval-row]", has_text="transient-nightly")).to_have_count(0)

    [run] = redrive.tick().started
    assert sent == [run]
    worker = threading.Thread(target=lambda: (services.run_bulk(bulk_id=run), connection.close()))
    worker.start()
    worker.join(30)
    page.goto(f"/dlq/redrive/{policy.pk}/")
    expect(page.get_by_test_id("redrive-state")).to_have_text("active")
    expect(page.get_by_test_id("redrive-run")).to_have_count(1)
    expect(page.get_by_test_id("redrive-run")).to_contain_text("3 / 3 · 3 ok · 0 failed")
    screenshot(page, "dlq-redrive-policy")
    page.get_by_test_id("redrive-run").locator("a").click()
    expect(page.get_by_test_id("bulk-action")).to_contain_text("a run of redrive policy transient-nightly")
    expect(page.get_by_test_id("bulk-state")).to_have_text("completed")
    expect(page.get_by_test_id("bulk-events")).to_contain_text("dlq.bulk_create")
    expect(page.get_by_test_id("bulk-events")).to_contain_text("dlq.bulk_complete")

    page.goto(f"/dlq/redrive/{policy.pk}/")
    page.get_by_test_id("redrive-pause").click()
    page.locator("#confirm-reason").fill("upstream incident")
    page.locator("#confirm-submit").click()
    expect(page.get_by_test_id("redrive-state")).to_have_text("paused")
    expect(page.get_by_test_id("redrive-paused-reason")).to_have_text("paused by olga: upstream incident")
    expect(page.get_by_test_id("redrive-resume")).to_be_visible()
    assert RedrivePolicy.objects.get(pk=policy.pk).state == "paused"
