"""An approved delete (issue #14) erases what may quote the payload: key, value, headers, the error message
and the fixes' check texts, and the failure group's sample text when it was this message's. The error type
and the coordinates stay. Through the REST API and the real database."""

from __future__ import annotations

import json

import pytest

from dlq.models import FailureGroup, PayloadRevision
from tests.dlq.conftest import api_for, missing_size_push

pytestmark = pytest.mark.django_db


def test_an_approved_delete_erases_the_error_message_and_the_groups_sample_text(
    people, pipeline, park, github_events
):
    bad = missing_size_push(github_events)
    first, second = park(
        pipeline,
        [
            (b"k1", bad, "JsonPathNotFound", 'path /payload/size not found in "customer secret-1"'),
            (b"k2", bad, "JsonPathNotFound", 'path /payload/size not found in "customer secret-2"'),
        ],
    )
    assert first.group_id == second.group_id
    group = FailureGroup.objects.get(pk=first.group_id)
    assert "secret-1" in group.sample_message
    operator, approver = api_for(people["operator"]), api_for(people["approver"])
    fix = operator.post(
        f"/api/dlq/messages/{first.pk}/fix/", {"value": {"type": "PushEvent"}, "reason": "try"}, format="json"
    )
    assert fix.status_code == 201, fix.content

    def delete(dead_letter):
        request = operator.post(
            f"/api/dlq/messages/{dead_letter.pk}/delete/", {"reason": "pii"}, format="json"
        )
        approved = approver.post(f"/api/dlq/approvals/{request.json()['id']}/approve/", {}, format="json")
        assert approved.status_code == 200, approved.content

    delete(first)
    erased = api_for(people["viewer"]).get(f"/api/dlq/messages/{first.pk}/").json()
    assert erased["status"] == "deleted"
    assert "secret" not in json.dumps(erased)
    assert erased["error_message"] == ""
    assert (erased["error_type"], erased["dlq"]["offset"], erased["source"]["offset"]) == (
        "JsonPathNotFound",
        first.dlq_offset,
        first.source_offset,
    )
    [revision] = PayloadRevision.objects.filter(dead_letter=first)
    outcomes = revision.dsl_check["destinations"]  # the check's error texts may quote the payload
    assert any(d["error_type"] for d in outcomes)
    assert {d["error_message"] for d in outcomes} <= {None, "(erased)"}
    groups = api_for(people["viewer"]).get("/api/dlq/groups/").json()["results"]
    [shown] = [g for g in groups if g["id"] == group.pk]
    assert "secret-1" not in shown["sample_message"]
    assert "secret-2" in shown["sample_message"]  # the message still parked stands in

    delete(second)
    group.refresh_from_db()
    assert group.sample_message == "(erased)"
    assert group.error_type == "JsonPathNotFound"
