"""Retention: closed dead letters are purged by their most specific policy (pipeline, team, default), in
chunks, parked ones never; each run is one row with its figures and one audit event; policies are set by team
admins over the API and the page, audited."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from access.models import AuditEvent
from dlq import services
from dlq.models import DeadLetter, PayloadRevision, RetentionRun, Status
from dlq.services import retention
from pipelines.services import create_pipeline
from tests.dlq.conftest import api_for, github_spec

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def _age(rows: list[DeadLetter], status: str, days: float) -> None:
    DeadLetter.objects.filter(pk__in=[r.pk for r in rows]).update(
        status=status, status_changed_at=NOW - timedelta(days=days)
    )


def _left(rows: list[DeadLetter]) -> set[int]:
    return set(DeadLetter.objects.filter(pk__in=[r.pk for r in rows]).values_list("pk", flat=True))


def test_each_row_follows_its_most_specific_policy_and_parked_rows_stay(
    park, pipeline, people, team, settings, monkeypatch
):
    settings.DLQ_RETENTION_DAYS = 30
    monkeypatch.setattr(retention, "CHUNK", 3)  # several chunks per rule
    suffix = uuid.uuid4().hex[:8]
    kept_forever = create_pipeline(
        actor=people["admin"],
        name=f"audit-{suffix}",
        team=team,
        spec=github_spec(f"audit.src-{suffix}", suffix),
    )
    other_team_pipeline = create_pipeline(
        actor=people["admin"],
        name=f"pay-{suffix}",
        team=people["foreign"].memberships.first().team,
        spec=github_spec(f"pay.src-{suffix}", f"p{suffix}"),
    )
    services.set_policy(actor=people["admin"], team=team, closed_days=7)
    services.set_policy(
        actor=people["admin"], team=team, pipeline=kept_forever, closed_days=0, purge_deleted=False
    )

    def rows(p, n):
        return park(p, [(b"k", b"{}", "Deserialization", "bad") for _ in range(n)])

    team_old, team_young, team_parked, team_deleted = (rows(pipeline, 4) for _ in range(4))
    forever_old, forever_deleted = rows(kept_forever, 2), rows(kept_forever, 2)
    default_old, default_young = rows(other_team_pipeline, 5), rows(other_team_pipeline, 2)
    _age(team_old, Status.REPLAYED, 8)
    _age(team_young, Status.SKIPPED, 6)
    _age(team_parked, Status.PARKED, 400)
    _age(team_deleted, Status.DELETED, 0)
    _age(forever_old, Status.SKIPPED, 4000)
    _age(forever_deleted, Status.DELETED, 1)
    _age(default_old, Status.SKIPPED, 31)
    _age(default_young, Status.REPLAYED, 29)
    PayloadRevision.objects.create(
        dead_letter=team_old[0], number=1, value=b"{}", reason="fix", author=people["operator"]
    )

    run = retention.apply_retention(now=NOW)

    assert _left(team_old) == _left(team_deleted) == _left(default_old) == set()
    assert _left(team_young) == {r.pk for r in team_young}
    assert _left(team_parked) == {r.pk for r in team_parked}
    assert _left(forever_old) == {r.pk for r in forever_old}
    assert _left(forever_deleted) == {r.pk for r in forever_deleted}
    assert _left(default_young) == {r.pk for r in default_young}
    assert run.purged == {"replayed": 4, "skipped": 5, "deleted": 4}
    assert run.total == 13
    assert not PayloadRevision.objects.exists()  # purged with its dead letter
    [event] = AuditEvent.objects.filter(action="dlq.retention")
    assert (event.actor_name, event.target_id) == ("system", str(run.pk))
    assert event.details["purged"] == run.purged
    # a second run finds nothing more to purge, and says so
    assert retention.apply_retention(now=NOW).total == 0
    assert RetentionRun.objects.count() == 2


def test_a_policy_is_set_by_a_team_admin_over_the_api_and_audited(people, team, pipeline):
    operator, admin = api_for(people["operator"]), api_for(people["admin"])
    body = {"team": team.name, "pipeline": pipeline.name, "closed_days": 14}
    assert operator.post("/api/dlq/retention/", body, format="json").status_code == 403
    assert admin.post("/api/dlq/retention/", {**body, "closed_days": -1}, format="json").status_code == 400
    unknown = admin.post("/api/dlq/retention/", {**body, "pipeline": "nope"}, format="json")
    assert unknown.status_code == 400
    assert "pipeline" in unknown.json()
    saved = admin.post("/api/dlq/retention/", body, format="json")
    assert saved.status_code == 200, saved.json()
    assert saved.json() == {
        "team": team.name,
        "pipeline": pipeline.name,
        "closed_days": 14,
        "purge_deleted": True,
    }
    again = admin.post("/api/dlq/retention/", {**body, "closed_days": 3}, format="json").json()
    assert again["closed_days"] == 3
    listed = operator.get("/api/dlq/retention/").json()
    assert [p["closed_days"] for p in listed["policies"]] == [3]
    events = AuditEvent.objects.filter(action="dlq.retention_policy").order_by("sequence")
    assert [e.details["closed_days"] for e in events] == [14, 3]
    assert events.last().details["before"] == {"closed_days": 14, "purge_deleted": True}
    # another team's operator sees none of it
    assert api_for(people["foreign"]).get("/api/dlq/retention/").json()["policies"] == []


def test_the_page_shows_the_policies_and_the_runs_and_lets_an_admin_set_one(people, team, park, pipeline):
    _age(park(pipeline, [(b"k", b"{}", "Deserialization", "bad")]), Status.SKIPPED, 90)
    retention.apply_retention(now=NOW)
    browser = Client()
    browser.force_login(people["viewer"])
    page = browser.get("/dlq/retention/")
    assert page.status_code == 200
    assert b'data-testid="retention-runs"' in page.content
    assert b"skipped 1" in page.content
    assert b"Set a policy" not in page.content  # a viewer may not
    admin = Client()
    admin.force_login(people["admin"])
    refused = admin.post("/dlq/retention/", {"team": team.name, "closed_days": "9999"})
    assert refused.status_code == 400
    saved = admin.post("/dlq/retention/", {"team": team.name, "closed_days": "10", "purge_deleted": "on"})
    assert saved.status_code == 302
    assert b"10 days" in admin.get("/dlq/retention/").content
