"""Security review #28, finding 7 (lows): the bulk approval threshold counts what one person selects within
a window (``STREAMFORGE_DLQ_BULK_APPROVAL_WINDOW``), so a large replay or skip cut into selections that are
each under the threshold still needs a second person once their sum crosses it; and two requests sent at
the same moment cannot both count the window before either is stored (on PostgreSQL, real transactions)."""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from dlq import services
from dlq.filters import MessageFilter
from dlq.models import ApprovalRequest, BulkAction, BulkState
from dlq.services import bulk as bulk_actions
from tests.dlq.conftest import api_for


@pytest.fixture
def queued(monkeypatch):
    """Bulk actions sent to a Celery worker are collected instead."""
    ids: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: ids.append(bulk.pk))
    return ids


def park_groups(park, pipeline, groups: dict[str, int]) -> None:
    """``count`` parked dead letters of ``pipeline`` per error type."""
    rows = [
        (f"{error_type}-{i}".encode(), b'{"a": 1}', error_type, "timed out")
        for error_type, count in groups.items()
        for i in range(count)
    ]
    park(pipeline, rows)


def skip(client, pipeline, error_type: str) -> dict[str, Any]:
    answer = client.post(
        "/api/dlq/bulk/",
        {
            "kind": "skip",
            "filters": {"pipeline": pipeline.name, "error_type": error_type},
            "reason": "noise",
            "rate_limit": 0,
        },
        format="json",
    )
    assert answer.status_code == 202, answer.json()
    created: dict[str, Any] = answer.json()
    return created


@pytest.mark.django_db
def test_successive_selections_under_the_threshold_need_a_second_person_once_their_sum_crosses_it(
    people, pipeline, park, queued, settings
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 10
    settings.DLQ_BULK_APPROVAL_WINDOW_SECONDS = 3600
    park_groups(park, pipeline, {"PartA": 4, "PartB": 4, "PartC": 4, "Other": 4})
    operator = api_for(people["operator"])

    first, second = skip(operator, pipeline, "PartA"), skip(operator, pipeline, "PartB")
    preview = operator.post(
        "/api/dlq/bulk/",
        {
            "kind": "skip",
            "filters": {"pipeline": pipeline.name, "error_type": "PartC"},
            "reason": "noise",
            "dry_run": True,
        },
        format="json",
    )
    third = skip(operator, pipeline, "PartC")

    assert (first["state"], second["state"]) == ("queued", "queued")  # 4, then 8: not above 10
    assert preview.status_code == 200, preview.json()
    assert preview.json()["needs_approval"] is True
    assert third["state"] == "awaiting_approval"  # 12 within the hour: a second person decides
    request = ApprovalRequest.objects.get(bulk_id=third["id"])
    assert "8 more selected by them within the window" in request.reason
    assert queued == [first["id"], second["id"]]
    # Another person's selections are theirs: the operator's hour does not count against the admin.
    assert skip(api_for(people["admin"]), pipeline, "Other")["state"] == "queued"


@pytest.mark.django_db
def test_selections_older_than_the_window_no_longer_count(people, pipeline, park, queued, settings):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 10
    settings.DLQ_BULK_APPROVAL_WINDOW_SECONDS = 3600
    park_groups(park, pipeline, {"PartA": 8, "PartB": 4})
    operator = api_for(people["operator"])
    first = skip(operator, pipeline, "PartA")
    BulkAction.objects.filter(pk=first["id"]).update(created_at=timezone.now() - timedelta(seconds=3601))

    assert skip(operator, pipeline, "PartB")["state"] == "queued"


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_selections_by_one_person_cannot_both_slip_under_the_threshold(
    people, pipeline, park, queued, settings, monkeypatch
):
    """Both requests are held right after counting the window until the other has counted too (at most
    3 s): without the per-person lock both count 0 and both are queued (12 messages, no second person);
    with it the second waits for the first to commit, counts its 6, and waits for an approver."""
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 10
    park_groups(park, pipeline, {"PartA": 6, "PartB": 6})
    counted = threading.Barrier(2, timeout=3)
    real_recent_volume = bulk_actions.recent_volume

    def recent_volume_then_wait(**kwargs):
        volume = real_recent_volume(**kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):  # the other is blocked (the lock): go on
            counted.wait()
        return volume

    monkeypatch.setattr(bulk_actions, "recent_volume", recent_volume_then_wait)
    states: dict[str, str] = {}
    errors: list[BaseException] = []

    def create(error_type: str) -> None:
        try:
            bulk = services.create_bulk(
                actor=people["operator"],
                kind="skip",
                selection=MessageFilter(pipeline=pipeline.name, error_type=error_type),
                reason="noise",
            )
            states[error_type] = bulk.state
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(part,)) for part in ("PartA", "PartB")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert sorted(states.values()) == sorted([BulkState.QUEUED, BulkState.AWAITING_APPROVAL])
    assert len(queued) == 1
