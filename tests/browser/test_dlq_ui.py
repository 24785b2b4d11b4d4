"""The DLQ console in a real Chromium against a really running daphne (HTTP + websockets), the real Redis
channel layer and the real Kafka broker.

Dead letters are stored through the real ingest code (``dlq.ingest.store_batch``, which broadcasts their
arrival after commit over the Redis channel layer), in a thread of their own: the broadcast uses
async_to_sync, which cannot run in the thread where Playwright keeps its event loop. Replays from the page
are produced by the web process to the pipeline's source topic on the test broker.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from datetime import timedelta

import pytest
import redis
from confluent_kafka.admin import NewTopic
from django.conf import settings
from django.db import connection
from django.db.models import F
from django.utils import timezone
from playwright.sync_api import expect

from access.models import AuditEvent, Role
from dlq import services
from dlq.ingest import TopicOwner, store_batch
from dlq.models import BulkAction, DeadLetter, FailureGroup, GroupHourlyCount, Replay, Status
from pipelines.services import create_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import Record
from tests.browser.conftest import in_thread, screenshot
from tests.dlq.conftest import EVENTS, dlq_headers, github_spec, missing_size_push
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

_offsets = itertools.count(1)


@pytest.fixture
def team():
    return TeamFactory(name="data-platform")


@pytest.fixture
def people(team):
    return {
        "viewer": member(team, Role.VIEWER, username="vic"),
        "operator": member(team, Role.OPERATOR, username="olga"),
        "approver": member(team, Role.APPROVER, username="abe"),
        "admin": member(team, Role.ADMIN, username="ada"),
    }


@pytest.fixture
def pipeline(team, people, kafka_admin):
    """A GitHub-events pipeline (unique names: the broker and the channel layer are shared) whose source
    and destination topics exist on the test broker, so replays land somewhere real."""
    suffix = uuid.uuid4().hex[:8]
    made = create_pipeline(
        actor=people["admin"],
        name=f"github-{suffix}",
        team=team,
        spec=github_spec(f"github.events-{suffix}", suffix),
    )
    # The destination topics too: a replay's prediction names a topic that is not there.
    spec = made.current_revision.spec
    topics = [spec["source"]["topics"][0], *(d["topic"] for d in spec["destinations"])]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    yield made
    for future in kafka_admin.delete_topics(topics).values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def bad_push() -> bytes:
    return missing_size_push(EVENTS.read_bytes().splitlines())


def store(pipeline, rows) -> list[DeadLetter]:
    """Store ``(key, value, error_type, message)`` rows as records of the pipeline's DLQ topic through the
    ingest code, in a thread (see the module docstring); returns the new dead letters, oldest first."""
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic, partition=0, offset=(offset := next(_offsets)), key=key, value=value,
            headers=dlq_headers(pipeline, error_type=error_type, message=message, source_offset=offset),
            timestamp_ms=int(time.time() * 1000),
        )
        for key, value, error_type, message in rows
    ]  # fmt: skip
    owners = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
    new_ids: list[int] = []
    failures: list[BaseException] = []

    def ingest() -> None:
        try:
            new_ids.extend(store_batch(records, owners).new_ids)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=ingest)
    worker.start()
    worker.join(30)
    assert not failures, failures
    return list(DeadLetter.objects.filter(pk__in=new_ids).order_by("id"))


def fixed(value: bytes, size: int) -> dict:
    event: dict = json.loads(value)
    event["payload"]["size"] = size
    return event


def test_an_operator_fixes_a_payload_checks_it_replays_it_and_sees_the_audit_entry(
    open_page, people, pipeline, bad_push, kafka_bootstrap
):
    [dead] = store(pipeline, [(b"repo-1", bad_push, "JsonPathNotFound", "path /payload/size not found")])
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    head = page.get_by_test_id("message-head")
    expect(head.locator('[data-field="status"]')).to_have_text("parked")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    expect(page.get_by_test_id("value-pretty")).to_contain_text('"type": "PushEvent"')
    page.get_by_test_id("value-tab-hex").click()
    expect(page.get_by_test_id("value-hex")).to_contain_text("00000000  7b")
    expect(page.get_by_test_id("value-pretty")).to_be_hidden()

    editor = page.get_by_test_id("fix-text")
    editor.fill('{\n  "type": "PushEvent",\n  "payload": {"size": 1,}\n}')
    validity = page.get_by_test_id("fix-validity")
    expect(validity).to_contain_text("Invalid JSON at line 3, column 25")
    expect(page.get_by_test_id("fix-save")).to_be_disabled()

    editor.fill(json.dumps(fixed(bad_push, 1), indent=2))
    expect(validity).to_have_text("valid JSON")
    expect(page.get_by_test_id("would-pass").get_by_test_id("verdict")).to_have_text("would pass")
    expect(page.get_by_test_id("would-pass")).to_contain_text("produced")
    expect(page.get_by_test_id("fix-diff").locator(".diff-add")).to_contain_text(['"size": 1'])
    expect(page.get_by_test_id("fix-save")).to_be_disabled()  # no reason yet
    page.get_by_test_id("fix-reason").fill("size from the commit count")
    page.get_by_test_id("value-tab-pretty").click()
    screenshot(page, "dlq-message")
    page.get_by_test_id("fix-save").click()
    expect(page.get_by_test_id("flash")).to_contain_text("Saved as payload revision 1; it would pass now")
    expect(page.get_by_test_id("payload-revision")).to_contain_text("size from the commit count")

    page.get_by_test_id("replay").click()  # asks first (a replay cannot be undone); the reason is optional
    page.get_by_test_id("confirm-submit").dblclick()  # one confirmation: one replay, however many clicks
    expect(head.locator('[data-field="status"]')).to_have_text("replayed")
    expect(page.locator('#message-audit tr[data-action="dlq.replay"]')).to_contain_text("olga")
    expect(page.get_by_test_id("fix-editor")).to_have_count(0)
    assert Replay.objects.filter(dead_letter=dead).count() == 1
    [record] = consume_all(kafka_bootstrap, pipeline.current_revision.spec["source"]["topics"][0])
    assert json.loads(record.value)["payload"]["size"] == 1


def test_a_replay_that_would_fail_again_asks_first_naming_the_destination(
    open_page, people, pipeline, bad_push, kafka_bootstrap
):
    """Never fixed, the payload would be dead-lettered again at "pushes": the Replay button opens a
    confirmation that says where and why, and sends only with a reason (forced, audited)."""
    [dead] = store(pipeline, [(b"repo-2", bad_push, "JsonPathNotFound", "path /payload/size not found")])
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    page.get_by_test_id("replay").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("would dead-letter this payload again at pushes (JsonPathNotFound")
    page.get_by_test_id("confirm-submit").click()  # no reason: refused in the page, nothing sent
    expect(page.get_by_test_id("confirm-error")).to_contain_text("A reason is required")
    assert consume_all(kafka_bootstrap, pipeline.current_revision.spec["source"]["topics"][0]) == []
    page.get_by_test_id("confirm-reason").fill("r2 of the pipeline reads the size from the commits")
    page.get_by_test_id("confirm-submit").click()
    expect(dialog).to_be_hidden()
    expect(page.locator('#message-head [data-field="status"]')).to_have_text("replayed")
    expect(page.locator('#message-audit tr[data-action="dlq.replay"]')).to_contain_text("r2 of the pipeline")
    assert len(consume_all(kafka_bootstrap, pipeline.current_revision.spec["source"]["topics"][0])) == 1


def test_a_skip_needs_a_reason_and_a_delete_request_is_approved_by_a_second_person(
    open_page, people, pipeline, bad_push
):
    skipped, erased = store(
        pipeline,
        [
            (b"k-skip", bad_push, "JsonPathNotFound", "path /payload/size not found"),
            (b"k-erase", b'{"email": "someone@example.org"}', "MessageDeserialization", "not an event"),
        ],
    )
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{skipped.pk}/")
    page.get_by_test_id("skip").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    page.get_by_test_id("confirm-submit").click()  # no reason
    expect(page.get_by_test_id("confirm-error")).to_contain_text("A reason is required")
    assert DeadLetter.objects.get(pk=skipped.pk).status == Status.PARKED
    page.get_by_test_id("confirm-reason").fill("duplicate of an event already delivered")
    page.get_by_test_id("confirm-submit").click()
    expect(dialog).to_be_hidden()
    expect(page.locator('#message-head [data-field="status"]')).to_have_text("skipped")
    expect(page.locator('#message-audit tr[data-action="dlq.skip"]')).to_contain_text("duplicate of an event")

    page.goto(f"/dlq/messages/{erased.pk}/")
    page.get_by_test_id("request-delete").click()
    page.get_by_test_id("confirm-reason").fill("carries a customer's e-mail address")
    page.get_by_test_id("confirm-submit").click()
    expect(page.locator('#message-audit tr[data-action="dlq.delete_requested"]')).to_be_visible()
    expect(page.get_by_test_id("pending-approvals")).to_have_text("1")
    expect(page.get_by_test_id("request-delete")).to_have_count(0)  # one pending request at a time

    approver = open_page(people["approver"])  # a second browser context: another person
    approver.goto("/dlq/approvals/")
    row = approver.get_by_test_id("approval-row")
    expect(row).to_contain_text("carries a customer's e-mail address")
    expect(row).to_contain_text("olga")
    row.get_by_test_id("approve").click()
    approver.get_by_test_id("confirm-submit").click()
    expect(approver.get_by_test_id("no-pending")).to_be_visible()
    expect(approver.locator("#approvals-decided")).to_contain_text("approved")
    expect(approver.get_by_test_id("pending-approvals")).to_have_count(0)

    # The operator's page learns of it over the websocket, without a reload.
    expect(page.locator('#message-head [data-field="status"]')).to_have_text("deleted")
    expect(page.locator('#message-audit tr[data-action="dlq.delete"]')).to_contain_text("abe")
    assert DeadLetter.objects.get(pk=erased.pk).value is None


def test_a_viewer_sees_no_mutation_buttons_and_a_forged_request_is_refused(
    open_page, people, pipeline, bad_push
):
    [dead] = store(pipeline, [(b"k", bad_push, "JsonPathNotFound", "path /payload/size not found")])
    services.request_delete(actor=people["operator"], dead_letter=dead, reason="PII")
    page = open_page(people["viewer"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    expect(page.get_by_test_id("error-type")).to_have_text("JsonPathNotFound")
    expect(page.get_by_test_id("actions").locator("button")).to_have_count(0)
    expect(page.get_by_test_id("fix-editor")).to_have_count(0)
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    response = page.request.post(
        f"/api/dlq/messages/{dead.pk}/skip/", data={"reason": "forged"}, headers={"X-CSRFToken": token}
    )
    assert response.status == 403
    assert DeadLetter.objects.get(pk=dead.pk).status == Status.PARKED
    page.goto("/dlq/approvals/")
    expect(page.get_by_test_id("approval-row")).to_be_visible()
    expect(page.get_by_test_id("approve")).to_have_count(0)
    page.goto("/dlq/bulk/")
    expect(page.get_by_test_id("bulk-form")).to_have_count(0)


def test_new_dead_letters_appear_on_the_list_and_the_overview_without_a_reload(
    open_page, people, pipeline, bad_push
):
    store(
        pipeline,
        [
            (f"old-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found")
            for i in range(2)
        ],
    )
    page = open_page(people["operator"])
    overview = page.context.new_page()
    overview.goto("/")
    backlog = overview.locator(f'tr[data-pipeline="{pipeline.name}"]').get_by_test_id("dlq-backlog")
    expect(backlog).to_have_text("2")
    page.goto(f"/dlq/?pipeline={pipeline.name}")
    rows = page.get_by_test_id("dlq-table").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    expect(overview.get_by_test_id("live-indicator")).to_have_text("live")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    arrived = store(
        pipeline,
        [
            (b"new-1", bad_push, "JsonPathNotFound", "path /payload/size not found"),
            (b"new-2", b"\x00\x01", "MessageDeserialization", "not UTF-8"),
            (b"new-3", b"{}", "RetryExhausted", "produce timed out"),
        ],
    )
    banner = page.get_by_test_id("new-banner")
    expect(banner).to_contain_text("3 new dead letters")
    expect(page.locator('#status-tabs [data-status="parked"] [data-count]')).to_have_text("5")
    expect(backlog).to_have_text("5")
    page.get_by_test_id("show-new").click()
    expect(rows).to_have_count(5)
    expect(rows.first).to_have_attribute("data-id", str(arrived[-1].pk))
    expect(page.locator("tr.new-row")).to_have_count(3)
    expect(banner).to_be_hidden()
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "dlq-list")

    in_thread(lambda: services.skip(actor=people["operator"], dead_letter=arrived[0], reason="duplicate"))
    expect(backlog).to_have_text("4")  # leaving "parked" lowers the backlog too


def take_queued_task(queue: str, object_id: int, task: str = "dlq.run_bulk") -> bool:
    """Take the ``task`` the web process queued for this object (a bulk action by default) off its Celery
    queue in Redis (the browser tests' own queue; no worker runs here: the test runs the task's body itself)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    queued: list[bytes] = client.lrange(queue, 0, -1)  # type: ignore[assignment]  # sync client
    for raw in queued:
        message = json.loads(raw)
        headers = message.get("headers", {})
        if headers.get("task") == task and headers.get("argsrepr") == f"({object_id},)":
            client.lrem(queue, 1, raw.decode())
            return True
    return False


def test_a_group_card_counts_an_arrival_live_in_parked_all_time_and_the_last_24_hours(
    open_page, people, pipeline, bad_push
):
    """The card's three counts move together when a dead letter of the group arrives (the last 24 hours
    used to stay one behind until a reload)."""
    [first] = store(pipeline, [(b"g-1", bad_push, "JsonPathNotFound", "path /payload/size not found")])
    page = open_page(people["viewer"])
    page.goto("/dlq/groups/")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    card = page.locator(f'[data-group="{first.group_id}"]')
    expect(card.locator('[data-field="last_24h"]')).to_have_text("1")
    store(pipeline, [(b"g-2", bad_push, "JsonPathNotFound", "path /payload/size not found")])
    for field in ("parked", "count", "last_24h"):
        expect(card.locator(f'[data-field="{field}"]')).to_have_text("2")


def test_a_runbook_leads_to_a_counted_bulk_replay_whose_progress_moves_live(
    open_page, asgi_server, people, pipeline, bad_push, team
):
    parked = store(
        pipeline,
        [(f"r-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found") for i in range(4)],
    )
    group = parked[0].group
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    earlier = ((20, 3), (14, 9), (9, 4), (5, 12), (2, 7))  # arrivals before these four, already handled
    for hours_ago, count in earlier:
        # The four stored above count in the hour of their failure time, which may be one of these hours.
        row, created = GroupHourlyCount.objects.get_or_create(
            group=group, hour=now - timedelta(hours=hours_ago), defaults={"count": count}
        )
        if not created:
            GroupHourlyCount.objects.filter(pk=row.pk).update(count=F("count") + count)
    FailureGroup.objects.filter(pk=group.pk).update(
        count=F("count") + sum(n for _, n in earlier), first_seen=now - timedelta(hours=20)
    )
    services.save_runbook(
        actor=people["admin"],
        team=team,
        title="Push events without a size",
        body=(
            "The GitHub relay drops `payload.size` on **force pushes**.\n\n"
            "1. Check the relay's release notes.\n2. Once it is fixed, *bulk replay* the group.\n\n"
            "See [the relay runbook](https://example.org/relay)."
        ),
        actions=["bulk_replay", "fix"],
        group=group,
    )
    page = open_page(people["operator"])
    page.goto("/dlq/groups/")
    card = page.locator(f'[data-group="{group.pk}"]')
    expect(card.get_by_test_id("runbook")).to_contain_text("drops payload.size on force pushes")
    expect(card.locator('[data-field="parked"]')).to_have_text("4")
    expect(card.get_by_test_id("sparkline").locator("polyline")).to_have_count(1)
    screenshot(page, "dlq-groups")

    card.get_by_test_id("runbook-bulk-replay").click()
    expect(page).to_have_url(re.compile(rf"/dlq/bulk/\?group={group.pk}&kind=replay$"))
    form = page.get_by_test_id("bulk-form")
    expect(form.locator("select[name=group]")).to_have_value(str(group.pk))
    create = page.get_by_test_id("bulk-create")
    expect(create).to_be_disabled()
    page.get_by_test_id("bulk-rate").fill("2")
    page.get_by_test_id("bulk-reason").fill("relay fixed in 4.2.1")
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("4 parked messages match · runs at once")
    expect(create).to_be_enabled()
    page.get_by_test_id("bulk-rate").fill("3")  # any change to the selection form needs a new count
    expect(create).to_be_disabled()
    page.get_by_test_id("bulk-rate").fill("2")
    page.get_by_test_id("bulk-count").click()
    expect(create).to_be_enabled()
    create.click()
    expect(page.get_by_test_id("flash")).to_contain_text("of 4 messages is queued")
    bulk = BulkAction.objects.latest("id")
    assert (bulk.kind, bulk.filters, bulk.rate_limit, bulk.total) == ("replay", {"group": group.pk}, 2, 4)
    row = page.locator(f'tr[data-bulk="{bulk.pk}"]')
    expect(row.locator('[data-field="state"]')).to_have_text("queued")
    expect(row.get_by_test_id("bulk-cancel")).to_be_visible()

    assert take_queued_task(asgi_server.celery_queue, bulk.pk), "the web process queued no task for a worker"
    worker = threading.Thread(target=lambda: (services.run_bulk(bulk_id=bulk.pk), connection.close()))
    worker.start()  # what the Celery worker's task does: dlq.tasks.run_bulk calls only this
    expect(row.locator('[data-field="counts"]')).to_contain_text("2 / 4")
    screenshot(page, "dlq-bulk")
    worker.join(30)
    expect(page.locator(f'tr[data-bulk="{bulk.pk}"] [data-field="state"]')).to_have_text("completed")
    expect(page.locator(f'tr[data-bulk="{bulk.pk}"] [data-field="counts"]')).to_have_text(
        "4 / 4 · 4 ok · 0 failed"
    )
    assert set(DeadLetter.objects.filter(group=group).values_list("status", flat=True)) == {Status.REPLAYED}
    # Audited once for the action, with its counts; each message points back to it.
    done = AuditEvent.objects.get(action="dlq.bulk_complete", target_id=str(bulk.pk))
    assert (done.details["processed"], done.details["succeeded"]) == (4, 4)
    assert DeadLetter.objects.filter(group=group, closed_by_bulk=bulk).count() == 4


def test_an_admin_writes_a_runbook_beside_its_group(open_page, people, pipeline, bad_push):
    [dead] = store(pipeline, [(b"k", bad_push, "JsonPathNotFound", "path /payload/size not found")])
    page = open_page(people["admin"])
    page.goto(f"/dlq/groups/?pipeline={pipeline.name}")
    card = page.locator(f'[data-group="{dead.group_id}"]')
    expect(card).to_contain_text("No runbook for this failure yet.")
    card.get_by_text("Add a runbook").click()
    form = card.locator(".runbook-form")
    form.locator("input[name=title]").fill("Size missing")
    form.locator("textarea[name=body]").fill("Ask the relay team.\n\n- then **bulk skip**\n- <b>not bold</b>")
    form.locator('input[name=actions][value="bulk_skip"]').check()
    form.get_by_role("button", name="Add runbook").click()
    runbook = page.locator(f'[data-group="{dead.group_id}"]').get_by_test_id("runbook")
    expect(runbook).to_contain_text("Size missing")
    expect(runbook.locator("strong")).to_have_text("bulk skip")
    expect(runbook).to_contain_text("<b>not bold</b>")  # shown as the text it is
    expect(runbook.get_by_role("link", name="Bulk skip this group")).to_be_visible()
    assert AuditEvent.objects.filter(action="runbook.create", actor_name="ada").exists()


def test_an_operator_finds_and_works_messages_with_filters_selection_and_the_keyboard(
    open_page, people, pipeline, bad_push
):
    """#18 item 4: a destination filter, a failure-group picker, page sizes, whole rows that open the
    message, a selection of rows made with the mouse and the keyboard that becomes a bulk replay of exactly
    those ids (counted first, as any bulk action), "/" to search, "?" for the keys, and a skip link."""
    parked = store(
        pipeline,
        [
            (f"k-{i:02}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found")
            for i in range(30)
        ],
    )
    pulls = [dl.pk for dl in parked[:10]]
    DeadLetter.objects.filter(pk__in=pulls).update(destination="pull-requests")
    group = parked[0].group
    page = open_page(people["operator"])
    page.goto("/dlq/?size=25")
    expect(page.locator("#dlq-rows tr[data-id]")).to_have_count(25)
    page.get_by_test_id("page-size").locator("select").select_option("100")
    expect(page).to_have_url(re.compile(r"size=100"))
    expect(page.locator("#dlq-rows tr[data-id]")).to_have_count(30)

    page.get_by_test_id("filter-destination").select_option("pull-requests")
    page.get_by_test_id("filter-group").select_option(str(group.pk))
    page.get_by_test_id("apply-filters").click()
    expect(page).to_have_url(re.compile(rf"destination=pull-requests.*group={group.pk}"))
    expect(page.locator("#dlq-rows tr[data-id]")).to_have_count(10)
    expect(page.locator('#status-tabs [data-status="parked"] [data-count]')).to_have_text("10")
    assert {
        int(i) for i in page.locator("#dlq-rows tr[data-id]").evaluate_all("rs => rs.map(r => r.dataset.id)")
    } == set(pulls)

    # A click on the row (its error text, not its link) opens the message.
    newest = max(pulls)
    page.locator(f'#dlq-rows tr[data-id="{newest}"] .error-cell').click()
    expect(page).to_have_url(re.compile(rf"/dlq/messages/{newest}/$"))
    page.go_back()

    # Keyboard: j j x ticks the second row; two more ticked with the mouse.
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("x")
    rows = page.locator("#dlq-rows tr[data-id]")
    expect(rows.nth(1)).to_have_class(re.compile("cursor"))
    rows.nth(3).locator("[data-select]").check()
    rows.nth(4).locator("[data-select]").check()
    expect(page.get_by_test_id("selection-bar")).to_contain_text("3 selected")
    chosen = sorted(int(rows.nth(i).get_attribute("data-id")) for i in (1, 3, 4))
    screenshot(page, "dlq-selection")
    page.get_by_test_id("replay-selected").click()
    expect(page).to_have_url(re.compile(r"/dlq/bulk/\?ids="))
    expect(page.get_by_test_id("ids-chip")).to_have_text("only the 3 selected dead letters")
    page.get_by_test_id("bulk-reason").fill("fixed upstream: these three only")
    page.get_by_test_id("bulk-count").click()
    expect(page.get_by_test_id("bulk-preview")).to_contain_text("3 parked messages match")
    page.get_by_test_id("bulk-create").click()
    expect(page.get_by_test_id("flash")).to_contain_text("of 3 messages is queued")
    bulk = BulkAction.objects.latest("id")
    assert (bulk.kind, sorted(bulk.filters["ids"]), bulk.total) == ("replay", chosen, 3)

    # "/" searches, "?" lists the keys, Tab from the top reaches the skip link first.
    page.goto("/dlq/")
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("/")
    expect(page.get_by_test_id("search")).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("?")
    expect(page.get_by_test_id("keys-help")).to_be_visible()
    expect(page.get_by_test_id("keys-help")).to_contain_text("next / previous dead letter")
    page.keyboard.press("Escape")
    page.goto("/dlq/")
    page.keyboard.press("Tab")
    expect(page.get_by_test_id("skip-link")).to_be_focused()


def test_a_group_offers_replay_and_delete_of_all_and_the_delete_says_how_long_kafka_keeps_it(
    open_page, people, pipeline, bad_push, kafka_admin
):
    """#18 items 4 and 5: per-group "replay all" and "request delete of all" (a bulk delete that always
    waits for an approver), and the delete dialogs say plainly that the DLQ topic keeps its copy, with the
    topic's retention.ms read from the broker."""
    dlq_topic = pipeline.current_revision.spec["dlq"]["topic"]
    week = 7 * 24 * 3600 * 1000
    kafka_admin.create_topics([NewTopic(dlq_topic, 1, 1, config={"retention.ms": str(week)})])[
        dlq_topic
    ].result(timeout=30)
    try:
        parked = store(
            pipeline,
            [
                (f"d-{i}".encode(), bad_push, "JsonPathNotFound", "path /payload/size not found")
                for i in range(3)
            ],
        )
        group = parked[0].group
        page = open_page(people["operator"])
        page.goto("/dlq/groups/")
        card = page.locator(f'[data-group="{group.pk}"]')
        expect(card.get_by_test_id("group-replay-all")).to_have_text("Replay all 3 parked…")
        card.get_by_test_id("group-delete-all").click()
        expect(page).to_have_url(re.compile(rf"/dlq/bulk/\?group={group.pk}&kind=delete$"))
        note = page.get_by_test_id("delete-note")
        expect(note).to_be_visible()
        expect(note).to_contain_text(f"{dlq_topic}: at least 7 days (retention.ms = {week})")
        page.get_by_test_id("bulk-reason").fill("customer asked for erasure")
        page.get_by_test_id("bulk-count").click()
        expect(page.get_by_test_id("bulk-preview")).to_contain_text("3 parked messages match")
        expect(page.get_by_test_id("bulk-preview")).to_contain_text("approv")
        page.get_by_test_id("bulk-kind").select_option("replay")
        expect(note).to_be_hidden()

        page.goto(f"/dlq/messages/{parked[0].pk}/")
        page.get_by_test_id("request-delete").click()
        expect(page.locator("dialog[open]")).to_contain_text(
            f"the copy in the DLQ topic {dlq_topic} stays there at least 7 days (retention.ms = {week})"
        )
    finally:
        kafka_admin.delete_topics([dlq_topic])[dlq_topic].result(timeout=30)


def test_a_source_records_dead_letters_are_shown_together_and_fixed_and_replayed_as_one(
    open_page, people, pipeline, bad_push, kafka_bootstrap
):
    """#18 item 1: a push without a size failed two destinations: its page names the sibling, and one fix
    with "Fix and replay all together" replays both, each for its own destination only, so neither
    destination can receive the record twice."""
    pushes, prs = store(
        pipeline,
        [(b"repo-9", bad_push, "JsonPathNotFound", "path /payload/size not found") for _ in range(2)],
    )
    DeadLetter.objects.filter(pk=prs.pk).update(
        source_offset=pushes.source_offset, destination="pull-requests"
    )
    in_thread(
        lambda: services.fix_payload(
            actor=people["operator"],
            dead_letter=pushes,
            value=json.dumps(fixed(bad_push, 1)).encode(),
            reason="size from the commit count",
        )
    )
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{pushes.pk}/")
    siblings = page.get_by_test_id("siblings")
    expect(siblings).to_contain_text(f"pull-requests (#{prs.pk}, JsonPathNotFound, parked)")
    siblings.get_by_test_id("replay-with-siblings").click()
    dialog = page.locator("dialog[open]")
    expect(dialog).to_contain_text("every destination receives the source record once")
    page.get_by_test_id("confirm-reason").fill("relay fixed: both destinations")
    page.get_by_test_id("confirm-submit").click()
    expect(page.get_by_test_id("flash")).to_contain_text(
        f"Replayed #{pushes.pk} (pushes), #{prs.pk} (pull-requests)"
    )
    expect(page.get_by_test_id("message-head").locator('[data-field="status"]')).to_have_text("replayed")
    # The sibling's status follows, without a reload (issue #30 item 5).
    expect(siblings).to_contain_text(f"pull-requests (#{prs.pk}, JsonPathNotFound, replayed)")
    screenshot(page, "dlq-siblings-replayed")
    sent = consume_all(kafka_bootstrap, pipeline.current_revision.spec["source"]["topics"][0])
    assert sorted(r.header(c.H_REPLAY_DESTINATIONS) for r in sent) == ["pull-requests", "pushes"]
    assert all(json.loads(r.value)["payload"]["size"] == 1 for r in sent)
    assert set(DeadLetter.objects.filter(pk__in=[pushes.pk, prs.pk]).values_list("status", flat=True)) == {
        Status.REPLAYED
    }
