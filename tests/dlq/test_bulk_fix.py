"""Bulk fix on real PostgreSQL: a JSON Patch previewed on a sample (diff, would-pass), waiting for an
approver above the threshold, then applied per message (own payload revision and audit event each), the
messages it does not apply to left unchanged and counted with their reason; the API's 400s name the
field and the reason."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied

from access.models import AuditEvent
from dlq import services
from dlq.filters import MessageFilter
from dlq.models import ApprovalRequest, BulkAction, BulkState, DeadLetter, PayloadRevision, Status
from dlq.services import bulk as bulk_actions
from dlq.services.fixes import current_payload
from tests.dlq.conftest import api_for, missing_size_push

pytestmark = pytest.mark.django_db

COPY_SIZE = {"patch": [{"op": "copy", "from": "/payload/distinct_size", "path": "/payload/size"}]}


@pytest.fixture
def queued(monkeypatch):
    """Bulk actions are collected instead of sent to Celery; the test runs them (as the task would)."""
    ids: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: ids.append(bulk.pk))
    return ids


@pytest.fixture
def broken_group(pipeline, park, github_events):
    """Eight pushes without ``payload.size`` (the patch fixes them), two without ``distinct_size`` either
    (its ``copy`` has no source there) and one that is not JSON: eleven parked dead letters."""
    fixable = missing_size_push(github_events)
    event = json.loads(fixable)
    del event["payload"]["distinct_size"]
    rows = [(f"k{i}".encode(), fixable, "JsonPathNotFound", "/payload/size") for i in range(8)]
    rows += [
        (f"n{i}".encode(), json.dumps(event).encode(), "JsonPathNotFound", "/payload/size") for i in range(2)
    ]
    rows += [(b"x", b'{"type": "PushEvent", ', "JsonPathNotFound", "/payload/size")]
    return park(pipeline, rows)


def test_a_bulk_fix_previews_waits_for_an_approver_and_fixes_each_message_or_says_why_not(
    settings, people, pipeline, broken_group, queued, pipeline_topics
):
    settings.DLQ_BULK_APPROVAL_THRESHOLD = 5
    selection = MessageFilter(pipeline=pipeline.name)
    fix = services.parse_fix(COPY_SIZE)

    preview = services.preview_bulk_fix(actor=people["operator"], selection=selection, fix=fix)
    assert (preview.count, preview.needs_approval, len(preview.samples)) == (11, True, 5)
    first = preview.samples[0]
    assert first.error == ""
    assert '+    "size": ' in first.diff
    assert first.check is not None
    assert first.check.would_pass
    assert not PayloadRevision.objects.exists()  # a preview stores nothing

    bulk = services.create_bulk_fix(
        actor=people["operator"], selection=selection, fix=fix, reason="force pushes lost their size"
    )
    assert bulk.state == BulkState.AWAITING_APPROVAL
    assert bulk.total == 11
    services.run_bulk(bulk_id=bulk.pk)  # a worker cannot run it before the approval
    assert not PayloadRevision.objects.exists()
    with pytest.raises(PermissionDenied):
        services.approve(actor=people["operator"], approval=ApprovalRequest.objects.get(bulk=bulk))
    services.approve(actor=people["approver"], approval=ApprovalRequest.objects.get(bulk=bulk), reason="ok")
    assert queued == [bulk.pk]

    done = services.run_bulk(bulk_id=bulk.pk, chunk_size=4)
    assert (done.state, done.processed, done.succeeded, done.failed) == (BulkState.COMPLETED, 11, 8, 3)
    assert (
        done.fix_failures.pop("operation 1 (copy /payload/size): a path it needs is not in this payload") == 2
    )
    ((reason, count),) = done.fix_failures.items()
    assert reason.startswith("the payload is not JSON")
    assert count == 1

    revisions = PayloadRevision.objects.filter(reason__startswith=f"bulk fix #{bulk.pk}")
    assert revisions.count() == 8
    assert all(r.dsl_check["would_pass"] for r in revisions)
    events = AuditEvent.objects.filter(action="dlq.fix", details__bulk=bulk.pk)
    assert events.count() == 8
    assert {e.actor_name for e in events} == {"olga"}
    assert DeadLetter.objects.filter(status=Status.PARKED).count() == 11  # replay is its own step
    fixed = json.loads(current_payload(broken_group[0])[0])
    assert fixed["payload"]["size"] == fixed["payload"]["distinct_size"]
    assert current_payload(broken_group[8]) == (bytes(broken_group[8].value), None)  # left unchanged


def test_the_bulk_fix_api_answers_400_naming_the_field_and_reason_and_previews_a_transform(
    people, pipeline, broken_group
):
    operator = api_for(people["operator"])
    selected = {"filters": {"pipeline": pipeline.name}, "reason": "r", "dry_run": True}

    def refused(fix: object) -> dict[str, list[str]]:
        answer = operator.post("/api/dlq/bulk/fix/", {**selected, "fix": fix}, format="json")
        assert answer.status_code == 400, answer.content
        errors: dict[str, list[str]] = answer.json()
        return errors

    assert (
        "add, remove, replace, move, copy, test"
        in refused({"patch": [{"op": "nope", "path": "/a"}]})["fix.patch[0].op"][0]
    )
    assert (
        "JSON Pointer"
        in refused({"patch": [{"op": "remove", "path": "payload/size"}]})["fix.patch[0].path"][0]
    )
    assert (
        "'value'"
        in refused({"patch": [{"op": "test", "path": "/a"}, {"op": "add", "path": "/b"}]})[
            "fix.patch[0].value"
        ][0]
    )
    assert "'from'" in refused({"patch": [{"op": "copy", "path": "/a"}]})["fix.patch[0].from"][0]
    assert "non-empty" in refused({"patch": []})["fix.patch"][0]
    assert "patch" in refused({"jq": "."})["fix"][0]
    assert refused({"transform": "CONSTRUCT:actor="})["fix.transform"][0].startswith("at character ")

    preview = operator.post(
        "/api/dlq/bulk/fix/",
        {**selected, "fix": {"transform": "CONSTRUCT:actor=/actor/login"}, "sample": 2},
        format="json",
    )
    assert preview.status_code == 200
    body = preview.json()
    assert body["count"] == 11
    assert len(body["samples"]) == 2
    sample = body["samples"][0]
    assert '+  "actor": "' in sample["diff"]
    assert sample["error"] == ""
    assert [d["outcome"] for d in sample["check"]["destinations"]] == ["filtered", "filtered"]
    viewer = api_for(people["viewer"]).post(
        "/api/dlq/bulk/fix/", {**selected, "dry_run": False, "fix": COPY_SIZE}, format="json"
    )
    assert viewer.status_code == 403
    assert not BulkAction.objects.exists()
