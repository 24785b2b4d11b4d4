"""Security review #28, finding 5 (no 500 from shape): JSON nested a few thousand levels deep in a request
body made DRF's parser raise RecursionError (a 500), on every endpoint that takes JSON; the pipeline
editor's JSON mode the same. Bodies nested deeper than 128 levels are a 400 naming the field where the
limit is crossed, before anything is decoded; 128 levels still pass the parser."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pipelines.services import create_pipeline
from streamforge_core.json_depth import MAX_JSON_DEPTH, TOO_DEEP
from tests.pipelines.conftest import github_spec

pytestmark = pytest.mark.django_db


def nested(depth: int, key: str = "a") -> str:
    """JSON text of ``depth`` objects, one inside the other (json.dumps itself cannot write it)."""
    return f'{{"{key}":' * depth + "1" + "}" * depth


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def pipeline(admin_user, team):
    return create_pipeline(actor=admin_user, name="github", team=team, spec=github_spec())


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/api/dsl/evaluate/",
            f'{{"kind": "filter", "expr": "/a,==,1", "message": {{"value": {nested(3000)}}}}}',
            "message.value" + ".a" * (MAX_JSON_DEPTH - 2),
        ),
        ("/api/pipelines/github/dry-run/", f'{{"messages": [{nested(3000)}]}}', "messages.0" + ".a" * 126),
        ("/api/pipelines/", f'{{"name": "deep", "team": "data-platform", "spec": {nested(3000)}}}', None),
        ("/api/dlq/messages/1/fix/", "[" * 5000 + "]" * 5000, None),
        ("/api/dsl/validate/", "[" * 200 + "]" * 200, "0" + ".0" * 127),
    ],
)
def test_a_request_body_nested_too_deep_is_a_400_naming_the_field(admin_user, pipeline, path, body, field):
    response = api(admin_user).post(path, data=body, content_type="application/json")

    assert response.status_code == 400, response.content[:300]
    ((named, reasons),) = response.json().items()
    assert reasons == [TOO_DEEP]
    if field is not None:
        assert named == field


def test_a_body_nested_exactly_128_levels_passes_the_parser(admin_user, pipeline):
    body = f'{{"kind": "filter", "expr": "/a,==,1", "message": {{"value": {nested(MAX_JSON_DEPTH - 2)}}}}}'

    response = api(admin_user).post("/api/dsl/evaluate/", data=body, content_type="application/json")

    assert response.status_code == 200, response.content[:300]
    assert response.json()["ok"] is True


def test_the_json_editor_answers_a_spec_nested_3000_deep_with_a_form_error(admin_user, pipeline):
    client = Client()
    client.force_login(admin_user)
    data = {"spec_mode": "json", "spec_json": nested(3000), "description": "", "comment": "deep"}

    response = client.post("/pipelines/github/edit/", data)

    assert response.status_code == 400
    assert TOO_DEEP in response.content.decode()
    dry_run = client.post(
        "/pipelines/draft/dry-run-request/",
        {"spec_mode": "json", "spec_json": "{}", "messages": "[" + nested(3000) + "]"},
    )
    assert dry_run.status_code < 500
