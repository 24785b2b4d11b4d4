"""Redrive policies (issue #32, 2) on PostgreSQL: four eyes on creating and widening, the schedule's selection
(error types, delay, claims, window, run size), the attempt limit along a chain of failing again, the brake
that pauses a policy and notifies, two beats ticking at once, the pages; wrong role, another team and bad
input. The replays of a run go through the real broker; the end to end through a Spark driver is
``test_redrive_driver.py``."""

from __future__ import annotations

import copy
from datetime import time, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from access.models import AuditEvent
from dlq import services
from dlq.models import (
    ApprovalRequest,
    BulkAction,
    DeadLetter,
    RedrivePolicy,
    RedriveState,
    Replay,
    ReplayState,
    Status,
)
from dlq.services import bulk as bulk_actions
from dlq.services import redrive
from dlq.services.errors import InvalidRequest
from dlq.services.redrive import PolicySettings, widened
from tests.dlq.conftest import api_for

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/dlq/redrive-policies/"


@pytest.fixture
def queued(monkeypatch) -> list[int]:
    """The bulk actions sent to a worker (the tests run them themselves)."""
    sent: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: sent.append(bulk.pk))
    monkeypatch.setattr(redrive, "enqueue_bulk", lambda bulk: sent.append(bulk.pk))
    return sent


def _active(people, pipeline, **settings) -> RedrivePolicy:
    """A policy of ``pipeline`` created by the operator and approved by the approver, through the API."""
    made = api_for(people["operator"]).post(
        API, {"pipeline": pipeline.name, "name": "transient", **settings}, format="json"
    )
    assert made.status_code == 202, made.json()
    approval = made.json()["pending_approval"]["id"]
    approved = api_for(people["approver"]).post(f"/api/dlq/approvals/{approval}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    return RedrivePolicy.objects.get(pk=made.json()["id"])


def _age(rows, seconds: int) -> None:
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows]).update(
        last_failed_at=timezone.now() - timedelta(seconds=seconds)
    )


# ----------------------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"error_types": ["NoSuchType"]}, "error_types"),
        ({"error_types": "RetryExhausted,Bogus"}, "error_types"),
        ({"error_types": [1]}, "error_types"),
        ({"error_types": []}, "error_types"),  # and no group: it would select nothing
        ({"group": "x"}, "group"),
        ({"group": -3}, "group"),
        ({"delay_seconds": -1}, "delay_seconds"),
        ({"delay_seconds": True}, "delay_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 21}, "max_attempts"),
        ({"rate_limit": 0}, "rate_limit"),
        ({"max_per_run": 1001}, "max_per_run"),
        ({"interval_seconds": 5}, "interval_seconds"),
        ({"window_start": "25:00", "window_end": "03:00"}, "window_start"),
        ({"window_start": "02:00"}, "window_end"),
        ({"window_start": "02:00", "window_end": "02:00"}, "window_end"),
        ({"pause_threshold": 1.5}, "pause_threshold"),
        ({"pause_threshold": "half"}, "pause_threshold"),
        ({"destination": "d" * 129}, "destination"),
    ],
)
def test_settings_refuse_bad_input_naming_the_field(data, field):
    with pytest.raises(InvalidRequest) as refused:
        PolicySettings.from_mapping(data)
    assert refused.value.field == field


def test_widening_is_told_apart_from_narrowing():
    base = PolicySettings.from_mapping(
        {"error_types": ["RetryExhausted", "RecordTooLarge"], "window_start": "01:00", "window_end": "05:00"}
    )

    def change(**data):
        return widened(base, PolicySettings.from_mapping(data, base=base))

    assert change(error_types=["RetryExhausted"], delay_seconds=900, max_attempts=1, rate_limit=5) == []
    assert change(window_start="02:00", window_end="04:00", pause_threshold=0.2) == []
    assert change(error_types=["RetryExhausted", "JsonPathNotFound"]) == ["error_types"]
    assert change(delay_seconds=10, interval_seconds=60) == ["delay_seconds", "interval_seconds"]
    assert change(max_attempts=4, rate_limit=11, max_per_run=501) == [
        "max_attempts",
        "rate_limit",
        "max_per_run",
    ]
    assert change(window_start="00:00", window_end="05:00") == ["window"]
    assert change(window_start=None, window_end=None) == ["window"]  # no window: any time
    assert change(pause_threshold=0.9) == ["pause_threshold"]
    grouped = PolicySettings.from_mapping({"group": 7, "error_types": []})
    assert widened(grouped, PolicySettings.from_mapping({"group": 8}, base=grouped)) == ["group"]
    assert widened(grouped, PolicySettings.from_mapping({"group": None, "error_types": ["RetryExhausted"]},
                                                        base=grouped)) == ["group"]  # fmt: skip
    night = PolicySettings.from_mapping({"window_start": "22:00", "window_end": "02:00"})
    assert night.window_minutes() == set(range(22 * 60, 1440)) | set(range(0, 120))


# ----------------------------------------------------------------------------------------- four eyes


def test_a_policy_runs_only_after_a_second_person_approves_it(people, pipeline, queued):
    olga, abe = api_for(people["operator"]), api_for(people["approver"])
    made = olga.post(
        API, {"pipeline": pipeline.name, "name": "transient", "delay_seconds": 60}, format="json"
    )
    assert made.status_code == 202, made.json()
    body = made.json()
    assert (body["state"], body["settings"]["error_types"], body["settings"]["delay_seconds"]) == (
        "awaiting_approval",
        ["RetryExhausted"],
        60,
    )
    approval = body["pending_approval"]["id"]
    assert redrive.tick().started == ()  # not active: nothing runs
    own = olga.post(f"/api/dlq/approvals/{approval}/approve/", {}, format="json")
    assert own.status_code == 403
    assert abe.post(f"/api/dlq/approvals/{approval}/approve/", {}, format="json").status_code == 200
    policy = RedrivePolicy.objects.get(pk=body["id"])
    assert (policy.state, policy.next_run_at is not None) == (RedriveState.ACTIVE, True)
    actions = list(
        AuditEvent.objects.filter(target_type__in=("redrive_policy", "approval")).values_list(
            "action", flat=True
        )
    )
    assert {"redrive_policy.create", "approval.approve"} <= set(actions)

    rejected = olga.post(API, {"pipeline": pipeline.name, "name": "other"}, format="json").json()
    api_for(people["approver2"]).post(
        f"/api/dlq/approvals/{rejected['pending_approval']['id']}/reject/", {"reason": "no"}, format="json"
    )
    assert RedrivePolicy.objects.get(pk=rejected["id"]).state == RedriveState.REJECTED


def test_narrowing_applies_at_once_and_widening_waits_for_an_approver(people, pipeline, queued):
    policy = _active(people, pipeline, rate_limit=20)
    olga = api_for(people["operator"])
    narrowed = olga.patch(f"{API}{policy.pk}/", {"rate_limit": 5, "reason": "gentler"}, format="json")
    assert narrowed.status_code == 200, narrowed.json()
    assert narrowed.json()["settings"]["rate_limit"] == 5
    wider = olga.patch(
        f"{API}{policy.pk}/", {"error_types": ["RetryExhausted", "RecordTooLarge"]}, format="json"
    )
    assert wider.status_code == 202, wider.json()
    assert wider.json()["settings"]["error_types"] == ["RetryExhausted"]  # not yet
    pending = wider.json()["pending_approval"]
    assert pending["change"]["error_types"] == ["RecordTooLarge", "RetryExhausted"]
    again = olga.patch(f"{API}{policy.pk}/", {"rate_limit": 1}, format="json")
    assert again.status_code == 409  # one change at a time
    assert (
        api_for(people["approver"])
        .post(f"/api/dlq/approvals/{pending['id']}/approve/", {}, format="json")
        .status_code
        == 200
    )
    policy.refresh_from_db()
    assert (sorted(policy.error_types), policy.rate_limit) == (["RecordTooLarge", "RetryExhausted"], 5)
    updates = AuditEvent.objects.filter(target_type="redrive_policy", action="redrive_policy.update")
    assert [e.details["after"]["rate_limit"] for e in updates.order_by("sequence")] == [5, 5]


def test_wrong_role_another_team_and_bad_input(people, pipeline, queued):
    policy = _active(people, pipeline)
    vic, fred, olga = api_for(people["viewer"]), api_for(people["foreign"]), api_for(people["operator"])
    assert vic.post(API, {"pipeline": pipeline.name, "name": "x"}, format="json").status_code == 403
    assert vic.patch(f"{API}{policy.pk}/", {"rate_limit": 1}, format="json").status_code == 403
    assert vic.post(f"{API}{policy.pk}/pause/", {}, format="json").status_code == 403
    assert vic.get(f"{API}{policy.pk}/").status_code == 200  # a viewer sees it
    foreign = fred.post(API, {"pipeline": pipeline.name, "name": "x"}, format="json")
    assert (foreign.status_code, list(foreign.json())) == (400, ["pipeline"])
    assert fred.get(f"{API}{policy.pk}/").status_code == 404
    assert fred.post(f"{API}{policy.pk}/pause/", {}, format="json").status_code == 404
    assert fred.get(API).json()["results"] == []
    for body, field in [
        ({"pipeline": pipeline.name, "name": "x", "max_attempts": "many"}, "max_attempts"),
        ({"pipeline": pipeline.name, "name": "x", "colour": "red"}, "colour"),
        ({"pipeline": pipeline.name, "name": ""}, "name"),
        ({"pipeline": pipeline.name, "name": "transient"}, "name"),  # taken
        ({"pipeline": pipeline.name, "name": "x", "group": 999999}, "group"),
        ({"name": "x"}, "pipeline"),
    ]:
        answer = olga.post(API, body, format="json")
        assert (answer.status_code, field in answer.json()) == (400, True), (body, answer.json())
    assert olga.patch(
        f"{API}{policy.pk}/", {"window_start": "nope", "window_end": "03:00"}, format="json"
    ).json() == {"window_start": ["a UTC time of day, HH:MM (e.g. 02:00)"]}
    assert olga.post(f"{API}{policy.pk}/resume/", {}, format="json").status_code == 409  # not paused
    assert olga.delete(f"{API}{policy.pk}/").status_code == 200
    assert olga.post(f"{API}{policy.pk}/pause/", {}, format="json").status_code == 409
    assert RedrivePolicy.objects.get(pk=policy.pk).state == RedriveState.DELETED


# ----------------------------------------------------------------------------------------- schedule


def test_a_run_selects_the_old_enough_unclaimed_dead_letters_of_its_types_and_replays_them(
    people, pipeline, park, github_events, pipeline_topics, queued
):
    old = park(
        pipeline, [(f"old-{i}".encode(), github_events[i], "RetryExhausted", "timed out") for i in range(3)]
    )
    young = park(pipeline, [(b"young", github_events[3], "RetryExhausted", "timed out")])
    data_error = park(pipeline, [(b"data", github_events[4], "JsonPathNotFound", "no /payload/size")])
    _age(old + data_error, 600)
    services.claim(actor=people["operator"], dead_letter=old[2], note="looking at this one")
    policy = _active(people, pipeline, delay_seconds=300, rate_limit=1000)

    first = redrive.tick()
    assert len(first.started) == 1
    run = BulkAction.objects.get(pk=first.started[0])
    assert (run.redrive_policy_id, run.kind, run.total, run.approval_required) == (
        policy.pk,
        "replay",
        2,
        False,
    )
    assert sorted(run.filters["ids"]) == [old[0].pk, old[1].pk]
    assert young[0].pk not in run.filters["ids"]
    assert data_error[0].pk not in run.filters["ids"]
    assert redrive.tick().started == ()  # not due again before its interval
    assert AuditEvent.objects.filter(target_type="bulk", target_id=str(run.pk), actor__isnull=True).exists()
    assert bulk_actions.recent_volume(actor_id=people["operator"].pk) == 0  # not counted to olga's window

    services.run_bulk(bulk_id=run.pk)
    run.refresh_from_db()
    assert (run.state, run.succeeded) == ("completed", 2)
    assert set(DeadLetter.objects.filter(pk__in=[old[0].pk, old[1].pk]).values_list("status", flat=True)) == {
        Status.REPLAYED
    }
    assert DeadLetter.objects.get(pk=old[2].pk).status == Status.PARKED  # claimed: left alone


def test_outside_its_window_no_run_starts(people, pipeline, park, github_events, queued):
    _age(park(pipeline, [(b"k", github_events[0], "RetryExhausted", "timed out")]), 600)
    now = timezone.now()
    start = (now + timedelta(hours=2)).time().replace(second=0, microsecond=0)
    end = (now + timedelta(hours=3)).time().replace(second=0, microsecond=0)
    policy = _active(people, pipeline, window_start=start.strftime("%H:%M"), window_end=end.strftime("%H:%M"))
    assert redrive.tick(now=now).started == ()
    inside = now + timedelta(hours=2, minutes=30)
    RedrivePolicy.objects.filter(pk=policy.pk).update(next_run_at=inside)
    assert len(redrive.tick(now=inside).started) == 1


def test_the_attempt_limit_follows_the_chain_of_failing_again(people, pipeline, park, github_events, queued):
    policy = _active(people, pipeline, delay_seconds=0, max_attempts=2)
    [first] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "timed out")])
    chain = [first]
    for attempt in range(2):
        made = redrive.tick(now=timezone.now() + timedelta(hours=attempt + 1))
        assert len(made.started) == 1, f"attempt {attempt + 1}"
        run = BulkAction.objects.get(pk=made.started[0])
        assert run.filters["ids"] == [chain[-1].pk]
        # the replay happened and its record came back to the DLQ: a new dead letter linked to this one
        Replay.objects.create(
            dead_letter=chain[-1], bulk=run, target_topic="t", state=ReplayState.FAILED_AGAIN,
            requested_by=people["operator"],
        )  # fmt: skip
        DeadLetter.objects.filter(pk=chain[-1].pk).update(status=Status.REPLAYED)
        [again] = park(pipeline, [(b"k", github_events[0], "RetryExhausted", "timed out")])
        DeadLetter.objects.filter(pk=again.pk).update(replay_of=chain[-1])
        BulkAction.objects.filter(pk=run.pk).update(state="completed")
        chain.append(again)
    assert redrive.attempts_made(policy, [chain[-1].pk]) == {chain[-1].pk: 2}
    RedrivePolicy.objects.filter(pk=policy.pk).update(pause_min_replays=100)  # keep the brake out of it
    assert redrive.tick(now=timezone.now() + timedelta(hours=5)).started == ()  # two attempts made: done
    assert redrive.select_run(RedrivePolicy.objects.get(pk=policy.pk), now=timezone.now()) == []


# ----------------------------------------------------------------------------------------- brake


def test_the_brake_pauses_a_policy_whose_replays_fail_again_and_a_resume_starts_counting_afresh(
    people, pipeline, park, github_events, queued
):
    policy = _active(people, pipeline, delay_seconds=0, pause_threshold=0.5, pause_min_replays=4)
    rows = park(
        pipeline, [(f"k{i}".encode(), github_events[i], "RetryExhausted", "timed out") for i in range(5)]
    )
    [run_id] = redrive.tick().started
    run = BulkAction.objects.get(pk=run_id)
    states = [ReplayState.FAILED_AGAIN] * 3 + [ReplayState.PRODUCED, ReplayState.PENDING]
    for row, state in zip(rows, states, strict=True):
        Replay.objects.create(
            dead_letter=row, bulk=run, target_topic="t", state=state, requested_by=people["operator"]
        )
    BulkAction.objects.filter(pk=run.pk).update(state="completed")
    verdict = redrive.brake(policy, now=timezone.now())
    assert (verdict.settled, verdict.failed, verdict.tripped) == (4, 3, True)  # the pending one is not judged

    done = redrive.tick()
    assert (done.paused, done.started) == ((policy.pk,), ())
    policy.refresh_from_db()
    assert policy.state == RedriveState.PAUSED
    assert "3 of 4 replays" in policy.paused_reason
    assert "50%" in policy.paused_reason
    event = AuditEvent.objects.get(target_type="redrive_policy", action="redrive_policy.pause")
    assert (event.actor_id, event.details["failed"]) == (None, 3)

    resumed = api_for(people["operator"]).post(
        f"{API}{policy.pk}/resume/", {"reason": "fixed upstream"}, format="json"
    )
    assert resumed.status_code == 200, resumed.json()
    assert redrive.brake(RedrivePolicy.objects.get(pk=policy.pk), now=timezone.now()).settled == 0


# ----------------------------------------------------------------------------------------- two beats


def test_two_beats_ticking_at_once_start_one_run(people, pipeline, park, github_events, queued, monkeypatch):
    """Two beats read the policy as due; the second runs its whole tick while the first is between reading
    and creating the run (forced interleaving). The claim's condition on the ``next_run_at`` each read lets
    only one through; without it both create a run (the run-under-way check comes too late for either)."""
    _active(people, pipeline, delay_seconds=0)
    park(pipeline, [(b"k", github_events[0], "RetryExhausted", "timed out")])
    now = timezone.now()
    seen_by_both = redrive._due(now)
    monkeypatch.setattr(redrive, "_due", lambda now: [copy.copy(p) for p in seen_by_both])  # as read then
    real_select, other_beat = redrive.select_run, []

    def select_while_the_other_beat_ticks(policy, *, now):
        if not other_beat:  # the first beat's selection: the other beat ticks now, once
            other_beat.append(None)
            other_beat[0] = redrive.tick(now=now)
        return real_select(policy, now=now)

    monkeypatch.setattr(redrive, "select_run", select_while_the_other_beat_ticks)
    first = redrive.tick(now=now)
    assert len(first.started) + len(other_beat[0].started) == 1
    assert BulkAction.objects.filter(redrive_policy__isnull=False).count() == 1


# ----------------------------------------------------------------------------------------- pages


def test_the_pages_create_show_and_refuse(people, pipeline, park, github_events, queued):
    page = Client()
    page.force_login(people["operator"])
    listing = page.get("/dlq/redrive/")
    assert listing.status_code == 200
    assert b'data-testid="redrive-create"' in listing.content
    bad = page.post(
        "/dlq/redrive/create/",
        {
            "pipeline": pipeline.name,
            "name": "nightly",
            "error_types": ["RetryExhausted"],
            "max_attempts": "0",
        },
    )
    assert bad.status_code == 400
    assert b"max_attempts: an integer from 1 to 20" in bad.content
    made = page.post(
        "/dlq/redrive/create/",
        {"pipeline": pipeline.name, "name": "nightly", "error_types": ["RetryExhausted", ""], "window_start": "01:00",
         "window_end": "04:00", "max_attempts": "2"},
    )  # fmt: skip
    assert made.status_code == 302
    policy = RedrivePolicy.objects.get(name="nightly")
    assert (policy.window_start, policy.max_attempts, policy.state) == (time(1, 0), 2, "awaiting_approval")
    detail = page.get(f"/dlq/redrive/{policy.pk}/")
    assert b'data-testid="redrive-pending"' in detail.content
    assert b"01:00-04:00 UTC" in detail.content
    widen = page.post(
        f"/dlq/redrive/{policy.pk}/edit/", {"error_types": ["RetryExhausted"], "max_attempts": "5"}
    )
    assert widen.status_code == 302  # refused while its creation waits: said on the page
    assert ApprovalRequest.objects.filter(redrive_policy=policy).count() == 1

    ApprovalRequest.objects.filter(redrive_policy=policy).delete()
    RedrivePolicy.objects.filter(pk=policy.pk).update(state="active", next_run_at=timezone.now(), window_start=None,
                                                       window_end=None, delay_seconds=0)  # fmt: skip
    park(pipeline, [(b"k", github_events[0], "RetryExhausted", "timed out")])
    [run] = redrive.tick().started
    shown = page.get(f"/dlq/bulk/{run}/")
    assert shown.status_code == 200
    assert b"a run of redrive policy" in shown.content
    assert b"dlq.bulk_create" in shown.content
    foreign = Client()
    foreign.force_login(people["foreign"])
    assert foreign.get(f"/dlq/redrive/{policy.pk}/").status_code == 404
    assert foreign.get(f"/dlq/bulk/{run}/").status_code == 404
    assert foreign.post(f"/dlq/redrive/{policy.pk}/edit/", {"rate_limit": "1"}).status_code == 404
    viewer = Client()
    viewer.force_login(people["viewer"])
    assert b'data-testid="redrive-edit"' not in viewer.get(f"/dlq/redrive/{policy.pk}/").content
    assert viewer.post("/dlq/redrive/create/", {"pipeline": pipeline.name, "name": "v"}).status_code == 403
