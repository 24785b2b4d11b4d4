"""The console on a phone (390x844, touch) and in both colour themes, in a real Chromium: the DLQ list and a
message page fit the screen and work by touch; the light theme follows the system setting unless the header's
selector says otherwise, the choice survives a reload, and the pipeline page's charts change colours with
it; both palettes meet WCAG AA for text. Screenshots of each go to artifacts/screenshots/ (for the README).
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from access.models import Role
from dlq.ingest import TopicOwner, store_batch
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from tests.browser.conftest import screenshot
from tests.dlq.conftest import dlq_headers, github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

#: Every top-level page of a signed-in person.
PAGES = [
    "/",
    "/pipelines/{pipeline}/",
    "/pipelines/{pipeline}/edit/",
    "/dlq/",
    "/dlq/messages/{message}/",
    "/dlq/groups/",
    "/dlq/bulk/",
    "/dlq/retention/",
    "/dlq/approvals/",
    "/audit/",
    "/clusters/",
    "/status/",
]

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}

#: Text colour / background pairs of the palette the pages use; each must reach WCAG AA (4.5:1).
TEXT_ON_BACKGROUND = [
    ("--text", "--bg"),
    ("--text", "--panel"),
    ("--text", "--panel-2"),
    ("--muted", "--bg"),
    ("--muted", "--panel"),
    ("--muted", "--panel-2"),
    ("--accent", "--bg"),
    ("--accent", "--panel"),
    ("--ok", "--panel"),
    ("--bad", "--panel"),
    ("--warn", "--panel"),
    ("--info", "--panel"),
    ("--ok", "--ok-bg"),
    ("--warn", "--warn-bg"),
    ("--bad", "--bad-bg"),
    ("--info", "--info-bg"),
    ("--on-accent", "--accent"),
    ("--on-bad", "--bad"),
    ("--on-warn", "--warn"),
    ("--alert-warning-text", "--alert-warning-bg"),
    ("--alert-critical-text", "--alert-critical-bg"),
    ("--error-box-text", "--error-box-bg"),
    ("--warning-box-text", "--warning-box-bg"),
]


@pytest.fixture
def site(browser_env):
    """A pipeline of a team with an operator and one parked dead letter (stored by the real ingest code, in a
    thread: its broadcast cannot run beside Playwright's event loop)."""
    team = TeamFactory(name="layout-theme")
    admin = member(team, Role.ADMIN, username="layout-admin")
    operator = member(team, Role.OPERATOR, username="layout-operator")
    pipeline = create_pipeline(
        actor=admin, name="layout-theme-pipeline", team=team, spec=github_spec("layout-theme.events", "lt")
    )
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    record = Record(
        topic=topic,
        partition=0,
        offset=7,
        key=b"customer-8f3a2c-0001",
        value=b'{"type": "PushEvent", "repo": {"name": "streamforge/web"}, "payload": {"commits": []}}',
        headers=dlq_headers(
            pipeline,
            error_type="JsonPathNotFound",
            message="path /payload/size not found in the record of layout-theme.events/0/7",
            source_offset=7,
        ),
        timestamp_ms=int(time.time() * 1000),
    )
    parked: list[int] = []

    def ingest() -> None:
        try:
            parked.extend(
                store_batch([record], {topic: TopicOwner(team.pk, pipeline.pk, pipeline.name)}).new_ids
            )
        finally:
            connection.close()

    worker = threading.Thread(target=ingest)
    worker.start()
    worker.join(30)
    assert len(parked) == 1
    return {"admin": admin, "operator": operator, "pipeline": pipeline, "message": parked[0]}


def horizontal_overflow(page: Page) -> int:
    """How many CSS pixels the page is wider than the screen (0 when it fits)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def unreachable(page: Page, selector: str) -> list[str]:
    """The elements matching ``selector`` that are not on screen horizontally or are covered where one would
    tap them (their centre); the page is scrolled to each first."""
    missed: list[str] = page.evaluate(
        """(selector) => Array.from(document.querySelectorAll(selector)).filter((el) => {
             el.scrollIntoView({block: "center"});
             const r = el.getBoundingClientRect();
             const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
             return !(r.width > 0 && r.left >= 0 && r.right <= window.innerWidth && hit && el.contains(hit));
           }).map((el) => el.textContent.trim())""",
        selector,
    )
    return missed


def relative_luminance(color: str) -> float:
    """WCAG's relative luminance of ``#rrggbb`` or ``rgb(r, g, b)``."""
    if color.startswith("#"):
        channels = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    else:
        channels = [int(float(c)) for c in re.findall(r"[\d.]+", color)[:3]]
    linear = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    lighter, darker = sorted([relative_luminance(foreground), relative_luminance(background)], reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def page_colors(page: Page) -> dict[str, str]:
    colors: dict[str, str] = page.evaluate(
        """() => ({theme: document.documentElement.dataset.theme,
                   background: getComputedStyle(document.body).backgroundColor,
                   text: getComputedStyle(document.body).color})"""
    )
    return colors


def palette(page: Page, names: set[str]) -> dict[str, str]:
    colors: dict[str, str] = page.evaluate(
        "(names) => Object.fromEntries(names.map((n) => [n, window.StreamForgeTheme.color(n)]))",
        sorted(names),
    )
    return colors


def chart_colors(page: Page) -> dict[str, str]:
    """The axis text, grid and first series colours the rates chart draws with now."""
    colors: dict[str, str] = page.evaluate(
        """() => { const chart = Chart.getChart(document.getElementById("chart-rates"));
                   return {ticks: chart.scales.y.options.ticks.color, grid: chart.scales.y.options.grid.color,
                           consumed: chart.data.datasets[0].borderColor}; }"""
    )
    return colors


def test_on_a_phone_an_operator_opens_a_dead_letter_from_the_list_and_sees_its_payload_and_actions(
    open_page, site
):
    page = open_page(site["operator"], color_scheme="dark", **PHONE)
    page.goto("/dlq/")
    expect(page.get_by_test_id("dlq-table")).to_be_visible()
    assert horizontal_overflow(page) <= 0
    page.get_by_test_id("nav-toggle").tap()  # the navigation and the theme choice are folded behind "Menu"
    assert unreachable(page, ".topbar nav a") == []
    assert unreachable(page, "[data-testid=theme-choice]") == []
    page.get_by_test_id("nav-toggle").tap()
    # The filters are folded; opened, their fields stack into one column.
    page.get_by_test_id("filters-toggle").tap()
    lefts = page.eval_on_selector_all(
        ".filter-grid > label", "(els) => els.map((e) => e.getBoundingClientRect().left)"
    )
    assert len(set(lefts)) == 1, lefts
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "mobile-dlq-list")

    row = page.locator(f'tr[data-id="{site["message"]}"]')
    expect(row).to_contain_text("JsonPathNotFound")
    row.get_by_test_id("message-link").tap()

    expect(page).to_have_url(re.compile(rf"/dlq/messages/{site['message']}/$"))
    expect(page.get_by_test_id("value-pretty")).to_contain_text('"PushEvent"')
    assert horizontal_overflow(page) <= 0
    assert unreachable(page, "[data-testid=replay], [data-testid=skip]") == []
    assert unreachable(page, "[data-testid=value-tab-raw], [data-testid=value-tab-hex]") == []
    page.get_by_test_id("value-tab-raw").tap()
    expect(page.get_by_test_id("value-raw")).to_be_visible()
    page.get_by_test_id("value-tab-pretty").tap()
    assert horizontal_overflow(page) <= 0
    screenshot(page, "mobile-dlq-message")

    page.get_by_test_id("skip").tap()  # the confirmation dialog fits too
    expect(page.locator("dialog[open]")).to_be_visible()
    assert unreachable(page, "dialog[open] button") == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_theme_follows_the_system_setting_and_its_text_meets_wcag_aa(open_page, site, scheme):
    page = open_page(site["operator"], color_scheme=scheme)
    page.goto(f"/dlq/messages/{site['message']}/")
    colors = page_colors(page)
    assert colors["theme"] == scheme
    background, text = relative_luminance(colors["background"]), relative_luminance(colors["text"])
    if scheme == "light":
        assert background > 0.8, colors
        assert text < 0.1, colors
    else:
        assert background < 0.1, colors
        assert text > 0.6, colors
    expect(page.get_by_test_id("theme-choice")).to_have_value("system")

    names = {name for pair in TEXT_ON_BACKGROUND for name in pair}
    colours = palette(page, names)
    too_faint = {
        f"{fg} on {bg}": round(ratio, 2)
        for fg, bg in TEXT_ON_BACKGROUND
        if (ratio := contrast(colours[fg], colours[bg])) < 4.5
    }
    assert too_faint == {}
    screenshot(page, f"theme-{scheme}-dlq-message")


def test_the_header_selector_switches_the_theme_recolours_the_charts_and_is_remembered(open_page, site):
    page = open_page(site["admin"], color_scheme="dark")
    page.goto(f"/pipelines/{site['pipeline'].name}/")
    page.wait_for_function(
        "typeof window.Chart === 'function' && Chart.getChart(document.getElementById('chart-rates'))"
    )
    dark_chart = chart_colors(page)
    assert dark_chart == {"ticks": "#8a96a3", "grid": "#2a333d", "consumed": "#4ea1ff"}
    screenshot(page, "theme-dark-pipeline")

    page.get_by_test_id("theme-choice").select_option("light")
    assert page_colors(page)["theme"] == "light"
    assert relative_luminance(page_colors(page)["background"]) > 0.8
    light = palette(page, {"--chart-text", "--chart-grid", "--accent"})
    assert chart_colors(page) == {
        "ticks": light["--chart-text"],
        "grid": light["--chart-grid"],
        "consumed": light["--accent"],
    }
    assert chart_colors(page) != dark_chart

    page.reload()
    assert page_colors(page)["theme"] == "light"
    expect(page.get_by_test_id("theme-choice")).to_have_value("light")
    page.wait_for_function(
        "typeof window.Chart === 'function' && Chart.getChart(document.getElementById('chart-rates'))"
    )
    assert chart_colors(page)["ticks"] == light["--chart-text"]
    screenshot(page, "theme-light-pipeline")

    page.get_by_test_id("theme-choice").select_option("system")  # back to the system's setting: dark here
    assert page_colors(page)["theme"] == "dark"
    assert page.evaluate("window.localStorage.getItem('streamforge-theme')") is None
    page.emulate_media(color_scheme="light")  # the system changes while the page is open
    expect(page.locator("html")).to_have_attribute("data-theme", "light")


def test_on_a_phone_no_page_is_wider_than_the_screen(open_page, site):
    page = open_page(site["admin"], **PHONE)
    too_wide = {}
    for path in PAGES:
        page.goto(path.format(pipeline=site["pipeline"].name, message=site["message"]))
        if (overflow := horizontal_overflow(page)) > 0:
            too_wide[path] = overflow
    assert too_wide == {}
