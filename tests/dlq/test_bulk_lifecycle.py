"""The bulk life cycle as a state machine (``dlq.services.bulk.BULK_TRANSITIONS``): a large bulk action
runs only after an approver other than its creator approved it, whatever path leads there.

The exploit of issue #14 (cancel an action awaiting approval, then resume it) is refused over the REST
API, the management command and the runner itself; every move is tried by every role from every state
over the REST API, and the expected answers below are written out independently of the production table.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from confluent_kafka.admin import NewTopic
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from access.models import AuditEvent, Role
from dlq import services
from dlq.filters import MessageFilter
from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    BulkState,
    DeadLetter,
    Status,
)
from dlq.services import bulk as bulk_actions
from tests.dlq.conftest import api_for
from tests.factories import member
from tests.pipelines.spark.harness import consume_all

_error_types = itertools.count(1)


@pytest.fixture
def queued(monkeypatch):
    """Bulk actions sent to a Celery worker are collected instead; tests run ``services.run_bulk``."""
    ids: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: ids.append(bulk.pk))
    return ids


def park_many(park, pipeline, n: int, error_type: str = "RetryExhausted") -> list[DeadLetter]:
    return list(park(pipeline, [(f"k{i}".encode(), b'{"a": 1}', error_type, "timed out") for i in range(n)]))


# --- the exploit --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_cancelled_bulk_that_needed_approval_cannot_be_resumed_before_approval(
    people, pipeline, park, queued
):
    """Issue #14, finding 1: the requester cancels their 1,005-message bulk skip while it awaits approval
    and resumes it; before the fix it was queued and skipped every message with the approval pending."""
    park_many(park, pipeline, 1_005)
    operator = api_for(people["operator"])
    created = operator.post(
        "/api/dlq/bulk/",
        {"kind": "skip", "filters": {"pipeline": pipeline.name}, "reason": "noise", "rate_limit": 0},
        format="json",
    )
    assert created.status_code == 202, created.json()
    bulk_id = created.json()["id"]
    assert created.json()["state"] == "awaiting_approval"

    cancelled = operator.post(f"/api/dlq/bulk/{bulk_id}/cancel/", {}, format="json")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    resumed = operator.post(f"/api/dlq/bulk/{bulk_id}/resume/", {}, format="json")
    assert resumed.status_code == 409
    assert "cancelled" in resumed.json()["detail"]

    assert queued == []
    services.run_bulk(bulk_id=bulk_id)  # even if a worker were handed it
    assert BulkAction.objects.get(pk=bulk_id).state == BulkState.CANCELLED
    assert DeadLetter.objects.filter(status=Status.PARKED).count() == 1_005
    request = ApprovalRequest.objects.get(bulk_id=bulk_id)
    assert request.state == ApprovalState.CANCELLED, "the withdrawn request can no longer be approved"
    late = api_for(people["approver"]).post(f"/api/dlq/approvals/{request.pk}/approve/", {}, format="json")
    assert late.status_code == 409
    assert BulkAction.objects.get(pk=bulk_id).state == BulkState.CANCELLED
    assert queued == []


@pytest.mark.django_db
def test_the_management_command_refuses_to_resume_a_withdrawn_bulk_action(
    people, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    park_many(park, pipeline, 3)
    call_command(
        "dlq", "bulk", "skip", "--as", "olga", "--reason", "noise", "--filter", f"pipeline={pipeline.name}"
    )
    bulk = BulkAction.objects.get()
    assert bulk.state == BulkState.AWAITING_APPROVAL
    call_command("dlq", "bulk-cancel", str(bulk.pk), "--as", "olga")
    for command in ("bulk-resume", "bulk-pause"):
        with pytest.raises(CommandError, match="is cancelled"):
            call_command("dlq", command, str(bulk.pk), "--as", "olga")
    request = ApprovalRequest.objects.get(bulk=bulk)
    with pytest.raises(CommandError, match="is cancelled"):
        call_command("dlq", "approve", str(request.pk), "--as", "abe")
    bulk.refresh_from_db()
    assert bulk.state == BulkState.CANCELLED
    assert queued == []
    assert DeadLetter.objects.filter(status=Status.PARKED).count() == 3


@pytest.mark.django_db
def test_the_runner_refuses_a_large_bulk_action_that_reached_queued_without_an_approval(
    people, pipeline, park, queued, settings
):
    """Belt and braces: however an action that needed approval got to QUEUED (here a direct UPDATE), a
    worker does not run it; it ends FAILED, saying why, and the refusal is audited."""
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    park_many(park, pipeline, 3)
    bulk = services.create_bulk(
        actor=people["operator"], kind="skip", selection=MessageFilter(pipeline=pipeline.name), reason="r"
    )
    BulkAction.objects.filter(pk=bulk.pk).update(state=BulkState.QUEUED)
    done = services.run_bulk(bulk_id=bulk.pk)
    assert done.state == BulkState.FAILED
    assert "approval" in done.last_error
    assert done.processed == 0
    assert DeadLetter.objects.filter(status=Status.PARKED).count() == 3
    assert AuditEvent.objects.filter(action="dlq.bulk_fail", target_id=str(bulk.pk)).count() == 1


@pytest.mark.django_db
def test_the_runner_refuses_a_bulk_action_approved_only_by_its_own_creator(
    people, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    park_many(park, pipeline, 3)
    bulk = services.create_bulk(
        actor=people["approver"], kind="skip", selection=MessageFilter(pipeline=pipeline.name), reason="r"
    )
    # A forged decision: the creator as the decider (the approval services refuse this; the runner too).
    ApprovalRequest.objects.filter(bulk=bulk).update(
        state=ApprovalState.APPROVED, decided_by=people["approver"]
    )
    BulkAction.objects.filter(pk=bulk.pk).update(state=BulkState.QUEUED)
    assert services.run_bulk(bulk_id=bulk.pk).state == BulkState.FAILED
    assert DeadLetter.objects.filter(status=Status.PARKED).count() == 3


@pytest.mark.django_db
def test_a_large_bulk_action_whose_approval_request_vanished_is_not_run(
    people, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    park_many(park, pipeline, 3)
    bulk = services.create_bulk(
        actor=people["operator"], kind="skip", selection=MessageFilter(pipeline=pipeline.name), reason="r"
    )
    ApprovalRequest.objects.filter(bulk=bulk).delete()
    BulkAction.objects.filter(pk=bulk.pk).update(state=BulkState.QUEUED)
    assert services.run_bulk(bulk_id=bulk.pk).state == BulkState.FAILED


@pytest.mark.kafka
@pytest.mark.django_db(transaction=True)
def test_a_withdrawn_bulk_replay_is_never_produced(
    people, pipeline, park, queued, kafka_admin, kafka_bootstrap
):
    """The same exploit with a bulk replay, on the real broker: nothing reaches the source topic."""
    source = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    try:
        park_many(park, pipeline, 1_005)
        operator = api_for(people["operator"])
        created = operator.post(
            "/api/dlq/bulk/",
            {"kind": "replay", "filters": {"pipeline": pipeline.name}, "reason": "outage", "rate_limit": 0},
            format="json",
        ).json()
        assert created["state"] == "awaiting_approval"
        assert operator.post(f"/api/dlq/bulk/{created['id']}/cancel/", {}, format="json").status_code == 200
        assert operator.post(f"/api/dlq/bulk/{created['id']}/resume/", {}, format="json").status_code == 409
        services.run_bulk(bulk_id=created["id"])
        assert consume_all(kafka_bootstrap, source) == []
        assert DeadLetter.objects.filter(status=Status.PARKED).count() == 1_005
        assert queued == []
    finally:
        kafka_admin.delete_topics([source])[source].result(timeout=30)


# --- every move, every role, every state, over the REST API -------------------------------------------

STATES = [
    "awaiting_approval",
    "queued",
    "running",
    "paused",
    "completed",
    "cancelled",  # cancelled after approval
    "withdrawn",  # cancelled while awaiting approval: state CANCELLED too
    "rejected",
    "failed",
]
ROLES = ["viewer", "requester", "other_operator", "approver", "requester_approver", "admin", "foreign"]
MOVES = ["approve", "reject", "pause", "resume", "cancel"]

#: (move, starting state) -> the state it leads to. Everything else is a 409 for whoever may make the move.
ALLOWED = {
    ("approve", "awaiting_approval"): BulkState.QUEUED,
    ("reject", "awaiting_approval"): BulkState.REJECTED,
    ("cancel", "awaiting_approval"): BulkState.CANCELLED,
    ("pause", "queued"): BulkState.PAUSED,
    ("pause", "running"): BulkState.PAUSED,
    ("resume", "paused"): BulkState.QUEUED,
    ("cancel", "queued"): BulkState.CANCELLED,
    ("cancel", "running"): BulkState.CANCELLED,
    ("cancel", "paused"): BulkState.CANCELLED,
}
#: Who may make each move at all (on an action of their team): others get 403, other teams 404.
MAY = {
    "approve": {"approver", "admin"},  # never the requester, whatever their role
    "reject": {"approver", "admin"},
    "pause": {"requester", "other_operator", "approver", "requester_approver", "admin"},
    "resume": {"requester", "other_operator", "approver", "requester_approver", "admin"},
    "cancel": {"requester", "other_operator", "approver", "requester_approver", "admin"},
}


def expected_answer(move: str, state: str, role: str) -> tuple[int, str]:
    """(HTTP status, the state afterwards) the spec says; the state is named by its final value."""
    start = BulkState.CANCELLED if state == "withdrawn" else BulkState(state)
    if role == "foreign":
        return 404, start
    if role not in MAY[move]:
        return 403, start
    if (move, state) in ALLOWED:
        return 200, ALLOWED[(move, state)]
    return 409, start


@dataclass
class Cast:
    """The people of one case: ``creator`` made the bulk action, ``actor`` tries the move."""

    creator: User
    actor: User
    second_approver: User


def cast_for(role: str, people, team) -> Cast:
    operator, approver = people["operator"], people["approver"]
    creator = approver if role == "requester_approver" else operator
    if role == "requester":
        actor = operator
    elif role == "requester_approver":
        actor = approver
    elif role == "other_operator":
        actor = member(team, Role.OPERATOR, username=f"otto{next(_error_types)}")
    else:
        actor = people[role]
    return Cast(creator=creator, actor=actor, second_approver=people["approver2"])


def bulk_in(state: str, *, cast: Cast, pipeline, park) -> BulkAction:
    """A large (approval-needing) bulk skip brought to ``state`` through the service functions, on its own
    three parked messages. RUNNING is the worker's claim; FAILED is the runner refusing an action pushed
    to QUEUED without its approval."""
    error_type = f"Lifecycle{next(_error_types)}"
    park_many(park, pipeline, 3, error_type=error_type)
    bulk = services.create_bulk(
        actor=cast.creator,
        kind="skip",
        selection=MessageFilter(pipeline=pipeline.name, error_type=error_type),
        reason="test traffic",
        rate_limit=0,
    )
    assert bulk.state == BulkState.AWAITING_APPROVAL
    request = ApprovalRequest.objects.get(bulk=bulk, kind=ApprovalKind.BULK)
    operator = cast.creator
    if state in ("queued", "running", "paused", "completed", "cancelled"):
        services.approve(actor=cast.second_approver, approval=request)
    if state == "running":
        assert bulk_actions._move(
            bulk_actions.BULK_TRANSITIONS["run"], bulk.pk, worker="elsewhere", heartbeat_at=timezone.now()
        )
    elif state == "paused":
        services.pause_bulk(actor=operator, bulk=BulkAction.objects.get(pk=bulk.pk))
    elif state == "completed":
        services.run_bulk(bulk_id=bulk.pk)
    elif state in ("cancelled", "withdrawn"):
        services.cancel_bulk(actor=operator, bulk=BulkAction.objects.get(pk=bulk.pk))
    elif state == "rejected":
        services.reject(actor=cast.second_approver, approval=request)
    elif state == "failed":
        BulkAction.objects.filter(pk=bulk.pk).update(state=BulkState.QUEUED)
        services.run_bulk(bulk_id=bulk.pk)
    bulk.refresh_from_db()
    assert bulk.state == (BulkState.CANCELLED if state == "withdrawn" else BulkState(state))
    return bulk


def attempt(move: str, bulk: BulkAction, actor):
    api = api_for(actor)
    if move in ("approve", "reject"):
        request = ApprovalRequest.objects.get(bulk=bulk, kind=ApprovalKind.BULK)
        return api.post(f"/api/dlq/approvals/{request.pk}/{move}/", {"reason": "checked"}, format="json")
    return api.post(f"/api/dlq/bulk/{bulk.pk}/{move}/", {"reason": "why not"}, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("move", MOVES)
@pytest.mark.parametrize("state", STATES)
def test_every_bulk_move_is_allowed_only_from_its_states_and_only_to_its_roles(
    move, state, people, team, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    outcomes = {}
    for role in ROLES:
        cast = cast_for(role, people, team)
        bulk = bulk_in(state, cast=cast, pipeline=pipeline, park=park)
        queued.clear()
        answer = attempt(move, bulk, cast.actor)
        bulk.refresh_from_db()
        outcomes[role] = (answer.status_code, bulk.state)
        if answer.status_code == 409:
            assert (
                bulk.get_state_display().lower() in answer.json()["detail"]
                or "request" in answer.json()["detail"]
            ), answer.json()
        sent = bulk.state == BulkState.QUEUED and answer.status_code == 200
        assert queued == ([bulk.pk] if sent else []), (role, queued)
        if bulk.state == BulkState.CANCELLED:
            assert not ApprovalRequest.objects.filter(bulk=bulk, state=ApprovalState.PENDING).exists()
    assert outcomes == {role: expected_answer(move, state, role) for role in ROLES}


# --- the worker's moves --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("state", STATES)
def test_a_worker_runs_only_a_queued_or_stale_running_approved_action(
    state, people, team, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    bulk = bulk_in(state, cast=cast_for("requester", people, team), pipeline=pipeline, park=park)
    before = bulk.state
    if state == "running":  # the worker holding it stopped beating: the takeover may claim it
        BulkAction.objects.filter(pk=bulk.pk).update(
            heartbeat_at=timezone.now() - timedelta(seconds=settings.DLQ_BULK_STALE_SECONDS + 1)
        )
    done = services.run_bulk(bulk_id=bulk.pk)
    if state in ("queued", "running"):
        assert done.state == BulkState.COMPLETED
        assert done.processed == 3
    else:
        assert done.state == before, "a worker leaves an action in any other state alone"


@pytest.mark.django_db
def test_a_worker_does_not_take_over_an_action_another_worker_is_still_running(
    people, team, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 2
    bulk = bulk_in("running", cast=cast_for("requester", people, team), pipeline=pipeline, park=park)
    done = services.run_bulk(bulk_id=bulk.pk)
    assert (done.state, done.worker, done.processed) == (BulkState.RUNNING, "elsewhere", 0)


def test_the_transition_table_lists_every_state_and_only_workers_run_or_finish():
    table = bulk_actions.BULK_TRANSITIONS
    reached = {row.target for row in table.values()} | {s for row in table.values() for s in row.sources}
    assert reached == set(BulkState)
    assert table["resume"].sources == (BulkState.PAUSED,)
    assert {row.action for row in table.values() if row.role is None} == {
        "run",
        "take_over",
        "complete",
        "fail",
    }
    assert {row.action for row in table.values() if row.not_requester} == {"approve", "reject"}
    into_running_states = {
        row.action for row in table.values() if row.target in (BulkState.QUEUED, BulkState.RUNNING)
    }
    assert into_running_states == {row.action for row in table.values() if row.runs}


# --- existing data ---------------------------------------------------------------------------------------


@pytest.fixture
def back_to_the_latest_migrations(transactional_db: None) -> Iterator[None]:
    """Migrate the test database forward to every app's latest migration after the test: the tests after a
    migration test need every later migration."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_marks_large_bulks_and_closes_requests_of_bulks_no_longer_awaiting_approval(
    people, team, back_to_the_latest_migrations
):
    """Before the state machine a bulk action could be cancelled while its request stayed pending; the
    migration closes such requests, so they cannot be approved into a run later."""
    executor = MigrationExecutor(connection)
    before, after = [("dlq", "0003_dead_letter_claimed_pipeline")], [("dlq", "0004_bulk_approval_required")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    bulk_action, approval_request = (
        old.get_model("dlq", "BulkAction"),
        old.get_model("dlq", "ApprovalRequest"),
    )

    def bulk(state: str, *, large: bool) -> int:
        row = bulk_action.objects.create(
            kind="skip",
            team_id=team.pk,
            max_id=1,
            reason="r",
            state=state,
            created_by_id=people["operator"].pk,
        )
        if large:
            approval_request.objects.create(
                kind="bulk", team_id=team.pk, bulk=row, reason="r", requested_by_id=people["operator"].pk
            )
        return int(row.pk)

    withdrawn, waiting, small = (
        bulk("cancelled", large=True),
        bulk("awaiting_approval", large=True),
        bulk("queued", large=False),
    )
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    # The models as of that migration: today's have columns added by later ones.
    new = executor.loader.project_state(after).apps
    bulk_now, approval_now = new.get_model("dlq", "BulkAction"), new.get_model("dlq", "ApprovalRequest")

    assert set(bulk_now.objects.filter(approval_required=True).values_list("pk", flat=True)) == {
        withdrawn,
        waiting,
    }
    assert approval_now.objects.get(bulk_id=withdrawn).state == ApprovalState.CANCELLED
    assert approval_now.objects.get(bulk_id=waiting).state == ApprovalState.PENDING
    assert bulk_now.objects.get(pk=small).approval_required is False
