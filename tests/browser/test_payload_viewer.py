"""A dead letter's payload viewer (folding JSON tree, copy buttons, wrapping raw text) and the header's UTC /
local time choice, in a real Chromium against a really running daphne.

This module runs its own web process with ``STREAMFORGE_DLQ_MASKED_PATHS`` set, so that a viewer's masked
values can be checked in the tree; operators and admins see everything as before.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings
from playwright.sync_api import expect

from access.models import AuditEvent, Role
from pipelines.services import create_pipeline
from tests.browser.conftest import AsgiServer, screenshot
from tests.browser.test_dlq_ui import store
from tests.database import child_database_url
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis]

SECRET = "octocat@example.com"
KOLKATA = timedelta(hours=5, minutes=30)


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, tmp_path_factory) -> Iterator[AsgiServer]:
    """This module's web process: the package's one, but with ``/payload/secret`` masked for viewers."""
    server = AsgiServer(child_database_url(), tmp_path_factory.mktemp("daphne") / "daphne.log")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STREAMFORGE_DLQ_MASKED_PATHS", "/payload/secret")
        server.start()
    yield server
    server.stop()
    redis.Redis.from_url(settings.REDIS_URL).delete(server.celery_queue)


@pytest.fixture
def people():
    team = TeamFactory(name=f"viewers-{uuid.uuid4().hex[:6]}")
    return {
        "viewer": member(team, Role.VIEWER, username="vera"),
        "operator": member(team, Role.OPERATOR, username="otto"),
        "admin": member(team, Role.ADMIN, username="adele"),
    }


@pytest.fixture
def pipeline(people):
    suffix = uuid.uuid4().hex[:8]
    admin = people["admin"]
    team = admin.memberships.get().team
    return create_pipeline(
        actor=admin, name=f"github-{suffix}", team=team, spec=github_spec(f"github.events-{suffix}", suffix)
    )


def push_event(**payload: object) -> bytes:
    return json.dumps(
        {"type": "PushEvent", "payload": {"size": 3, "commits": [{"sha": "a1"}, {"sha": "b2"}], **payload}}
    ).encode()


def park(pipeline, value: bytes, key: bytes = b"repo-1"):
    [dead] = store(pipeline, [(key, value, "JsonPathNotFound", "path /payload/size not found")])
    return dead


def toggle(page, path: str):
    return page.locator(f'[data-testid="value-tree"] [data-path="{path}"] > .jt-line > .jt-toggle')


def node_button(page, path: str, kind: str):
    """A node's copy button (``json`` or ``path``), shown while its line has the pointer or the focus."""
    line = page.locator(f'[data-testid="value-tree"] [data-path="{path}"] > .jt-line')
    line.hover()
    return line.locator(f":scope > .jt-actions > .jt-copy-{kind}")


def test_the_json_tree_folds_and_unfolds_from_the_keyboard(open_page, people, pipeline):
    dead = park(pipeline, push_event())
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    commits = page.locator('[data-testid="value-tree"] [data-path="/payload/commits"]')
    expect(commits.locator("> .jt-children")).to_be_visible()

    toggle(page, "/payload/commits").focus()
    page.keyboard.press("Enter")
    expect(toggle(page, "/payload/commits")).to_have_attribute("aria-expanded", "false")
    expect(commits.locator("> .jt-children")).to_be_hidden()
    expect(commits.locator("> .jt-line")).to_contain_text("2 items")
    page.keyboard.press("Space")
    expect(toggle(page, "/payload/commits")).to_have_attribute("aria-expanded", "true")
    expect(commits.locator("> .jt-children")).to_be_visible()
    page.keyboard.press("Tab")  # on to the node's copy buttons: every button is reachable from the keyboard
    expect(commits.locator("> .jt-line .jt-copy-json")).to_be_focused()
    toggle(page, "/payload").focus()
    page.keyboard.press("Enter")
    expect(toggle(page, "/payload")).to_have_attribute("aria-expanded", "false")

    page.get_by_test_id("value-expand-all").click()
    expect(page.locator('[data-testid="value-tree"] .jt-toggle[aria-expanded="false"]')).to_have_count(0)
    page.get_by_test_id("value-collapse-all").click()
    expect(toggle(page, "/payload")).to_have_attribute("aria-expanded", "false")
    expect(page.get_by_test_id("value-tree").locator(".jt-toggle").first).to_have_attribute(
        "aria-expanded", "true"
    )
    screenshot(page, "dlq-payload-tree")


def test_a_large_payload_starts_with_its_deep_levels_folded(open_page, people, pipeline):
    commits = [
        {"sha": f"c{n}", "author": {"name": f"dev {n}", "email": f"dev{n}@example.com"}} for n in range(40)
    ]
    dead = park(pipeline, push_event(commits=commits))
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    expect(toggle(page, "/payload")).to_have_attribute("aria-expanded", "true")
    expect(toggle(page, "/payload/commits")).to_have_attribute("aria-expanded", "false")
    toggle(page, "/payload/commits").click()
    expect(toggle(page, "/payload/commits/7")).to_have_attribute("aria-expanded", "false")
    toggle(page, "/payload/commits/7").click()
    expect(page.locator('[data-path="/payload/commits/7/author"] > .jt-line')).to_contain_text('"author": {')


def test_markup_in_a_payload_and_its_key_is_shown_as_text(open_page, people, pipeline):
    attack = '<img src=x onerror="alert(1)">'
    value = json.dumps({"name": attack, attack: "<script>alert(2)</script>", "payload": {"size": 1}}).encode()
    dead = park(pipeline, value, key=b'{"id": "<img src=y onerror=alert(3)>"}')
    page = open_page(people["operator"])
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"/dlq/messages/{dead.pk}/")
    tree = page.get_by_test_id("value-tree")
    expect(tree.locator('[data-path="/name"] .jt-string')).to_have_text(json.dumps(attack))
    expect(tree).to_contain_text("<script>alert(2)</script>")
    expect(page.get_by_test_id("key-tree")).to_contain_text("<img src=y onerror=alert(3)>")
    page.get_by_test_id("value-expand-all").click()
    page.get_by_test_id("value-tab-raw").click()
    page.get_by_test_id("value-tab-pretty").click()
    assert page.locator("#record img, #record script").count() == 0
    assert dialogs == []


def test_copy_buttons_put_the_payload_its_nodes_and_their_paths_on_the_clipboard(open_page, people, pipeline):
    value = push_event(ids=[12345678901234567890, 1.0])
    dead = park(pipeline, value, key=b"repo-42")
    page = open_page(people["operator"], permissions=["clipboard-read", "clipboard-write"])
    page.goto(f"/dlq/messages/{dead.pk}/")

    def clipboard() -> str:
        return str(page.evaluate("navigator.clipboard.readText()"))

    node_button(page, "/payload/size", "path").click()
    expect(page.get_by_test_id("value-copy-status")).to_have_text("Copied the path /payload/size.")
    assert clipboard() == "/payload/size"

    node_button(page, "/payload/commits", "json").click()
    expect(page.get_by_test_id("value-copy-status")).to_have_text("Copied the JSON of /payload/commits.")
    assert json.loads(clipboard()) == [{"sha": "a1"}, {"sha": "b2"}]

    node_button(page, "/payload/ids", "json").click()
    expect(page.get_by_test_id("value-copy-status")).to_contain_text("/payload/ids")
    assert clipboard() == "[\n  12345678901234567890,\n  1.0\n]"  # numbers as written, not as JS reads them

    page.get_by_test_id("value-copy").click()
    expect(page.get_by_test_id("value-copy-status")).to_have_text("Copied the JSON.")
    assert clipboard() == json.dumps(json.loads(value), indent=2)
    page.get_by_test_id("value-tab-raw").click()
    expect(page.get_by_test_id("value-copy")).to_have_text("Copy raw")
    page.get_by_test_id("value-copy").click()
    expect(page.get_by_test_id("value-copy-status")).to_have_text("Copied the raw text.")
    assert clipboard() == value.decode()

    page.get_by_test_id("key-copy").click()
    expect(page.get_by_test_id("key-copy-status")).to_have_text("Copied the raw text.")
    assert clipboard() == "repo-42"


def test_copying_without_clipboard_access_says_how_to_copy_instead(open_page, people, pipeline):
    dead = park(pipeline, push_event())
    page = open_page(people["operator"])
    page.add_init_script("Object.defineProperty(navigator, 'clipboard', { value: undefined })")
    page.goto(f"/dlq/messages/{dead.pk}/")
    page.get_by_test_id("value-copy").click()
    expect(page.get_by_test_id("value-copy-status")).to_contain_text("select the text and press Ctrl+C")


def test_a_long_single_line_raw_payload_wraps_instead_of_scrolling_sideways(open_page, people, pipeline):
    value = json.dumps(
        {"payload": {"size": 1}, "blob": "x" * 3000, "words": " ".join(["word"] * 400)}
    ).encode()
    dead = park(pipeline, value)
    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    page.get_by_test_id("value-tab-raw").click()
    raw = page.get_by_test_id("value-raw")
    expect(raw).to_be_visible()
    assert raw.evaluate("el => el.scrollWidth <= el.clientWidth")
    page.get_by_test_id("value-tab-pretty").click()
    tree = page.get_by_test_id("value-pretty")
    assert tree.evaluate("el => el.scrollWidth <= el.clientWidth")


def test_a_viewer_sees_masked_values_masked_in_the_tree(open_page, people, pipeline):
    dead = park(pipeline, push_event(secret=SECRET))
    page = open_page(people["viewer"], permissions=["clipboard-read", "clipboard-write"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    secret = page.locator('[data-testid="value-tree"] [data-path="/payload/secret"] .jt-string')
    expect(secret).to_have_text('"•••"')
    node_button(page, "/payload", "json").click()
    expect(page.get_by_test_id("value-copy-status")).to_have_text("Copied the JSON of /payload.")
    assert json.loads(page.evaluate("navigator.clipboard.readText()"))["secret"] == "•••"
    assert SECRET not in page.content()


def kolkata(moment: datetime) -> str:
    return (moment.astimezone(UTC) + KOLKATA).strftime("%Y-%m-%d %H:%M:%S") + " +05:30"


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_the_local_time_choice_shows_times_in_the_browsers_zone_and_is_remembered(
    open_page, people, pipeline
):
    dead = park(pipeline, push_event())
    page = open_page(people["admin"], timezone_id="Asia/Kolkata")
    page.goto("/dlq/")
    row_time = page.locator(f'tr[data-id="{dead.pk}"] time')
    expect(row_time).to_have_text(utc(dead.last_failed_at))
    choice = page.get_by_test_id("time-zone-choice")
    expect(choice).to_have_value("utc")
    expect(choice.locator('option[value="local"]')).to_have_text("local (UTC+05:30)")

    choice.select_option("local")
    expect(row_time).to_have_text(kolkata(dead.last_failed_at))
    expect(page.locator("thead .tz-name")).to_have_text("local")
    screenshot(page, "dlq-list-local-time")

    page.reload()
    expect(page.get_by_test_id("time-zone-choice")).to_have_value("local")
    expect(row_time).to_have_text(kolkata(dead.last_failed_at))

    page.goto(f"/dlq/messages/{dead.pk}/")
    failed = page.locator("#coordinates dt:text-is('failed') + dd")
    expect(failed.locator("time")).to_have_text(kolkata(dead.first_failed_at))
    expect(failed.locator(".tz-utc")).to_be_hidden()  # no " UTC" after a local time
    screenshot(page, "dlq-message-local-time")

    page.goto("/audit/")
    event = AuditEvent.objects.order_by("-sequence").first()
    assert event is not None
    expect(page.locator("tbody tr").first.locator("time")).to_have_text(kolkata(event.created_at))

    page.get_by_test_id("time-zone-choice").select_option("utc")
    expect(page.locator("tbody tr").first.locator("time")).to_have_text(utc(event.created_at))
    expect(page.locator("thead .tz-name")).to_have_text("UTC")
    page.goto(f"/dlq/messages/{dead.pk}/")
    expect(page.locator("#coordinates dt:text-is('failed') + dd")).to_have_text(
        f"{utc(dead.first_failed_at)} UTC"
    )
