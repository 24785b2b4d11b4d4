"""Input the DLQ console must refuse at the door (issue #14): text UTF-8 cannot encode, topic names Kafka
would refuse, a DLQ topic that already has an owner. Everything goes through the REST API and the real
database."""

from __future__ import annotations

import pytest

from access.models import Role
from dlq.models import DeadLetter, PayloadRevision, Status
from pipelines.services import create_pipeline
from tests.dlq.conftest import api_for, github_spec, missing_size_push
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db

#: A lone UTF-16 surrogate as JSON writes it: valid JSON, but no UTF-8 text.
LONE = "\\ud800"


def post_raw(client, url: str, body: str):
    """POST ``body`` exactly as written (the JSON escapes reach the server untouched)."""
    return client.post(url, data=body, content_type="application/json")


@pytest.fixture
def parked(pipeline, park, github_events):
    return park(pipeline, [(b"k1", missing_size_push(github_events), "JsonPathNotFound", "path not found")])


# ------------------------------------------------------------------------------------------ unencodable text


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        ("fix", f'{{"value": "{LONE}", "reason": "r"}}', "value"),
        ("fix", f'{{"value": {{"actor": {{"login": "a{LONE}"}}}}, "reason": "r"}}', "value.actor.login"),
        ("fix", f'{{"value": {{"{LONE}": 1}}, "reason": "r"}}', "value"),
        ("check", f'{{"value": "{LONE}"}}', "value"),
        ("check", f'{{"value": ["ok", "{LONE}"]}}', "value.1"),
    ],
)
def test_a_lone_surrogate_in_a_fix_or_check_payload_is_a_400_naming_the_field(
    people, parked, action, body, field
):
    response = post_raw(api_for(people["operator"]), f"/api/dlq/messages/{parked[0].pk}/{action}/", body)
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert "surrogate" in response.json()[field][0]
    assert not PayloadRevision.objects.filter(dead_letter=parked[0]).exists()


def test_a_lone_surrogate_in_free_form_json_of_any_dlq_request_is_a_400_naming_the_field(people, parked):
    response = post_raw(
        api_for(people["operator"]),
        "/api/dlq/bulk/",
        f'{{"kind": "skip", "reason": "r", "dry_run": true, "filters": {{"q": "x{LONE}"}}}}',
    )
    assert response.status_code == 400
    assert list(response.json()) == ["filters.q"]


def test_the_payload_field_refuses_unencodable_text_on_its_own():
    from dlq.api.serializers import FixSerializer

    serializer = FixSerializer(data={"value": {"a": "\ud800"}, "reason": "r"})
    assert not serializer.is_valid()
    assert list(serializer.errors) == ["value"]


# ------------------------------------------------------------------------------------------ topic names


@pytest.mark.parametrize("topic", ["bad topic", "..", "café", "x" * 250, "a/b"])
def test_a_replay_target_must_be_a_legal_kafka_topic_name_even_for_an_admin(people, parked, topic):
    response = api_for(people["admin"]).post(
        f"/api/dlq/messages/{parked[0].pk}/replay/", {"target_topic": topic}, format="json"
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["target_topic"]
    assert DeadLetter.objects.get(pk=parked[0].pk).status == Status.PARKED


@pytest.mark.parametrize("topic", ["bad topic!", ".", "dlq\\x"])
def test_a_bulk_replay_target_must_be_a_legal_kafka_topic_name(people, parked, topic):
    response = api_for(people["admin"]).post(
        "/api/dlq/bulk/",
        {
            "kind": "replay",
            "reason": "r",
            "filters": {"pipeline": parked[0].pipeline_name},
            "target_topic": topic,
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["target_topic"]


@pytest.mark.parametrize("topic", ["bad topic", "..", "connect\tdlq", "x" * 250, "connect:dlq"])
def test_a_registered_dlq_topic_must_be_a_legal_kafka_topic_name(people, topic):
    response = api_for(people["admin"]).post(
        "/api/dlq/topics/", {"topic": topic, "team": "data-platform"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["topic"]


# ------------------------------------------------------------------------------------------ one owner per DLQ


def test_two_pipelines_of_any_teams_cannot_share_a_dlq_topic(people, pipeline):
    taken = pipeline.current_revision.spec["dlq"]["topic"]
    other_team = TeamFactory(name="payments-admins")
    other_admin = member(other_team, Role.ADMIN, username="pat")
    spec = github_spec("payments.events", "pay")
    spec["dlq"]["topic"] = taken
    created = api_for(other_admin).post(
        "/api/pipelines/", {"name": "payments", "team": other_team.name, "spec": spec}, format="json"
    )
    assert created.status_code == 400, created.content
    assert list(created.json()) == ["spec.dlq.topic"]
    assert pipeline.name in created.json()["spec.dlq.topic"][0]

    spec["dlq"]["topic"] = "payments.events.dlq"
    ok = api_for(other_admin).post(
        "/api/pipelines/", {"name": "payments", "team": other_team.name, "spec": spec}, format="json"
    )
    assert ok.status_code == 201, ok.content
    spec["dlq"]["topic"] = taken
    revised = api_for(other_admin).put("/api/pipelines/payments/", {"spec": spec}, format="json")
    assert revised.status_code == 400, revised.content
    assert pipeline.name in revised.json()["spec.dlq.topic"][0]

    # Revising a pipeline with its own DLQ topic unchanged is not a conflict with itself.
    own = dict(pipeline.current_revision.spec, retry={"max_attempts": 3})
    assert (
        api_for(people["admin"])
        .put(f"/api/pipelines/{pipeline.name}/", {"spec": own}, format="json")
        .status_code
        == 200
    )


def test_an_extra_dlq_topic_cannot_be_a_pipelines_dlq_topic_nor_the_other_way_round(people, pipeline):
    taken = pipeline.current_revision.spec["dlq"]["topic"]
    other_team = TeamFactory(name="connect-admins")
    other_admin = member(other_team, Role.ADMIN, username="cam")
    registered = api_for(other_admin).post(
        "/api/dlq/topics/", {"topic": taken, "team": other_team.name}, format="json"
    )
    assert registered.status_code == 400, registered.content
    assert list(registered.json()) == ["topic"]
    assert pipeline.name in registered.json()["topic"][0]

    assert (
        api_for(other_admin)
        .post("/api/dlq/topics/", {"topic": "connect.dlq", "team": other_team.name}, format="json")
        .status_code
        == 201
    )
    spec = github_spec("orders.events", "orders")
    spec["dlq"]["topic"] = "connect.dlq"
    created = api_for(people["admin"]).post(
        "/api/pipelines/", {"name": "orders", "team": "data-platform", "spec": spec}, format="json"
    )
    assert created.status_code == 400, created.content
    assert list(created.json()) == ["spec.dlq.topic"]
    assert "connect-admins" in created.json()["spec.dlq.topic"][0]


# ------------------------------------------------------------------------------------------ selections


@pytest.mark.parametrize(
    ("ids", "reason"),
    [
        ([], "at least one id"),
        (["7x"], "not a dead-letter id"),
        ([0], "not a dead-letter id"),
        (",".join(str(i) for i in range(1, 1200)), "at most 1000"),
    ],
)
def test_a_bulk_selection_of_ids_is_checked_and_an_empty_one_never_means_everything(
    people, parked, ids, reason
):
    response = api_for(people["operator"]).post(
        "/api/dlq/bulk/",
        {"kind": "skip", "reason": "r", "dry_run": True, "filters": {"ids": ids}},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert reason in str(response.json())


def test_a_selection_and_a_destination_select_exactly_and_only_what_the_caller_may_see(
    people, pipeline, park, github_events
):
    bad = missing_size_push(github_events)
    rows = park(pipeline, [(f"k{i}".encode(), bad, "JsonPathNotFound", "path not found") for i in range(4)])
    DeadLetter.objects.filter(pk=rows[0].pk).update(destination="pull-requests")
    DeadLetter.objects.filter(pk=rows[1].pk).update(destination="*")  # failed every destination
    other_team = TeamFactory(name="other-team")
    other = github_spec("other.events", "other")
    foreign_pipeline = create_pipeline(
        actor=member(other_team, Role.ADMIN, username="oz"), name="other", team=other_team, spec=other
    )
    foreign = park(foreign_pipeline, [(b"f", bad, "JsonPathNotFound", "path not found")])
    client = api_for(people["operator"])

    listed = client.get("/api/dlq/messages/", {"destination": "pull-requests"}).json()["results"]
    assert sorted(m["id"] for m in listed) == sorted([rows[0].pk, rows[1].pk])

    wanted = [rows[2].pk, rows[3].pk, foreign[0].pk]
    listed = client.get("/api/dlq/messages/", {"ids": ",".join(map(str, wanted))}).json()["results"]
    assert sorted(m["id"] for m in listed) == [rows[2].pk, rows[3].pk]  # another team's id selects nothing
    counted = client.post(
        "/api/dlq/bulk/",
        {"kind": "skip", "reason": "r", "dry_run": True, "filters": {"ids": wanted}},
        format="json",
    ).json()
    assert counted["count"] == 2, counted
    assert client.get("/api/dlq/messages/", {"ids": "1,x"}).status_code == 400
