"""The demo (``make demo``): people, a team, a GitHub-events pipeline with a runbook, and a feeder that
replays the real events from ``demo/data`` into the source topic at a steady rate, each with a fresh id, with
a small share of corrupted records so the DLQ console has real work.

Everything goes through the same services the UI and the API use (``create_pipeline``,
``supervision.request_start``/``request_stop``, ``dlq.services.save_runbook``).
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from rest_framework.authtoken.models import Token

from access.models import Membership, Role, Team
from demo import avro_topic
from dlq.models import FailureGroup, Runbook
from dlq.services import save_runbook
from notifications import channels
from notifications.models import Channel
from pipelines.models import Pipeline
from pipelines.services import create_pipeline, revise_pipeline
from streamforge_core.kafka import KafkaConnection, admin_config, producer_config

EVENTS_FILE = Path(settings.BASE_DIR) / "demo" / "data" / "github-events-2021-07-21.ndjson"
PIPELINE = "github-demo"
TEAM = "operators"
SOURCE = "github.events"
#: The archive destination's topic takes at most this many bytes per record, so an oversized event is
#: dead-lettered as RecordTooLarge there while the other destinations take their small projections of it.
ARCHIVE_MAX_BYTES = 262_144

SPEC: dict[str, Any] = {
    "source": {"topics": [SOURCE], "starting_offsets": "earliest"},
    "destinations": [
        {
            "name": "pushes",
            "topic": "github.pushes",
            "filter": "/type,==,PushEvent",
            "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:commits=/payload/size",
            "key_transform": "/repo",
        },
        {
            "name": "pull-requests",
            "topic": "github.pull_requests",
            "filter": "/type,==,PullRequestEvent",
            "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:action=/payload/action:number=/payload/number",
        },
        {
            "name": "push-commit-totals",
            "topic": "github.push_commit_totals",
            "filter": "/type,==,PushEvent",
            "transform": "ARITHMETIC:ADD,/payload/size,/payload/distinct_size",
        },
        {"name": "archive", "topic": "github.archive"},
    ],
    "dlq": {"topic": "github.events.dlq"},
    # Bounded micro-batches: after a pause the first batch would otherwise take the whole backlog at once.
    "delivery": {
        "mode": "at_least_once",
        "commit_strategy": {"kind": "time", "interval_ms": 1000, "max_records": 4000},
    },
}

AVRO_PIPELINE = "github-avro"
#: The Avro pipeline (``avro_topic``): its source decoded through the registry, a projection of pushes
#: written as Avro with its subject's schema, and every record archived as it came (the original bytes).
#: A null where the projection needs a value is an error, so a push without its commit count is a dead
#: letter to fix in the console.
AVRO_DESCRIPTION = (
    "The same GitHub events as Avro through the schema registry: two writer versions, some bad framing."
)
AVRO_SPEC: dict[str, Any] = {
    "source": {"topics": [avro_topic.SOURCE], "format": "avro", "starting_offsets": "earliest"},
    "destinations": [
        {
            "name": "pushes",
            "topic": avro_topic.PUSHES_TOPIC,
            "filter": "/type,==,PushEvent",
            "transform": "CONSTRUCT:actor=/actor/login:repo=/repo/name:commits=/payload/size",
            "format": "avro",
        },
        {"name": "archive", "topic": "github.avro.archive"},
    ],
    "error_handling": {"null_value_behavior": "error"},
    "dlq": {"topic": "github.events.avro.dlq"},
    "delivery": SPEC["delivery"],
}

RUNBOOK = """\
**Push event without a commit count** (`JsonPathNotFound` at `/payload/size`)

The `pushes` destination builds `commits` from `payload.size`. Some producers drop the field for force pushes;
`payload.distinct_size` (the distinct commits) is still there.

1. **Bulk fix this group** with the JSON Patch
   `[{"op": "copy", "from": "/payload/distinct_size", "path": "/payload/size"}]`.
   Preview it: each sampled message must say *would pass*. Apply it (above the approval threshold an
   approver agrees first). A message without `distinct_size` is left unchanged and counted with its reason.
2. **Bulk replay** this group. The fixed records arrive on `github.pushes` within a few seconds.
3. Only a few? Fix one on its page (add `"size"` inside `payload`), check it says *would pass*, replay it.
4. The producer keeps sending them? **Bulk skip** the rest with the producer's name as the reason, and tell
   the producing team (#github-ingest).
"""


@dataclass(frozen=True)
class DemoPeople:
    """Who the demo created and their credentials (printed once per run; the passwords are new each run)."""

    admin: User
    admin_password: str
    approver: User
    approver_password: str
    token: str


def setup_people() -> DemoPeople:
    """The ``operators`` team with an admin (``admin``) and a second person who approves (``approver``).
    Passwords are generated anew on every run; an API token is kept for the admin."""
    team, _ = Team.objects.get_or_create(name=TEAM, defaults={"description": "on-call data engineers"})
    passwords = {}
    users = {}
    for username, role in (("admin", Role.ADMIN), ("approver", Role.APPROVER)):
        user, _ = User.objects.get_or_create(username=username)
        passwords[username] = secrets.token_urlsafe(12)
        user.set_password(passwords[username])
        user.save()
        Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
        users[username] = user
    token, _ = Token.objects.get_or_create(user=users["admin"])
    return DemoPeople(users["admin"], passwords["admin"], users["approver"], passwords["approver"], token.key)


#: The demo's notification channels: a signed webhook and an e-mail, both to devstack.sinks.
DEMO_CHANNELS = ("demo-webhook", "demo-mail")
#: The address the demo's e-mail channel writes to (the SMTP sink keeps every mail, whatever the address).
DEMO_RECIPIENT = "oncall@example.com"


def setup_notifications(people: DemoPeople, sinks_url: str) -> list[str]:
    """The team's notification channels to the local sinks (``devstack.sinks``, on loopback; the stack lets
    the server post there with ``STREAMFORGE_NOTIFY_ALLOW_PRIVATE``): a webhook to ``sinks_url`` + ``/hook``
    and an e-mail to ``DEMO_RECIPIENT`` (the processes' mail goes to the SMTP sink), every subscribable
    event; kept from an earlier run when they exist (a webhook to another URL is replaced: deleted and added
    again, both audited). Returns the channels' names."""
    team = Team.objects.get(name=TEAM)
    events = list(channels.SUBSCRIBABLE)
    hook = f"{sinks_url.rstrip('/')}/hook"
    existing = {c.name: c for c in Channel.objects.filter(team=team, name__in=DEMO_CHANNELS)}
    if "demo-webhook" in existing and existing["demo-webhook"].url != hook:
        channels.delete_channel(actor=people.admin, channel=existing.pop("demo-webhook"))
    if "demo-webhook" not in existing:
        channels.create_channel(
            actor=people.admin, team=team, name="demo-webhook", kind="webhook", events=events, url=hook
        )
    if "demo-mail" not in existing:
        channels.create_channel(
            actor=people.admin,
            team=team,
            name="demo-mail",
            kind="email",
            events=events,
            recipients=[DEMO_RECIPIENT],
        )
    return list(DEMO_CHANNELS)


def ensure_topics(bootstrap: str) -> None:
    """Create the two source topics (JSON and Avro) and the archive topic with its smaller record limit (the
    other destination and DLQ topics are created by the pipeline start, as for any pipeline)."""
    admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = [
        NewTopic(SOURCE, 2, 1),
        NewTopic(avro_topic.SOURCE, 2, 1),
        NewTopic("github.archive", 2, 1, config={"max.message.bytes": str(ARCHIVE_MAX_BYTES)}),
    ]
    missing = [t for t in wanted if t.topic not in existing]
    if missing:
        for future in admin.create_topics(missing).values():
            future.result(timeout=30)


@transaction.atomic
def setup_pipeline(
    people: DemoPeople, name: str = PIPELINE, spec: dict[str, Any] | None = None, description: str = ""
) -> Pipeline:
    """The demo pipeline ``name`` (created, or revised to ``spec``; default: the JSON pipeline's)."""
    spec = SPEC if spec is None else spec
    team = Team.objects.get(name=TEAM)
    pipeline = Pipeline.objects.filter(name=name).first()
    if pipeline is None:
        return create_pipeline(
            actor=people.admin,
            name=name,
            team=team,
            spec=spec,
            description=description
            or "Public GitHub events: pushes and pull requests projected, everything archived.",
        )
    revise_pipeline(actor=people.admin, pipeline=pipeline, spec=spec, comment="demo spec")
    pipeline.refresh_from_db()
    return pipeline


def attach_runbook(people: DemoPeople, pipeline: Pipeline) -> Runbook | None:
    """Attach the runbook to the pipeline's JsonPathNotFound failure group once it exists (it appears with
    the first such dead letter). Returns it, or None when the group is not there yet."""
    group = (
        FailureGroup.objects.filter(pipeline=pipeline, error_type="JsonPathNotFound")
        .order_by("-count")
        .first()
    )
    if group is None:
        return None
    existing = Runbook.objects.filter(group=group).first()
    if existing is not None:
        return existing
    return save_runbook(
        actor=people.admin,
        team=pipeline.team,
        title="Push event without a commit count",
        body=RUNBOOK,
        actions=["bulk_fix", "bulk_replay", "fix", "replay", "skip", "bulk_skip"],
        group=group,
    )


# ------------------------------------------------------------------------------------------------ feeder


def load_events(path: Path = EVENTS_FILE) -> list[dict[str, Any]]:
    """The real GitHub events (one JSON object per line)."""
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


#: Corruptions, in rotation. Each turns one real event into a record the pipeline must dead-letter:
#: name -> (expected error type, function from event dict to value bytes).
def _truncated(event: dict[str, Any]) -> bytes:
    text = json.dumps(event).encode()
    return text[: len(text) // 2]


def _invalid_utf8(event: dict[str, Any]) -> bytes:
    return b"\xff\xfe" + json.dumps(event).encode()


def _push_without_size(event: dict[str, Any]) -> bytes:
    changed = copy.deepcopy(event)
    changed["type"] = "PushEvent"
    changed.setdefault("payload", {}).pop("size", None)
    changed["payload"].setdefault("distinct_size", 1)
    changed["payload"].setdefault("commits", [])
    return json.dumps(changed).encode()


def _size_not_a_number(event: dict[str, Any]) -> bytes:
    changed = copy.deepcopy(event)
    changed["type"] = "PushEvent"
    changed.setdefault("payload", {})["size"] = "several"
    changed["payload"].setdefault("distinct_size", 1)
    return json.dumps(changed).encode()


def _oversized(event: dict[str, Any]) -> bytes:
    changed = copy.deepcopy(event)
    changed["padding"] = "x" * (ARCHIVE_MAX_BYTES + 40_000)
    return json.dumps(changed).encode()


CORRUPTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], bytes]]] = {
    "push_without_size": ("JsonPathNotFound", _push_without_size),
    "truncated_json": ("MessageDeserialization", _truncated),
    "push_without_size_2": ("JsonPathNotFound", _push_without_size),
    "invalid_utf8": ("MessageDeserialization", _invalid_utf8),
    "size_not_a_number": ("TransformEvaluation", _size_not_a_number),
    "oversized": ("RecordTooLarge", _oversized),
}


def stream(events: list[dict[str, Any]], *, corrupt_every: int) -> Iterator[tuple[bytes, bytes, str]]:
    """Endless (key, value, kind) records: the events in order, again and again, each with a fresh ``id``
    (``<original>-<cycle>``) and ``created_at`` left as it was; every ``corrupt_every``-th record is
    corrupted in the next way of ``CORRUPTIONS`` (``kind`` names it, ``ok`` for intact records)."""
    kinds = list(CORRUPTIONS)
    n = 0
    cycle = 0
    while True:
        cycle += 1
        for event in events:
            n += 1
            fresh = {**event, "id": f"{event.get('id')}-{cycle}"}
            key = str((event.get("repo") or {}).get("name", "")).encode()
            if corrupt_every and n % corrupt_every == 0:
                kind = kinds[(n // corrupt_every) % len(kinds)]
                yield key, CORRUPTIONS[kind][1](fresh), kind
            else:
                yield key, json.dumps(fresh).encode(), "ok"


class Feeder:
    """Produces (key, value, kind) records to ``topic`` at ``rate`` records/s until ``stop`` is set;
    ``counts`` per kind."""

    def __init__(self, bootstrap: str, *, rate: float, topic: str = SOURCE) -> None:
        self.producer = Producer(
            producer_config(
                KafkaConnection(bootstrap),
                idempotent=False,
                extra={"linger.ms": 20, "message.max.bytes": 2_000_000, "acks": "all"},
            )
        )
        self.rate = rate
        self.topic = topic
        self.stop = threading.Event()
        self.counts: Counter[str] = Counter()

    def run(self, records: Iterator[tuple[bytes, bytes, str]]) -> None:
        """Produce ``records`` until stopped, pacing to the rate; flushes before returning."""
        started = time.monotonic()
        for produced, (key, value, kind) in enumerate(records, 1):
            if self.stop.is_set():
                break
            while True:
                try:
                    self.producer.produce(self.topic, key=key, value=value)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.producer.poll(0)
            self.counts[kind] += 1
            ahead = produced / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self.stop.wait(ahead)
        self.producer.flush(30)
