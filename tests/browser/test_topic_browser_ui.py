"""The topic browser in a real browser, on the real test broker: compact rows that expand to the whole
record, times by the UTC/local toggle, a server-side search (substring and DSL, with its progress and a
refused expression's position) and a live tail that shows new records at the top and pauses."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from django.conf import settings
from playwright.sync_api import expect

from access.models import Role
from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config
from tests.browser.conftest import screenshot
from tests.browser.test_csp import Watcher
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.kafka]

#: The first record's timestamp: 2025-01-31 12:00:00 UTC; record n is n seconds later.
T0_MS = int(datetime(2025, 1, 31, 12, 0, tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def people():
    team = TeamFactory(name="data-platform")
    return {
        "team": team,
        "operator": member(team, Role.OPERATOR, username="olga"),
        "admin": member(team, Role.ADMIN, username="ada"),
    }


@pytest.fixture
def pipeline(people, kafka_admin) -> Iterator[Pipeline]:
    """A GitHub-events pipeline whose topics exist on the test broker."""
    suffix = uuid.uuid4().hex[:8]
    made = create_pipeline(
        actor=people["admin"],
        name=f"github-{suffix}",
        team=people["team"],
        spec=github_spec(f"github.events-{suffix}", suffix),
    )
    assert made.current_revision is not None
    spec = made.current_revision.spec
    topics = [spec["source"]["topics"][0], *(d["topic"] for d in spec["destinations"]), spec["dlq"]["topic"]]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    yield made
    for future in kafka_admin.delete_topics(topics).values():
        future.result(timeout=30)


def events(topic: str, numbers: range) -> None:
    """Produce records ``numbers`` to partition 0 of ``topic``; returns once every one is acknowledged and
    the partition's high watermark (what a browse step reads up to) covers them. Fails on any delivery error,
    which a bare ``flush()`` would not report."""
    conn = KafkaConnection(str(settings.KAFKA_BOOTSTRAP_SERVERS))
    producer = Producer(producer_config(conn))
    failed: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    for n in numbers:
        value = {"n": n, "type": "PushEvent" if n % 3 == 0 else "WatchEvent"}
        producer.produce(
            topic,
            value=json.dumps(value).encode(),
            key=f"order-{n}".encode(),
            headers=[("trace-id", f"t-{n}".encode())],
            timestamp=T0_MS + n * 1000,
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    assert not failed, failed
    reader = Consumer(consumer_config(conn, group_id=f"watermarks-{uuid.uuid4().hex[:6]}"))
    try:
        deadline = time.monotonic() + 30
        while reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] < numbers.stop:
            assert time.monotonic() < deadline, f"{topic}'s high watermark stays below {numbers.stop}"
            time.sleep(0.2)
    finally:
        reader.close()


def test_search_tail_and_compact_rows_of_the_topic_browser(open_page, asgi_server, people, pipeline):
    source = pipeline.current_revision.spec["source"]["topics"][0]
    events(source, range(30))
    page = open_page(people["operator"], timezone_id="Asia/Kolkata")
    watcher = Watcher(page, asgi_server.url)
    page.goto(f"/pipelines/{pipeline.name}/topics/{source}/")

    # Compact rows, newest first: coordinates, time, key and value on one line; the record when expanded.
    newest = page.get_by_test_id("records").get_by_test_id("record").first
    expect(newest.get_by_test_id("record-time")).to_have_text("2025-01-31 12:00:29")
    expect(newest.get_by_test_id("record-key-preview")).to_have_text("order-29")
    expect(newest.get_by_test_id("record-value-preview")).to_contain_text('"n": 29')
    expect(newest.get_by_test_id("value-pretty")).to_be_hidden()
    newest.get_by_test_id("record-summary").click()
    expect(newest.get_by_test_id("value-pretty")).to_contain_text('"WatchEvent"')
    expect(newest.get_by_test_id("record-headers")).to_contain_text("t-29")
    # The UTC/local toggle formats the browser's timestamps too.
    page.locator("#time-zone-choice").select_option("local")
    expect(newest.get_by_test_id("record-time")).to_have_text("2025-01-31 17:30:29 +05:30")
    page.locator("#time-zone-choice").select_option("utc")

    # Search: server-side over the bounded range, with what it scanned and covered.
    search = page.get_by_test_id("topic-search")
    search.get_by_test_id("search-q").fill("pushevent")
    search.get_by_test_id("search-run").click()
    expect(search.get_by_test_id("search-counts")).to_have_text(
        "Scanned 30 records, 10 matched · done: the whole range was searched"
    )
    expect(search.get_by_test_id("search-ranges")).to_have_text(
        "partition 0: 30 of 30 offsets read (0 to 30)"
    )
    found = search.get_by_test_id("search-results").get_by_test_id("record")
    expect(found).to_have_count(10)
    expect(found.first.get_by_test_id("record-key-preview")).to_have_text("order-0")
    assert watcher.problems() == []  # no CSP violation, no script error (the refusal below logs its 400)
    search.get_by_test_id("search-mode").select_option("dsl")
    search.get_by_test_id("search-q").fill("AND:/n,>=,20:/type,==,PushEvent")
    search.get_by_test_id("search-run").click()
    expect(search.get_by_test_id("search-counts")).to_contain_text("Scanned 30 records, 3 matched")
    expect(found).to_have_count(3)
    search.get_by_test_id("search-q").fill("/n,>")
    search.get_by_test_id("search-run").click()
    expect(search.get_by_test_id("search-error")).to_have_text("q: at character 4: expected /path,OP,value")

    # Live tail: new records at the top as they arrive; paused, nothing comes in; resumed, they do.
    tail = search.get_by_test_id("tail-records").get_by_test_id("record")
    toggle = search.get_by_test_id("tail-toggle")
    toggle.click()
    expect(toggle).to_have_text("Pause")
    expect(search.get_by_test_id("tail-status")).to_contain_text("Live: 0 new records")
    events(source, range(30, 32))
    expect(tail).to_have_count(2)
    expect(tail.first).to_have_attribute("data-offset", "31")
    expect(search.get_by_test_id("tail-status")).to_contain_text("Live: 2 new records")
    toggle.click()
    expect(toggle).to_have_text("Resume")
    events(source, range(32, 33))
    page.wait_for_timeout(2500)
    expect(tail).to_have_count(2)
    toggle.click()
    expect(tail).to_have_count(3)
    expect(tail.first.get_by_test_id("record-key-preview")).to_have_text("order-32")
    screenshot(page, "topic-browser-search-tail")


def test_a_search_stops_and_continues_where_it_stopped_and_the_consumer_groups_page(
    open_page, people, pipeline, kafka_bootstrap
):
    """Stop ends the search after the step in flight and says what it scanned; Continue goes on from its
    cursor (the scanned count grows to the range, never restarts, no record listed twice). Then the
    consumer groups of the team's topics, reached from the navigation."""
    source = pipeline.current_revision.spec["source"]["topics"][0]
    events(source, range(600))  # every key matches "order-": 50 matches per step, 12 steps
    page = open_page(people["operator"])
    page.goto(f"/pipelines/{pipeline.name}/topics/{source}/")
    search = page.get_by_test_id("topic-search")
    search.get_by_test_id("search-q").fill("order-")
    search.get_by_test_id("search-max-scan").fill("2000")
    search.get_by_test_id("search-run").click()
    counts = search.get_by_test_id("search-counts")
    expect(counts).to_contain_text(re.compile(r"Scanned [1-9]\d* records, [1-9]\d* matched · searching…"))
    search.get_by_test_id("search-stop").click()
    expect(counts).to_contain_text("stopped; Continue goes on from here")
    stopped = counts.text_content() or ""
    scanned = int(re.match(r"Scanned (\d+) records, \1 matched", stopped).group(1))
    assert 0 < scanned < 600
    page.wait_for_timeout(1500)
    expect(counts).to_have_text(stopped)  # no step runs after Stop
    found = search.get_by_test_id("search-results").get_by_test_id("record")
    expect(found).to_have_count(scanned)
    expect(search.get_by_test_id("search-stop")).to_be_hidden()
    search.get_by_test_id("search-continue").click()
    expect(counts).to_have_text(
        "Scanned 600 records, 600 matched · done: the whole range was searched", timeout=180_000
    )
    offsets = found.evaluate_all("rows => rows.map(row => row.dataset.offset)")
    assert sorted(int(o) for o in offsets) == list(range(600))  # each once: resumed, not restarted

    group = f"audit-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(consumer_config(KafkaConnection(kafka_bootstrap), group_id=group))
    consumer.commit(offsets=[TopicPartition(source, 0, 400)], asynchronous=False)
    consumer.close()
    page.get_by_test_id("nav-consumer-groups").click()
    expect(page).to_have_url(re.compile(r"/consumer-groups/$"))
    row = page.locator(f'[data-testid="team-group"][data-group="{group}"]')
    expect(row.locator("[data-field=state]")).to_have_text("empty")
    expect(row.locator("[data-field=members]")).to_have_text("0")
    expect(row.locator("[data-field=topics]")).to_have_text(source)
    expect(row.locator("[data-field=lag]")).to_have_text("200")
    row.get_by_test_id("group-partitions").locator("summary").click()
    expect(row.get_by_test_id("team-group-partition")).to_have_text(
        [re.compile(rf"{source}\s*0\s*400\s*600\s*200")]
    )
    expect(page.get_by_test_id("cluster-error")).to_have_count(0)
    screenshot(page, "consumer-groups")
