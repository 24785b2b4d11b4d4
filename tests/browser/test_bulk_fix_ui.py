"""Bulk fix in Chromium: from a failure group's card to the bulk page, a JSON Patch refused with its field
and reason, previewed on the group's messages (diff and would-pass each, the one it does not apply to
named), applied, run, the bulk row's counts and the reason of the message left unchanged shown, and the
bulk replay of the same selection offered, counted, and run: the fixed payloads land on the source topic with
the replay headers (that the driver passes such a record is test_end_to_end's)."""

# ruff: noqa: F811  # the fixtures are test_dlq_ui's, imported by name

from __future__ import annotations

import json
import re
import threading

import pytest
from django.db import connection
from playwright.sync_api import expect

from access.models import AuditEvent
from dlq import services
from dlq.models import BulkAction, PayloadRevision
from streamforge_core import contract as c
from tests.browser.conftest import screenshot
from tests.browser.test_dlq_ui import bad_push, people, pipeline, store, take_queued_task, team  # noqa: F401
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

COPY_SIZE = '[{"op": "copy", "from": "/payload/distinct_size", "path": "/payload/size"}]'
NOT_HERE = "operation 1 (copy /payload/size): a path it needs is not in this payload"


def test_a_group_is_bulk_fixed_from_its_card_after_a_preview_with_diffs_and_would_pass(
    open_page, asgi_server, people, pipeline, bad_push, kafka_bootstrap
):
    no_distinct = json.loads(bad_push)
    del no_distinct["payload"]["distinct_size"]
    rows = [
        (f"f-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found") for i in range(3)
    ]
    rows.append(
        (b"f-3", json.dumps(no_distinct).encode(), "JsonPathNotFound", "path /payload/size not found")
    )
    parked = store(pipeline, rows)
    group = parked[0].group
    page = open_page(people["operator"])
    page.goto("/dlq/groups/")
    page.locator(f'[data-group="{group.pk}"]').get_by_test_id("group-fix-all").click()
    expect(page).to_have_url(re.compile(rf"/dlq/bulk/\?group={group.pk}&kind=fix$"))
    expect(page.get_by_test_id("bulk-count")).to_be_hidden()  # the generic count/create give way to the fix's
    apply = page.get_by_test_id("bulk-fix-apply")
    expect(apply).to_be_disabled()
    status = page.get_by_test_id("bulk-fix-status")

    page.get_by_test_id("bulk-fix-text").fill('[{"op": "remove", "path": "payload/size"}]')
    page.get_by_test_id("bulk-fix-preview").click()
    expect(status).to_contain_text("fix.patch[0].path: not a JSON Pointer (RFC 6901)")
    page.get_by_test_id("bulk-fix-text").fill(COPY_SIZE)
    page.get_by_test_id("bulk-fix-preview").click()
    expect(status).to_contain_text(
        "4 parked messages selected · 3 of 4 shown would pass after the fix · runs at once"
    )
    verdicts = page.get_by_test_id("bulk-fix-verdict")
    expect(verdicts).to_have_text([" · would pass"] * 3 + [f" · left unchanged: {NOT_HERE}"])
    first = page.get_by_test_id("bulk-fix-sample").first
    expect(first.locator(".diff-add", has_text='"size": ')).to_have_count(1)
    assert not PayloadRevision.objects.exists()  # a preview stores nothing
    screenshot(page, "dlq-bulk-fix-preview")

    page.get_by_test_id("bulk-reason").fill("the relay drops size on force pushes")
    expect(apply).to_be_enabled()
    apply.click()
    expect(page.get_by_test_id("flash")).to_contain_text("Bulk fix #")
    expect(page.get_by_test_id("flash")).to_contain_text("of 4 messages is queued")
    bulk = BulkAction.objects.latest("id")
    assert (bulk.kind, bulk.filters, bulk.total) == ("fix", {"group": group.pk}, 4)
    assert take_queued_task(asgi_server.celery_queue, bulk.pk), "the web process queued no task for a worker"
    worker = threading.Thread(target=lambda: (services.run_bulk(bulk_id=bulk.pk), connection.close()))
    worker.start()
    worker.join(30)
    row = page.locator(f'tr[data-bulk="{bulk.pk}"]')
    expect(row.locator('[data-field="state"]')).to_have_text("completed")
    expect(row.locator('[data-field="counts"]')).to_have_text("4 / 4 · 3 ok · 1 failed")
    expect(row.get_by_test_id("bulk-fix-failures")).to_have_text(f"1 left unchanged: {NOT_HERE}")
    assert AuditEvent.objects.filter(action="dlq.fix", details__bulk=bulk.pk).count() == 3
    row.get_by_test_id("bulk-fix-replay").click()  # optionally replayed afterwards, as a bulk replay
    expect(page).to_have_url(re.compile(rf"/dlq/bulk/\?kind=replay&group={group.pk}$"))
    expect(page.get_by_test_id("bulk-kind")).to_have_value("replay")
    expect(page.get_by_test_id("bulk-form").locator("select[name=group]")).to_have_value(str(group.pk))

    # ... counted: the one left unchanged would fail again; left out, the three fixed are replayed.
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("would-fail-summary")).to_contain_text("1 of 4 would fail again at pushes")
    page.get_by_test_id("exclude-failing").click()
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("3 parked messages match")
    page.get_by_test_id("bulk-reason").fill("the fixed force pushes")
    page.get_by_test_id("bulk-create").click()
    expect(page.get_by_test_id("flash")).to_contain_text("of 3 messages is queued")
    replay = BulkAction.objects.latest("id")
    assert take_queued_task(asgi_server.celery_queue, replay.pk)
    worker = threading.Thread(target=lambda: (services.run_bulk(bulk_id=replay.pk), connection.close()))
    worker.start()
    worker.join(30)
    expect(page.locator(f'tr[data-bulk="{replay.pk}"] [data-field="counts"]')).to_have_text(
        "3 / 3 · 3 ok · 0 failed"
    )

    # On the source topic: the fixed payloads with the replay headers, for the pipeline's destination.
    source = pipeline.current_revision.spec["source"]["topics"][0]
    landed = consume_all(kafka_bootstrap, source)
    fixed_ones = [d for d in parked if d.pk != parked[3].pk]
    assert sorted(r.header(c.H_REPLAY_OF) for r in landed) == sorted(d.coordinates for d in fixed_ones)
    for record in landed:
        event = json.loads(record.value)
        assert event["payload"]["size"] == event["payload"]["distinct_size"]
        assert record.header(c.H_REPLAY_DESTINATIONS) == "pushes"
        assert record.header(c.H_REPLAYED_BY) == people["operator"].username
        assert record.header(c.H_REPLAY_SIGNATURE)
        assert record.header("trace-id") == "t-1"  # the original headers kept
