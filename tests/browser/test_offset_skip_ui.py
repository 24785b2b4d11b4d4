"""Skipping past a poison record in a real browser (issue #32, item 3): an operator opens the pipeline page,
follows "Skip past an offset…", asks for the dry run of a skip past offset 5 on partition 0 (the checkpoint
is at 3: three records), gives a reason and requests it; an approver approves it on the approvals page, where
it is named with its range; once a worker applied it, the offsets page shows it done with a link to the three
Skipped dead letters' list. The checkpoint is a stopped pipeline's, written in Spark 4's format."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from playwright.sync_api import expect

from access.models import Role
from dlq.models import OffsetSkip, OffsetSkipState
from dlq.services import offset_skips
from pipelines.services import create_pipeline
from pipelines.supervision import checkpoint_dir
from tests.browser.conftest import in_thread, screenshot
from tests.dlq.conftest import github_spec
from tests.dlq.test_offset_skips import spark_checkpoint
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import produce

pytestmark = [pytest.mark.browser, pytest.mark.kafka]


@pytest.fixture
def people():
    team = TeamFactory(name="data-platform")
    return {
        "team": team,
        "operator": member(team, Role.OPERATOR, username="olga"),
        "approver": member(team, Role.APPROVER, username="abe"),
        "admin": member(team, Role.ADMIN, username="ada"),
    }


@pytest.fixture
def pipeline(people, kafka_admin, kafka_bootstrap):
    """A stopped pipeline: its topics on the broker, 10 records on partition 0 of its source, and a checkpoint
    at offset 3 where the web process looks for it."""
    suffix = uuid.uuid4().hex[:8]
    made = create_pipeline(
        actor=people["admin"], name=f"github-{suffix}", team=people["team"],
        spec=github_spec(f"github.events-{suffix}", suffix),
    )  # fmt: skip
    spec = made.current_revision.spec
    topics = [spec["source"]["topics"][0], *(d["topic"] for d in spec["destinations"]), spec["dlq"]["topic"]]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    produce(
        kafka_bootstrap, topics[0], [(f"k{i}".encode(), json.dumps({"id": i}).encode()) for i in range(10)]
    )
    folder = Path(checkpoint_dir(made.name))
    spark_checkpoint(folder.parent, made.name, {topics[0]: {"0": 3}})
    yield made
    shutil.rmtree(folder, ignore_errors=True)
    for future in kafka_admin.delete_topics(topics).values():
        future.result(timeout=30)


def test_an_operator_requests_a_skip_after_its_dry_run_and_an_approver_approves_it(
    open_page, people, pipeline, monkeypatch
):
    monkeypatch.setattr(offset_skips, "enqueue_apply", lambda skip, countdown=0: None)
    # Given the pipeline page, the operator follows "Skip past an offset…"
    page = open_page(people["operator"])
    page.goto(f"/pipelines/{pipeline.name}/")
    page.get_by_test_id("link-offsets").click()
    rows = page.get_by_test_id("partitions")
    expect(rows.locator("tr[data-partition='0']")).to_contain_text("3")  # where the pipeline resumes
    # When they ask for the dry run of a skip past offset 5 on partition 0
    page.get_by_test_id("offset-0").fill("5")
    page.get_by_test_id("dry-run-0").click()
    # Then it counts the three records that are copied to the DLQ, then skipped
    expect(page.get_by_test_id("plan-records")).to_have_text("3")
    expect(page.get_by_test_id("dry-run")).to_contain_text("offsets 3 to 5")
    assert not OffsetSkip.objects.exists()
    # and with a reason they request it
    page.get_by_test_id("reason").fill("poison record at 5")
    page.get_by_test_id("request-skip").click()
    expect(page.locator(".flash")).to_contain_text("requested: an approver of data-platform decides")
    expect(page.get_by_test_id("skip-row")).to_contain_text("requested")
    screenshot(page, "offset-skip-requested")
    skip = OffsetSkip.objects.get()
    assert (skip.requested_by_id, skip.past_offset, skip.partition, skip.reason) == (
        people["operator"].pk,
        5,
        0,
        "poison record at 5",
    )

    # When an approver approves it on the approvals page, where it is named with its range
    approver = open_page(people["approver"])
    approver.goto("/dlq/approvals/")
    row = approver.locator("[data-testid=approval-row]", has_text="past offset 5 on partition 0")
    expect(row).to_contain_text("3 records copied to the DLQ first")
    row.get_by_test_id("approve").click()
    approver.locator("#confirm-submit").click()
    expect(approver.locator("[data-testid=approval-row]", has_text="past offset 5")).to_have_count(0)
    skip.refresh_from_db()
    assert (skip.state, skip.decided_by_id) == (OffsetSkipState.APPROVED, people["approver"].pk)

    # and a worker applies it, the offsets page shows it done, with a link to its Skipped dead letters
    in_thread(lambda: offset_skips.apply_skip(skip_id=skip.pk))
    page.reload()
    done = page.get_by_test_id("skip-row")
    expect(done).to_contain_text("done")
    expect(done).to_contain_text("copied [3, 6)")
    expect(page.get_by_test_id("skipped-dead-letters")).to_have_text("3 Skipped dead letters")
    expect(rows.locator("tr[data-partition='0'] td").nth(4)).to_have_text("6")
    page.get_by_test_id("skipped-dead-letters").click()
    expect(page).to_have_url(f"/dlq/?pipeline={pipeline.name}&error_type=Skipped", ignore_case=True)
