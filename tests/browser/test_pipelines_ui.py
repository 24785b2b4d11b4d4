"""The pipeline UI in a real Chromium against a really running daphne (HTTP + websockets) and the real Redis.

Progress reaches the page along the production path from the Redis stream on: the test appends driver
progress events (the driver's own event shape) to ``streamforge:progress``, ``pipelines.progress.ingest``
(what the beat runs every 2 s) stores them and broadcasts through the Redis channel layer, daphne's
websocket consumer forwards them, and the page's JavaScript updates. A real Spark driver is not started:
its 20-40 s start-up on this 2-core machine would dominate the run, and the driver's publishing of these
events is covered by tests/pipelines/test_managed_pipeline.py.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from playwright.sync_api import expect

from access.models import AuditEvent, Role
from pipelines import progress
from pipelines.models import MetricSample, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline, revise_pipeline
from pipelines.supervision.status import announce_status
from streamforge_core import contract as c
from tests.browser.conftest import in_thread, screenshot
from tests.factories import TeamFactory, member
from tests.pipelines.conftest import github_spec

pytestmark = [pytest.mark.browser, pytest.mark.redis]


@pytest.fixture
def team():
    return TeamFactory(name="data-platform")


@pytest.fixture
def admin_user(team):
    return member(team, Role.ADMIN, username="ada")


@pytest.fixture
def running(admin_user, team, settings):
    """A pipeline (unique name: the Redis channel layer is shared) with a RUNNING run, and a progress
    consumer group of this test's own, created before any event is appended."""
    settings.PROGRESS_CONSUMER_GROUP = f"browser-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(settings.REDIS_URL)
    progress.ensure_group(client, settings.PROGRESS_CONSUMER_GROUP)
    pipeline = create_pipeline(
        actor=admin_user,
        name=f"github-{uuid.uuid4().hex[:6]}",
        team=team,
        spec=github_spec(),
        description="GitHub events",
    )
    run = PipelineRun.objects.create(
        pipeline=pipeline, revision=pipeline.current_revision, run_id=uuid.uuid4(), attempt=1,
        state=PipelineState.RUNNING, host="worker-1", pid=4242,
    )  # fmt: skip
    Pipeline.objects.filter(pk=pipeline.pk).update(state=PipelineState.RUNNING, desired_state="running")
    yield run
    client.xgroup_destroy(c.PROGRESS_STREAM, settings.PROGRESS_CONSUMER_GROUP)


def driver_event(run, batch_id, *, consumed, ends, latest, dead=0, duration_ms=180.0):
    """A progress event shaped like ``pipelines.spark.driver._progress_event`` (two source partitions)."""
    return {
        "type": "progress", "pipeline": run.pipeline.name, "revision": 1, "run_id": str(run.run_id),
        "batch_id": batch_id, "time_ms": int(time.time() * 1000), "duration_ms": duration_ms,
        "mode": "at_least_once", "consumed": consumed, "already_committed": 0, "lost": 0,
        "destinations": {
            "pushes": {"produced": consumed // 2, "filtered": consumed - consumed // 2 - dead, "dead_lettered": dead},
            "pull-requests": {"produced": consumed // 4, "filtered": consumed - consumed // 4 - dead, "dead_lettered": dead},
        },
        "dead_lettered": {"MessageDeserialization": dead} if dead else {},
        "dlq_records": dead, "retries": batch_id % 3, "dlq_retries": 0,
        "offsets": {
            "github.events": {
                str(p): {"start": ends[p] - consumed // 2, "end": ends[p], "latest": latest[p]} for p in (0, 1)
            }
        },
    }  # fmt: skip


def publish_and_ingest(*events) -> None:
    """Append events to the real progress stream and run one ingest pass, in a thread of its own: the
    broadcast uses async_to_sync, which cannot run in the thread where Playwright keeps its event loop."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for body in events:
        client.xadd(c.PROGRESS_STREAM, {"event": json.dumps(body)})
    failures: list[BaseException] = []

    def ingest() -> None:
        try:
            report = progress.ingest()
            assert report.stored == len(events), report
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=ingest)
    worker.start()
    worker.join(30)
    assert not failures, failures


def test_an_operator_logs_in_and_sees_rate_and_lag_change_without_a_reload(open_page, running, team):
    operator = member(team, Role.OPERATOR, username="oti")
    operator.set_password("correct-horse-battery-9")
    operator.save()
    page = open_page()
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/"))
    page.fill("input[name=username]", "oti")
    page.fill("input[name=password]", "correct-horse-battery-9")
    page.click("button[type=submit]")
    expect(page.get_by_test_id("roles")).to_contain_text("data-platform · operator")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")

    row = page.locator(f'tr[data-pipeline="{running.pipeline.name}"]')
    expect(row.locator('[data-field="lag"]')).to_have_text("\N{EN DASH}")  # no batch yet
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    publish_and_ingest(driver_event(running, 0, consumed=1200, ends=(600, 600), latest=(900, 1000), dead=6))
    expect(row.locator('[data-field="lag"]')).to_have_text("700")
    expect(row.locator('[data-field="worst_partition"]')).to_have_text("github.events/1: 400")
    expect(row.locator('[data-field="consumed_per_second"]')).to_have_text("20")  # 1,200 records / 60 s
    # Dead-lettered records reach the DLQ backlog through the DLQ ingester, not progress events (that is
    # covered by tests/browser/test_dlq_ui.py): the backlog of this pipeline's parked messages stays 0.
    expect(row.get_by_test_id("dlq-backlog")).to_have_text("0")

    publish_and_ingest(driver_event(running, 1, consumed=600, ends=(900, 900), latest=(950, 960)))
    expect(row.locator('[data-field="lag"]')).to_have_text("110")
    expect(row.locator('[data-field="consumed_per_second"]')).to_have_text("30")  # 1,800 / 60 s
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "overview")


def test_the_pipeline_page_draws_live_charts_and_confirms_a_stop(open_page, running, admin_user):
    page = open_page(admin_user)
    page.goto(f"/pipelines/{running.pipeline.name}/")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    for batch in range(4):
        publish_and_ingest(
            driver_event(
                running,
                batch,
                consumed=400,
                ends=(200 * (batch + 1), 210 * (batch + 1)),
                latest=(1000, 1100),
                dead=batch,
                duration_ms=150.0 + 40 * batch,
            )
        )
    expect(page.locator('[data-stat="lag"]')).to_have_text(f"{(1000 - 800) + (1100 - 840):,}")
    expect(page.locator('[data-stat="last_batch"]')).to_contain_text("#3")
    # 0+1+2+3 records dead-lettered, each failing both destinations: 6 DLQ records, 12 destination outcomes
    expect(page.locator('[data-stat="dlq_records"]')).to_have_text("6")
    expect(page.get_by_test_id("dead-lettered-outcomes")).to_have_text(
        "12 destination outcomes dead-lettered"
    )
    assert page.evaluate("Chart.getChart('chart-lag').data.datasets[0].data.length") >= 1
    # The rates leave out the bucket still filling (it would dip at "now"): their point comes once it is full.
    page.wait_for_function(
        "() => Chart.getChart('chart-rates').data.datasets[0].data.length >= 1", timeout=15_000
    )
    assert page.evaluate("Chart.getChart('chart-dlq').data.labels") == ["MessageDeserialization"]
    assert page.evaluate("Chart.getChart('chart-partitions').data.datasets[0].data") == [200, 260]
    screenshot(page, "pipeline")

    page.get_by_test_id("action-stop").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("input[name=reason]").fill("maintenance window")
    page.get_by_test_id("confirm-submit").click()
    expect(page.locator(".flash")).to_contain_text("stop requested")
    assert Pipeline.objects.get(pk=running.pipeline.pk).desired_state == "stopped"
    assert AuditEvent.objects.filter(action="pipeline.stop", reason="maintenance window").exists()


def test_lifecycle_buttons_follow_the_state_and_a_saved_revision_says_restart_to_apply(
    open_page, running, admin_user
):
    """#18 item 3: Start is disabled while the pipeline is wanted running, Stop once it is not; after r2 is
    saved the header and the overview say "running r1, r2 saved" (live) with a restart to apply it."""
    pipeline = running.pipeline
    page = open_page(admin_user)
    page.goto(f"/pipelines/{pipeline.name}/")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    expect(page.get_by_test_id("action-start")).to_be_disabled()
    expect(page.get_by_test_id("action-stop")).to_be_enabled()
    expect(page.get_by_test_id("action-restart")).to_be_enabled()
    expect(page.get_by_test_id("revision-shown")).to_have_text("revision 1")
    expect(page.get_by_test_id("revision-note")).to_be_hidden()

    spec = github_spec()
    spec["destinations"][0]["filter"] = "/type,!=,IssuesEvent"
    in_thread(
        lambda: revise_pipeline(actor=admin_user, pipeline=pipeline, spec=spec, comment="only real pushes")
    )
    expect(page.get_by_test_id("revision-shown")).to_have_text("running r1, r2 saved")
    note = page.get_by_test_id("revision-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("runs revision 1")
    screenshot(page, "pipeline-revision-saved")
    note.get_by_test_id("restart-to-apply").click()
    expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
    expect(page.locator("#confirm-title")).to_contain_text("Restart")
    page.locator("#confirm-cancel").click()

    page.goto("/")
    expect(page.locator(f'tr[data-pipeline="{pipeline.name}"] [data-field="revision"]')).to_have_text(
        "running r1, r2 saved"
    )

    page.goto(f"/pipelines/{pipeline.name}/")
    page.get_by_test_id("action-stop").click()
    page.get_by_test_id("confirm-submit").click()
    expect(page.locator(".flash")).to_contain_text("stop requested")
    # Wanted stopped, the driver still finishing: nothing more to stop; start (again) is offered.
    expect(page.get_by_test_id("action-stop")).to_be_disabled()
    expect(page.get_by_test_id("action-start")).to_be_enabled()
    expect(page.get_by_test_id("action-restart")).to_be_disabled()

    # The run ends: no driver runs, so no "running r1" any more.
    def stopped() -> None:
        PipelineRun.objects.filter(pk=running.pk).update(state=PipelineState.STOPPED)
        locked = Pipeline.objects.get(pk=pipeline.pk)
        locked.state = PipelineState.STOPPED
        locked.save(update_fields=["state"])
        with transaction.atomic():
            announce_status(locked)

    in_thread(stopped)
    expect(page.get_by_test_id("revision-shown")).to_have_text("revision 2")
    expect(page.locator('#pipeline [data-field="state"]')).to_have_text("stopped")


def test_charts_break_over_a_stopped_period_and_leave_out_the_filling_bucket(open_page, running, admin_user):
    """#18 item 3: a period without batches is a gap in the lines (not a ramp drawn across it), the newest,
    still filling bucket does not drop the rates towards zero, the window can be chosen, and the time axis
    has labels on round times across it."""
    now = int(time.time() * 1000)
    bucket = 5000
    start = now // bucket * bucket

    def sample(batch_id: int, at: int, lag: int) -> MetricSample:
        return MetricSample(
            pipeline=running.pipeline, run=running, batch_id=batch_id, time_ms=at, duration_ms=200,
            consumed=5000, produced=5000, filtered=0, dead_lettered=0, dlq_records=0, lag=lag,
        )  # fmt: skip

    # ten minutes ago: 6 batches of 5,000 records, one per 5-s bucket; then the driver was stopped for eight
    # minutes (lag grew to 10,000 unseen); now 6 more, the newest in the bucket that is still filling
    before = [sample(i, start - 600_000 + i * bucket + 100, 0) for i in range(6)]
    after = [sample(6 + i, start - 5 * bucket + i * bucket + 100, 10_000 - 1000 * i) for i in range(6)]
    MetricSample.objects.bulk_create(before + after)

    page = open_page(admin_user)
    page.goto(f"/pipelines/{running.pipeline.name}/")
    expect(page.get_by_test_id("chart-bucket")).to_contain_text("points of 5 s")
    lag = page.evaluate("Chart.getChart('chart-lag').data.datasets[0].data")
    values = [point["y"] for point in lag]
    assert values.count(None) == 1, values  # one gap: no line across the stopped period
    gap = values.index(None)
    assert (values[gap - 1], values[gap + 1]) == (0, 10_000)
    consumed = page.evaluate("Chart.getChart('chart-rates').data.datasets[0].data")
    drawn_at = page.evaluate("Chart.getChart('chart-rates').options.scales.x.max")
    complete = [p["x"] for p in lag if p["y"] is not None and p["x"] + bucket <= drawn_at]
    assert len([p for p in lag if p["y"] is not None]) == 12
    # 5,000 records per 5 s in every complete bucket; the one still filling at drawing time is left out
    assert [p["y"] for p in consumed if p["y"] is not None] == [1000.0] * len(complete)
    assert all(p["x"] + bucket <= drawn_at for p in consumed)
    ticks = page.evaluate("Chart.getChart('chart-lag').scales.x.ticks.map(t => t.value)")
    assert 4 <= len(ticks) <= 8, ticks
    assert all(t % 120_000 == 0 for t in ticks), ticks  # every 2 minutes on the minute

    page.get_by_test_id("chart-range").get_by_role("link", name="1h").click()
    expect(page).to_have_url(re.compile(r"range=1h"))
    expect(page.get_by_test_id("chart-bucket")).to_contain_text("points of 30 s")
    ticks = page.evaluate("Chart.getChart('chart-lag').scales.x.ticks.map(t => t.value)")
    assert 4 <= len(ticks) <= 8, ticks
    assert all(t % 600_000 == 0 for t in ticks), ticks
    screenshot(page, "pipeline-charts-gap")


def test_a_viewer_sees_no_mutation_buttons_and_a_forged_post_is_refused(open_page, admin_user, team):
    pipeline = create_pipeline(
        actor=admin_user, name=f"gh-{uuid.uuid4().hex[:6]}", team=team, spec=github_spec()
    )
    viewer = member(team, Role.VIEWER, username="vic")
    page = open_page(viewer)
    page.goto(f"/pipelines/{pipeline.name}/")
    expect(page.locator("h1")).to_contain_text(pipeline.name)
    expect(page.get_by_test_id("actions").locator("button, a")).to_have_count(0)
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    response = page.request.post(
        f"/pipelines/{pipeline.name}/start/", form={"csrfmiddlewaretoken": token, "reason": "forged"}
    )
    assert response.status == 403
    assert Pipeline.objects.get(pk=pipeline.pk).desired_state == "stopped"
    page.goto("/")
    expect(page.get_by_test_id("new-pipeline")).to_have_count(0)


def test_the_editor_shows_a_dsl_error_with_its_position_and_dry_runs_the_draft(open_page, admin_user):
    page = open_page(admin_user)
    page.goto("/pipelines/new/")
    page.fill("input[name=name]", "draft-pipeline")
    page.fill('input[name="source.topics"]', "github.events")
    page.fill('input[name="destinations.0.name"]', "pushes")
    page.fill('input[name="destinations.0.topic"]', "github.pushes")
    filter_input = page.locator('input[name="destinations.0.filter"]')
    filter_input.press_sequentially("/type,=~~,PushEvent", delay=15)
    status = page.locator('[data-field-name="destinations.0.filter"] [data-dsl-status]')
    expect(status).to_contain_text("DslParse at 6")
    expect(status.locator("mark")).to_have_text("=")
    filter_input.fill("")
    filter_input.press_sequentially("/type,==,PushEvent", delay=15)
    expect(status).to_contain_text("parses")
    page.fill('input[name="destinations.0.transform"]', "EXTRACT:/actor/login,login")

    page.get_by_test_id("dry-run-messages").fill(
        '{"type": "PushEvent", "actor": {"login": "octocat"}}\n{"type": "WatchEvent"}\n{"type": "PushEvent"}\nnot json'
    )
    page.get_by_test_id("dry-run").click()
    rows = page.get_by_test_id("dry-run-output").locator("tbody tr")
    expect(rows).to_have_count(4)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.outcome)") == [
        "produced", "filtered", "dead_lettered", "dead_lettered",
    ]  # fmt: skip
    expect(rows.nth(0)).to_contain_text('{"login":"octocat"}')
    expect(rows.nth(2)).to_contain_text("JsonPathNotFound")
    expect(rows.nth(3)).to_contain_text("MessageDeserialization")
    screenshot(page, "editor")

    page.get_by_test_id("save").click()
    expect(page).to_have_url(re.compile(r"/pipelines/draft-pipeline/$"))
    assert Pipeline.objects.get(name="draft-pipeline").current_revision.number == 1


def test_the_live_indicator_shows_reconnecting_while_the_server_is_down(open_page, asgi_server, admin_user):
    page = open_page(admin_user)
    page.goto("/")
    indicator = page.get_by_test_id("live-indicator")
    expect(indicator).to_have_text("live")
    asgi_server.stop()
    try:
        expect(indicator).to_have_text("reconnecting")
    finally:
        asgi_server.start()
    expect(indicator).to_have_text("live", timeout=20_000)
