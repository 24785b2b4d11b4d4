"""``/api/audit/verify/`` re-hashes the whole log: only admins may make the server do that."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from access.models import Role
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db


def test_only_admins_may_verify_the_audit_chain():
    team = TeamFactory(name="payments")
    for role in (Role.VIEWER, Role.OPERATOR, Role.APPROVER):
        client = APIClient()
        client.force_authenticate(member(team, role, username=f"u-{role}"))
        assert client.get("/api/audit/verify/").status_code == 403, role
    admin = APIClient()
    admin.force_authenticate(member(team, Role.ADMIN, username="ada"))
    response = admin.get("/api/audit/verify/")
    assert response.status_code == 200
    assert response.json()["ok"] is True
