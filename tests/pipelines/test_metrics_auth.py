"""Who may read ``/metrics``: every team's pipeline names and volumes are not for anonymous callers."""

from __future__ import annotations

import pytest
from django.test import Client

from access.models import Role
from pipelines.models import Pipeline, PipelineTotals
from tests.factories import member
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def secret_pipeline(team, admin_user):
    from pipelines.services import create_pipeline

    pipeline = create_pipeline(actor=admin_user, name="payroll-export", team=team, spec=github_spec())
    PipelineTotals.objects.update_or_create(pipeline=pipeline, defaults={"consumed": 7})
    return pipeline


def test_metrics_refuse_an_anonymous_caller_when_no_token_is_configured(secret_pipeline, settings):
    settings.METRICS_TOKEN = ""
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"payroll-export" not in response.content


def test_metrics_without_a_token_configured_are_for_signed_in_admins_only(secret_pipeline, settings, team):
    settings.METRICS_TOKEN = ""
    viewer = Client()
    viewer.force_login(member(team, Role.OPERATOR, username="otto"))
    assert viewer.get("/metrics").status_code == 401
    admin = Client()
    admin.force_login(member(team, Role.ADMIN, username="adele"))
    ok = admin.get("/metrics")
    assert ok.status_code == 200
    assert (
        b'streamforge_messages_consumed_total{cluster="default",pipeline="payroll-export"} 7.0' in ok.content
    )


def test_metrics_with_a_token_configured_need_that_bearer_token(secret_pipeline, settings, admin_user):
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert Client().get("/metrics").status_code == 401
    assert Client(headers={"authorization": "Bearer wrong-token"}).get("/metrics").status_code == 401
    assert Client(headers={"authorization": "Basic s3cret-scrape-token"}).get("/metrics").status_code == 401
    scraper = Client(headers={"authorization": "Bearer s3cret-scrape-token"})
    response = scraper.get("/metrics")
    assert response.status_code == 200
    assert b'pipeline="payroll-export"' in response.content
    assert Pipeline.objects.count() == 1
