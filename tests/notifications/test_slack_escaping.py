"""Security review #28, finding 7 (lows): a Slack message escapes ``&``, ``<`` and ``>`` in every value it
carries, so an error type or a reason written by whoever produces to a topic cannot ping ``<!channel>`` or
show a disguised link ``<http://evil|click>`` in the team's Slack. Slack's own rule ("Escaping text" in its
message formatting documentation): those three characters, and only those, become ``&amp;``, ``&lt;`` and
``&gt;``. The receiver is a real HTTP server on 127.0.0.1 standing in for Slack's incoming webhook."""

from __future__ import annotations

import time

import pytest

from access.models import Role
from dlq.ingest import TopicOwner, store_batch
from notifications import channels, delivery, dispatch, events
from notifications.models import EventType
from pipelines.models import PipelineState
from pipelines.services import create_pipeline
from streamforge_core.kafka import Record
from tests.dlq.conftest import dlq_headers, github_spec
from tests.factories import member
from tests.notifications.conftest import GROUP

HOSTILE_TYPE = "<!channel> <!here|here> & <@U024BE7LH>"
HOSTILE_REASON = "see <http://evil.example/login|the runbook> & <!everyone>"


def _slack_texts(receiver) -> list[str]:
    return [body["text"] for body in receiver.bodies()]


def _assert_inert(text: str) -> None:
    """No Slack control sequence survives: every ``<`` and ``>`` is escaped, every ``&`` starts an entity."""
    assert "<" not in text, text
    assert ">" not in text, text
    assert text.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "").count("&") == 0, text


@pytest.mark.django_db(transaction=True)
def test_a_slack_message_escapes_a_hostile_error_type_and_reason_from_a_dead_letter(
    team, manager, receiver, inline_delivery
):
    channels.create_channel(
        actor=manager, team=team, name="slack", kind="slack", events=[GROUP], slack_url=receiver.url
    )
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN),
        name="slack-pipe",
        team=team,
        spec=github_spec("slack.events", "slack"),
    )
    owners = {pipeline.current_revision.spec["dlq"]["topic"]: TopicOwner(team.pk, pipeline.pk, pipeline.name)}
    hostile = Record(
        topic=pipeline.current_revision.spec["dlq"]["topic"],
        partition=0,
        offset=0,
        key=b"k",
        value=b"{}",
        headers=dlq_headers(pipeline, error_type=HOSTILE_TYPE, message=HOSTILE_REASON, source_offset=0),
        timestamp_ms=int(time.time() * 1000),
    )

    store_batch([hostile], owners)

    deadline = time.monotonic() + 10
    while not receiver.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    [text] = _slack_texts(receiver)
    _assert_inert(text)
    assert "&lt;!channel&gt;" in text
    assert "&lt;http://evil.example/login|the runbook&gt; &amp; &lt;!everyone&gt;" in text


@pytest.mark.django_db(transaction=True)
def test_a_slack_message_escapes_a_halt_reason_and_names(team, manager, receiver, inline_delivery):
    """The same for a pipeline's halt reason (written by its driver from the record that broke it) and for
    the title built from the pipeline's name."""
    channels.create_channel(
        actor=manager,
        team=team,
        name="slack",
        kind="slack",
        events=[EventType.PIPELINE_HALTED],
        slack_url=receiver.url,
    )
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN), name="halting", team=team, spec=github_spec("halt.events", "halt")
    )

    dispatch.publish(
        events.pipeline_event(pipeline, run_id="r1", state=PipelineState.HALTED, reason=HOSTILE_REASON)
    )

    deadline = time.monotonic() + 10
    while not receiver.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    [text] = _slack_texts(receiver)
    _assert_inert(text)
    assert text.startswith("*Pipeline halting is halted*\n")
    assert "&lt;http://evil.example/login|the runbook&gt; &amp; &lt;!everyone&gt;" in text


def test_slack_escaping_follows_slacks_rule_and_nothing_more():
    assert delivery.slack_escape("a < b & c > d") == "a &lt; b &amp; c &gt; d"
    assert delivery.slack_escape("&lt;") == "&amp;lt;"  # already-escaped text is text, escaped again
    assert delivery.slack_escape("*bold* _it_ `code` 'q' \"d\"") == "*bold* _it_ `code` 'q' \"d\""
