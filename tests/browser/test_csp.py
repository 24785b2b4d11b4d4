"""Every main page in a real Chromium under the site's Content-Security-Policy: nothing is blocked (no
``securitypolicyviolation`` event), nothing fails (no console error, no uncaught exception), and the parts
that need what the policy restricts still work: the live websocket connects (connect-src), the pipeline
page's charts draw (script-src for the vendored Chart.js), Swagger UI renders the schema from our own files.
Every request a page makes (documents, scripts, styles, fonts, images, fetches, websockets) goes to the app's
own origin, so the console works on a closed network; data: URLs are fine.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection
from playwright.sync_api import Page, expect

from access.models import Role
from dlq import services
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from tests.dlq.conftest import dlq_headers, github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

#: Run before any script of the page: record every CSP violation the page reports.
WATCH_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
    " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


class Watcher:
    """What went wrong on a page: console errors, uncaught exceptions, CSP violations, requests that left the
    app's origin."""

    def __init__(self, page: Page, origin: str) -> None:
        self.page = page
        self.errors: list[str] = []
        page.add_init_script(WATCH_VIOLATIONS)
        page.on("request", lambda request: self._check_origin(request.url, origin))
        page.on("websocket", lambda socket: self._check_origin(socket.url, origin.replace("http", "ws", 1)))
        page.on(
            "console",
            lambda msg: self.errors.append(f"{msg.text} {msg.location}") if msg.type == "error" else None,
        )
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        page.on(
            "response",
            lambda response: (
                self.errors.append(f"{response.status} {response.url}") if response.status >= 400 else None
            ),
        )

    def _check_origin(self, url: str, origin: str) -> None:
        if not (url.startswith(f"{origin}/") or url.startswith("data:")):
            self.errors.append(f"requested from outside the app: {url}")

    def problems(self) -> list[str]:
        violations = self.page.evaluate("window.__cspViolations || []")
        return [*self.errors, *violations]


@pytest.fixture
def site(browser_env):
    team = TeamFactory(name="csp-browser")
    admin = member(team, Role.ADMIN, username="csp-browser-admin")
    operator = member(team, Role.OPERATOR, username="csp-browser-operator")
    pipeline = create_pipeline(
        actor=admin, name="csp-browser-pipeline", team=team, spec=github_spec("csp-browser.events", "cspb")
    )
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic,
            partition=0,
            offset=offset,
            key=b"k",
            value=b'{"type": "PushEvent", "payload": {}}',
            headers=dlq_headers(
                pipeline,
                error_type="JsonPathNotFound",
                message="path /payload/size not found",
                source_offset=offset,
            ),
            timestamp_ms=int(time.time() * 1000),
        )
        for offset in (1, 2)
    ]
    owners = {topic: TopicOwner(team.pk, pipeline.pk, pipeline.name)}
    parked: list[int] = []

    def ingest() -> None:  # in a thread: its broadcast cannot run beside Playwright's event loop
        try:
            parked.extend(store_batch(records, owners).new_ids)
        finally:
            connection.close()

    worker = threading.Thread(target=ingest)
    worker.start()
    worker.join(30)
    parked.sort()
    assert len(parked) == 2
    services.request_delete(actor=operator, dead_letter=DeadLetter.objects.get(pk=parked[0]), reason="PII")
    return {"admin": admin, "pipeline": pipeline, "message": parked[1]}


def test_the_login_page_runs_under_the_policy_and_its_form_signs_in(open_page, asgi_server, site):
    user = User.objects.get(pk=site["admin"].pk)
    user.set_password("a long enough password")
    user.save()
    page = open_page()
    watcher = Watcher(page, asgi_server.url)
    page.goto("/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", "a long enough password")
    page.click("button[type=submit], input[type=submit]")
    expect(page.get_by_test_id("user")).to_have_text(user.username)
    assert watcher.problems() == []


@pytest.mark.parametrize(
    ("path", "live"),
    [
        ("/", True),
        ("/pipelines/{pipeline}/", True),
        ("/pipelines/{pipeline}/edit/", False),
        ("/dlq/", True),
        ("/dlq/messages/{message}/", True),
        ("/dlq/groups/", True),
        ("/dlq/bulk/", True),
        ("/dlq/retention/", False),
        ("/dlq/approvals/", True),
        ("/audit/", False),
        ("/clusters/", False),
        ("/status/", False),
    ],
)
def test_a_page_runs_without_a_policy_violation_or_a_console_error(open_page, asgi_server, site, path, live):
    page = open_page(site["admin"])
    watcher = Watcher(page, asgi_server.url)
    response = page.goto(path.format(pipeline=site["pipeline"].name, message=site["message"]))
    assert response is not None
    assert response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    if live:
        expect(page.get_by_test_id("live-indicator")).to_have_text("live")
    page.wait_for_load_state("networkidle")
    assert watcher.problems() == []


def test_the_pipeline_page_draws_its_charts_under_the_policy(open_page, asgi_server, site):
    page = open_page(site["admin"])
    watcher = Watcher(page, asgi_server.url)
    page.goto(f"/pipelines/{site['pipeline'].name}/")
    page.wait_for_function("typeof window.Chart === 'function'")
    expect(page.locator("canvas").first).to_be_visible()
    assert watcher.problems() == []


def test_swagger_ui_renders_the_schema_from_our_own_files_under_the_policy(open_page, asgi_server, site):
    page = open_page(site["admin"])
    watcher = Watcher(page, asgi_server.url)
    page.goto("/api/docs/")
    expect(page.locator(".opblock").first).to_be_visible(timeout=20_000)
    assert watcher.problems() == []
