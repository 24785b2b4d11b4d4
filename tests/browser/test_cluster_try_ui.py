"""The cluster form's "Test connection" in Chromium: while the server tries the typed settings the page says
so and counts the seconds; the answer (here: a broker that accepts connections and never answers, so the
whole bound is waited) comes above the form within the few seconds promised, the form still filled in, and
nothing was saved. The real-broker answers (wrong password, reached) are ``tests/pipelines/test_cluster_try``."""

from __future__ import annotations

import socket
import time

import pytest
from playwright.sync_api import expect

from access.models import Role
from pipelines.clusters import TRY_TIMEOUT_SECONDS
from pipelines.models import KafkaCluster
from tests.browser.conftest import screenshot
from tests.browser.test_csp import Watcher
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.kafka]


def test_test_connection_shows_progress_then_the_answer_and_keeps_the_form(
    open_page, browser_env, asgi_server
):
    silent = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: connections hang, unanswered
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    admin = member(TeamFactory(name="ops-try"), Role.ADMIN, username="try-admin")
    page = open_page(admin)
    watcher = Watcher(page, asgi_server.url)
    try:
        page.goto("/clusters/new/")
        page.get_by_label("Name", exact=True).fill("lab")
        page.get_by_label("Bootstrap servers", exact=True).fill(address)
        page.get_by_label("Security protocol", exact=True).select_option("PLAINTEXT")
        started = time.monotonic()
        page.get_by_test_id("cluster-try-button").click()

        progress = page.get_by_test_id("cluster-try-progress")
        expect(progress).to_be_visible()
        expect(progress).to_contain_text(f"up to {int(TRY_TIMEOUT_SECONDS * 2)} s")
        expect(page.get_by_test_id("cluster-try-button")).to_have_text("Testing…")

        verdict = page.get_by_test_id("cluster-try-verdict")
        expect(verdict).to_have_text("Not reached", timeout=(2 * TRY_TIMEOUT_SECONDS + 8) * 1000)
        assert time.monotonic() - started < 2 * TRY_TIMEOUT_SECONDS + 8
        expect(page.get_by_test_id("cluster-try-problem").first).to_contain_text("unreachable")
        expect(page.get_by_label("Bootstrap servers", exact=True)).to_have_value(address)
        expect(page.get_by_label("Name", exact=True)).to_have_value("lab")
        expect(page.get_by_test_id("cluster-try-progress")).to_be_hidden()
        screenshot(page, "cluster-test-connection")
        assert not KafkaCluster.objects.filter(name="lab").exists()
        assert watcher.problems() == []
    finally:
        silent.close()
