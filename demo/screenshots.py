"""Refresh the README's screenshots from a running demo (``make demo`` in another terminal):

    .venv/bin/python demo/screenshots.py --password <admin password printed by make demo>

Drives Debian's Chromium with Playwright, signs in as the demo admin and saves, into docs/img/: the
dashboard, the pipeline's page, the DLQ console (list, a message, failure groups, bulk actions), the runner
hosts, the consumer groups and the topic browser with a search's result in the dark theme, a replay's
confirmation, the dashboard and a message in the light one, and the overview and DLQ list on a 390 px
phone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"

#: (file name, path) of the desktop shots; "{pipeline}" and "{message}" are filled in from the demo.
DESKTOP = (
    ("dashboard", "/"),
    ("pipeline", "/pipelines/{pipeline}/"),
    ("dlq", "/dlq/"),
    ("message", "/dlq/messages/{message}/"),
    ("groups", "/dlq/groups/"),
    ("bulk", "/dlq/bulk/"),
    ("hosts", "/hosts/"),
    ("consumer-groups", "/consumer-groups/"),
)


def _signed_in(browser: Browser, args: argparse.Namespace, **context: object) -> Page:
    page = browser.new_context(**context).new_page()  # type: ignore[arg-type]
    page.goto(f"{args.url}/login/")
    page.fill("input[name=username]", args.user)
    page.fill("input[name=password]", args.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{args.url}/")
    return page


def _shoot(page: Page, url: str, name: str) -> None:
    page.goto(url)
    page.wait_for_timeout(4000)  # a few live updates arrive
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
    sys.stdout.write(f"{OUT / (name + '.png')}\n")


def _search(page: Page, url: str, query: str, name: str) -> None:
    """The topic page at ``url`` with a text search for ``query`` run to its end."""
    page.goto(url)
    page.fill("[data-testid=search-q]", query)
    page.click("[data-testid=search-run]")
    progress = page.locator("[data-testid=search-progress]")
    progress.filter(has_text="done").wait_for(timeout=120_000)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
    sys.stdout.write(f"{OUT / (name + '.png')}\n")


def _replay_dialog(page: Page, url: str, name: str) -> None:
    """The message page at ``url`` with its replay confirmation open (nothing is sent: it is dismissed)."""
    page.goto(url)
    page.locator("[data-testid=replay]").first.click()
    page.wait_for_selector("dialog[open]", timeout=10_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
    sys.stdout.write(f"{OUT / (name + '.png')}\n")
    page.keyboard.press("Escape")


def main() -> None:
    """Sign in and save one PNG per page (1440x900, and 390x844 for the phone)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", required=True)
    parser.add_argument("--pipeline", default="github-demo")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
        page = _signed_in(browser, args, viewport={"width": 1440, "height": 900}, color_scheme="dark")
        page.goto(f"{args.url}/dlq/?error_type=JsonPathNotFound&status=parked")
        first = page.locator("#dlq-rows tr[data-id]").first
        message = first.get_attribute("data-id") if first.count() else "1"
        fill = {"pipeline": args.pipeline, "message": message}
        for name, path in DESKTOP:
            _shoot(page, args.url + path.format(**fill), name)
        _search(
            page, f"{args.url}/pipelines/{args.pipeline}/topics/github.events/", "PushEvent", "topic-search"
        )
        _replay_dialog(page, f"{args.url}/dlq/messages/{message}/", "replay-confirm")
        light = _signed_in(browser, args, viewport={"width": 1440, "height": 900}, color_scheme="light")
        _shoot(light, f"{args.url}/", "dashboard-light")
        _shoot(light, f"{args.url}/dlq/messages/{message}/", "message-light")
        phone = _signed_in(
            browser,
            args,
            viewport={"width": 390, "height": 844},
            is_mobile=True,
            has_touch=True,
            color_scheme="dark",
        )
        _shoot(phone, f"{args.url}/dlq/", "dlq-phone")
        _shoot(phone, f"{args.url}/", "overview-phone")
        browser.close()


if __name__ == "__main__":
    main()
