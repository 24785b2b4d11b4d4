"""A console's worth of running pipelines without drivers: what the console's list paths read when N pipelines
run, written straight to the database (needs Django set up: the tests, or ``manage.py shell`` of a stack).

Each pipeline of ``seed`` is RUNNING with a leased run on one of two runner hosts, has an older ended run,
every third one a newer revision saved but not applied (so "running r1, r2 saved"), three batches in the rate
window, two partition positions, totals, a firing alert and two parked dead letters (stored through the DLQ
ingest code, so the DLQ console's counts and groups exist too). Nothing supervises these runs: run no worker
or beat against such a stack (its reconcile would end runs whose pids do not exist).

Used by ``tests/test_console_queries.py`` (query counts with 3 and 30 pipelines) and by
``python -m bench.density console`` (the console's latency under 20 operators).
"""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from access.models import Team
from dlq.ingest import TopicOwner, store_batch
from dlq.models import DeadLetter
from pipelines.models import (
    Alert,
    AlertSeverity,
    DesiredState,
    MetricSample,
    PartitionProgress,
    Pipeline,
    PipelineRun,
    PipelineState,
    PipelineTotals,
    RunnerHost,
)
from pipelines.services import create_pipeline, revise_pipeline
from streamforge_core import contract as c
from streamforge_core.kafka import Record

#: Dead letters parked per pipeline.
DEAD_LETTERS = 2
_offsets = itertools.count(1)


def spec_for(name: str) -> dict[str, Any]:
    """A valid two-destination spec reading ``<name>.src`` (no Kafka needed: nothing is started)."""
    return {
        "source": {"topics": [f"{name}.src"]},
        "destinations": [
            {"name": "all", "topic": f"{name}.out", "filter": "/type,==,PushEvent"},
            {"name": "copy", "topic": f"{name}.copy"},
        ],
        "dlq": {"topic": f"{name}.dlq"},
    }


def _park(pipeline: Pipeline, count: int) -> None:
    revision = pipeline.current_revision
    assert revision is not None
    topic = revision.spec["dlq"]["topic"]
    records = []
    for i in range(count):
        offset = next(_offsets) + int(time.time() * 1000)  # unique per record across seeds of one database
        headers = [
            (c.H_ERROR, b"no such field"),
            (c.H_ERROR_TYPE, b"JsonPathNotFound" if i % 2 else b"Serialization"),
            (c.H_SOURCE_TOPIC, revision.spec["source"]["topics"][0].encode()),
            (c.H_SOURCE_PARTITION, b"0"),
            (c.H_SOURCE_OFFSET, str(offset).encode()),
            (c.H_TIMESTAMP, timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ").encode()),
            (c.H_PIPELINE, pipeline.name.encode()),
            (c.H_DESTINATION, b"all"),
            (c.H_REVISION, b"1"),
            (c.H_ATTEMPTS, b"1"),
        ]
        records.append(
            Record(
                topic=topic,
                partition=0,
                offset=offset,
                key=b"k",
                value=b'{"type": "PushEvent"}',
                headers=headers,
                timestamp_ms=int(time.time() * 1000),
            )
        )
    store_batch(records, {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)})


def seed(*, team: Team, admin: User, n: int, prefix: str) -> list[Pipeline]:
    """``n`` running pipelines ``<prefix>-00`` ... of ``team`` created by ``admin`` (a team admin), with the
    rows described in the module docstring; returns them. Pipelines of those names that exist are left as
    they are (a second seed adds nothing). The runner hosts are ``<prefix>-runner-0`` and ``-1``."""
    now = timezone.now()
    defaults = {"slots": 40, "memory_mb": 24_000, "advertise_host": "127.0.0.1", "started_at": now}
    hosts = [
        RunnerHost.objects.get_or_create(
            name=f"{prefix}-runner-{i}",
            defaults={
                **defaults,
                "queue": f"streamforge.runner.{prefix}-runner-{i}",
                "last_heartbeat_at": now,
            },
        )[0]
        for i in range(2)
    ]
    now_ms = int(time.time() * 1000)
    made = []
    for i in range(n):
        name = f"{prefix}-{i:02d}"
        if Pipeline.objects.filter(name=name).exists():
            continue
        with transaction.atomic():
            pipeline = create_pipeline(actor=admin, name=name, team=team, spec=spec_for(name))
            first = pipeline.current_revision
            assert first is not None
            PipelineRun.objects.create(
                pipeline=pipeline, revision=first, run_id=uuid.uuid4(), attempt=1, state=PipelineState.STOPPED,
                host=hosts[0].name, epoch=1, ended_at=now - timedelta(minutes=5), exit_code=0,
            )  # fmt: skip
            run = PipelineRun.objects.create(
                pipeline=pipeline, revision=first, run_id=uuid.uuid4(), attempt=1, state=PipelineState.RUNNING,
                host=hosts[i % 2].name, epoch=2, pid=4_000_000 + i, last_heartbeat_at=now,
            )  # fmt: skip
            if i % 3 == 0:  # a revision saved after the start: the driver still runs r1
                spec = spec_for(name)
                spec["destinations"][1]["filter"] = "/type,==,PullRequestEvent"
                revise_pipeline(actor=admin, pipeline=pipeline, spec=spec, comment="narrower copy")
            Pipeline.objects.filter(pk=pipeline.pk).update(
                state=PipelineState.RUNNING, desired_state=DesiredState.RUNNING, lease_host=hosts[i % 2],
                lease_epoch=2, lease_expires_at=now + timedelta(days=1),
            )  # fmt: skip
            for batch in range(3):
                MetricSample.objects.create(
                    pipeline=pipeline, run=run, batch_id=batch, time_ms=now_ms - (3 - batch) * 5_000,
                    duration_ms=80.0, consumed=500, produced=480, filtered=10, dead_lettered=10, dlq_records=10,
                    lag=7,
                )  # fmt: skip
            for partition in range(2):
                PartitionProgress.objects.create(
                    pipeline=pipeline, topic=f"{name}.src", partition=partition, end_offset=1_000,
                    latest_offset=1_003 + partition, lag=3 + partition, updated_at=now,
                )  # fmt: skip
            PipelineTotals.objects.create(
                pipeline=pipeline, batches=3, consumed=1_500, dead_lettered=30, dlq_records=30
            )
            Alert.objects.create(
                pipeline=pipeline, rule="consumer_lag_high", severity=AlertSeverity.WARNING, summary="lag above 5",
                value=7.0, started_at=now, last_seen_at=now,
            )  # fmt: skip
        _park(pipeline, DEAD_LETTERS)
        made.append(pipeline)
    return made


def clear(*, prefix: str) -> None:
    """Remove what ``seed(prefix=...)`` wrote: its pipelines (with their runs, figures, alerts and parked dead
    letters) and its two runner hosts. A stack that keeps its database between runs (devstack's ``test``
    profile) otherwise carries them into the next benchmark, whose worker would find two registered hosts that
    are lost and place nothing on itself."""
    with transaction.atomic():
        seeded = Pipeline.objects.filter(name__regex=rf"^{prefix}-[0-9]+$")
        DeadLetter.objects.filter(pipeline__in=seeded).delete()
        PipelineRun.objects.filter(pipeline__in=seeded).delete()  # a run protects its revision
        seeded.update(current_revision=None)
        seeded.delete()
        RunnerHost.objects.filter(name__in=[f"{prefix}-runner-{i}" for i in range(2)]).delete()
