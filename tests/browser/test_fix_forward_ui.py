"""Fix forward in Chromium (issue #32, 1): after a revision that gives a missing field a default, an operator
scans the pipeline's dead letters, watches the scan's progress, sees what now passes beside the revision diff,
and replays exactly those through the bulk page's rules (counted first), each only to the destination it
failed."""

# ruff: noqa: F811  # the fixtures are test_dlq_ui's, imported by name

from __future__ import annotations

import copy
import re
import threading

import pytest
from django.db import connection
from playwright.sync_api import expect

from dlq import services
from dlq.models import BulkAction, FixForwardScan
from pipelines.services import revise_pipeline
from streamforge_core import contract as c
from tests.browser.conftest import screenshot
from tests.browser.test_dlq_ui import bad_push, people, pipeline, store, take_queued_task, team  # noqa: F401
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]


def in_a_worker(work) -> None:
    """Run ``work`` in a thread with its own database connection, as a Celery worker would."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)


def test_a_scan_after_a_new_revision_offers_exactly_what_now_passes_and_replays_it(
    open_page, asgi_server, people, pipeline, bad_push, kafka_bootstrap
):
    parked = store(
        pipeline,
        [(f"m-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found") for i in range(3)]
        + [(b"g", b"{not json", "MessageDeserialization", "not JSON")],
    )
    spec = copy.deepcopy(pipeline.current_revision.spec)
    spec["error_handling"] = {"missing_field_behavior": "null"}
    revise_pipeline(actor=people["admin"], pipeline=pipeline, spec=spec, comment="size may be missing")

    page = open_page(people["operator"])
    page.goto(f"/pipelines/{pipeline.name}/")
    page.get_by_test_id("link-fix-forward").click()
    expect(page).to_have_url(re.compile(r"/dlq/fix-forward/\?pipeline="))
    page.get_by_test_id("fix-forward-pipeline").select_option(pipeline.name)
    page.get_by_test_id("fix-forward-scan").click()
    expect(page).to_have_url(re.compile(r"/dlq/fix-forward/\d+/$"))
    expect(page.get_by_test_id("fix-forward-state")).to_have_text("queued")
    scan = FixForwardScan.objects.latest("id")
    assert (scan.revision, scan.trigger, scan.total) == (2, "manual", 4)
    assert take_queued_task(asgi_server.celery_queue, scan.pk, "dlq.run_fix_forward"), (
        "the web process queued no scan for a worker"
    )
    in_a_worker(lambda: services.run_fix_forward_scan(scan_id=scan.pk))

    # the page follows the scan and shows the result beside the diff that explains it
    expect(page.get_by_test_id("fix-forward-state")).to_have_text("done", timeout=10_000)
    expect(page.get_by_test_id("fix-forward-candidates")).to_have_text("3")
    expect(page.get_by_test_id("fix-forward-diff").locator(".diff-add")).to_contain_text(
        ['"missing_field_behavior": "null"']
    )
    groups = page.get_by_test_id("fix-forward-group")
    expect(groups).to_have_count(2)
    expect(groups.first.locator('[data-field="candidates"]')).to_have_text("3")
    screenshot(page, "dlq-fix-forward")

    page.get_by_test_id("fix-forward-replay").click()
    expect(page).to_have_url(re.compile(rf"/dlq/bulk/\?kind=replay&pipeline=.+&fix_forward={scan.pk}$"))
    expect(page.get_by_test_id("fix-forward-chip")).to_contain_text(f"fix-forward scan #{scan.pk}")
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("3 parked messages match")
    expect(page.get_by_test_id("bulk-would-fail")).to_be_hidden()
    page.get_by_test_id("bulk-reason").fill("revision 2 defaults a missing size")
    page.get_by_test_id("bulk-create").click()
    expect(page.get_by_test_id("flash")).to_contain_text("of 3 messages is queued")
    replay = BulkAction.objects.latest("id")
    assert replay.filters == {"pipeline": pipeline.name, "fix_forward": scan.pk}
    assert take_queued_task(asgi_server.celery_queue, replay.pk)
    in_a_worker(lambda: services.run_bulk(bulk_id=replay.pk))
    expect(page.locator(f'tr[data-bulk="{replay.pk}"] [data-field="counts"]')).to_have_text(
        "3 / 3 · 3 ok · 0 failed"
    )
    landed = consume_all(kafka_bootstrap, pipeline.current_revision.spec["source"]["topics"][0])
    assert sorted(r.header(c.H_REPLAY_OF) for r in landed) == sorted(d.coordinates for d in parked[:3])
    assert {r.header(c.H_REPLAY_DESTINATIONS) for r in landed} == {"pushes"}
