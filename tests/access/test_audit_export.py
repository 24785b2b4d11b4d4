"""Exporting the audit log (``GET /api/audit/export/``, the audit page's Export menu): admins only, the
current filter exactly, CSV or JSON Lines with each event's chain fields, and the export itself audited."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from access import audit
from access.exports import AUDIT_COLUMNS
from access.models import AuditEvent, Role
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def people():
    team = TeamFactory(name="payments")
    return {
        role: member(team, role, username=f"u-{role}")
        for role in (Role.VIEWER, Role.OPERATOR, Role.APPROVER, Role.ADMIN)
    }


@pytest.fixture
def events(people):
    """Three events by the admin: two on dead letter 7, one about a runbook (with a formula-like reason)."""
    admin = people[Role.ADMIN]
    return [
        audit.record(
            actor=admin, action="dlq.skip", target_type="dead_letter", target_id=7, reason="dup",
            before={"status": "parked"}, after={"status": "skipped"}, details={"n": 1},
        ),
        audit.record(actor=admin, action="dlq.fix", target_type="dead_letter", target_id=7, reason="typo"),
        audit.record(
            actor=admin, action="runbook.save", target_type="runbook", target_id=3, reason="=HYPERLINK(1)"
        ),
    ]  # fmt: skip


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def download(user, query: str):
    response = client_for(user).get(f"/api/audit/export/?{query}")
    if response.status_code != 200:
        return response, ""
    return response, b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR, Role.APPROVER])
def test_a_non_admin_may_not_export_the_audit_log(people, events, role):
    response, _ = download(people[role], "as=csv")

    assert response.status_code == 403
    assert not AuditEvent.objects.filter(action="audit.export").exists()


def test_an_admin_s_csv_export_holds_exactly_the_filtered_events_newest_first(people, events):
    response, body = download(people[Role.ADMIN], "as=csv&target_type=dead_letter&target_id=7")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="audit-log-')
    rows = list(csv.DictReader(io.StringIO(body)))
    assert list(rows[0]) == list(AUDIT_COLUMNS)
    assert [int(r["sequence"]) for r in rows] == [events[1].sequence, events[0].sequence]
    skip = rows[1]
    assert skip["actor"] == "u-admin"
    assert skip["action"] == "dlq.skip"
    assert (skip["target_type"], skip["target_id"], skip["reason"]) == ("dead_letter", "7", "dup")
    assert skip["before_digest"] == events[0].before_digest != ""
    assert skip["after_digest"] == events[0].after_digest != ""
    assert json.loads(skip["details"]) == {"n": 1}
    assert skip["hash"] == events[0].hash
    assert skip["prev_hash"] == events[0].prev_hash
    assert skip["created_at"].endswith("Z")


def test_a_json_export_is_one_event_a_line_with_details_as_an_object(people, events):
    response, body = download(people[Role.ADMIN], "as=json&action=dlq.fix")

    assert response["Content-Type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in body.splitlines()]
    assert [r["sequence"] for r in rows] == [events[1].sequence]
    assert rows[0]["details"] == {}
    assert set(rows[0]) == set(AUDIT_COLUMNS)


def test_the_export_is_audited_once_with_its_filter_and_lists_itself(people, events):
    _, body = download(people[Role.ADMIN], "as=json&actor=u-admin")

    recorded = list(AuditEvent.objects.filter(action="audit.export"))
    assert len(recorded) == 1
    assert recorded[0].details == {"filter": {"actor": "u-admin"}, "format": "json"}
    assert json.loads(body.splitlines()[0])["action"] == "audit.export"


def test_formula_like_cells_are_neutralised(people, events):
    _, body = download(people[Role.ADMIN], "as=csv&action=runbook.save")

    (row,) = csv.DictReader(io.StringIO(body))
    assert row["reason"] == "'=HYPERLINK(1)"


def test_an_unknown_format_is_a_400_and_not_audited(people, events):
    response, _ = download(people[Role.ADMIN], "as=xml")

    assert response.status_code == 400
    assert "as" in response.json()
    assert not AuditEvent.objects.filter(action="audit.export").exists()


@pytest.mark.kafka
@pytest.mark.redis
def test_the_audit_page_offers_an_export_of_its_filter(people, events):
    client = Client()
    client.force_login(people[Role.ADMIN])
    page = client.get("/audit/?action=dlq.skip").content.decode()

    assert 'href="/api/audit/export/?as=csv&amp;action=dlq.skip"' in page
    assert 'href="/api/audit/export/?as=json&amp;action=dlq.skip"' in page
