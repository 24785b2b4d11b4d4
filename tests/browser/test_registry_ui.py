"""An Avro dead letter worked in a real Chromium (#31): the message page shows it decoded with its writer
schema, the operator types the fix as JSON, the check says it would pass, the fix is saved and replayed;
the record that reaches the source topic is Avro framed with the writer schema's id, and the real Spark
driver then passes it to its destination (nothing dead-lettered again)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from django.conf import settings
from playwright.sync_api import expect

from pipelines.services import create_pipeline
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from streamforge_core.record_formats import RecordDecoder, shared_registry
from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import RegistryConnection
from streamforge_core.wire_format import frame
from tests.browser.test_dlq_ui import people, store, team  # noqa: F401  (fixtures)
from tests.pipelines.spark.harness import DriverProcess, consume_all

pytestmark = [
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.kafka,
    pytest.mark.registry,
    pytest.mark.spark,
]

ISSUE = {
    "type": "record",
    "name": "Issue",
    "fields": [
        {"name": "title", "type": "string"},
        {"name": "reporter", "type": {"type": "record", "name": "Reporter", "fields": [{"name": "login", "type": "string"}]}},
        {"name": "points", "type": ["null", "int"], "default": None},
    ],
}  # fmt: skip


@pytest.fixture
def registry(registry_url):
    return shared_registry(RegistryConnection(registry_url, timeout_s=5))


@pytest.fixture
def avro_pipeline(team, people, registry, kafka_admin):  # noqa: F811  (fixtures imported above)
    """An Avro pipeline whose ``estimates`` destination needs ``points`` (null is an error), with its
    topics on the test broker; the writer schema has a namespace of the test's own, so its id is this
    test's (Apicurio gives one id to one schema text)."""
    suffix = uuid.uuid4().hex[:8]
    source = f"avro.issues-{suffix}"
    schema_id = registry.register(f"{source}-value", json.dumps({**ISSUE, "namespace": f"b{suffix}"}))
    pipeline = create_pipeline(
        actor=people["admin"],
        name=f"issues-{suffix}",
        team=team,
        spec={
            "source": {"topics": [source], "format": "avro", "starting_offsets": "earliest"},
            "destinations": [
                {
                    "name": "estimates",
                    "topic": f"avro.estimates-{suffix}",
                    "transform": "CONSTRUCT:who=/reporter/login:points=/points",
                }
            ],
            "error_handling": {"null_value_behavior": "error"},
            "delivery": {"commit_strategy": {"kind": "batch", "max_records": 100}},
            "dlq": {"topic": f"{source}.dlq"},
        },
    )
    created = ensure_topics(
        kafka_admin, parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)
    ).created
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    created.append(source)
    yield pipeline, schema_id
    for future in kafka_admin.delete_topics(created).values():
        future.result(timeout=30)


def test_an_avro_dead_letter_is_fixed_as_json_replayed_in_its_writer_schema_and_then_passes(
    open_page,
    people,  # noqa: F811
    avro_pipeline,
    registry,
    kafka_bootstrap,
    tmp_path,
):
    pipeline, schema_id = avro_pipeline
    spec = pipeline.current_revision.spec
    broken = {"title": "flaky replay", "reporter": {"login": "octocat"}, "points": None}
    framed = frame(schema_id, codec_for(registry.lookup(schema_id)).encode(broken))
    [dead] = store(pipeline, [(b"issue-7", framed, "TransformEvaluation", "null value at /points")])

    page = open_page(people["operator"])
    page.goto(f"/dlq/messages/{dead.pk}/")
    schema_line = page.get_by_test_id("value-schema")
    expect(schema_line).to_contain_text(f"Decoded from avro with schema {schema_id}")
    expect(schema_line).to_contain_text(f"subject {spec['source']['topics'][0]}-value")
    expect(page.get_by_test_id("value-pretty")).to_contain_text('"login": "octocat"')
    expect(page.get_by_test_id("value-original")).to_be_attached()

    editor = page.get_by_test_id("fix-text")
    expect(editor).to_have_value(json.dumps(broken, indent=2))  # the editor starts from the decoded record
    editor.fill(json.dumps({**broken, "points": "three"}, indent=2))  # valid JSON, not valid Avro
    expect(page.get_by_test_id("would-pass")).to_contain_text("$.points")
    expect(page.get_by_test_id("fix-save")).to_be_disabled()

    fixed = {**broken, "points": 3}
    editor.fill(json.dumps(fixed, indent=2))
    expect(page.get_by_test_id("would-pass").get_by_test_id("verdict")).to_have_text("would pass")
    expect(page.get_by_test_id("fix-diff").locator(".diff-add")).to_contain_text(['"points": 3'])
    page.get_by_test_id("fix-reason").fill("estimate agreed in planning")
    page.get_by_test_id("fix-save").click()
    expect(page.get_by_test_id("flash")).to_contain_text("Saved as payload revision 1; it would pass now")
    expect(page.get_by_test_id("payload-revision")).to_contain_text("estimate agreed in planning")
    # The page is redrawn with the fix: Replay no longer warns that the payload would fail again.
    expect(page.get_by_test_id("replay")).not_to_have_attribute("data-danger", "true")
    page.get_by_test_id("replay").click()
    page.get_by_test_id("confirm-submit").click()
    expect(page.get_by_test_id("message-head").locator('[data-field="status"]')).to_have_text("replayed")

    [replayed] = consume_all(kafka_bootstrap, spec["source"]["topics"][0])
    decoded = RecordDecoder(registry, "avro").decode(replayed.value)
    assert (decoded.schema.schema_id, decoded.value) == (schema_id, fixed), "framed with the writer schema"

    driver = DriverProcess(
        spec=spec,
        pipeline=pipeline.name,
        workdir=tmp_path / "driver",
        bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL,
        jars=list(settings.SPARK_JARS),
        env={"SCHEMA_REGISTRY_URL": registry.connection.url},
    ).start()
    try:
        driver.wait_consumed(1)
        assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()
    finally:
        driver.ensure_stopped()
    [passed] = consume_all(kafka_bootstrap, spec["destinations"][0]["topic"])
    assert json.loads(passed.value) == {"who": "octocat", "points": 3}
    assert consume_all(kafka_bootstrap, spec["dlq"]["topic"]) == []
