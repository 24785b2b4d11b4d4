"""Runbook links (issue #14): the markdown renderer emits a link only to an absolute http(s) URL or a path on
this site; anything a browser could take elsewhere (protocol-relative, backslashes, control characters,
other schemes) is shown as text. Through the REST API and the groups page."""

from __future__ import annotations

import pytest
from django.test import Client

from dlq import markdown
from tests.dlq.conftest import api_for, missing_size_push

pytestmark = pytest.mark.django_db


@pytest.fixture
def parked(pipeline, park, github_events):
    return park(pipeline, [(b"k1", missing_size_push(github_events), "JsonPathNotFound", "path not found")])


EVIL_LINKS = [
    "//evil.example/x",
    "/\\evil.example",
    "\\\\evil.example",
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "/\\/evil.example",
    "https:evil.example",
    "/x\x01",
    "data:text/html,x",
]


def test_runbook_links_that_could_leave_the_site_are_shown_as_text(people, parked):
    body = "\n".join(f"- [bad{i}]({url})" for i, url in enumerate(EVIL_LINKS))
    body += "\n- [ok](/dlq/groups/) [web](https://docs.example/run?x=1)"
    created = api_for(people["admin"]).post(
        "/api/dlq/runbooks/",
        {"title": "links", "body": body, "group": parked[0].group_id, "actions": []},
        format="json",
    )
    assert created.status_code == 201, created.content
    client = Client()
    client.force_login(people["viewer"])
    page = client.get("/dlq/groups/").content.decode()
    for i in range(len(EVIL_LINKS)):
        assert f">bad{i}</a>" not in page
        assert f"[bad{i}](" in page
    assert '<a href="/dlq/groups/">ok</a>' in page
    assert '<a href="https://docs.example/run?x=1&amp;' not in page  # one query parameter only
    assert 'href="https://docs.example/run?x=1"' in page
    for url in EVIL_LINKS:
        assert "<a " not in markdown.render(f"[t]({url})")
