"""Exporting dead letters from the list page in a real Chromium against daphne (so the download is streamed
the ASGI way): the Export menu downloads exactly the filtered rows, "Export selected" exactly the ticked ones.
Masking is the same code either way; tests/dlq/test_export.py checks it."""

from __future__ import annotations

import csv
import io
import json
import uuid

import pytest

from access.models import AuditEvent, Role
from pipelines.services import create_pipeline
from tests.browser.test_dlq_ui import store
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]

SECRET = "octocat@example.com"


@pytest.fixture
def people():
    team = TeamFactory(name="data-platform")
    return {
        "team": team,
        "viewer": member(team, Role.VIEWER, username="vic"),
        "admin": member(team, Role.ADMIN, username="ada"),
    }


@pytest.fixture
def pipeline(people):
    suffix = uuid.uuid4().hex[:8]
    return create_pipeline(
        actor=people["admin"],
        name=f"github-{suffix}",
        team=people["team"],
        spec=github_spec(f"github.events-{suffix}", suffix),
    )


def read_csv(download) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(download.path().read_text(encoding="utf-8"))))


def test_a_viewer_exports_the_filtered_list_and_a_selection_as_csv(open_page, people, pipeline):
    event = json.dumps({"type": "PushEvent", "actor": {"login": "octocat", "email": SECRET}}).encode()
    stored = store(
        pipeline,
        [(f"k-{i}".encode(), event, "JsonPathNotFound", "path /payload/size not found") for i in range(3)]
        + [(b"k-x", event, "MessageDeserialization", "Unexpected character")],
    )
    wanted = sorted(dl.pk for dl in stored[:3])
    page = open_page(people["viewer"])
    page.goto("/dlq/?error_type=JsonPathNotFound")

    page.get_by_test_id("export-menu").locator("summary").click()
    with page.expect_download() as info:
        page.get_by_test_id("export-csv").click()
    download = info.value
    assert download.suggested_filename.startswith("dead-letters-")
    assert download.suggested_filename.endswith(".csv")
    rows = read_csv(download)
    assert sorted(int(r["id"]) for r in rows) == wanted
    assert {r["error_type"] for r in rows} == {"JsonPathNotFound"}
    assert all(json.loads(r["value"])["actor"]["login"] == "octocat" for r in rows)

    page.locator(f'#dlq-rows tr[data-id="{wanted[0]}"] [data-select]').check()
    with page.expect_download() as info:
        page.get_by_test_id("export-selected").click()
    assert [int(r["id"]) for r in read_csv(info.value)] == [wanted[0]]

    exports = list(AuditEvent.objects.filter(action="dlq.export").order_by("sequence"))
    assert [e.details["rows"] for e in exports] == [3, 1]
    assert exports[1].details["filter"] == {"ids": [wanted[0]]}
