"""Who owns a dead letter: the DLQ topic's registered owner, never what the record's headers claim. Anyone
who can write to a DLQ topic can write any header; a header naming another team's pipeline, or a source
topic the owning pipeline does not read, must neither move the record into that team's console nor widen
the topics it may be replayed to."""

from __future__ import annotations

import time
import uuid

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from dlq import services
from dlq.ingest import dlq_topics, store_batch
from dlq.models import DeadLetter
from pipelines.services import create_pipeline
from pipelines.spec import SpecError
from streamforge_core import contract as c
from streamforge_core.kafka import Record
from tests.dlq.conftest import api_for, dlq_headers, github_spec

pytestmark = pytest.mark.django_db

_offsets = iter(range(10_000, 20_000))


def _record(topic: str, headers: list[tuple[str, bytes | None]], *, value: bytes = b'{"id": 1}') -> Record:
    return Record(
        topic=topic,
        partition=0,
        offset=next(_offsets),
        key=b"k",
        value=value,
        headers=headers,
        timestamp_ms=int(time.time() * 1000),
    )


def _with(headers: list[tuple[str, bytes | None]], name: str, value: bytes) -> list[tuple[str, bytes | None]]:
    return [(n, value if n == name else v) for n, v in headers]


def _ingest(*records: Record) -> list[DeadLetter]:
    """Store records as the ingester does: owners from ``dlq_topics()``, the real registry."""
    result = store_batch(list(records), dlq_topics())
    return list(DeadLetter.objects.filter(pk__in=result.new_ids).order_by("id"))


@pytest.fixture
def other_pipeline(people):
    """A pipeline of the other team (``payments``, whose operator is ``fred``)."""
    suffix = uuid.uuid4().hex[:8]
    team = people["foreign"].memberships.get().team
    return create_pipeline(
        actor=people["admin"],
        name=f"payments-{suffix}",
        team=team,
        spec=github_spec(f"payments.events-{suffix}", suffix),
    )


def test_a_record_forging_another_teams_pipeline_header_lands_in_its_topics_team_only_with_a_warning(
    people, pipeline, other_pipeline, park
):
    """Team B's DLQ topic carries a record whose headers name team A's pipeline and A's source topic."""
    a_source = pipeline.current_revision.spec["source"]["topics"][0]
    b_dlq = other_pipeline.current_revision.spec["dlq"]["topic"]
    honest = dlq_headers(
        pipeline, error_type="JsonPathNotFound", message="path /x not found", source_offset=1
    )
    [a_own] = park(pipeline, [(b"k", b'{"id": 0}', "JsonPathNotFound", "path /x not found")])

    [forged] = _ingest(_record(b_dlq, honest))

    # B's, whatever the header says; the claim is kept and shown as a warning.
    assert (forged.team_id, forged.pipeline_id) == (other_pipeline.team_id, other_pipeline.pk)
    assert forged.pipeline_name == other_pipeline.name
    assert forged.claimed_pipeline == pipeline.name
    assert pipeline.name in forged.ownership_warning
    assert b_dlq in forged.ownership_warning
    # The same failure as A's own record, yet not in A's failure group.
    assert forged.group_id != a_own.group_id
    assert forged.group.team_id == other_pipeline.team_id

    # A cannot see it, nor replay it.
    a_operator = people["operator"]
    assert not services.visible_dead_letters(a_operator).filter(pk=forged.pk).exists()
    assert api_for(a_operator).get(f"/api/dlq/messages/{forged.pk}/").status_code == 404
    assert api_for(a_operator).post(f"/api/dlq/messages/{forged.pk}/replay/", {}).status_code == 404
    with pytest.raises(PermissionDenied):
        services.replay(actor=a_operator, dead_letter=forged)

    # B sees it with the warning, in the API and on the page, and may not replay it into A's source topic.
    b_operator = people["foreign"]
    body = api_for(b_operator).get(f"/api/dlq/messages/{forged.pk}/").json()
    assert body["pipeline"] == other_pipeline.name
    assert body["claimed_pipeline"] == pipeline.name
    assert body["ownership_warning"] == forged.ownership_warning
    client = Client()
    client.force_login(type(b_operator).objects.get(pk=b_operator.pk))
    page = client.get(f"/dlq/messages/{forged.pk}/").content.decode()
    assert 'data-testid="ownership-warning"' in page
    refused = api_for(b_operator).post(f"/api/dlq/messages/{forged.pk}/replay/", {}, format="json")
    assert refused.status_code == 400
    assert "target_topic" in refused.json()
    assert a_source not in DeadLetter.objects.get(pk=forged.pk).replays.values_list("target_topic", flat=True)
    assert DeadLetter.objects.get(pk=forged.pk).status == "parked"


def test_a_registered_topics_records_belong_to_its_team_whatever_pipeline_their_header_names(
    people, pipeline, other_pipeline
):
    """An extra DLQ topic registered for team B without a pipeline: a header naming A's pipeline grants A
    nothing and gives the record no pipeline (whose topics it could be replayed to)."""
    topic = f"connect-{uuid.uuid4().hex[:8]}.dlq"
    b_team = other_pipeline.team
    services.register_topic(actor=people["admin"], topic=topic, team=b_team)
    headers = dlq_headers(pipeline, error_type="E", message="m", source_offset=2)

    [row] = _ingest(_record(topic, headers))

    assert (row.team_id, row.pipeline_id, row.pipeline_name) == (b_team.pk, None, "")
    assert row.claimed_pipeline == pipeline.name
    assert "no pipeline" in row.ownership_warning
    assert not services.visible_dead_letters(people["operator"]).filter(pk=row.pk).exists()
    refused = api_for(people["foreign"]).post(f"/api/dlq/messages/{row.pk}/replay/", {}, format="json")
    assert refused.status_code == 400
    assert "target_topic" in refused.json()


def test_a_registered_topic_cannot_be_tied_to_another_teams_pipeline(people, pipeline, other_pipeline):
    with pytest.raises(services.InvalidRequest) as refused:
        services.register_topic(
            actor=people["admin"], topic="x.dlq", team=other_pipeline.team, pipeline=pipeline
        )
    assert refused.value.field == "pipeline"


def test_a_source_topic_header_naming_another_topic_does_not_widen_replay_targets(people, pipeline):
    """The record's own pipeline, but its source-topic header names a topic the pipeline does not read."""
    dlq = pipeline.current_revision.spec["dlq"]["topic"]
    headers = dlq_headers(pipeline, error_type="E", message="m", source_offset=3)
    [row] = _ingest(_record(dlq, _with(headers, c.H_SOURCE_TOPIC, b"billing.ledger")))
    assert row.source_topic == "billing.ledger"  # kept, as the header said
    operator = api_for(people["operator"])

    for target in ("", "billing.ledger"):  # the default (the header) and naming it outright
        refused = operator.post(
            f"/api/dlq/messages/{row.pk}/replay/", {"target_topic": target}, format="json"
        )
        assert refused.status_code == 400, refused.content
        assert "billing.ledger" not in refused.json()["target_topic"][0].split("(")[1]
    assert not row.replays.exists()
    assert DeadLetter.objects.get(pk=row.pk).status == "parked"
    assert services.allowed_targets(row) == {
        pipeline.current_revision.spec["source"]["topics"][0],
        *(d["topic"] for d in pipeline.current_revision.spec["destinations"]),
    }


def test_a_header_naming_another_pipeline_does_not_move_a_record_off_its_topics_writer(
    people, team, pipeline
):
    """Each DLQ topic has one writing pipeline (a second claim is refused), so the header cannot choose: a
    record whose header names another pipeline, even one of the same team, stays with the topic's writer
    and carries a warning naming what the header claimed."""
    spec = pipeline.current_revision.spec
    with pytest.raises(SpecError, match="already the DLQ topic"):
        create_pipeline(actor=people["admin"], name=f"twin-{uuid.uuid4().hex[:8]}", team=team, spec=spec)
    twin = create_pipeline(
        actor=people["admin"],
        name=f"twin-{uuid.uuid4().hex[:8]}",
        team=team,
        spec={**spec, "dlq": {**spec["dlq"], "topic": f"{spec['dlq']['topic']}-twin"}},
    )
    headers = dlq_headers(pipeline, error_type="E", message="m", source_offset=4)
    to_twin, to_first, to_stranger = _ingest(
        _record(spec["dlq"]["topic"], _with(headers, c.H_PIPELINE, twin.name.encode())),
        _record(spec["dlq"]["topic"], headers),
        _record(spec["dlq"]["topic"], _with(headers, c.H_PIPELINE, b"somebody-else")),
    )
    assert to_twin.pipeline_id == pipeline.pk
    assert twin.name in to_twin.ownership_warning
    assert (to_first.pipeline_id, to_first.ownership_warning) == (pipeline.pk, "")
    assert to_stranger.pipeline_id == pipeline.pk
    assert "somebody-else" in to_stranger.ownership_warning
