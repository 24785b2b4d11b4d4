"""Bad input at the API's door: schemathesis generates requests from the OpenAPI schema (valid and invalid
bodies, odd path and query values) for every operation, as an admin with real objects around; no request
may end in a server error (5xx). Side effects that would leave the process (Celery tasks) are collected."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token

from access.models import Role
from dlq.services import bulk as bulk_actions
from pipelines.supervision import requests as supervision_requests
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


#: The schema as the app serves it (no database needed for that), bound to the app itself: WSGI, in process.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


@pytest.fixture(autouse=True)
def in_process(db, monkeypatch):
    """As Django's own test client does, requests do not close the database connection (the test's
    transaction lives on it), and Celery tasks are collected instead of sent."""
    monkeypatch.setattr(supervision_requests, "_after_commit_enqueue", lambda task_name, pipeline_id: None)
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: None)
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(db):
    from pipelines.services import create_pipeline

    team = TeamFactory(name="fuzz")
    admin = member(team, Role.ADMIN, username="fuzz-admin")
    create_pipeline(actor=admin, name="fuzz-pipeline", team=team, spec=github_spec("fuzz.events", "fuzz"))
    return Token.objects.get_or_create(user=admin)[0].key


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_ends_in_a_server_error(case, admin_token):
    response = case.call(headers={"Authorization": f"Token {admin_token}", "Host": "127.0.0.1"})
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
