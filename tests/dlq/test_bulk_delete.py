"""A bulk delete (#18 item 4, "request delete of all" for a failure group): it always waits for a second
person with the approver role, like a single delete, and erases exactly what an approved single delete
erases, with one audit event per bulk step instead of one per message. Real PostgreSQL, through the API."""

from __future__ import annotations

import pytest
from django.test import Client

from access.models import AuditEvent
from dlq import services
from dlq.filters import MessageFilter
from dlq.models import (
    ApprovalRequest,
    BulkAction,
    BulkState,
    DeadLetter,
    ErasedRecord,
    FailureGroup,
    PayloadRevision,
    Status,
)
from dlq.services import bulk as bulk_actions
from dlq.services.erasure import ERASED_SAMPLE
from tests.dlq.conftest import api_for, missing_size_push

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch):
    ids: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: ids.append(bulk.pk))
    return ids


def test_a_bulk_delete_of_a_group_waits_for_a_second_person_and_erases_every_message(
    people, pipeline, park, github_events, queued
):
    bad = missing_size_push(github_events)
    parked = park(
        pipeline,
        [
            (f"k{i}".encode(), bad, "JsonPathNotFound", f'path /payload/size not found in "secret-{i}"')
            for i in range(3)
        ],
    )
    group = parked[0].group
    services.fix_payload(
        actor=people["operator"], dead_letter=parked[0], value=b'{"x": "secret fix"}', reason="try"
    )
    operator, approver = api_for(people["operator"]), api_for(people["approver"])

    counted = operator.post(
        "/api/dlq/bulk/",
        {"kind": "delete", "reason": "GDPR request 17", "dry_run": True, "filters": {"group": group.pk}},
        format="json",
    ).json()
    assert (counted["count"], counted["needs_approval"]) == (3, True)  # 3 is far below the threshold
    created = operator.post(
        "/api/dlq/bulk/",
        {"kind": "delete", "reason": "GDPR request 17", "filters": {"group": group.pk}},
        format="json",
    ).json()
    assert created["state"] == BulkState.AWAITING_APPROVAL
    assert queued == []
    request = ApprovalRequest.objects.get(bulk_id=created["id"])
    assert operator.post(f"/api/dlq/approvals/{request.pk}/approve/", {}, format="json").status_code == 403
    # Not approved: a worker refuses to run it, nothing is erased.
    bulk_actions.run_bulk(bulk_id=created["id"])
    assert DeadLetter.objects.filter(group=group, status=Status.PARKED).count() == 3

    assert (
        approver.post(
            f"/api/dlq/approvals/{request.pk}/approve/", {"reason": "checked"}, format="json"
        ).status_code
        == 200
    )
    assert queued == [created["id"]]
    done = bulk_actions.run_bulk(bulk_id=created["id"])
    assert (done.state, done.processed, done.succeeded) == (BulkState.COMPLETED, 3, 3)
    rows = DeadLetter.objects.filter(group=group)
    assert set(rows.values_list("status", flat=True)) == {Status.DELETED}
    for row in rows:
        assert (row.key, row.value, row.headers, row.key_text, row.error_message) == (None, None, [], "", "")
        assert row.closed_by_bulk_id == created["id"]
        assert row.error_type == "JsonPathNotFound"  # what failed where stays
    assert PayloadRevision.objects.get(dead_letter=parked[0]).value == b""
    assert FailureGroup.objects.get(pk=group.pk).sample_message == ERASED_SAMPLE
    # What the topic browser withholds from now on (#28, finding 3): each DLQ record and its source record.
    assert set(ErasedRecord.objects.values_list("topic", "partition", "offset", "kind")) == {
        (r.dlq_topic, r.dlq_partition, r.dlq_offset, "dlq") for r in rows
    } | {(r.source_topic, r.source_partition, r.source_offset, "source") for r in rows}
    # One event per step, none per message, and no payload in any of them.
    actions = list(
        AuditEvent.objects.filter(target_type="bulk", target_id=str(created["id"])).values_list(
            "action", flat=True
        )
    )
    assert "dlq.bulk_complete" in actions
    assert not AuditEvent.objects.filter(action="dlq.delete").exists()
    assert not any("secret" in str(e.details) + e.reason for e in AuditEvent.objects.all())
    browser = Client()
    browser.force_login(people["viewer"])
    page = browser.get(f"/dlq/messages/{parked[1].pk}/").content.decode()
    assert f"bulk #{created['id']}</a> deleted (erased) it" in page
    assert "secret-1" not in page


def test_a_bulk_delete_skips_what_left_the_parked_state_and_leaves_other_groups_alone(
    people, pipeline, park, github_events, queued
):
    bad = missing_size_push(github_events)
    ours = park(pipeline, [(f"a{i}".encode(), bad, "JsonPathNotFound", "path not found") for i in range(2)])
    other = park(pipeline, [(b"b", b"{", "MessageDeserialization", "invalid JSON")])
    bulk = services.create_bulk(
        actor=people["operator"], kind="delete", selection=MessageFilter(group=ours[0].group_id), reason="r"
    )
    services.skip(actor=people["operator"], dead_letter=ours[1], reason="handled by hand")
    services.approve(actor=people["approver"], approval=ApprovalRequest.objects.get(bulk=bulk))
    done = bulk_actions.run_bulk(bulk_id=bulk.pk)
    assert (done.processed, BulkAction.objects.get(pk=bulk.pk).state) == (1, BulkState.COMPLETED)
    assert DeadLetter.objects.get(pk=ours[0].pk).status == Status.DELETED
    assert DeadLetter.objects.get(pk=ours[1].pk).status == Status.SKIPPED
    assert DeadLetter.objects.get(pk=other[0].pk).value is not None
