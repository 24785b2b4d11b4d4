"""On-call triage in a real Chromium (issue #30, items 4, 5, 7 and 8): what a person sees on the pipeline page
(labelled numbers, links to its other pages, a Runs table that follows the driver, a 7-day chart of hourly
points with dates on its axis), on a phone at 390x844 (the overview's lag, backlog and alerts first, the DLQ list
as cards with error type, destination and age, filters and navigation folded away) and on a laptop at 1440 px
(a header on one row; disabled buttons that look disabled in both themes).

The dead letter is stored by the real ingest code and the run's status reaches the page over the real Redis
channel layer and websocket (``announce_status``, as the supervisor sends it).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import expect

from access.models import Role
from pipelines.alerts import DLQ_BACKLOG_RECORDS, dlq_backlog_rule
from pipelines.models import Alert, MetricSample, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline
from pipelines.supervision.status import announce_status
from tests.browser.conftest import in_thread, screenshot
from tests.browser.test_layout_theme import PHONE, horizontal_overflow
from tests.dlq.conftest import dlq_headers, github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

HOUR_MS = 3600 * 1000


def park_one(pipeline, *, offset: int) -> int:
    """Store one dead letter of ``pipeline`` (JsonPathNotFound at destination ``pushes``, failed 5 minutes ago)
    through the real ingest code, in a thread (its broadcast cannot run beside Playwright's loop); its id."""
    from dlq.ingest import TopicOwner, store_batch
    from streamforge_core.kafka import Record

    topic = pipeline.current_revision.spec["dlq"]["topic"]
    record = Record(
        topic=topic,
        partition=0,
        offset=offset,
        key=f"order-{offset:04d}".encode(),
        value=b'{"type": "PushEvent"}',
        headers=dlq_headers(
            pipeline,
            error_type="JsonPathNotFound",
            message="path /payload/size not found",
            source_offset=offset,
            destination="pushes",
        ),
        timestamp_ms=int(time.time() * 1000) - 5 * 60 * 1000,
    )
    owner = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
    ids: list[int] = []
    in_thread(lambda: ids.extend(store_batch([record], owner).new_ids))
    assert len(ids) == 1
    return ids[0]


@pytest.fixture
def site(browser_env):
    """A pipeline (unique name: the channel layer is shared) with one parked dead letter at destination
    ``pushes`` (stored by the real ingest code), two days of hourly metric samples, an admin and an operator."""
    team = TeamFactory(name=f"triage-{uuid.uuid4().hex[:6]}")
    admin = member(team, Role.ADMIN, username=f"triage-admin-{uuid.uuid4().hex[:6]}")
    operator = member(team, Role.OPERATOR, username=f"triage-op-{uuid.uuid4().hex[:6]}")
    name = f"triage-{uuid.uuid4().hex[:6]}"
    pipeline = create_pipeline(actor=admin, name=name, team=team, spec=github_spec(f"{name}.events", "tr"))
    now_ms = int(time.time() * 1000)
    message = park_one(pipeline, offset=3)
    old_run = PipelineRun.objects.create(
        pipeline=pipeline, revision=pipeline.current_revision, run_id=uuid.uuid4(), attempt=1,
        state=PipelineState.STOPPED, host="worker-1",
    )  # fmt: skip
    MetricSample.objects.bulk_create(
        MetricSample(
            pipeline=pipeline,
            run=old_run,
            batch_id=i,
            time_ms=now_ms - (48 - i) * HOUR_MS + 60_000,
            duration_ms=100.0,
            consumed=3600,
            produced=3600,
            filtered=0,
            dead_lettered=0,
            dlq_records=0,
            lag=1000 + 10 * i,
        )
        for i in range(48)
    )
    return {"admin": admin, "operator": operator, "pipeline": pipeline, "message": message}


def test_the_pipeline_page_labels_its_numbers_links_its_pages_follows_its_runs_and_draws_a_week_hourly(
    open_page, site
):
    pipeline = site["pipeline"]
    firing = dlq_backlog_rule(dead_lettered=DLQ_BACKLOG_RECORDS + 1)
    assert firing is not None
    Alert.objects.create(
        pipeline=pipeline, rule=firing.rule, severity=firing.severity, summary=firing.summary,
        value=firing.value, started_at=timezone.now(), last_seen_at=timezone.now(),
    )  # fmt: skip
    page = open_page(site["operator"])
    page.goto(f"/pipelines/{pipeline.name}/")

    # The alert's banner names its window and since when it fires.
    banner = page.locator('#pipeline [data-field="alerts"] [data-rule="DLQBacklog"]')
    expect(banner).to_contain_text(
        re.compile(
            r"DLQBacklog: \d+ records went to the DLQ in the last \d+ minutes · firing since \w{3} \d+ \d\d:\d\d"
        )
    )

    # Every number says what it counts: the parked backlog beside the cumulative DLQ records, each a link.
    backlog = page.get_by_test_id("tile-backlog")
    expect(backlog).to_contain_text("waiting for a person")
    expect(backlog.locator("[data-stat=dlq_backlog]")).to_have_text("1")
    expect(backlog).to_have_attribute("href", f"/dlq/?pipeline={pipeline.name}&status=parked")
    records = page.get_by_test_id("tile-dlq")
    expect(records).to_contain_text("since created")
    expect(records).to_contain_text("destination outcomes dead-lettered")
    expect(records).to_have_attribute("href", f"/dlq/?pipeline={pipeline.name}")

    # Find your way: its dead letters (filtered), failure groups, topics and test message.
    links = page.get_by_test_id("pipeline-links")
    expect(links.get_by_test_id("link-dlq")).to_have_attribute(
        "href", f"/dlq/?pipeline={pipeline.name}&status=parked"
    )
    expect(links.get_by_test_id("link-groups")).to_have_attribute(
        "href", f"/dlq/groups/?pipeline={pipeline.name}"
    )
    expect(links.get_by_test_id("link-topics")).to_have_attribute(
        "href", f"/pipelines/{pipeline.name}/topics/"
    )
    expect(links.get_by_test_id("link-test-message")).to_have_attribute(
        "href", f"/pipelines/{pipeline.name}/test-message/"
    )

    # The Runs table follows the driver: a new run appears, without a reload, when its status is announced.
    runs = page.get_by_test_id("runs")
    expect(runs.locator("tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")  # both sockets open
    page.evaluate("window.notReloaded = true")

    def start_run() -> None:
        with transaction.atomic():
            run = PipelineRun.objects.create(
                pipeline=pipeline, revision=pipeline.current_revision, run_id=uuid.uuid4(), attempt=2,
                state=PipelineState.RUNNING, host="worker-7", pid=777,
            )  # fmt: skip
            Pipeline.objects.filter(pk=pipeline.pk).update(
                state=PipelineState.RUNNING, desired_state="running"
            )
            announce_status(Pipeline.objects.get(pk=pipeline.pk), run)

    in_thread(start_run)
    expect(runs.locator("tbody tr")).to_have_count(2)
    expect(runs.locator("tbody tr").first).to_contain_text("worker-7 pid 777")
    expect(runs.locator("tbody tr").first.get_by_test_id("run-state")).to_have_text("running")
    expect(page.get_by_test_id("runs-refreshed")).to_contain_text("live")
    assert page.evaluate("window.notReloaded") is True

    # The 7-day window: hourly points, and an axis labelled by dates ("Nov 20"), not "11-20 00:00".
    page.goto(f"/pipelines/{pipeline.name}/?range=7d")
    expect(page.get_by_test_id("chart-bucket")).to_contain_text("hourly points")
    lag = page.evaluate(
        """() => { const c = Chart.getChart("chart-lag");
                   return { xs: c.data.datasets[0].data.filter((p) => p.y !== null).map((p) => p.x),
                            labels: c.scales.x.ticks.map((t) => t.label) }; }"""
    )
    assert len(lag["xs"]) >= 47, lag
    assert {b - a for a, b in zip(lag["xs"], lag["xs"][1:], strict=False)} == {HOUR_MS}, lag["xs"]
    assert 6 <= len(lag["labels"]) <= 8, lag["labels"]
    assert all(re.fullmatch(r"[A-Z][a-z]{2} \d{1,2}", label) for label in lag["labels"]), lag["labels"]
    screenshot(page, "pipeline-week-hourly")


def test_on_a_phone_the_overview_and_dlq_list_put_what_failed_first_and_fold_the_rest(open_page, site):
    page = open_page(site["admin"], **PHONE)
    page.goto("/")
    # The navigation is folded behind "Menu"; the menu opens it.
    toggle = page.get_by_test_id("nav-toggle")
    expect(toggle).to_be_visible()
    expect(page.get_by_test_id("nav-dlq")).to_be_hidden()
    expect(page.get_by_test_id("roles")).to_be_hidden()
    header_height = page.eval_on_selector(".topbar", "(el) => el.getBoundingClientRect().height")
    assert header_height < 70, header_height
    toggle.tap()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.get_by_test_id("nav-dlq")).to_be_visible()
    toggle.tap()
    expect(page.get_by_test_id("nav-dlq")).to_be_hidden()

    # The overview: a card per pipeline, lag, backlog and alerts above the rates and the team, labelled.
    row = page.locator(f'tr[data-pipeline="{site["pipeline"].name}"]')
    top = {
        cls: row.locator(f"td.{cls}").first.bounding_box()["y"]
        for cls in ("ov-lag", "ov-backlog", "ov-alerts", "ov-rate", "ov-team")
    }
    assert max(top["ov-lag"], top["ov-backlog"], top["ov-alerts"]) < min(top["ov-rate"], top["ov-team"]), top
    expect(row.locator("td.ov-backlog")).to_have_text(re.compile(r"^\s*1\s*$"))
    label = row.locator("td.ov-backlog").evaluate("(el) => getComputedStyle(el, '::before').content")
    assert label == '"DLQ backlog"', label
    assert horizontal_overflow(page) <= 0
    screenshot(page, "mobile-overview")

    # The DLQ list: filters folded (their toggle shown), each dead letter a card with error type, destination
    # and age, all within the screen.
    page.goto("/dlq/")
    expect(page.get_by_test_id("filters-toggle")).to_be_visible()
    expect(page.get_by_test_id("apply-filters")).to_be_hidden()
    card = page.locator(f'tr[data-id="{site["message"]}"]')
    for testid, text in (("error-type", "JsonPathNotFound"), ("destination", "pushes"), ("age", "ago")):
        part = card.get_by_test_id(testid)
        expect(part).to_be_visible()
        expect(part).to_contain_text(text)
        box = part.bounding_box()
        assert box["x"] >= 0, (testid, box)
        assert box["x"] + box["width"] <= 390, (testid, box)
    expect(card.get_by_test_id("age")).to_contain_text(re.compile(r"\d+\s+minutes? ago"))
    card_box = card.bounding_box()
    assert card_box["height"] < 200, card_box  # a compact card, not a column of table cells
    page.get_by_test_id("filters-toggle").tap()
    expect(page.get_by_test_id("apply-filters")).to_be_visible()
    assert horizontal_overflow(page) <= 0
    screenshot(page, "mobile-dlq-cards")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_1440_px_the_header_is_one_row_and_disabled_buttons_look_disabled(open_page, site, scheme):
    page = open_page(site["admin"], color_scheme=scheme)
    page.goto(f"/pipelines/{site['pipeline'].name}/")
    expect(page.get_by_test_id("nav-toggle")).to_be_hidden()
    header = page.evaluate(
        """() => { const bar = document.querySelector(".topbar");
                   const kids = Array.from(bar.querySelectorAll("nav a, .who, .theme-choice, .brand, .live"))
                     .filter((el) => el.getClientRects().length);
                   const nav = bar.querySelector("nav"), links = nav.querySelectorAll("a");
                   const after = nav.nextElementSibling.getBoundingClientRect().left;
                   return { height: bar.getBoundingClientRect().height, overflow: bar.scrollWidth - bar.clientWidth,
                            navOverflow: nav.scrollWidth - nav.clientWidth,
                            overlap: links[links.length - 1].getBoundingClientRect().right - after,
                            rightmost: Math.max(...kids.map((el) => el.getBoundingClientRect().right)),
                            tops: [...new Set(Array.from(bar.querySelectorAll("nav a")).map((a) => Math.round(a.getBoundingClientRect().top)))] }; }"""
    )
    assert header["height"] < 60, header
    assert header["overflow"] <= 0, header
    assert header["rightmost"] <= 1440, header
    assert header["navOverflow"] <= 0, header
    assert header["overlap"] <= 0, header  # no link runs under the next item
    assert len(header["tops"]) == 1, header  # every link on one row

    # The pipeline is stopped: Start is offered, Stop and Restart are not, and look it.
    styles = page.evaluate(
        """() => Object.fromEntries(["action-start", "action-stop", "action-restart"].map((id) => {
             const s = getComputedStyle(document.querySelector(`[data-testid=${id}]`));
             return [id, { bg: s.backgroundColor, color: s.color, border: s.borderTopStyle, opacity: s.opacity }];
           }))"""
    )
    muted, panel = page.evaluate(
        """() => { const probe = document.createElement("span"); document.body.appendChild(probe);
                   probe.style.color = "var(--muted)"; probe.style.backgroundColor = "var(--panel-2)";
                   const s = getComputedStyle(probe); const out = [s.color, s.backgroundColor]; probe.remove();
                   return out; }"""
    )
    for disabled in ("action-stop", "action-restart"):
        assert styles[disabled]["color"] == muted, styles
        assert styles[disabled]["bg"] == panel, styles
        assert styles[disabled]["border"] == "dashed", styles
        assert styles[disabled]["opacity"] == "1", styles  # not a paler copy of a live red Stop
    assert styles["action-start"]["bg"] != panel, styles
    assert styles["action-start"]["border"] != "dashed", styles
    screenshot(page, f"header-1440-{scheme}")


def test_a_delete_requested_elsewhere_disables_replay_and_skip_on_an_open_message_page_until_decided(
    open_page, site
):
    from dlq.models import ApprovalRequest, DeadLetter
    from dlq.services import approvals

    team = site["pipeline"].team
    approver = member(team, Role.APPROVER, username=f"triage-approver-{uuid.uuid4().hex[:6]}")
    page = open_page(site["operator"])
    page.goto(f"/dlq/messages/{site['message']}/")
    expect(page.get_by_test_id("replay")).to_be_enabled()
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    expect(page.get_by_test_id("pending-delete")).to_have_count(0)

    dead_letter = DeadLetter.objects.get(pk=site["message"])
    in_thread(
        lambda: approvals.request_delete(actor=site["admin"], dead_letter=dead_letter, reason="GDPR erasure")
    )
    request = ApprovalRequest.objects.get(dead_letter=dead_letter)
    notice = page.get_by_test_id("pending-delete")
    expect(notice).to_contain_text(f"request #{request.pk} by {site['admin'].username} waits for an approver")
    for action in ("replay", "skip"):
        expect(page.get_by_test_id(action)).to_be_disabled()
        expect(page.get_by_test_id(action)).to_have_attribute(
            "title", re.compile("delete request .* waits for approval")
        )
    expect(page.get_by_test_id("request-delete")).to_have_count(0)

    in_thread(lambda: approvals.reject(actor=approver, approval=request, reason="keep it"))
    expect(page.get_by_test_id("pending-delete")).to_have_count(0)
    expect(page.get_by_test_id("replay")).to_be_enabled()
    expect(page.get_by_test_id("skip")).to_be_enabled()


def test_the_bulk_page_lists_the_selected_ids_and_follows_their_statuses(open_page, site):
    from dlq.models import DeadLetter
    from dlq.services.replays import skip

    message = site["message"]
    page = open_page(site["operator"])
    page.goto(f"/dlq/bulk/?ids={message}&kind=skip")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    selected = page.get_by_test_id("bulk-selected")
    expect(selected).to_contain_text("The 1 selected dead letter")
    item = selected.locator(f'li[data-id="{message}"]')
    expect(item.get_by_role("link", name=f"#{message}")).to_have_attribute(
        "href", f"/dlq/messages/{message}/"
    )
    expect(item.locator("[data-field=status]")).to_have_text("parked")
    expect(item).to_contain_text("JsonPathNotFound")

    dead_letter = DeadLetter.objects.get(pk=message)
    in_thread(lambda: skip(actor=site["admin"], dead_letter=dead_letter, reason="handled by hand"))
    expect(item.locator("[data-field=status]")).to_have_text("skipped")


def test_a_group_card_and_its_buttons_count_the_same_set_live_and_runbook_actions_open_what_they_name(
    open_page, site
):
    from dlq.models import DeadLetter, Runbook
    from dlq.services.replays import skip

    pipeline, first = site["pipeline"], site["message"]
    group_id = DeadLetter.objects.get(pk=first).group_id
    Runbook.objects.create(
        team=pipeline.team, group_id=group_id, title="Missing size", body="Add the size, or skip.",
        actions=["fix", "skip", "replay"], created_by=site["admin"],
    )  # fmt: skip
    page = open_page(site["operator"])
    page.goto(f"/dlq/groups/?pipeline={pipeline.name}")
    expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    card = page.locator(f'[data-group="{group_id}"]')
    parked = card.locator("[data-field=parked]")
    replay_all = card.get_by_test_id("group-replay-all")
    expect(parked).to_have_text("1")
    expect(replay_all).to_have_text("Replay all 1 parked…")

    second = park_one(pipeline, offset=4)  # an arrival raises the card and its button together
    expect(parked).to_have_text("2")
    expect(replay_all).to_have_text("Replay all 2 parked…")
    in_thread(
        lambda: skip(actor=site["admin"], dead_letter=DeadLetter.objects.get(pk=first), reason="by hand")
    )
    expect(parked).to_have_text("1")  # one leaving "parked" lowers both
    expect(replay_all).to_have_text("Replay all 1 parked…")

    # The runbook's actions open the action they name on the group's oldest parked dead letter.
    for action in ("fix", "skip", "replay"):
        expect(card.get_by_test_id(f"runbook-{action}")).to_have_attribute(
            "href", f"/dlq/messages/{second}/?action={action}"
        )
    card.get_by_test_id("runbook-skip").click()
    dialog = page.locator("dialog[open]")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"Skip dead letter #{second}?")
    assert page.url.endswith(f"/dlq/messages/{second}/")  # a reload does not open it again
    page.goto(f"/dlq/messages/{second}/?action=fix")
    expect(page.get_by_test_id("fix-text")).to_be_focused()
    expect(page.locator("dialog[open]")).to_have_count(0)
