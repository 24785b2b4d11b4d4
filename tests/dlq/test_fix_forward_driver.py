"""Fix forward end to end on real Kafka, Spark, Redis and PostgreSQL (issue #32, acceptance): revision 1's
driver dead-letters real GitHub pushes that lack ``payload.size``; they are ingested; revision 2 (a missing
field becomes null) goes live on the same checkpoint; its announcement starts a scan that finds exactly those;
the bulk replay of the scan's candidates is what the running revision-2 driver then delivers, to ``pushes``
only, and nothing of them is dead-lettered again."""

from __future__ import annotations

import copy
import json
import time

import pytest
from confluent_kafka.admin import NewTopic
from django.conf import settings

from dlq import services
from dlq.filters import MessageFilter
from dlq.ingest import Ingester
from dlq.models import DeadLetter, FixForwardState, Status
from dlq.services import bulk as bulk_actions
from dlq.services import fix_forward
from pipelines.services import revise_pipeline
from pipelines.signals import revision_live
from pipelines.spec import parse_spec
from pipelines.topics import ensure_topics
from streamforge_core import contract as c
from tests.dlq.conftest import missing_size_push
from tests.dlq.test_end_to_end import ingest_until
from tests.pipelines.spark.harness import DriverProcess, consume_all, produce

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
]


def test_a_new_revision_goes_live_and_exactly_what_it_now_passes_is_replayed_through_the_driver(
    people, pipeline, github_events, kafka_admin, kafka_bootstrap, tmp_path, monkeypatch
):
    scans: list[int] = []
    bulks: list[int] = []
    monkeypatch.setattr(fix_forward, "enqueue_scan", scans.append)
    monkeypatch.setattr(bulk_actions, "enqueue_bulk", lambda bulk: bulks.append(bulk.pk))
    spec = pipeline.current_revision.spec
    source, pushes, prs = (
        spec["source"]["topics"][0],
        spec["destinations"][0]["topic"],
        spec["destinations"][1]["topic"],
    )
    kafka_admin.create_topics([NewTopic(source, 1, 1)])[source].result(timeout=30)
    plan = ensure_topics(kafka_admin, parse_spec(spec, pipeline_name=pipeline.name))
    driver = DriverProcess(
        spec=spec, pipeline=pipeline.name, workdir=tmp_path / "driver", bootstrap=kafka_bootstrap,
        redis_url=settings.REDIS_URL, jars=list(settings.SPARK_JARS), revision=1,
    )  # fmt: skip
    ingester = Ingester(group_id=f"ingest-{pipeline.name}", poll_timeout=0.5, refresh_seconds=1)
    try:
        broken = missing_size_push(github_events)
        produce(
            kafka_bootstrap,
            source,
            [(None, e) for e in github_events[:20]] + [(f"ff-{i}".encode(), broken) for i in range(3)],
        )
        driver.start().wait_consumed(23, timeout=240)
        assert driver.stop() == c.EXIT_STOPPED, driver.log_tail()
        ingest_until(
            ingester,
            lambda: DeadLetter.objects.filter(key_text__startswith="ff-").count() == 3,
            60,
            "three dead letters",
        )
        parked = list(DeadLetter.objects.filter(key_text__startswith="ff-").order_by("id"))
        assert {(d.error_type, d.destination, d.revision) for d in parked} == {
            ("JsonPathNotFound", "pushes", 1)
        }

        revised = copy.deepcopy(spec)
        revised["error_handling"] = {"missing_field_behavior": "null"}
        revise_pipeline(actor=people["admin"], pipeline=pipeline, spec=revised, comment="size may be missing")
        driver.spec, driver.revision = revised, 2
        driver.restart()  # revision 2 on the same checkpoint
        revision_live.send(sender=None, pipeline_id=pipeline.pk, revision=2, previous_revision=1)
        [scan_id] = scans
        scan = services.run_fix_forward_scan(scan_id=scan_id)
        assert (scan.state, scan.candidates, scan.still_failing, scan.unchanged) == (
            FixForwardState.DONE,
            3,
            0,
            0,
        )

        bulk = services.create_bulk(
            actor=people["operator"], kind="replay", selection=MessageFilter.from_mapping(services.replay_filters(scan)),
            reason="revision 2 defaults a missing size", rate_limit=0,
        )  # fmt: skip
        assert bulk.total == 3
        services.run_bulk(bulk_id=bulks[0])
        assert set(
            DeadLetter.objects.filter(pk__in=[d.pk for d in parked]).values_list("status", flat=True)
        ) == {Status.REPLAYED}

        replayed_at = {
            f"{source}/{r.partition}/{r.offset}"
            for r in consume_all(kafka_bootstrap, source)
            if r.header(c.H_REPLAY_OF) is not None
        }
        assert len(replayed_at) == 3
        deadline = time.monotonic() + 180
        arrived: list = []
        while len(arrived) < 3 and time.monotonic() < deadline:
            arrived = [
                r for r in consume_all(kafka_bootstrap, pushes) if r.header(c.H_LINEAGE) in replayed_at
            ]
            time.sleep(1)
        assert len(arrived) == 3, f"the replayed records did not reach {pushes}:\n{driver.log_tail()}"
        actor = json.loads(broken)["actor"]["login"]
        assert [json.loads(r.value) for r in arrived] == [{"actor": actor, "size": None}] * 3
        assert not [r for r in consume_all(kafka_bootstrap, prs) if r.header(c.H_LINEAGE) in replayed_at]
        ingester.run_once()
        assert not DeadLetter.objects.filter(replay_of__in=parked).exists()  # none failed again
    finally:
        driver.ensure_stopped()
        ingester.stop.set()
        ingester.run()
        kafka_admin.delete_topics([source, *plan.created])
