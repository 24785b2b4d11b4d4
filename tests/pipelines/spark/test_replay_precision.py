"""Destination-precise replay on the real pipeline (#18): a fan-out pipeline, one record failing one of its
destinations, fixed in the console and replayed. The replay carries ``x-streamforge-replay-destinations``,
so the driver writes it to the destination it failed only; every other destination, which already had the
record, holds it exactly once, and the accounting identity holds per destination with the replay counted
as replay-skipped where it was not for."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings

from access.models import Role
from dlq import services
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter, Status
from pipelines.services import create_pipeline
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from tests.factories import TeamFactory, member
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark, pytest.mark.django_db]

EVENTS = Path(__file__).resolve().parents[3] / "demo" / "data" / "github-events-2021-07-21.ndjson"


def test_a_fixed_record_replayed_for_its_failed_destination_reaches_every_destination_once(
    tmp_path, kafka_bootstrap, kafka_admin, make_topic
):
    suffix = uuid.uuid4().hex[:8]
    source = make_topic("events")
    spec = {
        "source": {"topics": [source]},
        "destinations": [
            {
                "name": "pushes",
                "topic": f"pushes-{suffix}",
                "filter": "/type,==,PushEvent",
                "transform": "EXTRACT:/actor/login,login",
            },
            {"name": "archive", "topic": f"archive-{suffix}", "filter": "EXISTS:/id"},
        ],
        "dlq": {"topic": f"events-{suffix}.dlq"},
    }
    team = TeamFactory()
    admin = member(team, Role.ADMIN, is_superuser=True)
    operator = member(team, Role.OPERATOR)
    pipeline = create_pipeline(actor=admin, name=f"fanout-{suffix}", team=team, spec=spec)
    created = ensure_topics(kafka_admin, pipeline.current_revision.parsed).created

    events = [json.loads(line) for line in EVENTS.read_bytes().splitlines()]
    chosen = [e for e in events if e["type"] == "PushEvent"][:3] + [
        e for e in events if e["type"] != "PushEvent"
    ][:2]
    broken = json.loads(json.dumps(chosen[0]))
    del broken["actor"]["login"]  # fails "pushes" (JsonPathNotFound); "archive" takes it as it is
    records = [(e["id"].encode(), json.dumps(e).encode()) for e in [broken, *chosen[1:]]]

    driver = DriverProcess(
        spec=spec,
        pipeline=pipeline.name,
        workdir=tmp_path / "driver",
        bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL,
        jars=list(settings.SPARK_JARS),
    )
    try:
        driver.start()
        produce(kafka_bootstrap, source, records)
        driver.wait_consumed(len(records))

        # The console: the dead letter parked from the real DLQ topic, fixed, and replayed.
        dlq_records = consume_all(kafka_bootstrap, spec["dlq"]["topic"])
        assert [(r.header(c.H_DESTINATION), r.header(c.H_ERROR_TYPE)) for r in dlq_records] == [
            ("pushes", "JsonPathNotFound")
        ]
        owners = {spec["dlq"]["topic"]: TopicOwner(team.pk, pipeline.pk, pipeline.name)}
        store_batch(dlq_records, owners)
        dead = DeadLetter.objects.get(pipeline=pipeline)
        services.fix_payload(
            actor=operator, dead_letter=dead, value=json.dumps(chosen[0]).encode(), reason="login restored"
        )
        replay = services.replay(actor=operator, dead_letter=dead, reason="fixed")
        assert replay.destinations == "pushes"
        driver.wait_consumed(len(records) + 1)
        assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()

        archive = Counter(
            json.loads(r.value)["id"] for r in consume_all(kafka_bootstrap, f"archive-{suffix}")
        )
        assert archive == {e["id"]: 1 for e in chosen}, "the replay must not write to archive a second time"
        pushes = Counter(
            json.loads(r.value)["login"] for r in consume_all(kafka_bootstrap, f"pushes-{suffix}")
        )
        assert pushes == Counter(e["actor"]["login"] for e in chosen[:3])  # the fixed one arrived, once
        assert DeadLetter.objects.get(pk=dead.pk).status == Status.REPLAYED
        assert len(consume_all(kafka_bootstrap, spec["dlq"]["topic"])) == 1  # nothing failed again

        events_seen = driver.events()
        consumed = sum(e["consumed"] for e in events_seen)
        assert consumed == len(records) + 1
        totals = {name: Counter() for name in ("pushes", "archive")}
        for event in events_seen:
            for name, counts in totals.items():
                counts.update(event["destinations"][name])
        for name, counts in totals.items():  # the identity, per destination
            outcomes = ("produced", "filtered", "dead_lettered", "replay_skipped")
            assert sum(counts[o] for o in outcomes) == consumed, (name, counts)
        assert totals["archive"]["replay_skipped"] == 1
        assert (totals["pushes"]["produced"], totals["pushes"]["dead_lettered"]) == (3, 1)
    finally:
        driver.ensure_stopped()
        for future in kafka_admin.delete_topics(created).values():
            future.result(timeout=30)
