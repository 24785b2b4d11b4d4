"""The Content-Security-Policy, page by page through Django's test client: every HTML page answers with the
policy, and nothing in it would be blocked by it (no inline <script>, no on*= handler, no style= attribute, no
<style> block), so the policy can forbid inline code outright. tests/browser/test_csp.py watches the same pages
run in Chromium."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
from django.test import Client

from access.models import Role
from dlq import services
from dlq.filters import MessageFilter
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter
from dlq.services import bulk as bulk_actions
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from tests.dlq.conftest import dlq_headers, github_spec
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db


class InlineCode(HTMLParser):
    """Collects what a strict CSP blocks in a page: inline scripts (a <script> without src that the browser
    would run), event-handler attributes, style attributes and <style> elements."""

    #: Script types a browser does not run (data islands such as json_script).
    DATA_TYPES = frozenset({"application/json", "application/ld+json", "text/template"})

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script" and not named.get("src") and named.get("type") not in self.DATA_TYPES:
            self.found.append(f"inline <script> at line {self.getpos()[0]}")
        if tag == "style":
            self.found.append(f"<style> element at line {self.getpos()[0]}")
        for name, value in attrs:
            if re.fullmatch(r"on[a-z]+", name):
                self.found.append(f"<{tag} {name}={value!r}> at line {self.getpos()[0]}")
            if name == "style":
                self.found.append(f"<{tag} style={value!r}> at line {self.getpos()[0]}")
            if value and value.strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}> at line {self.getpos()[0]}")


def inline_code(html: str) -> list[str]:
    """What in ``html`` a CSP without 'unsafe-inline' would block."""
    parser = InlineCode()
    parser.feed(html)
    parser.close()
    return parser.found


@pytest.fixture
def site():
    """A team with an admin and an operator, a pipeline, two dead letters (one in a group), a queued bulk
    action and a pending delete approval: every page has something of each kind to draw."""
    team = TeamFactory(name="csp-team")
    admin = member(team, Role.ADMIN, username="csp-admin")
    operator = member(team, Role.OPERATOR, username="csp-operator")
    pipeline = create_pipeline(
        actor=admin, name="csp-pipeline", team=team, spec=github_spec("csp.events", "csp")
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
    stored = store_batch(records, {topic: TopicOwner(team.pk, pipeline.pk, pipeline.name)})
    parked = sorted(stored.new_ids)
    services.request_delete(actor=operator, dead_letter=DeadLetter.objects.get(pk=parked[0]), reason="PII")
    return {"admin": admin, "pipeline": pipeline, "parked": parked}


def page_paths(site) -> list[str]:
    name = site["pipeline"].name
    return [
        "/",
        f"/pipelines/{name}/",
        f"/pipelines/{name}/edit/",
        "/pipelines/new/",
        "/dlq/",
        f"/dlq/messages/{site['parked'][1]}/",
        "/dlq/groups/",
        "/dlq/bulk/",
        "/dlq/approvals/",
        "/audit/",
        "/status/",
        "/api/docs/",
    ]


def test_every_page_has_the_csp_header_and_no_inline_code_it_would_block(site, monkeypatch):
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: None)  # no worker: it stays queued
    services.create_bulk(
        actor=site["admin"],
        kind="skip",
        selection=MessageFilter(pipeline=site["pipeline"].name),
        reason="cleanup",
    )
    client = Client()
    client.force_login(site["admin"])
    anonymous = [("/login/", Client().get("/login/"))]
    problems = {}
    for path, response in [*anonymous, *((path, client.get(path)) for path in page_paths(site))]:
        assert response.status_code == 200, path
        assert response["Content-Type"].startswith("text/html"), path
        policy = response.get("Content-Security-Policy", "")
        for directive in (
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
        ):
            assert directive in policy, f"{path}: {directive!r} missing from {policy!r}"
        assert "unsafe-inline" not in policy, path
        assert "unsafe-eval" not in policy, path
        found = inline_code(response.content.decode())
        if found:
            problems[path] = found
    assert problems == {}


def test_the_api_docs_load_swagger_ui_from_our_own_static_files(site):
    client = Client()
    client.force_login(site["admin"])
    body = client.get("/api/docs/").content.decode()
    sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', body)
    assert any("swagger-ui-bundle.js" in source for source in sources), sources
    assert all(source.startswith("/") and not source.startswith("//") for source in sources), sources
    script = client.get("/api/docs/?script=")
    assert script.status_code == 200
    assert "SwaggerUIBundle" in script.content.decode()


def test_the_inline_code_finder_sees_what_the_policy_blocks():
    page = (
        '<script>alert(1)</script><script src="/static/x.js"></script>'
        '<script type="application/json" id="d">{}</script>'
        '<button onclick="go()">x</button><div style="color: red"></div><a href="javascript:go()">y</a>'
        "<style>p {}</style>"
    )
    assert len(inline_code(page)) == 5
