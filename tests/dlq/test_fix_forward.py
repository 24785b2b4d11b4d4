"""Fix forward (issue #32, 1) on PostgreSQL and the real broker: a revision that gives a missing field a default
goes live; the scan finds exactly the dead letters that revision now passes (not the ones it still fails, not
the ones whose failure was never the pipeline's); a bulk replay of the scan's candidates replays only those,
each only to the destination it failed. The REST API: who may see and start a scan, and bad input."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
from django.db import connection
from django.test import Client

from access.models import AuditEvent
from dlq import services
from dlq.filters import FilterError, MessageFilter
from dlq.models import DeadLetter, FixForwardCandidate, FixForwardScan, FixForwardState, Status
from dlq.services import bulk as bulk_actions
from dlq.services import fix_forward
from pipelines.services import revise_pipeline
from pipelines.signals import revision_live
from streamforge_core import contract as c
from tests.dlq.conftest import api_for, missing_size_push
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.kafka, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queued(monkeypatch) -> dict[str, list[int]]:
    """Scans and bulk actions bound for a Celery worker are collected; the test runs them itself, as the
    tasks would (``dlq.tasks`` only call the services)."""
    sent: dict[str, list[int]] = {"scans": [], "bulks": []}
    monkeypatch.setattr(fix_forward, "enqueue_scan", lambda scan_id: sent["scans"].append(scan_id))
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: sent["bulks"].append(bulk.pk))
    return sent


@pytest.fixture
def world(people, pipeline, park, github_events, pipeline_topics):
    """Revision 1 dead-lettered: three pushes without ``payload.size`` (JsonPathNotFound at ``pushes``), one
    record that is not JSON (every destination), one good push whose produce ran out of retries."""
    broken = [missing_size_push(github_events)] * 3
    good_push = next(e for e in github_events if b'"PushEvent"' in e)
    parked = {
        "missing": park(pipeline, [(f"m{i}".encode(), v, "JsonPathNotFound", "/payload/size") for i, v in enumerate(broken)]),
        "garbage": park(pipeline, [(b"g", b"{not json", "MessageDeserialization", "not JSON")]),
        "retries": park(pipeline, [(b"r", good_push, "RetryExhausted", "timed out after 5 attempts")]),
    }  # fmt: skip
    # the MessageDeserialization dead letter failed every destination
    DeadLetter.objects.filter(pk=parked["garbage"][0].pk).update(destination=c.ALL_DESTINATIONS)
    spec = copy.deepcopy(pipeline.current_revision.spec)
    spec["error_handling"] = {"missing_field_behavior": "null"}  # the fix: a missing field becomes null
    revise_pipeline(actor=people["admin"], pipeline=pipeline, spec=spec, comment="size may be missing")
    pipeline.refresh_from_db()
    return parked


def test_a_revision_that_defaults_a_missing_field_replays_only_what_now_passes_and_only_where_it_failed(
    people, pipeline, world, queued, kafka_bootstrap
):
    # the revision goes live (what supervision announces when a run of it reaches RUNNING)
    revision_live.send(sender=None, pipeline_id=pipeline.pk, revision=2, previous_revision=1)
    [scan_id] = queued["scans"]
    scan = FixForwardScan.objects.get(pk=scan_id)
    assert (scan.state, scan.revision, scan.previous_revision, scan.trigger, scan.total) == (
        FixForwardState.QUEUED, 2, 1, "revision_live", 5,
    )  # fmt: skip
    revision_live.send(sender=None, pipeline_id=pipeline.pk, revision=2, previous_revision=1)
    assert len(queued["scans"]) == 1  # one scan per revision

    scan = services.run_fix_forward_scan(scan_id=scan_id, chunk_size=2)  # three chunks: progress is summed
    assert (scan.state, scan.checked, scan.candidates, scan.still_failing, scan.unchanged, scan.unknown) == (
        FixForwardState.DONE, 5, 3, 1, 1, 0,
    ), scan.error  # fmt: skip
    candidates = set(FixForwardCandidate.objects.filter(scan=scan).values_list("dead_letter_id", flat=True))
    assert candidates == {d.pk for d in world["missing"]}
    by_type = {g["error_type"]: g for g in scan.groups}
    assert (by_type["JsonPathNotFound"]["candidates"], by_type["JsonPathNotFound"]["destination"]) == (
        3,
        "pushes",
    )
    assert by_type["MessageDeserialization"]["still_failing"] == 1
    assert by_type["RetryExhausted"]["unchanged"] == 1
    # run again (a redelivered task): nothing is judged twice
    assert services.run_fix_forward_scan(scan_id=scan_id).checked == 5

    # the API shows the counts beside the revision diff, and the filter that replays exactly the candidates
    shown = api_for(people["viewer"]).get(f"/api/dlq/fix-forward/{scan.pk}/").json()
    assert '"missing_field_behavior": "null"' in shown["revision_diff"]
    assert shown["replay_filters"] == {"pipeline": pipeline.name, "fix_forward": scan.pk}
    operator = api_for(people["operator"])
    preview = operator.post(
        "/api/dlq/bulk/",
        {"kind": "replay", "filters": shown["replay_filters"], "dry_run": True},
        format="json",
    ).json()
    assert (preview["count"], preview["would_fail"]) == (3, 0), preview
    made = operator.post(
        "/api/dlq/bulk/",
        {"kind": "replay", "filters": shown["replay_filters"], "reason": "fixed forward", "rate_limit": 0},
        format="json",
    )
    assert made.status_code == 202, made.json()
    [bulk_id] = queued["bulks"]
    services.run_bulk(bulk_id=bulk_id)
    connection.close()

    statuses = Counter(DeadLetter.objects.filter(pipeline=pipeline).values_list("status", flat=True))
    assert statuses == {Status.REPLAYED: 3, Status.PARKED: 2}
    source = pipeline.current_revision.spec["source"]["topics"][0]
    replayed = consume_all(kafka_bootstrap, source)
    assert len(replayed) == 3
    for record in replayed:
        assert dict(record.headers)[c.H_REPLAY_DESTINATIONS] == b"pushes"  # only where it failed
        assert (
            "size" not in json.loads(record.value)["payload"]
        )  # the data is unchanged: the pipeline was wrong
    assert AuditEvent.objects.filter(action="fix_forward.requested", target_id=str(scan.pk)).exists()
    assert AuditEvent.objects.filter(action="fix_forward.done", target_id=str(scan.pk)).exists()


def test_a_scan_of_a_revision_that_is_no_longer_current_fails_with_the_reason(
    people, pipeline, world, queued
):
    scan = services.request_fix_forward_scan(pipeline=pipeline, actor=people["operator"])
    spec = copy.deepcopy(pipeline.current_revision.spec)
    spec["error_handling"] = {"missing_field_behavior": "passthrough"}
    revise_pipeline(actor=people["admin"], pipeline=pipeline, spec=spec)
    ended = services.run_fix_forward_scan(scan_id=scan.pk)
    assert ended.state == FixForwardState.FAILED
    assert ended.error == "revision 2 is no longer current (now 3): run a new scan"
    assert not FixForwardCandidate.objects.filter(scan=scan).exists()


def test_who_may_see_and_start_a_scan_and_what_bad_input_gets(people, pipeline, world, queued):
    viewer, operator, foreign = (api_for(people[r]) for r in ("viewer", "operator", "foreign"))
    refused = viewer.post("/api/dlq/fix-forward/", {"pipeline": pipeline.name}, format="json")
    assert refused.status_code == 403
    started = operator.post("/api/dlq/fix-forward/", {"pipeline": pipeline.name}, format="json")
    assert started.status_code == 202
    assert (started.json()["trigger"], started.json()["requested_by"]) == ("manual", "olga")
    assert queued["scans"] == [started.json()["id"]]
    # another team's operator: the pipeline is not theirs to name, nor its scans to read
    assert (
        foreign.post("/api/dlq/fix-forward/", {"pipeline": pipeline.name}, format="json").status_code == 400
    )
    assert foreign.get(f"/api/dlq/fix-forward/{started.json()['id']}/").status_code == 404
    assert foreign.get("/api/dlq/fix-forward/").json()["results"] == []
    listed = viewer.get(f"/api/dlq/fix-forward/?pipeline={pipeline.name}").json()["results"]
    assert [s["id"] for s in listed] == [started.json()["id"]]
    bad = operator.post("/api/dlq/fix-forward/", {"pipeline": "Not A Slug!"}, format="json")
    assert bad.status_code == 400
    assert "pipeline" in bad.json()
    assert operator.post("/api/dlq/fix-forward/", {}, format="json").json()["pipeline"]
    # the replay filter refuses a scan id that is not one
    with pytest.raises(FilterError, match="fix-forward scan id"):
        MessageFilter.from_mapping({"fix_forward": "abc"})
    bulk = operator.post(
        "/api/dlq/bulk/", {"kind": "replay", "filters": {"fix_forward": 0}, "dry_run": True}, format="json"
    )
    assert bulk.status_code == 400
    assert "filters.fix_forward" in bulk.json()


def test_the_pages_start_a_scan_for_an_operator_only_and_show_it_to_its_team(people, pipeline, world, queued):
    viewer, operator, foreign = Client(), Client(), Client()
    viewer.force_login(people["viewer"])
    operator.force_login(people["operator"])
    foreign.force_login(people["foreign"])
    assert b'data-testid="fix-forward-start"' not in viewer.get("/dlq/fix-forward/").content
    assert viewer.post("/dlq/fix-forward/start/", {"pipeline": pipeline.name}).status_code == 403
    assert foreign.post("/dlq/fix-forward/start/", {"pipeline": pipeline.name}).status_code == 404
    assert not queued["scans"]
    started = operator.post("/dlq/fix-forward/start/", {"pipeline": pipeline.name})
    assert started.status_code == 302
    [scan_id] = queued["scans"]
    assert started["Location"] == f"/dlq/fix-forward/{scan_id}/"
    page = viewer.get(f"/dlq/fix-forward/{scan_id}/")
    assert page.status_code == 200
    assert b"fix-forward-replay" not in page.content  # a viewer is offered no replay (and it has not run)
    assert foreign.get(f"/dlq/fix-forward/{scan_id}/").status_code == 404
