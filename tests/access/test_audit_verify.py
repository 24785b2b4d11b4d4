"""``/api/audit/verify/`` re-hashes the whole log: only admins may make the server do that."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from access.models import Role
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.django_db, pytest.mark.kafka, pytest.mark.redis]


def test_only_admins_may_verify_the_audit_chain(django_capture_on_commit_callbacks):
    # Creating people is audited, and each event is anchored after commit: run those hooks, so the chain
    # the admin verifies is complete in its anchors.
    with django_capture_on_commit_callbacks(execute=True):
        team = TeamFactory(name="payments")
        users = {
            role: member(team, role, username=f"u-{role}")
            for role in (Role.VIEWER, Role.OPERATOR, Role.APPROVER)
        }
        ada = member(team, Role.ADMIN, username="ada")
    for role, user in users.items():
        client = APIClient()
        client.force_authenticate(user)
        assert client.get("/api/audit/verify/").status_code == 403, role
    admin = APIClient()
    admin.force_authenticate(ada)
    response = admin.get("/api/audit/verify/")
    assert response.status_code == 200
    assert response.json()["ok"] is True
