"""The ingester on the real broker: 10,000 DLQ records written the StreamForge, Kafka Connect and Spring
ways, ingested exactly once while the ingester process is killed with SIGKILL mid-way and started again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.db.models import Sum

from dlq import services
from dlq.headers import spring_int, spring_long
from dlq.models import DeadLetter, FailureGroup
from streamforge_core import contract as c
from tests.database import child_database_url
from tests.dlq.conftest import produce_with_headers

pytestmark = [pytest.mark.kafka, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
RECORDS = 10_000


def mixed_record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Record ``i`` in one of three conventions, with one of a few error messages that vary by number."""
    key, value = f"key-{i}".encode(), f'{{"id": {i}, "pad": "{"x" * 200}"}}'.encode()
    if i % 3 == 0:
        headers = [
            (c.H_ERROR, f"path /payload/size not found at record {i}".encode()),
            (c.H_ERROR_TYPE, b"JsonPathNotFound"),
            (c.H_SOURCE_TOPIC, b"github.events"),
            (c.H_SOURCE_PARTITION, b"0"),
            (c.H_SOURCE_OFFSET, str(i).encode()),
            (c.H_TIMESTAMP, b"2026-11-21T08:00:00Z"),
            (c.H_PIPELINE, b"github-demo"),
        ]
    elif i % 3 == 1:
        headers = [
            ("__connect.errors.topic", b"orders"),
            ("__connect.errors.partition", b"1"),
            ("__connect.errors.offset", str(i).encode()),
            ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
            ("__connect.errors.exception.message", f"Converting byte[] at offset {i} failed".encode()),
        ]
    else:
        headers = [
            ("kafka_dlt-original-topic", b"payments"),
            ("kafka_dlt-original-partition", spring_int(2)),
            ("kafka_dlt-original-offset", spring_long(i)),
            ("kafka_dlt-exception-fqcn", b"java.lang.NumberFormatException"),
            ("kafka_dlt-exception-message", f'For input string: "{i}x"'.encode()),
        ]
    return key, value, headers


def start_ingester(group: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA_BOOTSTRAP_SERVERS,
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "dlq_ingest", "--group-id", group, "--batch-size", "250", "--refresh", "2", "--until-idle", "6"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def test_ten_thousand_mixed_records_are_ingested_exactly_once_across_a_kill(
    people, team, make_topic, kafka_bootstrap
):
    topic = make_topic("mixed-dlq", partitions=3)
    services.register_topic(
        actor=people["admin"], topic=topic, team=team, description="Connect, Spring and ours"
    )
    produce_with_headers(kafka_bootstrap, topic, (mixed_record(i) for i in range(RECORDS)))
    group = f"ingest-{uuid.uuid4().hex[:8]}"

    first = start_ingester(group)
    started = time.monotonic()
    deadline = started + 120
    while DeadLetter.objects.count() < 2_500 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    at_kill, first_elapsed = DeadLetter.objects.count(), time.monotonic() - started
    assert 0 < at_kill < RECORDS, f"the kill should land mid-way, {at_kill} rows were stored"

    second = start_ingester(group)
    output, _ = second.communicate(timeout=300)
    assert second.returncode == 0, output.decode()[-3000:]

    rows = DeadLetter.objects.filter(dlq_topic=topic)
    assert rows.count() == RECORDS
    assert rows.values("dlq_partition", "dlq_offset").distinct().count() == RECORDS
    by_convention = Counter(rows.values_list("convention", flat=True))
    assert by_convention == {"streamforge": 3334, "kafka_connect": 3333, "spring": 3333}
    spring = rows.filter(convention="spring").order_by("source_offset").first()
    assert (spring.source_topic, spring.source_partition, spring.error_type) == (
        "payments",
        2,
        "NumberFormatException",
    )
    # Group counts were not incremented twice for the batch re-read after the kill.
    assert FailureGroup.objects.aggregate(total=Sum("count"))["total"] == RECORDS
    assert FailureGroup.objects.count() == 3
    assert all(d.team_id == team.pk for d in rows[:10])
    sys.stderr.write(
        f"\ningest: {at_kill} rows in {first_elapsed:.1f}s before the kill ({at_kill / first_elapsed:.0f} rows/s, "
        f"incl. start-up); second run: {output.decode().strip().splitlines()[-1]}\n"
    )


def test_a_batch_read_again_after_a_crash_adds_no_rows_and_no_counts(people, team, pipeline, park):
    """The crash window between the database commit and the offset commit: the same records come again."""
    from dlq.ingest import TopicOwner, store_batch
    from streamforge_core.kafka import Record

    topic = pipeline.current_revision.spec["dlq"]["topic"]
    records = [
        Record(
            topic=topic,
            partition=0,
            offset=i,
            key=None,
            value=b"{}",
            headers=list(mixed_record(3 * i)[2]),
            timestamp_ms=None,
        )
        for i in range(50)
    ]
    owners = {topic: TopicOwner(team.pk, pipeline.pk, pipeline.name)}
    assert store_batch(records, owners).inserted == 50
    again = store_batch(
        [
            *records[20:],
            Record(topic=topic, partition=0, offset=50, key=None, value=b"{}", headers=[], timestamp_ms=None),
        ],
        owners,
    )
    assert (again.inserted, again.already_stored) == (1, 30)
    assert DeadLetter.objects.count() == 51
    assert FailureGroup.objects.aggregate(total=Sum("count"))["total"] == 51


def test_headers_longer_than_their_columns_are_cut_to_fit_instead_of_failing_the_batch(team, pipeline):
    """A foreign producer's headers can be any length; the database (PostgreSQL checks a column's width)
    must not refuse the batch, or the ingester would stop at it on every restart."""
    from dlq.ingest import TopicOwner, store_batch
    from streamforge_core.kafka import Record

    topic = pipeline.current_revision.spec["dlq"]["topic"]
    long_headers = [
        (c.H_ERROR_TYPE, b"E" * 300),
        (c.H_ERROR, b"x" * 5000),
        (c.H_PIPELINE, b"p" * 100),
        (c.H_DESTINATION, b"d" * 300),
        (c.H_SOURCE_TOPIC, b"t" * 400),
        (c.H_SOURCE_PARTITION, str(2**40).encode()),
    ]
    record = Record(
        topic=topic,
        partition=0,
        offset=0,
        key=b"k" * 500,
        value=b"{}",
        headers=long_headers,
        timestamp_ms=None,
    )
    result = store_batch([record], {topic: TopicOwner(team.pk, pipeline.pk, pipeline.name)})
    assert result.inserted == 1
    row = DeadLetter.objects.get(dlq_topic=topic)
    assert (len(row.error_type), len(row.destination), len(row.source_topic)) == (128, 128, 249)
    assert (len(row.key_text), len(row.error_message), row.source_partition) == (200, 5000, None)
    # The pipeline is the topic's writer, whatever the (over-long) header claims; the claim is a warning.
    assert row.pipeline_name == pipeline.name
    assert FailureGroup.objects.get(pk=row.group_id).pipeline_name == pipeline.name
    assert "p" * 20 in row.ownership_warning


def test_a_recreated_dlq_topic_is_read_as_new_records_not_as_re_reads(
    people, team, kafka_admin, kafka_bootstrap
):
    """Deleting and recreating a DLQ topic starts its offsets at 0 again; its records must still be parked."""
    from confluent_kafka.admin import NewTopic

    from dlq.ingest import Ingester

    topic = f"recreated-dlq-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    services.register_topic(actor=people["admin"], topic=topic, team=team)
    ingester = Ingester(group_id=f"g-{topic}", instance_id="", poll_timeout=0.5, refresh_seconds=3600)
    try:
        produce_with_headers(kafka_bootstrap, topic, (mixed_record(i) for i in range(10)))
        deadline = time.monotonic() + 60
        while DeadLetter.objects.filter(dlq_topic=topic).count() < 10 and time.monotonic() < deadline:
            ingester.run_once()
        kafka_admin.delete_topics([topic])[topic].result(timeout=30)
        time.sleep(2)
        kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        produce_with_headers(kafka_bootstrap, topic, (mixed_record(100 + i) for i in range(5)))
        deadline = time.monotonic() + 90
        while DeadLetter.objects.filter(dlq_topic=topic).count() < 15 and time.monotonic() < deadline:
            ingester.run_once()
        rows = DeadLetter.objects.filter(dlq_topic=topic)
        assert rows.count() == 15
        assert rows.values("dlq_topic_id").distinct().count() == 2
        assert sorted(rows.filter(dlq_offset__lt=5).values_list("key_text", flat=True)) == sorted(
            [f"key-{i}" for i in range(5)] + [f"key-{100 + i}" for i in range(5)]
        )
    finally:
        ingester.stop.set()
        ingester.run()
        kafka_admin.delete_topics([topic])


@pytest.mark.kafka
def test_asking_whether_a_failed_ingesters_consumer_is_assigned_never_raises(kafka_bootstrap):
    """The command's main thread asks ``assigned()`` while ingester threads fail and retry. A run that
    failed (a commit refused during a broker restart) closes its consumer; asking a closed consumer raised
    RuntimeError in the main thread, which ended the command's loop, and ingest stopped after the broker
    came back (`make chaos`, broker restart). Guards: the run forgets its consumer before closing it, and
    ``assigned()`` answers False for a closed one."""
    from dlq.ingest import Ingester

    ingester = Ingester(bootstrap_servers=kafka_bootstrap, group_id=f"assigned-{uuid.uuid4()}")
    consumer = ingester._make_consumer()
    ingester._consumer = consumer
    consumer.close()  # as a failed run's finally does, seen from another thread before it is forgotten
    assert ingester.assigned() is False

    ingester._consumer = ingester._make_consumer()
    ingester.stop.set()
    ingester.run()  # returns at once; its finally closes the consumer
    assert ingester._consumer is None
    assert ingester.assigned() is False
