"""Every event type, end to end from the code that really emits it to a real signed webhook receiver: the
alert rules (``pipelines.alerts.evaluate``), the supervision state machine over real child processes (a
HALTED and a FAILED pipeline), a delete request and a bulk delete waiting for an approver, and a bulk skip
run to completion. Each time the subscribed channel hears exactly one signed request; a channel of the same
team not subscribed to that event type, and another team's channel subscribed to it, hear nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic

from access.models import Role
from dlq import services
from dlq.filters import MessageFilter
from dlq.models import ApprovalKind, ApprovalRequest, BulkAction, BulkState
from dlq.services import bulk as bulk_actions
from dlq.services import fix_forward
from notifications import channels
from notifications.models import Channel, DeliveryAttempt, EventType, Notification
from pipelines import alerts, supervision
from pipelines.models import Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline, revise_pipeline
from pipelines.supervision import launcher
from pipelines.supervision import requests as supervision_requests
from pipelines.topics import TopicPlan
from tests.dlq.conftest import github_spec as dlq_spec
from tests.dlq.conftest import park  # noqa: F401  # the fixture
from tests.factories import MembershipFactory, TeamFactory, UserFactory, member
from tests.notifications.conftest import Receiver
from tests.pipelines.conftest import github_spec

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "pipelines" / "fake_driver.py"

pytestmark = pytest.mark.django_db(transaction=True)  # the signals are sent after commit


@pytest.fixture
def team():
    return TeamFactory(name="notify-events")


@pytest.fixture
def manager(team):
    return MembershipFactory(team=team, role=Role.OPERATOR, manages_team=True, user=UserFactory()).user


@pytest.fixture
def foreign_team():
    return TeamFactory(name="elsewhere")


@pytest.fixture
def foreign_manager(foreign_team):
    return MembershipFactory(
        team=foreign_team, role=Role.OPERATOR, manages_team=True, user=UserFactory()
    ).user


@dataclass
class Listeners:
    """The subscribed channel, a channel of the same team subscribed to every other event type, and another
    team's channel subscribed to this one: all three post to the same receiver."""

    subscribed: Channel
    deaf: Channel
    foreign: Channel


@pytest.fixture
def listen(team, manager, foreign_team, foreign_manager, receiver, inline_delivery):
    """``listen(event_type)``: the three channels, made just before the action under test (so what the
    set-up emitted, such as the failure group of the dead letters it parks, reaches none of them)."""

    def make(event_type: str) -> Listeners:
        others = [value for value in channels.SUBSCRIBABLE if value != event_type]
        subscribed = channels.create_channel(
            actor=manager, team=team, name="hook", kind="webhook", events=[event_type], url=receiver.url
        )
        deaf = channels.create_channel(
            actor=manager, team=team, name="deaf", kind="webhook", events=others, url=receiver.url
        )
        foreign = channels.create_channel(
            actor=foreign_manager,
            team=foreign_team,
            name="foreign",
            kind="webhook",
            events=[event_type],
            url=receiver.url,
        )
        receiver.signing_secret = subscribed.signing_secret or ""
        return Listeners(subscribed.channel, deaf.channel, foreign.channel)

    return make


def _the_one_delivery(receiver: Receiver, listeners: Listeners, event_type: str) -> dict[str, Any]:
    """Assert the receiver heard exactly one request, signed with the subscribed channel's secret, about
    ``event_type``, and that the other two channels have nothing; return its body."""
    assert len(receiver.requests) == 1, receiver.bodies()
    assert receiver.bad_signatures == 0
    headers, _ = receiver.requests[0]
    body: dict[str, Any] = receiver.bodies()[0]
    assert headers["x-streamforge-event"] == event_type
    assert body["event"] == event_type
    assert body["team"] == listeners.subscribed.team.name
    notification = Notification.objects.get(channel=listeners.subscribed)
    assert headers["x-streamforge-delivery"] == str(notification.pk) == str(body["id"])
    assert DeliveryAttempt.objects.get(notification=notification).status_code == 200
    assert not Notification.objects.filter(channel__in=(listeners.deaf, listeners.foreign)).exists()
    return body


# ---------------------------------------------------------------------------------------------------- alerts


def test_an_alert_that_starts_firing_is_notified_once(backlogged, listen, receiver):
    pipeline, now_ms = backlogged
    listeners = listen(EventType.ALERT_FIRING)

    assert [a.rule for a in alerts.evaluate(now_ms=now_ms)] == ["DLQBacklog"]
    alerts.evaluate(now_ms=now_ms + 1000)  # still firing with the same figure: nothing new

    body = _the_one_delivery(receiver, listeners, EventType.ALERT_FIRING)
    assert body["title"] == f"DLQBacklog firing on {pipeline.name}"
    assert "150 records went to the DLQ" in body["text"]
    assert body["data"] == {
        "pipeline": pipeline.name,
        "rule": "DLQBacklog",
        "severity": "warning",
        "value": 150.0,
    }


def test_an_alert_that_stops_firing_is_notified_as_resolved(backlogged, listen, receiver):
    pipeline, now_ms = backlogged
    alerts.evaluate(now_ms=now_ms)  # fires before anyone listens
    listeners = listen(EventType.ALERT_RESOLVED)

    assert alerts.evaluate(now_ms=now_ms + 3600_000) == []  # an hour later the backlog is out of the window

    body = _the_one_delivery(receiver, listeners, EventType.ALERT_RESOLVED)
    assert body["title"] == f"DLQBacklog resolved on {pipeline.name}"
    assert (body["data"]["pipeline"], body["data"]["rule"]) == (pipeline.name, "DLQBacklog")


# ----------------------------------------------------------------------------------------------- supervision


@pytest.fixture
def supervised(settings, tmp_path, monkeypatch, team, manager):
    """As in tests/pipelines/test_supervision.py: a pipeline whose driver is the stand-in
    (``behaviour["name"]``), started by the reconcile tick (the start task is not sent to a broker); every
    child is killed afterwards."""
    settings.STATE_DIR = tmp_path
    settings.RESTART_BACKOFF_SECONDS = 0
    settings.CRASH_LOOP_FAILURES = 2
    behaviour = {"name": "crash"}
    real_command = supervision.driver_command
    monkeypatch.setattr(
        launcher,
        "driver_command",
        lambda run, spec_file, conn: [
            sys.executable,
            str(FAKE_DRIVER),
            behaviour["name"],
            *real_command(run, spec_file, conn)[3:],
        ],
    )
    monkeypatch.setattr("pipelines.topics.ensure_topics", lambda admin, spec: TopicPlan([], [], []))
    monkeypatch.setattr(supervision_requests, "_after_commit_enqueue", lambda task_name, pipeline_id: None)
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN), name=f"sup{os.getpid()}", team=team, spec=github_spec()
    )
    yield pipeline, behaviour
    for run in PipelineRun.objects.exclude(pid=None):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    supervision._children.clear()


def _tick_until(pipeline: Pipeline, state: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        supervision.reconcile()
        if Pipeline.objects.get(pk=pipeline.pk).state == state:
            return
        time.sleep(0.2)
    raise AssertionError(f"pipeline never became {state}")


@pytest.mark.redis
def test_a_pipeline_halted_by_its_driver_is_notified_once(supervised, manager, listen, receiver):
    pipeline, behaviour = supervised
    behaviour["name"] = "halt"  # exit 3: DeadLetterQueue
    listeners = listen(EventType.PIPELINE_HALTED)

    supervision.request_start(actor=manager, pipeline=pipeline)
    _tick_until(pipeline, PipelineState.HALTED)
    for _ in range(3):  # later ticks neither restart it nor say it again
        supervision.reconcile()

    body = _the_one_delivery(receiver, listeners, EventType.PIPELINE_HALTED)
    run = PipelineRun.objects.get(pipeline=pipeline)
    assert body["title"] == f"Pipeline {pipeline.name} is halted"
    assert body["data"]["pipeline"] == pipeline.name
    assert body["data"]["state"] == "halted"
    assert body["data"]["run_id"] == str(run.run_id)
    assert "DeadLetterQueue" in body["data"]["reason"]
    assert "DLQ topic gone" in body["text"]


@pytest.mark.redis
def test_a_pipeline_failed_by_a_crash_loop_is_notified_once_and_its_restart_is_not(
    supervised, manager, listen, receiver
):
    pipeline, behaviour = supervised
    behaviour["name"] = "crash"  # exit 1; the second crash in the crash-loop window makes it FAILED
    listeners = listen(EventType.PIPELINE_FAILED)

    supervision.request_start(actor=manager, pipeline=pipeline)
    _tick_until(pipeline, PipelineState.FAILED)

    runs = list(PipelineRun.objects.filter(pipeline=pipeline).order_by("started_at"))
    assert [r.state for r in runs] == ["restarting", "failed"]
    body = _the_one_delivery(receiver, listeners, EventType.PIPELINE_FAILED)
    assert body["title"] == f"Pipeline {pipeline.name} is failed"
    assert (body["data"]["pipeline"], body["data"]["state"]) == (pipeline.name, "failed")
    assert body["data"]["run_id"] == str(runs[-1].run_id)
    assert "boom" in body["data"]["reason"]


# ------------------------------------------------------------------------------------------------------ DLQ


@pytest.fixture
def parked(team, park):  # noqa: F811
    """Two dead letters of one failure group of a pipeline of ``team``, stored through the ingest code."""
    suffix = uuid.uuid4().hex[:8]
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN),
        name=f"dlq-{suffix}",
        team=team,
        spec=dlq_spec(f"notify.events-{suffix}", suffix),
    )
    return park(
        pipeline,
        [
            (f"k{i}".encode(), b'{"payload": {}}', "JsonPathNotFound", "path /payload/size not found")
            for i in range(2)
        ],
    )


@pytest.fixture
def operator(team):
    return member(team, Role.OPERATOR, username="olga")


def test_a_delete_request_waiting_for_an_approver_is_notified_once(parked, operator, listen, receiver):
    listeners = listen(EventType.APPROVAL_WAITING)

    request = services.request_delete(actor=operator, dead_letter=parked[0], reason="GDPR request 17")

    body = _the_one_delivery(receiver, listeners, EventType.APPROVAL_WAITING)
    assert body["title"] == f"Approval waiting: delete of dead letter {parked[0].pk}"
    assert body["text"] == "olga asks: GDPR request 17"
    assert body["data"] == {
        "approval": request.pk, "kind": ApprovalKind.DELETE, "requested_by": "olga",
        "dead_letter": parked[0].pk, "bulk": None,
    }  # fmt: skip


def test_a_bulk_delete_waiting_for_an_approver_is_notified_once(
    parked, operator, listen, receiver, monkeypatch
):
    queued: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: queued.append(bulk.pk))
    listeners = listen(EventType.APPROVAL_WAITING)

    bulk = services.create_bulk(
        actor=operator, kind="delete", selection=MessageFilter(group=parked[0].group_id), reason="purge"
    )

    assert (bulk.state, queued) == (BulkState.AWAITING_APPROVAL, [])
    approval = ApprovalRequest.objects.get(bulk=bulk)
    body = _the_one_delivery(receiver, listeners, EventType.APPROVAL_WAITING)
    assert body["title"] == f"Approval waiting: bulk action {bulk.pk}"
    assert body["text"] == "olga asks: bulk delete of 2 messages: purge"
    assert body["data"] == {
        "approval": approval.pk, "kind": ApprovalKind.BULK, "requested_by": "olga",
        "dead_letter": None, "bulk": bulk.pk,
    }  # fmt: skip


def test_a_bulk_action_run_to_completion_is_notified_once(parked, operator, listen, receiver, monkeypatch):
    queued: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: queued.append(bulk.pk))
    bulk = services.create_bulk(
        actor=operator, kind="skip", selection=MessageFilter(group=parked[0].group_id), reason="known noise"
    )
    assert queued == [bulk.pk]  # two messages: no approval needed
    listeners = listen(EventType.BULK_FINISHED)

    done = bulk_actions.run_bulk(bulk_id=bulk.pk, chunk_size=1)
    bulk_actions.run_bulk(bulk_id=bulk.pk)  # a redelivered task finds it complete and says nothing

    assert (done.state, done.processed) == (BulkState.COMPLETED, 2)
    body = _the_one_delivery(receiver, listeners, EventType.BULK_FINISHED)
    assert body["title"] == f"Bulk skip {bulk.pk} finished"
    assert body["data"] == {
        "bulk": bulk.pk,
        "kind": "skip",
        "total": 2,
        "processed": 2,
        "succeeded": 2,
        "failed": 0,
        "fraction": 1.0,
    }
    assert BulkAction.objects.get(pk=bulk.pk).state == BulkState.COMPLETED


@pytest.mark.kafka
def test_a_fix_forward_scan_that_finds_replayable_dead_letters_is_notified_once(
    parked,
    park,  # noqa: F811
    operator,
    listen,
    receiver,
    kafka_admin,
    monkeypatch,
):
    """Revision 2 gives the missing ``payload.size`` a default (null): the scan finds the two pushes without
    one, and the team hears it once, with where they failed and the page that replays them."""
    pipeline = parked[0].pipeline
    push = b'{"type": "PushEvent", "actor": {"login": "octocat"}, "payload": {}}'
    park(
        pipeline,
        [(f"p{i}".encode(), push, "JsonPathNotFound", "path /payload/size not found") for i in range(2)],
    )
    spec = pipeline.current_revision.spec
    topics = [*spec["source"]["topics"], *(d["topic"] for d in spec["destinations"])]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)  # a replay's prediction checks the topics it would write
    monkeypatch.setattr(fix_forward, "enqueue_scan", lambda scan_id: None)
    revised = {**spec, "error_handling": {"missing_field_behavior": "null"}}
    revise_pipeline(actor=member(pipeline.team, Role.ADMIN), pipeline=pipeline, spec=revised)
    pipeline.refresh_from_db()
    listeners = listen(EventType.FIX_FORWARD)
    try:
        scan = services.request_fix_forward_scan(pipeline=pipeline, actor=operator)
        scan = services.run_fix_forward_scan(scan_id=scan.pk)
        assert scan.candidates == 2
        body = _the_one_delivery(receiver, listeners, EventType.FIX_FORWARD)
        assert body["title"] == f"Revision 2 of {pipeline.name} now passes 2 parked dead letters"
        assert body["text"] == (
            f"2 at pushes (JsonPathNotFound)\nReplay them from /dlq/fix-forward/{scan.pk}/ (a bulk replay, counted first)"
        )
        assert body["data"]["candidates"] == 2
    finally:
        kafka_admin.delete_topics(topics)
