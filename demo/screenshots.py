"""Refresh the README's screenshots from a running demo (``make demo`` in another terminal):

    .venv/bin/python demo/screenshots.py --password <admin password printed by make demo>

Drives Debian's Chromium with Playwright, signs in as the demo admin and saves the dashboard, the DLQ
console and the failure groups into docs/img/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"


def main() -> None:
    """Sign in and save one PNG per page (1440x900 viewport, full page)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{args.url}/login/")
        page.fill("input[name=username]", args.user)
        page.fill("input[name=password]", args.password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{args.url}/")
        for name, path in (("dashboard", "/"), ("dlq", "/dlq/"), ("groups", "/dlq/groups/")):
            page.goto(args.url + path)
            page.wait_for_timeout(4000)  # a few live updates arrive
            page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
            sys.stdout.write(f"{OUT / (name + '.png')}\n")
        browser.close()


if __name__ == "__main__":
    main()
