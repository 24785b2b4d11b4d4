"""The main job, headless: ``python -m devstack --profile test demo`` starts the stack and the demo pipeline
over real GitHub events; a real browser sees the running pipeline's figures move on the overview without a
reload; through the REST API alone this test fixes and replays one dead letter and sees it arrive on its
destination topic; it sees the demo's Avro pipeline write Avro and dead-letter its bad records with their
reasons; then it stops the demo with SIGINT as a terminal's Ctrl-C would and checks that exactly what the
demo started was stopped (the suite's own Kafka and Redis keep running)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from demo import avro_topic
from devstack import config
from devstack.services import running_process
from streamforge_core import contract as c
from streamforge_core.record_formats import RecordDecoder
from streamforge_core.schema_registry import RegistryConnection, SchemaRegistry
from tests.pipelines.spark.harness import consume_all

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.browser,
    pytest.mark.registry,
]

REPO = Path(__file__).resolve().parents[1]
PROFILE = config.profile("test")


class Api:
    """A tiny REST client for the running web process (the demo's own database, not pytest's)."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(  # noqa: S310  # http://127.0.0.1 from the profile
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}; demo output:\n{log.read_text()[-4000:]}"
    )


def watch_the_overview_move(password: str, log: Path) -> None:
    """In Debian's Chromium: sign in to the running demo, open the overview and see the real pipeline's
    figures (records/s, lag, DLQ backlog) change without a reload, pushed over the websocket as the real
    driver's batches are ingested. A screenshot is saved with the other browser screenshots."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{PROFILE.web_url}/login/")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{PROFILE.web_url}/")
            row = page.locator('tr[data-pipeline="github-demo"]')
            cells = ('[data-field="consumed_per_second"]', '[data-field="lag"]', '[data-field="dlq_backlog"]')

            def figures() -> tuple[str, ...]:
                return tuple(row.locator(cell).inner_text() for cell in cells)

            page.evaluate("window.__loaded = true")  # gone if the page reloads
            first = figures()
            deadline = time.monotonic() + 120
            while figures() == first and time.monotonic() < deadline:
                page.wait_for_timeout(1000)
            assert figures() != first, (
                f"the overview did not move in 120 s: {first}\n{log.read_text()[-2000:]}"
            )
            assert page.evaluate("window.__loaded === true"), "the page reloaded"
            assert page.locator("#live-indicator").get_attribute("data-state") == "live"
            shots = REPO / "artifacts" / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "demo-overview.png"))
        finally:
            browser.close()


def see_the_avro_pipeline_work(api: Api, log: Path) -> None:
    """The demo's Avro pipeline (#31) runs beside the JSON one: its Avro projection is written with its
    subject's schema, and its bad records are dead letters with the reasons DESIGN.md names (an id the
    registry never gave; a null where the projection needs a value, shown decoded)."""
    wait_for(
        lambda: api.call("GET", "/api/pipelines/github-avro/")[1]["state"] == "running",
        240,
        "github-avro running",
        log,
    )

    def parked(error_type: str, text: str) -> list[dict[str, Any]]:
        answer = api.call("GET", f"/api/dlq/messages/?pipeline=github-avro&error_type={error_type}")[1]
        return [m for m in answer["results"] if text in m["error_message"]]

    wait_for(
        lambda: parked("MessageDeserialization", f"unknown schema id {avro_topic.UNKNOWN_SCHEMA_ID}"),
        180,
        "an unknown-schema-id dead letter of github-avro",
        log,
    )
    [null_size, *_] = wait_for(
        lambda: parked("TransformEvaluation", "null"), 180, "a null commit count of github-avro", log
    )
    detail = api.call("GET", f"/api/dlq/messages/{null_size['id']}/")[1]
    assert json.loads(detail["value"]["text"])["payload"]["size"] is None, detail["value"]
    registry = SchemaRegistry(RegistryConnection(os.environ["SCHEMA_REGISTRY_URL"], timeout_s=5))
    projected = wait_for(
        lambda: consume_all(settings.KAFKA_BOOTSTRAP_SERVERS, avro_topic.PUSHES_TOPIC),
        120,
        f"Avro records on {avro_topic.PUSHES_TOPIC}",
        log,
    )
    # The newest record: one this run's registry wrote (a reused stack's topic keeps older runs' records,
    # framed with schema ids a restarted in-memory registry no longer knows).
    record = RecordDecoder(registry, "avro").decode(projected[-1].value)
    assert record.schema.subject == f"{avro_topic.PUSHES_TOPIC}-value"
    assert set(record.value) == {"actor", "repo", "commits"}


def test_the_demo_runs_headless_and_a_fixed_dead_letter_reaches_its_destination(tmp_path):
    log = tmp_path / "demo.log"
    before = {name for name in ("kafka", "redis") if running_process(PROFILE, name) is not None}
    assert before == {"kafka", "redis"}, "make test starts the test profile's Kafka and Redis first"
    demo = subprocess.Popen(
        [sys.executable, "-m", "devstack", "--profile", "test", "demo", "--rate", "100", "--corrupt-every", "10"],
        cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
    )  # fmt: skip
    try:
        token = wait_for(
            lambda: (m := re.search(r"API token:\s+(\w+)", log.read_text())) and m.group(1),
            240,
            "the demo",
            log,
        )
        api = Api(PROFILE.web_url, token)
        wait_for(
            lambda: api.call("GET", "/api/pipelines/github-demo/")[1]["state"] == "running",
            240,
            "running",
            log,
        )
        password = re.search(r"sign in as\s+admin / (\S+)", log.read_text())
        assert password is not None
        watch_the_overview_move(password.group(1), log)
        dead = wait_for(
            lambda: [
                m
                for m in api.call(
                    "GET",
                    "/api/dlq/messages/?pipeline=github-demo&error_type=JsonPathNotFound&status=parked&q=CONSTRUCT",
                )[1]["results"]
                if m["destination"] == "pushes"
            ],
            240,
            "a JsonPathNotFound dead letter of the pushes destination",
            log,
        )[0]
        detail = api.call("GET", f"/api/dlq/messages/{dead['id']}/")[1]
        event = json.loads(detail["value"]["text"])
        event["payload"]["size"] = len(event["payload"].get("commits", []))
        status, fixed = api.call(
            "POST", f"/api/dlq/messages/{dead['id']}/fix/", {"value": event, "reason": "count the commits"}
        )
        assert status == 201, fixed
        assert fixed["check"]["would_pass"] is True
        status, replayed = api.call("POST", f"/api/dlq/messages/{dead['id']}/replay/", {})
        assert status == 201, replayed
        lineage = f"github.events/{replayed['partition']}/{replayed['offset']}"
        arrived = wait_for(
            lambda: [
                r
                for r in consume_all(settings.KAFKA_BOOTSTRAP_SERVERS, "github.pushes")
                if r.header(c.H_LINEAGE) == lineage
            ],
            180,
            f"the replayed record {lineage} on github.pushes",
            log,
        )
        assert json.loads(arrived[0].value)["commits"] == event["payload"]["size"]
        assert api.call("GET", f"/api/dlq/messages/{dead['id']}/")[1]["status"] == "replayed"
        # Throughput reached the control plane (the rate window is 60 s; on a loaded machine one micro-batch
        # can take longer than that, so the running totals are what must have moved).
        metrics = api.call("GET", "/api/pipelines/github-demo/metrics/")[1]
        assert metrics["totals"]["consumed"] > 0, metrics
        see_the_avro_pipeline_work(api, log)
    finally:
        os.killpg(demo.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        try:
            code = demo.wait(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            raise
    output = log.read_text()
    assert "github-demo is stopped" in output, output[-3000:]
    assert "github-avro is stopped" in output, output[-3000:]
    assert code in (0, 130), output[-3000:]
    for name in ("web", "worker", "beat", "dlq-ingest"):
        assert running_process(PROFILE, name) is None, f"{name} still runs after the demo"
    assert running_process(PROFILE, "kafka") is not None
    assert running_process(PROFILE, "redis") is not None
