"""The DLQ console on a registry-format pipeline, against the real schema registry (Apicurio) of the test
profile: a dead letter's Avro payload is shown decoded with its schema id, subject and version (masking
works on the decoded fields, the original bytes stay available), a fix is typed as JSON and stored framed
again with the writer schema (or a later compatible version of the subject), and a fix that does not fit is
refused naming the field. The would-pass check decodes what it checks, as the pipeline does."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from django.test import Client

from dlq.models import PayloadRevision
from pipelines.services import create_pipeline
from pipelines.topics import ensure_topics
from streamforge_core.record_formats import RecordDecoder, shared_registry
from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import RegistryConnection
from streamforge_core.wire_format import frame
from tests.dlq.conftest import api_for
from tests.pipelines.spark.harness import produce

pytestmark = [pytest.mark.django_db, pytest.mark.registry, pytest.mark.kafka]

EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "test.console",
    "fields": [
        {"name": "type", "type": "string"},
        {
            "name": "actor",
            "type": {
                "type": "record",
                "name": "Actor",
                "fields": [{"name": "login", "type": "string"}, {"name": "email", "type": "string"}],
            },
        },
        {"name": "size", "type": ["null", "long"], "default": None},
    ],
}
#: A compatible later version: a new field with a default.
EVENT_V2 = {**EVENT, "fields": [*EVENT["fields"], {"name": "public", "type": "boolean", "default": True}]}


@pytest.fixture
def registry(registry_url):
    return shared_registry(RegistryConnection(registry_url, timeout_s=5))


@pytest.fixture
def avro_pipeline(team, people, registry, kafka_admin):
    suffix = uuid.uuid4().hex[:8]
    source = f"avro.events-{suffix}"
    # Apicurio gives one id to one text (its content id) whatever the subject: a namespace of the test's own
    # keeps this schema's id (and the subject the registry files it under) this test's.
    schema_id = registry.register(f"{source}-value", json.dumps({**EVENT, "namespace": f"t{suffix}"}))
    pipeline = create_pipeline(
        actor=people["admin"],
        name=f"avro-{suffix}",
        team=team,
        spec={
            "source": {"topics": [source], "format": "avro"},
            "destinations": [
                {
                    "name": "pushes",
                    "topic": f"avro.pushes-{suffix}",
                    "filter": "/type,==,PushEvent",
                    "transform": "CONSTRUCT:actor=/actor/login:size=/size",
                }
            ],
            "error_handling": {"null_value_behavior": "error"},
            "dlq": {"topic": f"{source}.dlq"},
        },
    )
    created = ensure_topics(kafka_admin, pipeline.current_revision.parsed).created
    for future in kafka_admin.create_topics(
        [NewTopic(source, num_partitions=1, replication_factor=1)]
    ).values():
        future.result(timeout=30)
    created.append(source)
    yield pipeline, schema_id
    if created:
        for future in kafka_admin.delete_topics(created).values():
            future.result(timeout=30)


def _framed(registry, schema_id: int, value: dict) -> bytes:
    return frame(schema_id, codec_for(registry.lookup(schema_id)).encode(value))


def _page(user, pk: int) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/dlq/messages/{pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_an_avro_dead_letter_is_shown_decoded_with_its_schema_and_masked_on_its_fields(
    people, avro_pipeline, registry, park, settings
):
    pipeline, schema_id = avro_pipeline
    event = {"type": "PushEvent", "actor": {"login": "octocat", "email": "octo@example.com"}, "size": None}
    value = _framed(registry, schema_id, event)
    (row,) = park(pipeline, [(b"k", value, "TransformEvaluation", "null at /size")])

    page = _page(people["operator"], row.pk)
    assert f'/api/clusters/default/schemas/{schema_id}/"' in page
    subject = f"{pipeline.current_revision.spec['source']['topics'][0]}-value"
    assert subject in re.search(r'data-testid="value-schema".*?</p>', page, re.S).group(0)
    assert "&quot;login&quot;: &quot;octocat&quot;" in page  # the pretty tab shows the decoded record
    assert 'data-testid="value-original"' in page  # the framed bytes as stored
    assert "&quot;size&quot;: null" in page  # the fix editor starts from the decoded JSON too

    settings.DLQ_MASKED_PATHS = ["/actor/email"]
    masked = _page(people["viewer"], row.pk)
    assert "octo@example.com" not in masked
    assert "octocat" in masked
    assert 'data-testid="value-original"' not in masked

    # The REST API gives what the page shows: the decoded record (masked) and how it was read.
    detail = api_for(people["viewer"]).get(f"/api/dlq/messages/{row.pk}/").json()
    assert detail["value"]["encoding"] == "json"
    assert json.loads(detail["value"]["text"])["actor"]["login"] == "octocat"
    assert "octo@example.com" not in detail["value"]["text"]
    assert detail["value_format"] == {
        "format": "avro", "decoded": True, "schema_id": schema_id, "subject": subject,
        "version": detail["value_format"]["version"], "error": "",
    }  # fmt: skip
    assert detail["value_format"]["version"] >= 1

    schema = api_for(people["viewer"]).get(f"/api/clusters/default/schemas/{schema_id}/")
    assert schema.status_code == 200, schema.content
    assert (schema.json()["schema_type"], schema.json()["subject"]) == ("AVRO", subject)
    assert api_for(people["viewer"]).get("/api/clusters/default/schemas/2000000000/").status_code == 404
    # another team, with no pipeline on the cluster, does not see its registry at all
    assert api_for(people["foreign"]).get(f"/api/clusters/default/schemas/{schema_id}/").status_code == 404
    assert api_for(people["foreign"]).get(f"/api/dlq/messages/{row.pk}/").status_code == 404


def test_a_json_fix_is_stored_framed_with_the_writer_schema_and_would_pass(
    people, avro_pipeline, registry, park
):
    pipeline, schema_id = avro_pipeline
    event = {"type": "PushEvent", "actor": {"login": "octocat", "email": "o@example.com"}, "size": None}
    (row,) = park(pipeline, [(b"k", _framed(registry, schema_id, event), "TransformEvaluation", "null")])
    api = api_for(people["operator"])
    fixed = {**event, "size": 3}

    check = api.post(f"/api/dlq/messages/{row.pk}/check/", {"value": fixed}, format="json")
    assert check.status_code == 200, check.content
    assert check.json()["check"]["would_pass"] is True, check.json()["check"]
    assert '+  "size": 3' in check.json()["diff"]  # the diff compares the decoded records

    saved = api.post(f"/api/dlq/messages/{row.pk}/fix/", {"value": fixed, "reason": "size"}, format="json")
    assert saved.status_code == 201, saved.content
    stored = bytes(PayloadRevision.objects.get(dead_letter=row).value)
    decoded = RecordDecoder(registry, "avro").decode(stored)
    assert (decoded.schema.schema_id, decoded.value) == (schema_id, fixed)


def test_a_fix_that_does_not_fit_the_schema_is_refused_naming_the_field(
    people, avro_pipeline, registry, park
):
    pipeline, schema_id = avro_pipeline
    event = {"type": "PushEvent", "actor": {"login": "octocat", "email": "o@example.com"}, "size": None}
    (row,) = park(pipeline, [(b"k", _framed(registry, schema_id, event), "TransformEvaluation", "null")])
    api = api_for(people["operator"])
    bad = {**event, "actor": {"login": 42, "email": "o@example.com"}}

    refused = api.post(f"/api/dlq/messages/{row.pk}/fix/", {"value": bad, "reason": "x"}, format="json")
    assert refused.status_code == 400
    assert "$.actor.login" in refused.json()["value"][0]
    assert not PayloadRevision.objects.filter(dead_letter=row).exists()


def test_a_fix_may_be_written_with_a_later_compatible_version_of_the_subject(
    people, avro_pipeline, registry, park
):
    pipeline, schema_id = avro_pipeline
    subject = f"{pipeline.current_revision.spec['source']['topics'][0]}-value"
    namespace = json.loads(registry.lookup(schema_id).schema_str)["namespace"]
    v2 = registry.register(subject, json.dumps({**EVENT_V2, "namespace": namespace}))
    event = {"type": "PushEvent", "actor": {"login": "octocat", "email": "o@example.com"}, "size": None}
    (row,) = park(pipeline, [(b"k", _framed(registry, schema_id, event), "TransformEvaluation", "null")])
    api = api_for(people["operator"])
    fixed = {**event, "size": 1, "public": False}

    saved = api.post(
        f"/api/dlq/messages/{row.pk}/fix/",
        {"value": fixed, "reason": "v2", "schema_version": 2},
        format="json",
    )
    assert saved.status_code == 201, saved.content
    stored = bytes(PayloadRevision.objects.get(dead_letter=row).value)
    decoded = RecordDecoder(registry, "avro").decode(stored)
    assert (decoded.schema.schema_id, decoded.value) == (v2, fixed)

    missing = api.post(
        f"/api/dlq/messages/{row.pk}/fix/",
        {"value": fixed, "reason": "v9", "schema_version": 9},
        format="json",
    )
    assert missing.status_code == 400
    assert "version 9" in missing.json()["schema_version"][0]
    for bad in (0, "two", 2**31):
        refused = api.post(
            f"/api/dlq/messages/{row.pk}/fix/",
            {"value": fixed, "reason": "x", "schema_version": bad},
            format="json",
        )
        assert refused.status_code == 400, refused.content
        assert "schema_version" in refused.json()
    as_viewer = api_for(people["viewer"]).post(
        f"/api/dlq/messages/{row.pk}/fix/",
        {"value": fixed, "reason": "x", "schema_version": 2},
        format="json",
    )
    assert as_viewer.status_code == 403


def test_an_export_has_the_decoded_record_masked_on_its_fields(
    people, avro_pipeline, registry, park, settings
):
    pipeline, schema_id = avro_pipeline
    event = {"type": "PushEvent", "actor": {"login": "octocat", "email": "octo@example.com"}, "size": None}
    (row,) = park(pipeline, [(b"k", _framed(registry, schema_id, event), "TransformEvaluation", "null")])
    settings.DLQ_MASKED_PATHS = ["/actor/email"]

    response = api_for(people["viewer"]).get("/api/dlq/messages/export/", {"as": "json"})
    assert response.status_code == 200, response.content
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    (exported,) = [line for line in lines if line["id"] == row.pk]
    assert exported["value_encoding"] == "json"
    assert exported["value"]["actor"]["login"] == "octocat"
    assert exported["value"]["actor"]["email"] != "octo@example.com"


def test_the_topic_browser_shows_and_searches_registry_records_decoded(
    people, avro_pipeline, registry, kafka_bootstrap
):
    pipeline, schema_id = avro_pipeline
    source = pipeline.current_revision.spec["source"]["topics"][0]
    kinds = ["PushEvent", "WatchEvent", "PushEvent"]
    values = [
        _framed(registry, schema_id, {"type": kind, "actor": {"login": f"u{i}", "email": "e"}, "size": i})
        for i, kind in enumerate(kinds)
    ]
    produce(
        kafka_bootstrap,
        source,
        [(str(i).encode(), v) for i, v in enumerate(values)] + [(b"bad", b"\x00\x00")],
    )
    api = api_for(people["operator"])

    page = api.get(f"/api/pipelines/{pipeline.name}/topics/{source}/messages/", {"order": "oldest"})
    assert page.status_code == 200, page.content
    records = page.json()["records"]
    assert [json.loads(r["value"]["raw"])["actor"]["login"] for r in records[:3]] == ["u0", "u1", "u2"]
    assert records[0]["value_schema"].startswith(f"avro, schema {schema_id}, subject {source}-value")
    assert records[3]["value_schema"].startswith("not decoded: 4-byte schema id cut short")

    found = api.get(
        f"/api/pipelines/{pipeline.name}/topics/{source}/search/", {"q": "/type,==,PushEvent", "mode": "dsl"}
    )
    assert found.status_code == 200, found.content
    assert [json.loads(r["value"]["raw"])["size"] for r in found.json()["records"]] == [0, 2]


def test_a_bulk_fix_patches_the_decoded_records_and_frames_them_again(
    people, avro_pipeline, registry, park, monkeypatch
):
    from dlq import services
    from dlq.filters import MessageFilter
    from dlq.services import bulk as bulk_actions
    from dlq.services.fixes import current_payload

    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: None)
    pipeline, schema_id = avro_pipeline
    event = {"type": "PushEvent", "actor": {"login": "octocat", "email": "o@example.com"}, "size": None}
    rows = park(
        pipeline,
        [
            (f"k{i}".encode(), _framed(registry, schema_id, event), "TransformEvaluation", "null")
            for i in range(3)
        ],
    )
    rows += park(pipeline, [(b"bad", b"\x00\x00", "MessageDeserialization", "cut short")])
    fix = services.parse_fix({"patch": [{"op": "replace", "path": "/size", "value": 7}]})
    selection = MessageFilter(pipeline=pipeline.name)

    preview = services.preview_bulk_fix(actor=people["operator"], selection=selection, fix=fix)
    by_id = {sample.dead_letter_id: sample for sample in preview.samples}
    assert '+  "size": 7' in by_id[rows[0].pk].diff  # the decoded records compared
    assert by_id[rows[0].pk].check is not None
    assert by_id[rows[0].pk].check.would_pass
    assert by_id[rows[3].pk].error == "the payload does not decode with its schema: fix it alone"

    bulk = services.create_bulk_fix(actor=people["operator"], selection=selection, fix=fix, reason="size")
    done = services.run_bulk(bulk_id=bulk.pk)
    assert (done.succeeded, done.failed) == (3, 1)
    decoded = RecordDecoder(registry, "avro").decode(current_payload(rows[0])[0])
    assert (decoded.schema.schema_id, decoded.value["size"]) == (schema_id, 7)


def test_a_test_message_typed_as_json_is_produced_with_the_topics_schema(people, avro_pipeline, registry):
    pipeline, schema_id = avro_pipeline
    url = f"/api/pipelines/{pipeline.name}/test-messages/"
    api = api_for(people["operator"])
    event = {"type": "PushEvent", "actor": {"login": "tester", "email": "t@example.com"}, "size": 1}

    sent = api.post(url, {"value": json.dumps(event), "reason": "try the pushes filter"}, format="json")
    assert sent.status_code == 201, sent.content
    landed = sent.json()
    source = pipeline.current_revision.spec["source"]["topics"][0]
    page = api.get(f"/api/pipelines/{pipeline.name}/topics/{source}/messages/", {"order": "oldest"})
    (record,) = [r for r in page.json()["records"] if r["offset"] == landed["offset"]]
    assert json.loads(record["value"]["raw"]) == event
    assert record["value_schema"].startswith(f"avro, schema {schema_id}")

    bad = api.post(url, {"value": json.dumps({**event, "size": "one"}), "reason": "x"}, format="json")
    assert bad.status_code == 400
    assert "$.size" in bad.json()["value"][0]


def test_a_test_message_may_be_encoded_with_a_chosen_subject_and_version(people, avro_pipeline, registry):
    """#31 "produce a test message as JSON encoded with a chosen subject and version": version 1 of the
    topic's subject while a version 2 exists, or another subject; a subject or version the registry does
    not have is a 400 naming the field, never a 503."""
    pipeline, schema_id = avro_pipeline
    source = pipeline.current_revision.spec["source"]["topics"][0]
    subject = f"{source}-value"
    suffix = source.rsplit("-", 1)[1]
    v2_id = registry.register(subject, json.dumps({**EVENT_V2, "namespace": f"t{suffix}"}))
    other = f"other-{suffix}-value"
    other_id = registry.register(other, json.dumps({**EVENT_V2, "namespace": f"o{suffix}"}))
    url = f"/api/pipelines/{pipeline.name}/test-messages/"
    api = api_for(people["operator"])
    event = {"type": "PushEvent", "actor": {"login": "tester", "email": "t@example.com"}, "size": 1}

    def send(**choice) -> int:
        sent = api.post(url, {"value": json.dumps(event), "reason": "versions", **choice}, format="json")
        assert sent.status_code == 201, sent.content
        return int(sent.json()["offset"])

    offsets = {"latest": send(), "v1": send(schema_version=1), "other": send(subject=other)}
    page = api.get(f"/api/pipelines/{pipeline.name}/topics/{source}/messages/", {"order": "oldest"})
    schema_of = {r["offset"]: r["value_schema"] for r in page.json()["records"]}
    assert schema_of[offsets["latest"]].startswith(f"avro, schema {v2_id}")
    assert schema_of[offsets["v1"]].startswith(f"avro, schema {schema_id}")
    assert schema_of[offsets["other"]].startswith(f"avro, schema {other_id}")

    missing = api.post(
        url, {"value": json.dumps(event), "reason": "x", "subject": "no-such-subject"}, format="json"
    )
    assert missing.status_code == 400, missing.content
    assert "no-such-subject" in missing.json()["subject"][0]
    no_version = api.post(
        url, {"value": json.dumps(event), "reason": "x", "schema_version": 9}, format="json"
    )
    assert no_version.status_code == 400, no_version.content
    assert "no version 9" in no_version.json()["schema_version"][0]
    for bad, field in (({"schema_version": 0}, "schema_version"), ({"subject": "s" * 256}, "subject")):
        refused = api.post(url, {"value": json.dumps(event), "reason": "x", **bad}, format="json")
        assert refused.status_code == 400, refused.content
        assert field in refused.json(), refused.content
    viewer = api_for(people["viewer"]).post(
        url, {"value": json.dumps(event), "reason": "x", "schema_version": 1}, format="json"
    )
    assert viewer.status_code == 403, viewer.content
