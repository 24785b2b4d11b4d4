"""On-call truth in Chromium (issue #30, items 1 and 6): a replay asks for confirmation, says it cannot be
undone, names the parked sibling it will not send and keeps the optional reason in the audit; where the
replayed record went then says "not part of this replay" for the destination it was not for; and a record
the pipeline has committed past is never blamed on a stopped pipeline.

The pipeline's part is played by the test (no Spark driver): it writes the pushes record with the lineage
header and commits the pipeline's consumer group, as the driver would. The replay is the web process's own.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from django.db import connection
from playwright.sync_api import expect

from access.models import AuditEvent
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter, Replay
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, Record, consumer_config, producer_config
from tests.browser import test_dlq_ui
from tests.browser.conftest import screenshot
from tests.dlq.conftest import dlq_headers

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

# The DLQ console tests' fixtures: its team and people, a pipeline with its source topic, a push to fix.
team, people, pipeline, bad_push = (
    test_dlq_ui.team,
    test_dlq_ui.people,
    test_dlq_ui.pipeline,
    test_dlq_ui.bad_push,
)
fixed = test_dlq_ui.fixed


def _store_siblings(pipeline, push: bytes) -> list[DeadLetter]:
    """One source record (offset 41 of the source topic) dead-lettered at both destinations, stored through
    the ingest code in a thread of its own (it broadcasts after commit); oldest first."""
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic, partition=0, offset=900 + n, key=b"repo-9", value=push,
            headers=dlq_headers(pipeline, error_type="JsonPathNotFound", message=f"{dest} failed",
                                source_offset=41, destination=dest),
            timestamp_ms=int(time.time() * 1000),
        )
        for n, dest in enumerate(("pushes", "pull-requests"))
    ]  # fmt: skip
    owners = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
    new_ids: list[int] = []

    def ingest() -> None:
        try:
            new_ids.extend(store_batch(records, owners).new_ids)
        finally:
            connection.close()

    worker = threading.Thread(target=ingest)
    worker.start()
    worker.join(30)
    return list(DeadLetter.objects.filter(pk__in=new_ids).order_by("id"))


def test_a_replay_is_confirmed_and_its_outcomes_say_what_it_was_for(
    open_page, people, pipeline, bad_push, kafka_bootstrap
):
    spec = pipeline.current_revision.spec
    source = spec["source"]["topics"][0]
    outputs = [d["topic"] for d in spec["destinations"]]  # created by the pipeline fixture
    pushes_letter, prs_letter = _store_siblings(pipeline, json.dumps(fixed(bad_push, 1)).encode())
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{pushes_letter.pk}/")

    # Item 6: a replay asks first, says what it sends and which sibling it leaves parked.
    page.get_by_test_id("replay").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"Replay #{pushes_letter.pk} to {source}?")
    expect(dialog).to_contain_text("It cannot be undone.")
    expect(dialog).to_contain_text("for destination pushes only")
    expect(dialog).to_contain_text(f"#{prs_letter.pk} (pull-requests): they stay parked")
    expect(dialog).to_contain_text("(optional, kept in the audit log)")
    expect(page.get_by_test_id("confirm-submit")).not_to_have_class("danger")
    screenshot(page, "dlq-replay-confirm")
    assert not Replay.objects.filter(dead_letter=pushes_letter).exists()  # nothing sent before confirming
    page.get_by_test_id("confirm-reason").fill("the producer re-sent the size")
    page.get_by_test_id("confirm-submit").dblclick()  # one confirmation: one replay
    expect(dialog).to_be_hidden()
    expect(page.get_by_test_id("flash")).to_contain_text(f"Replayed to {source} (partition 0, offset 0)")
    expect(page.locator('#message-head [data-field="status"]')).to_have_text("replayed")
    expect(page.locator('#message-audit tr[data-action="dlq.replay"]')).to_contain_text(
        "the producer re-sent the size"
    )
    [attempt] = Replay.objects.filter(dead_letter=pushes_letter)
    assert attempt.destinations == "pushes"
    assert AuditEvent.objects.get(action="dlq.replay", target_id=str(pushes_letter.pk)).reason == (
        "the producer re-sent the size"
    )

    # The pipeline's part: pushes gets the replayed record; the group commits past it and past an
    # ordinary record (offset 1) whose pushes record is not written yet.
    conn = KafkaConnection(kafka_bootstrap)
    producer = Producer(producer_config(conn))
    producer.produce(source, value=json.dumps(fixed(bad_push, 2)).encode())
    producer.produce(outputs[0], value=b'{"actor":"a"}', headers=[(c.H_LINEAGE, f"{source}/0/0".encode())])
    assert producer.flush(10) == 0
    group = Consumer(consumer_config(conn, group_id=f"streamforge-{pipeline.name}"))
    group.commit(offsets=[TopicPartition(source, 0, 2)], asynchronous=False)
    group.close()

    # Item 1: the replay's outcomes: produced at pushes, not part of it at pull-requests.
    page.get_by_test_id("replay-outcomes-link").click()
    expect(page.get_by_test_id("record-outcomes")).to_have_attribute("data-done", "true")
    expect(page.get_by_test_id("replay-for-badge")).to_have_text("a console replay for pushes only")
    expect(page.locator("[data-destination=pushes]")).to_contain_text("produced at 0/0")
    prs = page.locator("[data-destination=pull-requests]")
    expect(prs).to_have_attribute("data-outcome", "not_in_replay")
    expect(prs).to_contain_text("not part of this replay")
    expect(page.get_by_test_id("timed-out")).to_have_count(0)
    screenshot(page, "record-outcomes-replay")

    # Committed past, outcome unknown: the page never asks whether the pipeline is running.
    page.goto(f"/pipelines/{pipeline.name}/topics/{source}/records/0/1/?wait=0")
    expect(page.get_by_test_id("timed-out")).to_contain_text("the pipeline has read and committed past")
    expect(page.get_by_test_id("timed-out")).not_to_contain_text("running")
    expect(page.locator("[data-destination=pushes]")).to_contain_text("committed past this record")


def test_a_bulk_replay_dry_run_says_how_many_would_fail_again_where_and_offers_a_way_around(
    open_page, people, pipeline, bad_push
):
    """Before: the count said "2 parked messages match" and the replay sent the one that fails again."""
    passes, fails = test_dlq_ui.store(
        pipeline,
        [
            (
                b"repo-1",
                json.dumps(fixed(bad_push, 1)).encode(),
                "JsonPathNotFound",
                "path /payload/size not found",
            ),
            (b"repo-2", bad_push, "JsonPathNotFound", "path /payload/size not found"),
        ],
    )
    page = open_page(people["operator"])
    page.goto(f"/dlq/bulk/?pipeline={pipeline.name}&kind=replay")
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("2 parked messages match")
    summary = page.get_by_test_id("would-fail-summary")
    expect(summary).to_contain_text("1 of 2 would fail again at pushes (JsonPathNotFound")
    expect(page.get_by_test_id("bulk-create")).to_be_enabled()  # still the action the person chose
    expect(page.get_by_test_id("exclude-failing")).to_have_text("Leave them out: replay the other 1")
    expect(page.get_by_test_id("skip-failing")).to_have_class("button secondary")
    screenshot(page, "dlq-bulk-would-fail")

    page.get_by_test_id("skip-failing").click()
    expect(page.get_by_test_id("bulk-kind")).to_have_value("skip")
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("1 parked message match")
    page.go_back()
    page.get_by_test_id("bulk-count").click()
    page.get_by_test_id("exclude-failing").click()
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("1 parked message match")
    expect(page.get_by_test_id("bulk-would-fail")).to_be_hidden()
    assert page.url.endswith(f"ids={passes.pk}")
    assert fails.pk != passes.pk


def test_a_bulk_skip_counts_and_leaves_out_the_message_a_pending_delete_holds(
    open_page, asgi_server, people, pipeline, bad_push
):
    """Before: the dry run said "3 parked messages match" and the skip closed the message whose delete an
    approver had yet to decide."""
    from dlq import services
    from dlq.models import ApprovalRequest, BulkAction, Status
    from tests.browser.conftest import in_thread

    rows = [
        (f"h-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found") for i in range(3)
    ]
    parked = test_dlq_ui.store(pipeline, rows)
    held = parked[1]
    in_thread(
        lambda: services.request_delete(actor=people["operator"], dead_letter=held, reason="GDPR erasure")
    )
    request = ApprovalRequest.objects.get(dead_letter=held)
    page = open_page(people["operator"])
    page.goto(f"/dlq/bulk/?pipeline={pipeline.name}&kind=skip")
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text(
        "3 parked messages match · 1 held by a pending delete request (left out: an approver decides them first)"
    )
    page.get_by_test_id("bulk-reason").fill("test traffic")
    page.get_by_test_id("bulk-create").click()
    expect(page.get_by_test_id("flash")).to_contain_text("of 3 messages is queued")
    bulk = BulkAction.objects.latest("id")
    assert test_dlq_ui.take_queued_task(asgi_server.celery_queue, bulk.pk)
    in_thread(lambda: services.run_bulk(bulk_id=bulk.pk))
    row = page.locator(f'tr[data-bulk="{bulk.pk}"]')
    expect(row.locator('[data-field="state"]')).to_have_text("completed")
    expect(row.locator('[data-field="counts"]')).to_have_text("3 / 3 · 2 ok · 1 failed")
    left_out = row.get_by_test_id("bulk-left-out")
    expect(left_out).to_have_text(
        f"#{held.pk} left out: dead letter #{held.pk} has a pending delete request #{request.pk} by "
        f"{people['operator'].username}: an approver decides it first (reject it to replay or skip this message)"
    )
    expect(left_out.get_by_role("link", name=f"#{held.pk}")).to_have_attribute(
        "href", f"/dlq/messages/{held.pk}/"
    )
    held.refresh_from_db()
    assert held.status == Status.PARKED
