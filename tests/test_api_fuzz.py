"""Bad input at the API's door: schemathesis generates requests from the OpenAPI schema (valid and invalid
bodies, odd path and query values) for every operation, reads and mutations alike (POST, PUT, PATCH,
DELETE), as an admin of a team of the fuzz run's own; no request may end in a server error (5xx).

Shape (security review #28, finding 5): ``test_no_nested_body_or_huge_integer_ends_in_a_server_error`` sends
every operation of the schema bodies with JSON nested hundreds to thousands of levels deep at one of its
fields (raw text: Python's own encoder cannot write it), every integer field of its body set to a value past
32 or 64 bits, and every integer path or query parameter likewise; the answer is a 4xx, never a 5xx.

So that mutations reach past "404 not found" into the code that changes things, the fuzz run has a world of
its own (team, people, a pipeline whose topics exist on the test broker, parked dead letters in a failure
group, a runbook, a registered DLQ topic, a pending delete approval, a queued bulk action), and generated
path parameters and body references (``team``, ``group``, ``pipeline``) are swapped for real ones in about
half the examples. Each example runs in a savepoint rolled back afterwards: every example meets the world
as it was made, and no mutation touches another test's rows. Side effects that would leave the process
(Celery tasks) are collected; replays really produce, to this run's own topics.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from confluent_kafka.admin import AdminClient, NewTopic
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import AuditEvent, Role
from dlq import services
from dlq.filters import MessageFilter
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter
from dlq.services import bulk as bulk_actions
from pipelines.models import RunnerHost
from pipelines.supervision import requests as supervision_requests
from streamforge_core.kafka import Record
from tests.dlq.conftest import dlq_headers, github_spec
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

#: Examples per operation: 46 operations x this many take about 85 s on the test machine (12 took 127 s of a
#: suite that has to stay under 45 minutes).
MAX_EXAMPLES = 8

#: The schema as the app serves it (no database needed for that), bound to the app itself: WSGI, in process.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())

#: What exists in this run's world, by what refers to it: filled by the ``world`` fixture before an
#: operation's examples are drawn, read by the hooks below while they are drawn.
KNOWN: dict[str, list[Any]] = {}

#: Which collection a path's ``{id}`` (or ``{name}``, ``{sequence}``) names.
_PATH_KINDS = {
    "/api/dlq/approvals/": "approval",
    "/api/dlq/bulk/": "bulk",
    "/api/dlq/groups/": "group",
    "/api/dlq/messages/": "message",
    "/api/dlq/runbooks/": "runbook",
    "/api/dlq/topics/": "topic",
    "/api/pipelines/": "pipeline",
    "/api/hosts/": "host",
    "/api/audit/": "audit",
    "/api/users/": "user",
    "/api/teams/": "team",
    "/api/tokens/": "user",
}
#: Body fields that name an object (or, for ``spec``, hold a valid pipeline spec), and where to find one.
_BODY_REFERENCES = {"team": "team", "group": "group", "pipeline": "pipeline_name", "spec": "spec"}


def _path_kind(path: str) -> str | None:
    return next((kind for prefix, kind in _PATH_KINDS.items() if path.startswith(prefix)), None)


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> st.SearchStrategy[Any]:
    """Keep the generated path parameters, or point them at an object that exists."""
    kind = _path_kind(context.operation.path) if context.operation else None
    known = KNOWN.get(kind or "", [])
    if not known or not path_parameters or len(path_parameters) != 1:
        return st.just(path_parameters)
    (name,) = path_parameters
    real = st.sampled_from(known).map(lambda value: {name: value})
    return st.one_of(st.just(path_parameters), real)


def _with_real_references(body: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``body`` as generated, or with its references (team, group, pipeline) naming objects that exist and
    its pipeline spec a valid one."""
    fields = [field for field in _BODY_REFERENCES if field in body and KNOWN.get(_BODY_REFERENCES[field])]
    if not fields:
        return st.just(body)
    swapped = st.fixed_dictionaries(
        {field: st.sampled_from(KNOWN[_BODY_REFERENCES[field]]) for field in fields}
    ).map(lambda real: {**body, **real})
    return st.one_of(st.just(body), swapped)


@schema.hook
def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
    """Keep the generated body, or make it refer to objects that exist (see ``_with_real_references``)."""
    if not isinstance(body, dict):
        return st.just(body)
    if not isinstance(body.get("target_topic"), str):
        return _with_real_references(body)
    # Replays really produce, and the admin may name any topic: a generated name would have the shared test
    # broker create it (or, with characters Kafka refuses, fail as the broker's 503). Target topic names are
    # checked by their own tests (#14, topic names); here a replay goes to one of this run's own topics, or
    # to the default (the source topic).
    rest = {key: value for key, value in body.items() if key != "target_topic"}
    return _with_real_references(rest).flatmap(
        lambda chosen: st.sampled_from(["", *KNOWN.get("target_topic", [])]).map(
            lambda topic: {**chosen, "target_topic": topic}
        )
    )


@pytest.fixture(scope="module")
def fuzz_topics(kafka_admin: AdminClient) -> Iterator[str]:
    """A suffix whose pipeline topics (source, two destinations) exist on the test broker for this run: what
    a fuzzed replay produces to, and no other test reads."""
    suffix = f"fuzz{uuid.uuid4().hex[:8]}"
    names = [f"github.events-{suffix}", f"github.pushes-{suffix}", f"github.prs-{suffix}"]
    futures = kafka_admin.create_topics([NewTopic(name, 1, 1) for name in names])
    for future in futures.values():
        future.result(timeout=30)
    yield suffix
    for future in kafka_admin.delete_topics(names).values():
        future.result(timeout=30)


@pytest.fixture(autouse=True)
def in_process(db, monkeypatch, settings):
    """As Django's own test client does, requests do not close the database connection (the test's
    transaction lives on it), and Celery tasks are collected instead of sent."""
    monkeypatch.setattr(supervision_requests, "_after_commit_enqueue", lambda task_name, pipeline_id: None)
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: None)
    settings.DLQ_PRODUCE_TIMEOUT_SECONDS = 5  # the topics exist: an answer takes milliseconds
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(db, fuzz_topics):
    """The fuzz run's own team and objects (see the module docstring); returns the admin's API token."""
    from pipelines.services import create_pipeline

    team = TeamFactory(name=f"fuzz-{uuid.uuid4().hex[:6]}")
    admin = member(team, Role.ADMIN, username=f"{team.name}-admin")
    approver = member(team, Role.APPROVER, username=f"{team.name}-approver")
    pipeline = create_pipeline(
        actor=admin,
        name=f"{team.name}-pipeline",
        team=team,
        spec=github_spec(f"github.events-{fuzz_topics}", fuzz_topics),
    )
    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic,
            partition=0,
            offset=offset,
            key=f"k{offset}".encode(),
            value=b'{"type": "PushEvent", "actor": {"login": "octocat"}, "payload": {}}',
            headers=dlq_headers(
                pipeline,
                error_type="JsonPathNotFound",
                message="path /payload/size not found",
                source_offset=offset,
            ),
            timestamp_ms=int(time.time() * 1000),
        )
        for offset in range(1, 5)
    ]
    parked = sorted(store_batch(records, {topic: TopicOwner(team.pk, pipeline.pk, pipeline.name)}).new_ids)
    first = DeadLetter.objects.get(pk=parked[0])
    approval = services.request_delete(actor=approver, dead_letter=first, reason="PII")
    runbook = services.save_runbook(
        actor=admin, team=team, title="size missing", body="re-send", actions=["replay"], group=first.group
    )
    registered = services.register_topic(actor=admin, topic=f"{team.name}.connect.dlq", team=team)
    bulk = services.create_bulk(
        actor=admin, kind="skip", selection=MessageFilter(pipeline=pipeline.name), reason="cleanup"
    )
    host = RunnerHost.objects.create(
        name=f"{team.name}-host",
        queue=f"celery.runner.{team.name}-host",
        slots=2,
        memory_mb=2048,
        advertise_host="127.0.0.1",
        started_at=timezone.now(),
        last_heartbeat_at=timezone.now(),
    )
    KNOWN.update(
        host=[host.name],
        team=[team.name],
        pipeline=[pipeline.name],
        pipeline_name=[pipeline.name],
        spec=[github_spec(f"github.events-{fuzz_topics}", fuzz_topics)],
        target_topic=[f"github.events-{fuzz_topics}", f"github.pushes-{fuzz_topics}"],
        message=parked,
        group=[first.group_id],
        approval=[approval.pk],
        runbook=[runbook.pk],
        topic=[registered.pk],
        bulk=[bulk.pk],
        audit=list(AuditEvent.objects.values_list("sequence", flat=True)[:5]),
        user=[admin.username, approver.username],
    )
    yield Token.objects.get_or_create(user=admin)[0].key
    KNOWN.clear()


@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
def test_no_request_ends_in_a_server_error(case, world):
    # A savepoint per example, rolled back: the next example finds the world unchanged.
    with transaction.atomic():
        response = case.call(headers={"Authorization": f"Token {world}", "Host": "127.0.0.1"})
        transaction.set_rollback(True)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )


#: Integers past every bound an API value has: a 32-bit partition, a 63-bit offset or id, far past both
#: (JSON numbers and query values alike), and below zero.
HUGE_INTEGERS = st.one_of(
    st.sampled_from([2**31, 2**63, -(2**63) - 1, 10**40, -1]),
    st.integers(min_value=2**31, max_value=10**400),
)

#: The operations of the schema, as (method, path template) pairs.
OPERATIONS = [
    (method, path)
    for path, item in schema.raw_schema["paths"].items()
    for method in item
    if method in {"get", "post", "put", "patch", "delete"}
]


def _resolve(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = schema.raw_schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    if isinstance(node, dict) and len(node.get("allOf", [])) == 1:
        return _resolve(node["allOf"][0])
    return node


def _body_schema(method: str, path: str) -> dict[str, Any] | None:
    body = schema.raw_schema["paths"][path][method].get("requestBody") or {}
    content = body.get("content", {}).get("application/json")
    return _resolve(content["schema"]) if content else None


def _with_huge_integers(node: dict[str, Any], huge: int, depth: int = 0) -> Any:
    """An example of the body schema ``node`` holding ``huge`` in every integer field (objects and arrays of
    objects followed three levels deep); other fields left out."""
    node = _resolve(node)
    if node.get("type") == "integer":
        return huge
    if node.get("type") == "array" and depth < 3:
        item = _with_huge_integers(node.get("items", {}), huge, depth + 1)
        return [] if item is None else [item]
    if node.get("type") == "object" or "properties" in node:
        if depth >= 3:
            return {}
        found = {
            name: _with_huge_integers(child, huge, depth + 1)
            for name, child in node.get("properties", {}).items()
        }
        return {name: value for name, value in found.items() if value not in (None, {}, [])}
    return None


def _nested(depth: int, arrays: bool) -> str:
    return ("[" * depth + "]" * depth) if arrays else ('{"n":' * depth + "0" + "}" * depth)


@st.composite
def _shaped_request(draw: Any, method: str, path: str) -> tuple[str, str, str | None]:
    """A request to the operation: path and query integers huge, string path parameters real or huge, and
    for a JSON body either a field nested too deep or every integer field huge."""
    operation = schema.raw_schema["paths"][path][method]
    parameters = [
        _resolve(p)
        for p in [*schema.raw_schema["paths"][path].get("parameters", []), *operation.get("parameters", [])]
    ]
    url = path
    query: dict[str, str] = {}
    kind = _path_kind(path)
    for parameter in parameters:
        name, where = parameter["name"], parameter["in"]
        integer = _resolve(parameter.get("schema", {})).get("type") == "integer"
        if where == "path":
            known = KNOWN.get("target_topic" if name == "topic" else kind or "", [])
            choices = [str(v) for v in known] if not integer else []
            # Mostly a real object, so that the request reaches past "not found" to the integers after it.
            real = choices and draw(st.integers(min_value=0, max_value=3)) > 0
            value = draw(st.sampled_from(choices)) if real else str(draw(HUGE_INTEGERS))
            url = url.replace("{" + name + "}", value)
        elif where == "query" and integer:
            query[name] = str(draw(HUGE_INTEGERS))
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    body_schema = _body_schema(method, path)
    if body_schema is None:
        return method, url, None
    body = _with_huge_integers(body_schema, draw(HUGE_INTEGERS)) or {}
    if draw(st.booleans()):
        return method, url, json.dumps(body)
    fields = sorted(_resolve(body_schema).get("properties", {})) or ["value"]
    field = draw(st.sampled_from(fields))
    deep = _nested(draw(st.integers(min_value=129, max_value=5000)), draw(st.booleans()))
    return method, url, json.dumps({**body, field: "__DEEP__"}).replace('"__DEEP__"', deep)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS])
@hypothesis_settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_no_nested_body_or_huge_integer_ends_in_a_server_error(method, path, world, data):
    method, url, body = data.draw(_shaped_request(method, path))
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Token {world}")
    with transaction.atomic():
        response = getattr(client, method)(
            url, data=body, content_type="application/json", HTTP_HOST="127.0.0.1"
        )
        transaction.set_rollback(True)
    shown = "" if response.streaming else response.content.decode(errors="replace")[:300]
    assert response.status_code < 500, f"{method.upper()} {url[:200]} -> {response.status_code}: {shown}"
