"""An erased dead letter as a person sees it in the topic browser, in a real browser (security review #28,
finding 3): after an approved (four-eyes) delete, the operator who could read the record before opens the
DLQ topic and the source topic and finds it marked "erased by an approved delete", with nothing of its key,
value or headers on any tab of the page."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import NewTopic
from playwright.sync_api import expect

from access.models import Role
from dlq import services
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter
from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from tests.browser.conftest import in_thread, screenshot
from tests.dlq.conftest import dlq_headers, github_spec, produce_with_headers
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.browser, pytest.mark.kafka]

SECRET = "octocat-erased-login"


@pytest.fixture
def people():
    team = TeamFactory(name="data-platform")
    return {
        "team": team,
        "operator": member(team, Role.OPERATOR, username="olga"),
        "approver": member(team, Role.APPROVER, username="abe"),
        "admin": member(team, Role.ADMIN, username="ada"),
    }


@pytest.fixture
def pipeline(people, kafka_admin) -> Iterator[Pipeline]:
    """A GitHub-events pipeline whose source and DLQ topics exist on the test broker."""
    suffix = uuid.uuid4().hex[:8]
    made = create_pipeline(
        actor=people["admin"],
        name=f"github-{suffix}",
        team=people["team"],
        spec=github_spec(f"github.events-{suffix}", suffix),
    )
    assert made.current_revision is not None
    spec = made.current_revision.spec
    topics = [spec["source"]["topics"][0], spec["dlq"]["topic"]]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    yield made
    for future in kafka_admin.delete_topics(topics).values():
        future.result(timeout=30)


def test_review_28_3_an_erased_dead_letter_reads_as_erased_on_its_dlq_and_source_topic_pages(
    open_page, people, pipeline, kafka_bootstrap
):
    spec = pipeline.current_revision.spec
    source, dlq = spec["source"]["topics"][0], spec["dlq"]["topic"]
    event = json.dumps({"type": "PushEvent", "actor": {"login": SECRET}}).encode()
    headers = dlq_headers(
        pipeline, error_type="JsonPathNotFound", message="no /payload/size", source_offset=0
    )
    produce_with_headers(kafka_bootstrap, source, [(SECRET.encode(), event, [])])
    produce_with_headers(kafka_bootstrap, dlq, [(SECRET.encode(), event, headers)])
    record = Record(topic=dlq, partition=0, offset=0, key=SECRET.encode(), value=event, headers=headers,
                    timestamp_ms=None)  # fmt: skip
    stored = store_batch([record], {dlq: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)})
    dead = DeadLetter.objects.get(pk=stored.new_ids[0])

    page = open_page(people["operator"])
    page.goto(f"/pipelines/{pipeline.name}/topics/{dlq}/")
    expect(page.get_by_test_id("record")).to_have_count(1)
    assert SECRET in page.content()  # before the delete, the operator reads it

    def delete_with_approval() -> None:
        approval = services.request_delete(actor=people["operator"], dead_letter=dead, reason="GDPR erasure")
        services.approve(actor=people["approver"], approval=approval)

    in_thread(delete_with_approval)

    for topic in (dlq, source):
        page.goto(f"/pipelines/{pipeline.name}/topics/{topic}/")
        shown = page.get_by_test_id("record")
        expect(shown).to_have_count(1)
        expect(shown.get_by_test_id("erased-badge")).to_have_text("erased by an approved delete")
        shown.get_by_test_id("record-summary").click()  # a compact row: the whole record when expanded
        expect(shown.get_by_test_id("value-erased")).to_be_visible()
        expect(shown.get_by_test_id("value-raw")).to_have_text("erased by an approved delete")
        shown.get_by_test_id("value-tab-hex").click()
        expect(shown.get_by_test_id("value-hex")).to_have_text("erased by an approved delete")
        expect(shown.get_by_test_id("key-raw")).to_have_text("erased by an approved delete")
        expect(shown.get_by_text("No headers.")).to_be_visible()
        assert SECRET not in page.content()
    screenshot(page, "topic-browser-erased-record")
