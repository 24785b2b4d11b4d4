"""Security review #28, finding 5 (no 500 from shape): a huge partition or offset in a record-outcomes URL
was an OverflowError 500. Every URL pattern with an integer part, and every integer query parameter, is
tried here with values past 32 bits (a Kafka partition), past 63 bits (an offset, a database id) and far
past both; the answer is a 400 naming the parameter or a 404, never a 500.

``test_every_url_pattern_with_an_integer_part_is_tried`` walks the URL configuration, so a new pattern
with an integer part fails this file until it is listed here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import Role
from pipelines.services import create_pipeline
from tests.dlq.conftest import github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.django_db, pytest.mark.kafka]

#: Past a partition (32-bit), past an offset or id (63-bit), past both by far, and 4,300 digits (more than
#: Python's int() takes from text by default).
HUGE = ["2147483648", "9223372036854775808", "1" + "0" * 40, "9" * 4300]

#: Every URL pattern with an integer part (as the resolver writes it) and the paths to try: ``{n}`` an
#: integer of 63 bits (an offset, an id), ``{partition}`` one of 31; ``{p}`` the pipeline, ``{t}`` its
#: source topic.
INTEGER_ROUTES = {
    "api/pipelines/<slug:name>/topics/<str:topic>/records/<partition:partition>/<offset:offset>/outcomes/": [
        "/api/pipelines/{p}/topics/{t}/records/{partition}/0/outcomes/",
        "/api/pipelines/{p}/topics/{t}/records/0/{n}/outcomes/",
    ],
    "pipelines/<slug:name>/topics/<str:topic>/records/<partition:partition>/<offset:offset>/": [
        "/pipelines/{p}/topics/{t}/records/{partition}/0/",
        "/pipelines/{p}/topics/{t}/records/0/{n}/",
    ],
    "dlq/messages/<int:pk>/": ["/dlq/messages/{n}/"],
    "dlq/fix-forward/<int:pk>/": ["/dlq/fix-forward/{n}/"],
    "dlq/bulk/<int:pk>/": ["/dlq/bulk/{n}/"],
    "dlq/redrive/<int:pk>/": ["/dlq/redrive/{n}/"],
    "dlq/redrive/<int:pk>/edit/": ["POST /dlq/redrive/{n}/edit/"],
    "notifications/channels/<int:pk>/edit": ["POST /notifications/channels/{n}/edit"],
    "notifications/channels/<int:pk>/delete": ["POST /notifications/channels/{n}/delete"],
    "notifications/channels/<int:pk>/test": ["POST /notifications/channels/{n}/test"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/$": ["/api/dlq/messages/{n}/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/check/$": ["POST /api/dlq/messages/{n}/check/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/fix/$": ["POST /api/dlq/messages/{n}/fix/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/replay/$": ["POST /api/dlq/messages/{n}/replay/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/replay-with-siblings/$": [
        "POST /api/dlq/messages/{n}/replay-with-siblings/"
    ],
    "api/dlq/^messages/(?P<pk>[0-9]+)/delete/$": ["POST /api/dlq/messages/{n}/delete/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/skip/$": ["POST /api/dlq/messages/{n}/skip/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/claim/$": ["POST /api/dlq/messages/{n}/claim/"],
    "api/dlq/^messages/(?P<pk>[0-9]+)/release/$": ["POST /api/dlq/messages/{n}/release/"],
    "api/dlq/^approvals/(?P<pk>[0-9]+)/$": ["/api/dlq/approvals/{n}/"],
    "api/dlq/^approvals/(?P<pk>[0-9]+)/approve/$": ["POST /api/dlq/approvals/{n}/approve/"],
    "api/dlq/^approvals/(?P<pk>[0-9]+)/reject/$": ["POST /api/dlq/approvals/{n}/reject/"],
    "api/dlq/^groups/(?P<pk>[0-9]+)/$": ["/api/dlq/groups/{n}/"],
    "api/dlq/^groups/(?P<pk>[0-9]+)/claim/$": ["POST /api/dlq/groups/{n}/claim/"],
    "api/dlq/^groups/(?P<pk>[0-9]+)/release/$": ["POST /api/dlq/groups/{n}/release/"],
    "api/dlq/^bulk/(?P<pk>[0-9]+)/$": ["/api/dlq/bulk/{n}/"],
    "api/dlq/^bulk/(?P<pk>[0-9]+)/cancel/$": ["POST /api/dlq/bulk/{n}/cancel/"],
    "api/dlq/^bulk/(?P<pk>[0-9]+)/pause/$": ["POST /api/dlq/bulk/{n}/pause/"],
    "api/dlq/^bulk/(?P<pk>[0-9]+)/resume/$": ["POST /api/dlq/bulk/{n}/resume/"],
    "api/dlq/^fix-forward/(?P<pk>[0-9]+)/$": ["/api/dlq/fix-forward/{n}/"],
    "api/dlq/^redrive-policies/(?P<pk>[0-9]+)/$": [
        "/api/dlq/redrive-policies/{n}/",
        "DELETE /api/dlq/redrive-policies/{n}/",
    ],
    "api/^sso/group-mappings/(?P<pk>[0-9]+)/$": [
        "PATCH /api/sso/group-mappings/{n}/",
        "DELETE /api/sso/group-mappings/{n}/",
    ],
    "api/dlq/^redrive-policies/(?P<pk>[0-9]+)/pause/$": ["POST /api/dlq/redrive-policies/{n}/pause/"],
    "api/dlq/^redrive-policies/(?P<pk>[0-9]+)/resume/$": ["POST /api/dlq/redrive-policies/{n}/resume/"],
    "api/dlq/^runbooks/(?P<pk>[0-9]+)/$": ["/api/dlq/runbooks/{n}/", "DELETE /api/dlq/runbooks/{n}/"],
    "api/dlq/^topics/(?P<pk>[0-9]+)/$": ["/api/dlq/topics/{n}/"],
    "api/notifications/^channels/(?P<pk>[0-9]+)/$": [
        "/api/notifications/channels/{n}/",
        "DELETE /api/notifications/channels/{n}/",
    ],
    "api/notifications/^channels/(?P<pk>[0-9]+)/test/$": ["POST /api/notifications/channels/{n}/test/"],
    "api/^audit/(?P<sequence>[0-9]+)/$": ["/api/audit/{n}/"],
    "api/^clusters/(?P<name>[a-z0-9][a-z0-9-]{0,62})/schemas/(?P<schema_id>[0-9]{1,10})/$": [
        "/api/clusters/default/schemas/{partition}/"
    ],
}

#: Integer query parameters, each on the pages and endpoints that read it.
INTEGER_QUERIES = [
    "/api/pipelines/{p}/topics/{t}/messages/?partition={n}",
    "/api/pipelines/{p}/topics/{t}/messages/?from_offset={n}",
    "/api/pipelines/{p}/topics/{t}/messages/?partition=0&from_offset={n}",
    "/api/pipelines/{p}/topics/{t}/messages/?limit={n}",
    "/api/pipelines/{p}/topics/{t}/messages/?from_time={n}",
    "/pipelines/{p}/topics/{t}/?partition={n}",
    "/pipelines/{p}/topics/{t}/?from_offset={n}",
    "/pipelines/{p}/topics/{t}/?partition=0&from_offset={n}",
    "/pipelines/{p}/topics/{t}/?highlight=0:{n}",
    "/pipelines/{p}/topics/{t}/?highlight={n}:0",
    "/pipelines/{p}/topics/{t}/records/0/0/?started={n}&wait={n}",
    "/api/dlq/messages/?group={n}",
    "/api/dlq/messages/?ids={n}",
    "/api/dlq/messages/?page_size={n}",
    "/api/dlq/messages/export/?group={n}",
    "/api/dlq/groups/?page={n}",
    "/api/dlq/approvals/?page={n}",
    "/api/dlq/bulk/?page={n}",
    "/api/dlq/fix-forward/?page={n}",
    "/api/dlq/redrive-policies/?page={n}",
    "/api/dlq/messages/?fix_forward={n}",
    "/dlq/bulk/?fix_forward={n}",
    "/dlq/?fix_forward={n}",
    "/api/audit/?target_id={n}&target_type=dead_letter",
    "/api/audit/?page_size={n}",
    "/api/notifications/deliveries/?channel={n}",
    "/api/notifications/deliveries/?page={n}",
    "/api/pipelines/?page={n}",
    "/api/pipelines/{p}/runs/?page={n}",
    "/api/pipelines/{p}/metrics/?range={n}",
    "/dlq/?before={n}",
    "/dlq/?after={n}",
    "/dlq/?size={n}",
    "/dlq/?group={n}",
    "/dlq/bulk/?group={n}",
    "/audit/?before={n}",
    "/audit/?after={n}",
    "/notifications/{team}/?page={n}",
    "/pipelines/{p}/offsets/?partition={n}&offset=0",
    "/pipelines/{p}/offsets/?partition=0&offset={n}",
    "/pipelines/{p}/offsets/?to_time={n}",
]


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern)


@pytest.fixture
def world(kafka_admin: AdminClient) -> Iterator[dict[str, Any]]:
    """An admin of a team with a pipeline whose source topic exists on the test broker."""
    team: Any = TeamFactory(name=f"bounds-{uuid.uuid4().hex[:6]}")
    admin = member(team, Role.ADMIN, username=f"{team.name}-admin")
    suffix = uuid.uuid4().hex[:8]
    pipeline = create_pipeline(
        actor=admin, name=f"bounds-{suffix}", team=team, spec=github_spec(f"bounds.events-{suffix}", suffix)
    )
    assert pipeline.current_revision is not None
    topic = pipeline.current_revision.spec["source"]["topics"][0]
    kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    # A server error is an answer to report (with every other), not an exception ending the test.
    api = APIClient(raise_request_exception=False)
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=admin)[0].key}")
    page = Client(raise_request_exception=False)
    page.force_login(admin)
    yield {"api": api, "page": page, "p": pipeline.name, "t": topic, "team": team.name}
    kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def _call(world: dict[str, Any], spec: str, n: str) -> tuple[str, int, bytes]:
    method, _, path = spec.rpartition(" ")
    path = path.format(n=n, partition=n, p=world["p"], t=world["t"], team=world["team"])
    client = world["api"] if path.startswith("/api/") else world["page"]
    response = getattr(client, (method or "GET").lower())(path)
    body = b"" if response.streaming else response.content[:300]
    return path, response.status_code, body


def test_every_url_pattern_with_an_integer_part_is_tried():
    integer_part = re.compile(r"<(int|partition|offset):|\[0-9\]|\(\?P<(pk|id|sequence|partition|offset)>")
    with_integers = {
        route
        for route in _routes(get_resolver().url_patterns)
        if integer_part.search(route) and r"\.(?P<format>" not in route
    }
    assert with_integers == set(INTEGER_ROUTES)


def _out_of_range(spec: str, n: str) -> bool:
    bound = 2**31 - 1 if "{partition}" in spec else 2**63 - 1
    return int(n) > bound


@pytest.mark.parametrize("n", HUGE)
def test_a_huge_integer_in_any_url_part_is_a_400_or_404_never_a_500(world, n):
    answers = [
        (_out_of_range(spec, n), *_call(world, spec, n))
        for specs in INTEGER_ROUTES.values()
        for spec in specs
    ]

    failed = [
        f"{status} {path[:100]} {body[:80]!r}"
        for out_of_range, path, status, body in answers
        if status >= 500 or (out_of_range and status not in (400, 404))
    ]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("n", [*HUGE, "-" + HUGE[1]])
def test_a_huge_integer_in_any_query_parameter_is_never_a_500(world, n):
    answers = [_call(world, spec, n) for spec in INTEGER_QUERIES]

    failed = [f"{status} {path[:100]} {body[:80]!r}" for path, status, body in answers if status >= 500]
    assert not failed, "\n".join(failed)
