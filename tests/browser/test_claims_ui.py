"""Who is on it, in Chromium (issue #32, 4): an operator claims a failure group from its card with a note; the
card, the list rows of its dead letters and a message page say "investigating: olga"; a second operator sees
no Claim button there, only the claim; the claimer releases it."""

# ruff: noqa: F811  # the fixtures are test_dlq_ui's, imported by name

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from access.models import Role
from dlq.models import Claim
from tests.browser.conftest import screenshot
from tests.browser.test_dlq_ui import bad_push, people, pipeline, store, team  # noqa: F401
from tests.factories import member

pytestmark = [pytest.mark.browser, pytest.mark.kafka]


def test_a_group_is_claimed_from_its_card_shown_everywhere_and_released(
    open_page, asgi_server, people, pipeline, bad_push
):
    parked = store(
        pipeline,
        [(f"c-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found") for i in range(2)],
    )
    group = parked[0].group
    page = open_page(people["operator"])
    page.goto(f"/dlq/groups/?pipeline={pipeline.name}")
    card = page.locator(f'[data-group="{group.pk}"]')
    card.get_by_test_id("claim-button").click()
    page.locator("#confirm-reason").fill("the relay drops size; ticket OPS-12")
    page.locator("#confirm-submit").click()
    expect(card.get_by_test_id("claim-chip")).to_contain_text("investigating: olga")
    expect(card.get_by_test_id("claim-chip")).to_contain_text("ticket OPS-12")
    assert Claim.objects.get(group=group).note == "the relay drops size; ticket OPS-12"
    expect(card.get_by_test_id("claim-button")).to_have_text("Edit note…")  # the claimer may change the note
    screenshot(page, "dlq-group-claimed")

    page.goto(f"/dlq/?group={group.pk}")
    expect(page.get_by_test_id("row-claim")).to_have_text(["investigating: olga (its group)"] * 2)

    other = open_page(member(group.team, Role.OPERATOR, username="otto"))
    other.goto(f"/dlq/messages/{parked[0].pk}/")
    expect(other.get_by_test_id("claim-chip")).to_contain_text("investigating: olga (its group)")
    other.goto(f"/dlq/groups/?pipeline={pipeline.name}")
    expect(other.locator(f'[data-group="{group.pk}"]').get_by_test_id("claim-button")).to_have_count(0)

    page.goto(f"/dlq/groups/?pipeline={pipeline.name}")
    card.get_by_test_id("release-button").click()
    page.locator("#confirm-submit").click()
    expect(card.get_by_test_id("claim-chip")).to_have_count(0)
    expect(card.get_by_test_id("claim-button")).to_have_text("Claim…")
    assert Claim.objects.get(group=group).release_reason == "released by hand"
