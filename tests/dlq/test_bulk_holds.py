"""A pending delete request holds a message from bulk actions too (issue #30): a bulk replay, skip or fix
over a selection that includes messages an approver has yet to decide a delete of counts them in its dry
run and leaves them parked and untouched when it runs, each listed with the reason, over the API; the
replay on the real broker sends only the others. The rule is the single replay's
(``holds.held_by_pending_delete``)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import NewTopic

from dlq import services
from dlq.filters import MessageFilter
from dlq.models import ApprovalRequest, DeadLetter, PayloadRevision, Status
from dlq.services import bulk as bulk_actions
from streamforge_core import contract as c
from tests.dlq.conftest import api_for
from tests.pipelines.spark.harness import consume_all

pytestmark = [pytest.mark.kafka, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queued(monkeypatch):
    """Bulk actions are collected instead of sent to Celery; the test runs them (as the task would)."""
    ids: list[int] = []
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: ids.append(bulk.pk))
    return ids


def test_a_bulk_replay_skip_and_fix_leave_out_the_messages_a_pending_delete_holds(
    people, pipeline, park, github_events, kafka_admin, kafka_bootstrap, queued
):
    source = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    try:
        parked = park(
            pipeline, [(f"k{i}".encode(), github_events[i], "RetryExhausted", "timed out") for i in range(6)]
        )
        held = [parked[1], parked[4]]
        requests = [
            services.request_delete(actor=people["operator"], dead_letter=d, reason="GDPR erasure")
            for d in held
        ]
        why = {
            str(
                d.pk
            ): f"dead letter #{d.pk} has a pending delete request #{r.pk} by olga: an approver decides "
            "it first (reject it to replay or skip this message)"
            for d, r in zip(held, requests, strict=True)
        }
        operator = api_for(people["operator"])
        selection = {"pipeline": pipeline.name}

        preview = operator.post(
            "/api/dlq/bulk/", {"kind": "replay", "filters": selection, "dry_run": True}, format="json"
        ).json()
        assert (preview["count"], preview["held"], preview["held_ids"]) == (6, 2, [d.pk for d in held])
        assert preview["checked"] == 4  # the held ones are not checked: they will not be sent
        created = operator.post(
            "/api/dlq/bulk/",
            {"kind": "replay", "filters": selection, "reason": "after the outage", "rate_limit": 0},
            format="json",
        ).json()
        done = services.run_bulk(bulk_id=created["id"], chunk_size=4)
        assert (done.state, done.processed, done.succeeded, done.failed) == ("completed", 6, 4, 2)
        answered = operator.get(f"/api/dlq/bulk/{created['id']}/").json()
        assert answered["left_out"] == why
        statuses = dict(DeadLetter.objects.values_list("pk", "status"))
        assert {statuses[d.pk] for d in held} == {Status.PARKED}
        assert not DeadLetter.objects.filter(
            pk__in=[d.pk for d in held], closed_by_bulk__isnull=False
        ).exists()
        assert [statuses[d.pk] for d in parked if d not in held] == [Status.REPLAYED] * 4
        replayed = consume_all(kafka_bootstrap, source)
        assert sorted(r.header(c.H_REPLAY_OF) for r in replayed) == sorted(
            d.coordinates for d in parked if d not in held
        )

        # A skip of what is left: only the held two, both left out.
        preview = operator.post(
            "/api/dlq/bulk/", {"kind": "skip", "filters": selection, "dry_run": True}, format="json"
        ).json()
        assert (preview["count"], preview["held"]) == (2, 2)
        created = operator.post(
            "/api/dlq/bulk/", {"kind": "skip", "filters": selection, "reason": "noise"}, format="json"
        ).json()
        done = services.run_bulk(bulk_id=created["id"])
        assert (done.processed, done.succeeded, done.failed, done.left_out) == (2, 0, 2, why)

        # A fix of them: previewed as held, and no payload revision made.
        fix = services.parse_fix({"patch": [{"op": "add", "path": "/note", "value": "x"}]})
        user = people["operator"]
        assert services.preview_bulk_fix(actor=user, selection=MessageFilter(**selection), fix=fix).held == 2
        bulk = services.create_bulk_fix(
            actor=user, selection=MessageFilter(**selection), fix=fix, reason="mark them"
        )
        done = services.run_bulk(bulk_id=bulk.pk)
        assert (done.processed, done.succeeded, done.failed, done.left_out) == (2, 0, 2, why)
        assert not PayloadRevision.objects.exists()
        assert set(
            DeadLetter.objects.filter(pk__in=[d.pk for d in held]).values_list("status", flat=True)
        ) == {Status.PARKED}
        assert ApprovalRequest.objects.filter(state="pending", kind="delete").count() == 2
    finally:
        kafka_admin.delete_topics([source])[source].result(timeout=30)
