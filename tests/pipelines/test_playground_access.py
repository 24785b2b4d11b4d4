"""Security review #28, finding 1 (the DSL playground's access): a signed-in user in no team could have the
web process evaluate whatever they sent, as fast as they liked, through ``POST /api/dsl/evaluate/`` and the
dry runs. These endpoints now need team membership (403 otherwise) and share a per-user ``dsl`` rate (429
with Retry-After past it), counted in the real Redis cache."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pipelines.services import create_pipeline
from tests.factories import UserFactory
from tests.pipelines.conftest import github_spec

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

EVALUATE = {"kind": "filter", "expr": "/type,==,PushEvent", "message": {"value": {"type": "PushEvent"}}}
MESSAGES = {"messages": [{"value": {"type": "PushEvent", "actor": {"login": "o"}, "payload": {"size": 1}}}]}


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def pipeline(admin_user, team):
    return create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())


def test_a_signed_in_user_in_no_team_gets_403_from_the_playground_and_the_dry_runs(pipeline):
    loner = api(UserFactory(username="lone"))

    answers = {
        "evaluate": loner.post("/api/dsl/evaluate/", EVALUATE, format="json").status_code,
        "validate": loner.post(
            "/api/dsl/validate/", {"kind": "filter", "expr": "/a,==,1"}, format="json"
        ).status_code,
        "draft dry run": loner.post(
            "/api/dsl/dry-run/", {"spec": github_spec(), **MESSAGES}, format="json"
        ).status_code,
        "pipeline dry run": loner.post("/api/pipelines/github/dry-run/", MESSAGES, format="json").status_code,
    }

    assert answers == dict.fromkeys(answers, 403)


def test_past_the_dsl_rate_the_playground_and_dry_runs_answer_429_with_retry_after(
    viewer, pipeline, settings
):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "dsl": "3/minute"},
    }
    client = api(viewer)

    within = [
        client.post("/api/dsl/evaluate/", EVALUATE, format="json").status_code,
        client.post("/api/dsl/evaluate/", EVALUATE, format="json").status_code,
        client.post("/api/pipelines/github/dry-run/", MESSAGES, format="json").status_code,
    ]
    past = [
        client.post("/api/dsl/evaluate/", EVALUATE, format="json"),
        client.post("/api/pipelines/github/dry-run/", MESSAGES, format="json"),
        client.post("/api/dsl/dry-run/", {"spec": github_spec(), **MESSAGES}, format="json"),
    ]

    assert within == [200, 200, 200]
    assert [response.status_code for response in past] == [429, 429, 429]
    assert all(0 < int(response["Retry-After"]) <= 60 for response in past)
    validate = client.post("/api/dsl/validate/", {"kind": "filter", "expr": "/a,==,1"}, format="json")
    assert validate.status_code == 200  # evaluates nothing: the editor calls it as the operator types
