"""Test messages: an operator produces a record to one of a pipeline's source topics, tagged with the
``x-streamforge-test`` header, and follows what became of it at every destination: produced where (the
destination record carrying its lineage header), dead-lettered with which error (the dead letter the DLQ
ingester stored with its source coordinates), or filtered (the DSL dry run says the destination's filter
drops it, and the pipeline's consumer group has committed past it with nothing written).

``record_outcomes`` works for any source record, not only test messages: the topic browser links a source
record to it ("where did it go?").

Headers a producer can write decide nothing: a test message may not carry ``x-streamforge-*`` headers (the
console's own, which the ingester and the driver read), and who sent one is the console's own record of it
(``ProducedTestMessage``), never the ``x-streamforge-test`` header, which any producer to the topic can
write. The header is still added, for people and tools downstream, as information.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import KafkaException
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from access import audit
from access.models import Role
from access.permissions import require_role
from dlq import topic_browser
from dlq.headers import STREAMFORGE_PREFIX
from dlq.models import DeadLetter, ProducedTestMessage
from dlq.services import InvalidRequest, RegistryUnavailable, ReplayFailed, erasure
from dlq.services.kafka_io import OutgoingRecord, produce
from pipelines.clusters import connection_for
from pipelines.dsl import Message
from pipelines.formats import RegistryUnreachable, SchemaNotFound, formats_for, source_record_value
from pipelines.lag import consumer_group_lag
from pipelines.models import Pipeline
from pipelines.services import dry_run
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.codec_errors import SchemaValidation
from streamforge_core.kafka import Record

#: How far before the source record's timestamp a destination is searched (ms): a destination timestamp
#: rule may move a produced record's timestamp somewhat earlier than its source's.
SEARCH_MARGIN_MS = 60_000

OutcomeKind = Literal["produced", "dead_lettered", "filtered", "not_in_replay", "pending"]


@dataclass(frozen=True)
class ProducedTest:
    """Where a test message landed on the source topic."""

    topic: str
    partition: int
    offset: int


def produce_test_message(
    *,
    actor: User,
    pipeline: Pipeline,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
    reason: str,
    subject: str = "",
    schema_version: int | None = None,
) -> ProducedTest:
    """Produce a test record to ``topic``, one of ``pipeline``'s source topics, with ``headers`` plus
    ``x-streamforge-test: <actor's username>``, and record where it landed and who sent it
    (``ProducedTestMessage``) with one audit event (``topic.test_message``: topic, partition, offset; never
    the payload), in one transaction. Needs the operator role in the pipeline's team.

    Raises PermissionDenied without that role, InvalidRequest (field ``reason``, ``topic`` or ``headers``)
    for an empty reason, a topic that is not a source topic of the pipeline, or a header named
    ``x-streamforge-*`` in any case (the console's own: a replay id, a test sender, a pipeline, ...; see
    ``../shared/DESIGN.md`` "Contracts"), ReplayFailed (503) when the broker does not take the record.
    For a registry-format source the value is JSON, encoded with the latest schema of ``subject`` (default
    ``<topic>-value``) or its ``schema_version`` (``pipelines.formats.source_record_value``):
    InvalidRequest on ``value`` when it does not fit, naming the field, and on ``subject`` or
    ``schema_version`` when the registry does not have it; RegistryUnavailable (503) without a usable
    registry.
    """
    require_role(actor, pipeline.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "say why this test message is produced")
    reserved = sorted({name for name, _value in headers or [] if name.lower().startswith(STREAMFORGE_PREFIX)})
    if reserved:
        raise InvalidRequest(
            "headers",
            f"{', '.join(reserved)}: headers named {STREAMFORGE_PREFIX}* are the console's own; "
            "a test message may not carry them",
        )
    spec = topic_browser.spec_of(pipeline)
    if topic not in spec.source.topics:
        raise InvalidRequest(
            "topic", f"not a source topic of {pipeline.name}: {', '.join(spec.source.topics)}"
        )
    if value is not None:
        try:  # a registry-format source: the JSON typed is encoded with the topic's subject
            value = source_record_value(
                spec, pipeline.cluster, topic, value, subject=subject, version=schema_version
            )
        except SchemaValidation as exc:
            raise InvalidRequest(
                "value", f"does not fit the schema of {subject or topic + '-value'}: {exc}"
            ) from None
        except SchemaNotFound as exc:
            raise InvalidRequest(exc.field, str(exc)) from None
        except RegistryUnreachable as exc:
            raise RegistryUnavailable(str(exc)) from None
    out = OutgoingRecord(
        topic=topic,
        key=key,
        value=value,
        headers=[*(headers or []), (c.H_TEST, actor.get_username().encode())],
        cluster_id=pipeline.cluster_id,
    )
    produce([out])
    if out.error or out.partition is None or out.offset is None:
        raise ReplayFailed(f"the broker did not take the test message: {out.error or 'no answer'}")
    with transaction.atomic():
        ProducedTestMessage.objects.create(
            pipeline=pipeline,
            cluster_id=pipeline.cluster_id,
            topic=topic,
            partition=out.partition,
            offset=out.offset,
            produced_by=actor,
        )
        audit.record(
            actor=actor,
            action="topic.test_message",
            target_type="pipeline",
            target_id=pipeline.name,
            reason=reason.strip(),
            details={"topic": topic, "partition": out.partition, "offset": out.offset},
        )
    return ProducedTest(topic, out.partition, out.offset)


@dataclass(frozen=True)
class DestinationOutcome:
    """What became of a source record at one destination: ``outcome`` (``produced``, ``dead_lettered``,
    ``filtered``, ``not_in_replay`` for a console replay destined for other destinations only, which the
    driver skips here, or ``pending`` while nothing is known yet), ``expected`` (what the dry run of the current
    spec says: ``produced``, ``filtered`` or ``dead_lettered``; empty when the record could not be read),
    where it was produced (``partition``, ``offset`` on ``topic``), or the dead letter (``dead_letter_id``,
    ``error_type``, ``error_message``)."""

    destination: str
    topic: str
    outcome: OutcomeKind
    expected: str = ""
    expected_error: str = ""
    partition: int | None = None
    offset: int | None = None
    dead_letter_id: int | None = None
    error_type: str = ""
    error_message: str = ""


@dataclass(frozen=True)
class RecordOutcomes:
    """A source record's outcomes, one per destination in spec order; ``done`` once none is pending;
    ``found`` is False when the source record cannot be read (then only dead letters are known);
    ``erased`` when an approved delete erased its content (then it is not read or evaluated either);
    ``test_by`` who sent it as a test message through the console (empty: it is none);
    ``committed`` whether the pipeline's consumer group has committed past the record (then a pending
    destination is not waiting for the pipeline to read it); ``replay_for`` the destinations a console
    replay is for (empty: every destination); ``error`` non-empty when the cluster did not answer."""

    topic: str
    partition: int
    offset: int
    found: bool
    committed: bool
    done: bool
    test_by: str
    destinations: list[DestinationOutcome]
    error: str = ""
    erased: bool = False
    replay_for: tuple[str, ...] = ()


def resolve_outcome(
    *, expected: str, dead_lettered: bool, produced: bool, committed: bool, in_replay: bool
) -> OutcomeKind:
    """One destination's outcome from what is known of it (pure): a dead letter stored for it wins; else
    ``not_in_replay`` when the record is a console replay for other destinations only (the driver writes it
    nowhere here, ``pipelines.spark.writer.replay_scope``); else ``produced`` when its record was found;
    else ``filtered`` when the dry run says the filter drops it (``expected``) and the pipeline's group has
    committed past it; else ``pending``."""
    if dead_lettered:
        return "dead_lettered"
    if not in_replay:
        return "not_in_replay"
    if produced:
        return "produced"
    if expected == "filtered" and committed:
        return "filtered"
    return "pending"


def replay_destinations(record: Record, *, destinations: list[str], dlq_topic: str) -> frozenset[str] | None:
    """The destinations a source ``record`` is for when it is a console replay (its replay headers carry
    the console's valid signature, ``streamforge_core.replay_signing``): the named ones of ``destinations``,
    or none at all when it replays another DLQ topic than ``dlq_topic``. None: every destination (not a
    replay, a replay for all, unsigned or forged headers, or names none of which exist any more). The rules
    of ``pipelines.spark.writer.replay_scope``, which the driver applies (the last header of a name counts).
    """
    found: dict[str, str] = {}
    for name, value in record.headers:
        if name in (c.H_REPLAY_OF, c.H_REPLAY_DESTINATIONS, c.H_REPLAY_SIGNATURE):
            found[name] = (value or b"").decode("utf-8", "replace")
    replay_of, named = found.get(c.H_REPLAY_OF), found.get(c.H_REPLAY_DESTINATIONS)
    if replay_of is None and named is None:
        return None
    key = settings.REPLAY_KEY.encode()
    if not replay_signing.verify(
        key, replay_of or "", named or "", record.value, found.get(c.H_REPLAY_SIGNATURE)
    ):
        return None
    if replay_of is not None and replay_of.rsplit("/", 2)[0] != dlq_topic:
        return frozenset()
    if named is None:
        return None
    only = frozenset(n.strip() for n in named.split(",")) & set(destinations)
    return only or None


def record_outcomes(pipeline: Pipeline, *, topic: str, partition: int, offset: int) -> RecordOutcomes:
    """What became of the record at ``topic``/``partition``/``offset`` (a source topic of ``pipeline``) at
    each destination, by ``resolve_outcome``: a dead letter stored for it (``DeadLetter.source_*``), a
    console replay for other destinations (``replay_destinations``), a destination record carrying its
    lineage header (``topic_browser.find_by_lineage``), the dry run and the group's committed offset. Raises TopicNotFound for a topic that is not
    a source topic of the pipeline; a cluster that does not answer is reported in ``error``."""
    spec = topic_browser.spec_of(pipeline)
    if topic not in spec.source.topics:
        raise topic_browser.TopicNotFound(topic)
    letters = {
        dl.destination: dl
        for dl in DeadLetter.objects.filter(
            pipeline=pipeline, source_topic=topic, source_partition=partition, source_offset=offset
        ).order_by("id")
    }
    lineage = f"{topic}/{partition}/{offset}"
    error = ""
    expected: list[tuple[str, str]] = [("", "")] * len(spec.destinations)
    record = None
    committed = False
    erased = bool(
        erasure.erased_coordinates(cluster_id=pipeline.cluster_id, coordinates=[(topic, partition, offset)])
    )
    try:
        if not erased:
            record = topic_browser.read_record(pipeline, topic, partition, offset)
        lags = consumer_group_lag(
            group=spec.source.consumer_group,
            topics=[topic],
            kafka=connection_for(pipeline.cluster),
            timeout=5,
        )
        committed = any(
            lag.partition == partition and lag.committed is not None and lag.committed > offset
            for lag in lags
        )
    except (KafkaException, ValueError) as exc:
        error = f"the cluster did not answer: {exc}"
    if record is not None:
        message = Message(
            value=record.value,
            key=record.key,
            headers=tuple(record.headers),
            timestamp_ms=record.timestamp_ms,
        )
        try:
            checked = dry_run(spec=spec, messages=[message], formats=formats_for(spec, pipeline.cluster))
            expected = [(r.outcome, r.error_message or "") for r in checked[0]]
        except RegistryUnreachable as exc:
            error = f"the schema registry cannot answer: {exc}"
    scope = (
        replay_destinations(
            record, destinations=[d.name for d in spec.destinations], dlq_topic=spec.dlq.topic
        )
        if record is not None
        else None
    )
    outcomes: list[DestinationOutcome] = []
    for dest, (kind, why) in zip(spec.destinations, expected, strict=True):
        letter = letters.get(dest.name) or letters.get(c.ALL_DESTINATIONS)
        base = DestinationOutcome(dest.name, dest.topic, "pending", expected=kind, expected_error=why)
        in_replay = scope is None or dest.name in scope
        landed = None
        if letter is None and in_replay and record is not None and not error and kind != "filtered":
            since = (record.timestamp_ms or 0) - SEARCH_MARGIN_MS
            try:
                landed = topic_browser.find_by_lineage(pipeline, dest.topic, lineage, since_ms=since)
            except KafkaException as exc:
                error = f"the cluster did not answer: {exc}"
        outcome = resolve_outcome(
            expected=kind,
            dead_lettered=letter is not None,
            produced=landed is not None,
            committed=committed,
            in_replay=in_replay,
        )
        if letter is not None:
            outcomes.append(
                _with(base, outcome, dead_letter_id=letter.pk, error_type=letter.error_type,
                      error_message=letter.error_message)
            )  # fmt: skip
        elif landed is not None:
            outcomes.append(_with(base, outcome, partition=landed.partition, offset=landed.offset))
        else:
            outcomes.append(_with(base, outcome))
    return RecordOutcomes(
        topic=topic,
        partition=partition,
        offset=offset,
        found=record is not None,
        committed=committed,
        done=all(o.outcome != "pending" for o in outcomes),
        test_by=topic_browser.senders_of_test_messages(pipeline, topic, [(partition, offset)]).get(
            (partition, offset), ""
        ),
        destinations=outcomes,
        error=error,
        erased=erased,
        replay_for=tuple(sorted(scope)) if scope is not None else (),
    )


def _with(base: DestinationOutcome, outcome: OutcomeKind, **changes: object) -> DestinationOutcome:
    return dataclasses.replace(base, outcome=outcome, **changes)  # type: ignore[arg-type]
