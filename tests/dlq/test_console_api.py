"""The DLQ console through its REST API: inspect, fix, skip, delete with approval, permissions, groups,
filters, audit. Dead letters are stored through the real ingest code; nothing here needs the broker
(replays are in test_replay.py)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client

from access.audit import verify_chain
from access.models import AuditEvent
from dlq.models import DeadLetter, FailureGroup, Runbook, Status
from tests.dlq.conftest import api_for, missing_size_push

pytestmark = pytest.mark.django_db


@pytest.fixture
def parked(pipeline, park, github_events):
    """Three dead letters of the pipeline: two JsonPathNotFound (one group), one MessageDeserialization."""
    bad = missing_size_push(github_events)
    return park(
        pipeline,
        [
            (b"k1", bad, "JsonPathNotFound", "path /payload/size not found"),
            (b"k2", bad, "JsonPathNotFound", "path /payload/size not found"),
            (b"k3", b"\xff\xfe not json", "MessageDeserialization", "invalid UTF-8 at byte 0"),
        ],
    )


def test_the_detail_shows_the_record_the_failure_and_the_revision_that_failed_it(people, parked, pipeline):
    body = api_for(people["viewer"]).get(f"/api/dlq/messages/{parked[0].pk}/").json()
    assert body["error_type"] == "JsonPathNotFound"
    assert body["source"] == {
        "topic": pipeline.current_revision.spec["source"]["topics"][0],
        "partition": 0,
        "offset": parked[0].source_offset,
    }
    assert body["value"]["encoding"] == "json"
    assert '"type": "PushEvent"' in body["value"]["text"]
    assert body["key"] == {"encoding": "text", "text": "k1", "size": 2}
    assert {"name": "trace-id", "encoding": "text", "value": "t-1"} in body["headers"]
    assert body["revision"]["number"] == 1
    assert body["revision"]["destination"]["transform"] == "CONSTRUCT:actor=/actor/login:size=/payload/size"
    binary = api_for(people["viewer"]).get(f"/api/dlq/messages/{parked[2].pk}/").json()
    assert binary["value"]["encoding"] == "hex"
    assert binary["value"]["text"].startswith("00000000  ff fe 20 6e")


def test_viewers_see_sensitive_paths_masked_and_operators_do_not(people, parked, settings):
    settings.DLQ_MASKED_PATHS = ["/actor/login"]
    seen_by_viewer = json.loads(
        api_for(people["viewer"]).get(f"/api/dlq/messages/{parked[0].pk}/").json()["value"]["text"]
    )
    seen_by_operator = json.loads(
        api_for(people["operator"]).get(f"/api/dlq/messages/{parked[0].pk}/").json()["value"]["text"]
    )
    assert seen_by_viewer["actor"]["login"] == "•••"
    assert seen_by_operator["actor"]["login"] not in ("", "•••")


def test_a_fix_keeps_the_original_shows_the_diff_and_says_whether_it_would_pass(
    people, parked, pipeline_topics
):
    api = api_for(people["operator"])
    event = json.loads(bytes(parked[0].value))
    still_bad = api.post(
        f"/api/dlq/messages/{parked[0].pk}/fix/",
        {"value": {**event, "note": "x"}, "reason": "try"},
        format="json",
    )
    assert still_bad.status_code == 201
    assert still_bad.json()["check"]["would_pass"] is False
    event["payload"]["size"] = 3
    fixed = api.post(
        f"/api/dlq/messages/{parked[0].pk}/fix/", {"value": event, "reason": "size is 3"}, format="json"
    )
    assert fixed.status_code == 201
    body = fixed.json()
    assert body["payload_revision"] == 2
    assert body["check"]["would_pass"] is True
    # only the destination the replay is for (#30 item 2): pull-requests, which filters it out, is not listed
    assert [(d["destination"], d["outcome"]) for d in body["check"]["destinations"]] == [
        ("pushes", "produced")
    ]
    assert '+    "size": 3' in body["diff"]
    detail = api.get(f"/api/dlq/messages/{parked[0].pk}/").json()
    assert [r["number"] for r in detail["payload_revisions"]] == [1, 2]
    assert '"size"' not in detail["value"]["text"]  # the original stays as it was
    assert AuditEvent.objects.filter(action="dlq.fix", target_id=str(parked[0].pk)).count() == 2


def test_a_fix_needs_a_reason_and_a_change(people, parked):
    api = api_for(people["operator"])
    no_reason = api.post(f"/api/dlq/messages/{parked[0].pk}/fix/", {"value": {"a": 1}}, format="json")
    assert no_reason.status_code == 400
    assert "reason" in no_reason.json()
    same = api.post(
        f"/api/dlq/messages/{parked[0].pk}/fix/",
        {"value": bytes(parked[0].value).decode(), "reason": "no-op"},
        format="json",
    )
    assert same.status_code == 400
    assert same.json() == {"value": ["the payload is unchanged"]}


def test_a_replay_of_a_fix_that_would_fail_again_is_refused(people, parked, pipeline_topics):
    api = api_for(people["operator"])
    api.post(
        f"/api/dlq/messages/{parked[0].pk}/fix/",
        {"value": {"type": "PushEvent"}, "reason": "try"},
        format="json",
    )
    refused = api.post(f"/api/dlq/messages/{parked[0].pk}/replay/", {}, format="json")
    assert refused.status_code == 409
    assert "would be dead-lettered again at pushes (JsonPathNotFound)" in refused.json()["detail"]
    assert DeadLetter.objects.get(pk=parked[0].pk).status == Status.PARKED


def test_a_skip_without_a_reason_is_a_400_and_with_one_it_is_audited(people, parked):
    api = api_for(people["operator"])
    missing = api.post(f"/api/dlq/messages/{parked[1].pk}/skip/", {}, format="json")
    assert missing.status_code == 400
    assert "reason" in missing.json()
    blank = api.post(f"/api/dlq/messages/{parked[1].pk}/skip/", {"reason": "   "}, format="json")
    assert blank.status_code == 400
    done = api.post(
        f"/api/dlq/messages/{parked[1].pk}/skip/", {"reason": "synthetic test event"}, format="json"
    )
    assert done.status_code == 200
    assert done.json()["status"] == "skipped"
    again = api.post(f"/api/dlq/messages/{parked[1].pk}/skip/", {"reason": "twice"}, format="json")
    assert again.status_code == 409
    event = AuditEvent.objects.get(action="dlq.skip", target_id=str(parked[1].pk))
    assert (event.actor_name, event.reason) == ("olga", "synthetic test event")


def test_a_viewer_gets_403_on_every_mutation(people, parked, pipeline):
    api = api_for(people["viewer"])
    pk = parked[0].pk
    attempts = [
        api.post(f"/api/dlq/messages/{pk}/fix/", {"value": {"a": 1}, "reason": "r"}, format="json"),
        api.post(f"/api/dlq/messages/{pk}/replay/", {}, format="json"),
        api.post(f"/api/dlq/messages/{pk}/skip/", {"reason": "r"}, format="json"),
        api.post(f"/api/dlq/messages/{pk}/delete/", {"reason": "r"}, format="json"),
        api.post(
            "/api/dlq/bulk/",
            {"kind": "skip", "filters": {"pipeline": pipeline.name}, "reason": "r"},
            format="json",
        ),
        api.post(
            "/api/dlq/runbooks/",
            {"title": "t", "body": "b", "error_type": "X", "team": "data-platform"},
            format="json",
        ),
    ]
    assert [r.status_code for r in attempts] == [403] * len(attempts)
    request = api_for(people["operator"]).post(
        f"/api/dlq/messages/{pk}/delete/", {"reason": "pii"}, format="json"
    )
    assert (
        api.post(f"/api/dlq/approvals/{request.json()['id']}/approve/", {}, format="json").status_code == 403
    )
    assert DeadLetter.objects.filter(status=Status.PARKED).count() == 3


def test_another_teams_operator_sees_nothing(people, parked):
    api = api_for(people["foreign"])
    assert api.get("/api/dlq/messages/").json()["results"] == []
    assert api.get(f"/api/dlq/messages/{parked[0].pk}/").status_code == 404
    assert (
        api.post(f"/api/dlq/messages/{parked[0].pk}/skip/", {"reason": "r"}, format="json").status_code == 404
    )


def test_a_delete_needs_a_second_person_with_the_approver_role(people, parked):
    pk = parked[2].pk
    request = api_for(people["approver"]).post(
        f"/api/dlq/messages/{pk}/delete/", {"reason": "holds a token"}, format="json"
    )
    assert request.status_code == 202
    approval = request.json()["id"]
    own = api_for(people["approver"]).post(f"/api/dlq/approvals/{approval}/approve/", {}, format="json")
    assert own.status_code == 403
    assert "your own request" in own.json()["detail"]
    by_operator = api_for(people["operator"]).post(
        f"/api/dlq/approvals/{approval}/approve/", {}, format="json"
    )
    assert by_operator.status_code == 403
    assert DeadLetter.objects.get(pk=pk).status == Status.PARKED
    approved = api_for(people["approver2"]).post(
        f"/api/dlq/approvals/{approval}/approve/", {"reason": "ok"}, format="json"
    )
    assert approved.status_code == 200
    assert approved.json()["state"] == "approved"
    erased = DeadLetter.objects.get(pk=pk)
    assert (erased.status, erased.value, erased.key, erased.headers) == (Status.DELETED, None, None, [])
    assert (
        api_for(people["approver2"])
        .post(f"/api/dlq/approvals/{approval}/approve/", {}, format="json")
        .status_code
        == 409
    )
    assert [
        e.action
        for e in AuditEvent.objects.filter(
            target_type__in=["dead_letter", "approval"], target_id__in=[str(pk), str(approval)]
        ).order_by("sequence")
    ] == [
        "dlq.delete_requested",
        "approval.approve",
        "dlq.delete",
    ]


def test_the_list_filters_searches_and_pages_with_a_cursor(people, parked, pipeline):
    api = api_for(people["viewer"])
    everything = api.get("/api/dlq/messages/").json()
    assert [r["id"] for r in everything["results"]] == [p.pk for p in reversed(parked)]
    by_type = api.get("/api/dlq/messages/", {"error_type": "JsonPathNotFound"}).json()["results"]
    assert {r["id"] for r in by_type} == {parked[0].pk, parked[1].pk}
    assert [r["id"] for r in api.get("/api/dlq/messages/", {"q": "k3"}).json()["results"]] == [parked[2].pk]
    for not_a_prefix in ("K3", "3", "k_", "k%"):  # exact and case-sensitive, whatever the collation
        assert api.get("/api/dlq/messages/", {"q": not_a_prefix}).json()["results"] == [], not_a_prefix
    assert [r["id"] for r in api.get("/api/dlq/messages/", {"q": "UTF-8"}).json()["results"]] == [
        parked[2].pk
    ]
    page = api.get("/api/dlq/messages/", {"page_size": 2}).json()
    assert len(page["results"]) == 2
    assert page["next"]
    rest = api.get(page["next"]).json()
    assert [r["id"] for r in rest["results"]] == [parked[0].pk]
    bad = api.get("/api/dlq/messages/", {"status": "lost"})
    assert bad.status_code == 400
    assert "status" in bad.json()
    huge = api.get("/api/dlq/messages/", {"group": str(10**30)})
    assert huge.status_code == 400
    assert api.get(f"/api/dlq/messages/{10**30}/").status_code == 404
    bad_time = api.get("/api/dlq/messages/", {"since": "yesterday"})
    assert bad_time.status_code == 400
    assert "since" in bad_time.json()


def test_a_key_prefix_search_pages_newest_first_on_the_api_and_the_page(people, pipeline, park):
    """A key-only search is ordered by ``dlq.filters.SEARCH_ORDER`` on PostgreSQL (so the key index finds
    the matches): same rows, same order and working cursors as any other list."""
    rows = park(pipeline, [(f"order-{i}".encode(), b"{}", "Deserialization", "bad") for i in range(5)])
    park(pipeline, [(b"invoice-1", b"{}", "Deserialization", "bad")])
    newest_first = [r.pk for r in reversed(rows)]
    api = api_for(people["viewer"])
    first = api.get("/api/dlq/messages/", {"q": "order-", "page_size": 2}).json()
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()
    assert [r["id"] for page in (first, second, third) for r in page["results"]] == newest_first
    assert third["next"] is None
    back = api.get(second["previous"]).json()
    assert [r["id"] for r in back["results"]] == newest_first[:2]

    browser = Client()
    browser.force_login(people["viewer"])
    page = browser.get("/dlq/", {"q": "order-"})
    assert page.status_code == 200
    assert [row.pk for row in page.context["page"].rows] == newest_first
    older = browser.get("/dlq/", {"q": "order-", "before": str(newest_first[1])})
    assert [row.pk for row in older.context["page"].rows] == newest_first[2:]


def test_failure_groups_count_and_carry_their_runbooks(people, parked, pipeline):
    admin = api_for(people["admin"])
    groups = admin.get("/api/dlq/groups/").json()["results"]
    by_type = {g["error_type"]: g for g in groups}
    assert by_type["JsonPathNotFound"]["count"] == 2
    assert by_type["JsonPathNotFound"]["parked"] == 2
    assert by_type["JsonPathNotFound"]["signature"] == "path /payload/size not found"
    assert sum(point["count"] for point in by_type["JsonPathNotFound"]["trend"]) == 2
    made = admin.post(
        "/api/dlq/runbooks/",
        {
            "title": "Push without size",
            "body": "Count the commits, set `payload.size`, replay.",
            "group": by_type["JsonPathNotFound"]["id"],
            "actions": ["fix", "replay", "bulk_skip"],
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    by_error_type = admin.post(
        "/api/dlq/runbooks/",
        {
            "title": "Undecodable",
            "body": "Skip.",
            "error_type": "MessageDeserialization",
            "team": "data-platform",
            "actions": ["skip"],
        },
        format="json",
    )
    assert by_error_type.status_code == 201
    seen = {g["error_type"]: g for g in api_for(people["viewer"]).get("/api/dlq/groups/").json()["results"]}
    assert [r["title"] for r in seen["JsonPathNotFound"]["runbooks"]] == ["Push without size"]
    assert [r["title"] for r in seen["MessageDeserialization"]["runbooks"]] == ["Undecodable"]
    bad = admin.post(
        "/api/dlq/runbooks/",
        {"title": "x", "body": "", "error_type": "X", "team": "data-platform", "actions": ["explode"]},
        format="json",
    )
    assert bad.status_code == 400
    assert "actions" in bad.json()
    assert Runbook.objects.count() == 2
    assert FailureGroup.objects.get(pk=by_type["JsonPathNotFound"]["id"]).count == 2


@pytest.mark.kafka
@pytest.mark.redis
def test_the_audit_chain_verifies_and_an_edited_event_is_named(
    people, parked, pipeline, django_capture_on_commit_callbacks
):
    api = api_for(people["operator"])
    with django_capture_on_commit_callbacks(execute=True):  # the anchors are written after commit
        api.post(f"/api/dlq/messages/{parked[0].pk}/skip/", {"reason": "one"}, format="json")
        api.post(f"/api/dlq/messages/{parked[1].pk}/skip/", {"reason": "two"}, format="json")
        api = api_for(people["admin"])  # verifying the chain is for admins (making its token is audited)
    first = api.get("/api/audit/verify/").json()
    assert first["ok"] is True, first
    edited = AuditEvent.objects.get(action="dlq.skip", reason="one")
    with connection.cursor() as cursor:  # what someone with database access could do; the app cannot
        cursor.execute(
            "UPDATE access_auditevent SET reason = %s WHERE id = %s", ["nothing to see", edited.pk]
        )
    report = api.get("/api/audit/verify/").json()
    assert report["ok"] is False
    assert report["broken_at"] == edited.sequence
    assert "edited" in report["problem"]


def test_the_audit_log_is_for_admins_and_object_trails_for_their_team(people, parked):
    api_for(people["operator"]).post(
        f"/api/dlq/messages/{parked[0].pk}/skip/", {"reason": "one"}, format="json"
    )
    assert api_for(people["operator"]).get("/api/audit/").status_code == 403
    trail = api_for(people["viewer"]).get(
        "/api/audit/", {"target_type": "dead_letter", "target_id": parked[0].pk}
    )
    assert [e["action"] for e in trail.json()["results"]] == ["dlq.skip"]
    foreign = api_for(people["foreign"]).get(
        "/api/audit/", {"target_type": "dead_letter", "target_id": parked[0].pk}
    )
    assert foreign.status_code == 403
    everything = api_for(people["admin"]).get("/api/audit/", {"action": "dlq.skip"}).json()["results"]
    assert [e["actor_name"] for e in everything] == ["olga"]


@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_verify_notices_events_cut_off_the_end_of_the_log(people, parked):
    for row in parked:
        api_for(people["operator"]).post(f"/api/dlq/messages/{row.pk}/skip/", {"reason": "r"}, format="json")
    assert verify_chain().ok
    newest = AuditEvent.objects.order_by("-sequence").first()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM access_auditevent WHERE id = %s", [newest.pk])
    report = verify_chain()
    assert not report.ok
    assert (
        report.problem
        == f"events #{newest.sequence} to #{newest.sequence} were removed (the Kafka anchor saw #{newest.sequence})"
    )
