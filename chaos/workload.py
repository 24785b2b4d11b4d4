"""What the faults run against: one pipeline per delivery mode over one shared source topic, a continuous
producer of real GitHub events (a share of them corrupted), and the accountant that checks the identity.

The harness calls each pipeline by its mode: a delivery mode (``MODES``, one pipeline each for the whole
run), or ``LOW_LATENCY``, an at_least_once pipeline in Spark's real-time mode that only its own fault runs
(``chaos.kill_low_latency``).

Every run gets a fresh tag, so its topics, pipelines, consumer groups and checkpoints start empty: the
identity covers every source offset of this run and nothing else. Django must be set up before import.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from django.conf import settings
from django.contrib.auth.models import User

from access.models import Membership, Role, Team
from chaos import accounting
from chaos.accounting import Coordinates, Expected, Observed, Tally
from demo import scenario as demo
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState
from pipelines.services import create_pipeline
from pipelines.spec import PipelineSpec, parse_spec
from pipelines.supervision import request_start, request_stop
from streamforge_core import contract as c
from streamforge_core import redis_client
from streamforge_core.kafka import (
    KafkaConnection,
    Record,
    admin_config,
    consumer_config,
    producer_config,
    retrying,
)

MODES = ("at_least_once", "effectively_once")
#: The low_latency commit strategy's pipeline (Spark's real-time mode, at_least_once only): started and
#: stopped by its own fault, so the other faults keep two drivers on the two cores.
LOW_LATENCY = "low_latency"
SHORT = {"at_least_once": "alo", "effectively_once": "eo", "at_most_once": "amo", LOW_LATENCY: "ll"}
#: Each mode's ``delivery`` block: the delivery modes with a 2 s processing-time trigger (two drivers share
#: two busy cores); low_latency in real-time mode, whose 5 s real-time batches are its commits.
EVERY_2_S = {"kind": "time", "interval_ms": 2000}
DELIVERY: dict[str, dict[str, Any]] = {
    "at_least_once": {"mode": "at_least_once", "commit_strategy": EVERY_2_S},
    "effectively_once": {"mode": "effectively_once", "commit_strategy": EVERY_2_S},
    LOW_LATENCY: {"mode": "at_least_once", "commit_strategy": {"kind": "low_latency"}},
}
TEAM = "chaos"
#: Between a delivery mode and a copy's number in a pipeline's key (``effectively_once.2``).
COPY_SEP = "."


def pipeline_keys(modes: Iterable[str], copies: int = 1) -> list[str]:
    """The run's pipeline keys: each mode ``copies`` times, interleaved so that placement spreads the modes
    (``at_least_once``, ``effectively_once``, ``at_least_once.2``, ``effectively_once.2``, ...); the first copy
    of a mode is keyed by the mode alone. Raises ValueError for ``copies`` < 1."""
    if copies < 1:
        raise ValueError(f"copies must be at least 1, not {copies}")
    return [mode if n == 1 else f"{mode}{COPY_SEP}{n}" for n in range(1, copies + 1) for mode in modes]


def delivery_of(key: str) -> str:
    """The delivery mode of pipeline key ``key`` (``effectively_once.2`` -> ``effectively_once``)."""
    return key.split(COPY_SEP, 1)[0]


def short_of(key: str) -> str:
    """``key``'s short form in topic and pipeline names (``effectively_once.2`` -> ``eo2``)."""
    mode, _, copy = key.partition(COPY_SEP)
    return SHORT[mode] + copy


ARCHIVE_MAX_BYTES = demo.ARCHIVE_MAX_BYTES


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> float | None:
    """Poll ``predicate`` until it is true; the seconds it took, or None after ``timeout`` seconds."""
    began = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            return None
        time.sleep(interval)


def source_topic(tag: str) -> str:
    """The run's source topic, which every pipeline of the run reads."""
    return f"chaos.{tag}.events"


def spec_for(mode: str, tag: str, trigger_ms: int = 0) -> dict[str, Any]:
    """The demo's GitHub-events spec (four destinations, the archive with a 256 KiB record limit) on this
    run's topics, reading from earliest, with the delivery block (``DELIVERY``) of pipeline key ``mode``'s
    delivery mode; ``trigger_ms`` (ms, 0: the block's 2 s) sets a time commit strategy's interval."""
    spec = copy.deepcopy(demo.SPEC)
    prefix = f"chaos.{tag}.{short_of(mode)}"
    spec["source"] = {"topics": [source_topic(tag)], "starting_offsets": "earliest"}
    for dest in spec["destinations"]:
        dest["topic"] = f"{prefix}.{dest['name']}"
    spec["dlq"] = {"topic": f"{prefix}.dlq"}
    spec["delivery"] = copy.deepcopy(DELIVERY[delivery_of(mode)])
    if trigger_ms and spec["delivery"]["commit_strategy"]["kind"] == "time":
        spec["delivery"]["commit_strategy"]["interval_ms"] = trigger_ms
    return spec


# ------------------------------------------------------------------------------------------------ producer


class Feeder:
    """Produces the demo's endless stream (real events with fresh ids, every ``corrupt_every``-th corrupted)
    into ``topic`` at ``rate`` records/s until ``stop()``. The producer is idempotent with a 10-minute
    delivery timeout, so a broker outage delays records instead of dropping them; ``delivered`` and
    ``failed`` count the broker's answers (a failure is the producer's loss, reported, not the pipeline's)."""

    def __init__(self, bootstrap: str, topic: str, *, rate: float, corrupt_every: int) -> None:
        self.topic = topic
        self.rate = rate
        self.corrupt_every = corrupt_every
        self.producer = Producer(
            producer_config(
                KafkaConnection(bootstrap),
                extra={
                    "linger.ms": 20,
                    "message.max.bytes": 2_000_000,
                    "message.timeout.ms": 600_000,
                    # The broker fault makes every connection attempt fail for a while: errors are expected.
                    "log_level": 2,
                },
            )
        )
        self.kinds: Counter[str] = Counter()
        self.delivered = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _report(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1

    def _run(self) -> None:
        started = time.monotonic()
        events = demo.load_events()
        for n, (key, value, kind) in enumerate(demo.stream(events, corrupt_every=self.corrupt_every), 1):
            if self._stop.is_set():
                break
            while True:
                try:
                    self.producer.produce(self.topic, key=key, value=value, on_delivery=self._report)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.producer.poll(0)
            self.kinds[kind] += 1
            ahead = n / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self._stop.wait(ahead)

    def stop(self, timeout: float = 120.0) -> int:
        """Stop producing and wait for every acknowledgement; returns the records still unacknowledged."""
        self._stop.set()
        self._thread.join(timeout=10)
        return int(self.producer.flush(timeout))


# ------------------------------------------------------------------------------------------------ pipelines


@dataclass
class PipelineHandle:
    """One pipeline of the run: its name, delivery mode, validated spec and how to look at its driver."""

    mode: str
    name: str
    pk: int
    spec: PipelineSpec
    bootstrap: str
    redis_url: str

    def refresh(self) -> Pipeline:
        return Pipeline.objects.get(pk=self.pk)

    def active_run(self) -> PipelineRun | None:
        return (
            PipelineRun.objects.filter(
                pipeline_id=self.pk,
                state__in=(PipelineState.STARTING, PipelineState.RUNNING, PipelineState.STOPPING),
            )
            .order_by("-started_at")
            .first()
        )

    def last_run(self) -> PipelineRun | None:
        return PipelineRun.objects.filter(pipeline_id=self.pk).order_by("-started_at", "-id").first()

    def heartbeat(self) -> dict[str, Any] | None:
        """The driver's latest heartbeat (run id, pid, phase, last batch), or None (none, or no Redis)."""
        try:
            client = redis_client.connect(self.redis_url, timeout=2)
            raw = cast("bytes | None", client.get(c.heartbeat_key(self.name)))
        except redis.RedisError:
            return None
        return dict(json.loads(raw)) if raw else None

    def processing(self) -> bool:
        """Whether the active run has finished a batch (its heartbeat says "running")."""
        run = self.active_run()
        beat = self.heartbeat()
        return bool(
            run is not None
            and beat is not None
            and beat.get("run_id") == str(run.run_id)
            and beat.get("phase") == "running"
        )

    def ended(self) -> bool:
        """Whether the pipeline has no driver and none is coming: STOPPED, HALTED or FAILED."""
        return self.refresh().state in (PipelineState.STOPPED, PipelineState.HALTED, PipelineState.FAILED)

    def committed(self) -> dict[int, int]:
        """{source partition: committed offset} of the pipeline's consumer group (-1001: none yet)."""
        topic = self.spec.source.topics[0]

        def read() -> dict[int, int]:
            consumer = Consumer(
                consumer_config(KafkaConnection(self.bootstrap), group_id=self.spec.source.consumer_group)
            )
            try:
                metadata = consumer.list_topics(topic, timeout=10).topics[topic]
                parts = [TopicPartition(topic, p) for p in metadata.partitions]
                return {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
            finally:
                consumer.close()

        # Right after a broker restart the group coordinator is still loading: NOT_COORDINATOR for a while.
        return retrying(read)

    def caught_up(self, ends: dict[int, int]) -> bool:
        """Whether every source partition is committed up to ``ends`` (an empty partition counts)."""
        try:
            committed = self.committed()
        except Exception:
            return False  # the broker is away: not caught up yet
        return all(end == 0 or committed.get(p, -1) >= end for p, end in ends.items())


def setup_team() -> User:
    """The chaos team and its admin (pipelines, bulk replays to another topic need the admin role)."""
    team, _ = Team.objects.get_or_create(name=TEAM, defaults={"description": "fault-injection runs"})
    user, _ = User.objects.get_or_create(username="chaos-admin")
    Membership.objects.update_or_create(user=user, team=team, defaults={"role": Role.ADMIN})
    return user


def stop_leftovers(actor: User, *, every_team: bool = False) -> list[str]:
    """Ask every pipeline of an earlier chaos run that still wants to run to stop (a run interrupted hard
    leaves them RUNNING; their drivers would compete for the cores); with ``every_team``, every pipeline of
    the stack: on a profile with its own Spark master, any other running pipeline holds executor cores of
    the standalone cluster, and the run's pipelines would wait for cores ("Initial job has not accepted any
    resources") instead of starting. Returns the names asked to stop."""
    names = []
    wanted = Pipeline.objects.filter(desired_state=DesiredState.RUNNING)
    if not every_team:
        wanted = wanted.filter(team__name=TEAM)
    for pipeline in wanted:
        request_stop(actor=actor, pipeline=pipeline, reason="chaos: leftover of an earlier run")
        names.append(pipeline.name)
    return names


def create_topics(bootstrap: str, tag: str, modes: Iterable[str]) -> str:
    """The run's source topic (2 partitions) and each pipeline's archive topic (``create_archive_topics``);
    returns the source topic's name."""
    source = source_topic(tag)
    _create(bootstrap, [NewTopic(source, 2, 1), *_archive_topics(tag, modes)])
    return source


def create_archive_topics(bootstrap: str, tag: str, modes: Iterable[str]) -> None:
    """Each pipeline's archive topic with its smaller record limit (``ARCHIVE_MAX_BYTES``), for a pipeline
    that joins the run later; the other destination and DLQ topics are created by the pipeline start, as
    for any pipeline."""
    _create(bootstrap, _archive_topics(tag, modes))


def _archive_topics(tag: str, modes: Iterable[str]) -> list[NewTopic]:
    return [
        NewTopic(
            f"chaos.{tag}.{short_of(mode)}.archive",
            2,
            1,
            config={"max.message.bytes": str(ARCHIVE_MAX_BYTES)},
        )
        for mode in modes
    ]


def delete_run_topics(bootstrap: str, tag: str) -> list[str]:
    """Delete every topic of run ``tag`` (``chaos.<tag>.*``: the source, each pipeline's destinations and DLQ);
    returns their names. A passed run's records are not needed again, and at 100 records/s into six pipelines
    a run writes several GB that the broker's 24-hour retention would otherwise keep (56 GB after a day of
    runs, session 24). Raises ``KafkaException`` when the broker refuses."""
    admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
    prefix = f"chaos.{tag}."
    names = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix))
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(timeout=60)
    return names


def _create(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)


def start_pipelines(
    actor: User, tag: str, modes: Iterable[str], bootstrap: str, redis_url: str, *, trigger_ms: int = 0
) -> dict[str, PipelineHandle]:
    """Create one pipeline per key of ``modes`` (a delivery mode, or a copy of one: ``pipeline_keys``) and ask
    supervision to start each (its runner launches the driver); ``trigger_ms`` as in ``spec_for``."""
    team = Team.objects.get(name=TEAM)
    handles = {}
    for mode in modes:
        name = f"chaos-{short_of(mode)}-{tag}"
        raw = spec_for(mode, tag, trigger_ms)
        pipeline = create_pipeline(
            actor=actor, name=name, team=team, spec=raw, description=f"chaos run {tag}"
        )
        request_start(actor=actor, pipeline=pipeline, reason="chaos run")
        handles[mode] = PipelineHandle(
            mode, name, pipeline.pk, parse_spec(raw, pipeline_name=name), bootstrap, redis_url
        )
    return handles


def stop_pipelines(
    actor: User, handles: Iterable[PipelineHandle], reason: str, timeout: float = 150.0
) -> None:
    """Ask every pipeline of ``handles`` to stop, then wait up to ``timeout`` seconds for each to end
    (STOPPED, or HALTED/FAILED when it ended otherwise): its driver is gone once this returns."""
    stopping = list(handles)
    for handle in stopping:
        request_stop(actor=actor, pipeline=handle.refresh(), reason=reason)
    for handle in stopping:
        wait_until(handle.ended, timeout, 1.0)


def new_tag() -> str:
    return time.strftime("%m%d%H%M") + uuid.uuid4().hex[:4]


# ------------------------------------------------------------------------------------------------ accountant


class SourceLog:
    """The shared source topic, read in slices as the run goes (records are kept only until every
    accountant has turned them into expectations)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.next: dict[int, int] = {}
        self.count = 0

    def ends(self) -> dict[int, int]:
        return accounting.end_offsets(self.bootstrap, self.topic)

    def read_to(self, ends: dict[int, int]) -> list[Record]:
        """The records from where the last read stopped up to ``ends`` (exclusive)."""
        records = accounting.consume_all(self.bootstrap, self.topic, ends=ends, starts=self.next, timeout=120)
        self.next = {p: max(self.next.get(p, 0), e) for p, e in ends.items()}
        self.count += len(records)
        return records

    def read_so_far(self) -> list[Record]:
        """Every record the earlier reads covered, from the beginning again (for a pipeline that joins the
        run later and reads from earliest: its accountant must expect all of them)."""
        return accounting.consume_all(self.bootstrap, self.topic, ends=self.next, timeout=300)


@dataclass
class Accountant:
    """The accounting identity of one pipeline, kept up to date in slices: expectations for every source
    record read so far, and every output read so far (destination topics and the DLQ; ``read_committed``
    for effectively_once, as its downstream consumers read)."""

    handle: PipelineHandle
    limits: dict[str, int]
    expected: dict[Coordinates, dict[str, Expected]] = field(default_factory=dict)
    observed: Observed = field(default_factory=Observed)
    output_next: dict[str, dict[int, int]] = field(default_factory=dict)
    dlq_records: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def read_committed(self) -> bool:
        return delivery_of(self.handle.mode) == "effectively_once"

    def add_source(self, records: list[Record], memo: accounting.OutcomeMemo | None = None) -> None:
        """Expect ``records``' fates (``accounting.expected_fates``; ``memo`` shared with the other
        accountants given the same records)."""
        self.expected.update(
            accounting.expected_fates(
                self.handle.spec, records, self.limits, replay_key=settings.REPLAY_KEY.encode(), memo=memo
            )
        )

    def _read_new(self, topic: str) -> list[Record]:
        bootstrap = self.handle.bootstrap
        ends = accounting.end_offsets(bootstrap, topic)
        starts = self.output_next.get(topic, {})
        records = accounting.consume_all(
            bootstrap, topic, read_committed=self.read_committed, ends=ends, starts=starts, timeout=180
        )
        self.output_next[topic] = ends
        return records

    def read_outputs(self) -> None:
        """Read what every output topic gained since the last call."""
        spec = self.handle.spec
        destinations = {d.name: self._read_new(d.topic) for d in spec.destinations}
        dlq = self._read_new(spec.dlq.topic)
        self.dlq_records.extend((r.topic, r.partition, r.offset) for r in dlq)
        accounting.observe(spec, destinations, dlq, into=self.observed)

    def tallies(self, *, compare_values: bool = True) -> dict[str, Tally]:
        """{destination: Tally} over every source record so far; ``compare_values=False`` counts fates only
        (no JSON comparison of produced values: the run-long totals need counts, and comparing every value
        again at each check made a long run's checks grow with its length)."""
        return accounting.tally(self.expected, self.observed, compare_values=compare_values)


def accountant_for(handle: PipelineHandle) -> Accountant:
    """An empty accountant for ``handle``, with the record limits of its destination and DLQ topics."""
    topics = [d.topic for d in handle.spec.destinations] + [handle.spec.dlq.topic]
    return Accountant(handle, topic_limits(handle.bootstrap, topics))


def total(tallies: dict[str, Tally]) -> Tally:
    """The per-destination tallies summed into one."""
    summed = Tally()
    for t in tallies.values():
        summed.add(t)
    return summed


def topic_limits(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """``max.message.bytes`` of each topic, in bytes (the writer's size rule needs them)."""
    admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    return {res.name: int(f.result(timeout=30)["max.message.bytes"].value) for res, f in futures.items()}
