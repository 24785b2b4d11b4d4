"""Pipeline operations: create a pipeline, revise its spec, delete it, dry-run a spec against sample messages.

Each mutation is one function, one transaction and one audit event; callers (API views, forms, commands)
validate input shape and call these.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from django.contrib.auth.models import User
from django.db import transaction

from access import audit
from access.models import Role, Team
from access.permissions import require_role
from pipelines import dlq_owners
from pipelines.dsl import Message, Outcome, evaluate_destination
from pipelines.formats import PipelineFormats
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline, PipelineRevision
from pipelines.spec import DestinationConfig, PipelineSpec, SpecError, parse_spec
from pipelines.supervision.status import announce_status
from streamforge_core import contract as c
from streamforge_core.codec_errors import DecodeError, SchemaValidation
from streamforge_core.kafka import KafkaConnection
from streamforge_core.text import UNENCODABLE, is_encodable, unencodable_path


def spec_text(spec: Mapping[str, Any]) -> str:
    """The spec as stable, readable JSON (sorted keys, two-space indent): what revision diffs compare."""
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def spec_diff(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], *, old_label: str, new_label: str
) -> str:
    """A unified diff between two specs' ``spec_text``; empty when they are equal."""
    before = spec_text(old).splitlines(keepends=True) if old is not None else []
    return "".join(
        difflib.unified_diff(before, spec_text(new).splitlines(keepends=True), old_label, new_label)
    )


@transaction.atomic
def create_pipeline(
    *,
    actor: User,
    name: str,
    team: Team,
    spec: object,
    description: str = "",
    cluster: KafkaCluster | None = None,
) -> Pipeline:
    """Create a pipeline with revision 1 on ``cluster`` (None: the installation's default; fixed for the
    pipeline's life). Needs the admin role (DESIGN.md: admins own pipelines).

    Raises SpecError (field errors) for an invalid spec, PermissionDenied without the role.
    """
    require_role(actor, team, Role.ADMIN)
    validated = parse_spec(spec, pipeline_name=name)
    _claim_dlq_topic(validated, pipeline=None, cluster=cluster)
    pipeline = Pipeline.objects.create(name=name, team=team, description=description, cluster=cluster)
    _add_revision(pipeline=pipeline, actor=actor, spec=validated, comment="created")
    audit.record(
        actor=actor,
        action="pipeline.create",
        target_type="pipeline",
        target_id=name,
        after=validated.to_json(),
        details={"cluster": cluster.name if cluster is not None else DEFAULT_CLUSTER_NAME},
    )
    return pipeline


@transaction.atomic
def revise_pipeline(
    *,
    actor: User,
    pipeline: Pipeline,
    spec: object,
    comment: str = "",
    description: str | None = None,
) -> PipelineRevision:
    """Store ``spec`` as the pipeline's next revision and make it current (the next start runs it).

    A spec equal to the current one still makes a revision only when the description changes nothing else:
    an unchanged spec returns the current revision. Raises SpecError or PermissionDenied.
    """
    require_role(actor, pipeline.team, Role.ADMIN)
    locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)  # serialises revision numbering
    validated = parse_spec(spec, pipeline_name=locked.name)
    _claim_dlq_topic(validated, pipeline=locked, cluster=locked.cluster)
    current = locked.current_revision
    described: dict[str, str] = {}
    if description is not None and description != locked.description:
        described = {"description_before": locked.description, "description": description}
        locked.description = description
        locked.save(update_fields=["description", "updated_at"])
    if current is not None and current.spec == validated.to_json():
        if described:  # a description-only change is a mutation too
            audit.record(
                actor=actor,
                action="pipeline.describe",
                target_type="pipeline",
                target_id=locked.name,
                reason=comment,
                before=described["description_before"],
                after=description,
                details={"revision": current.number, **described},
            )
        return current
    revision = _add_revision(pipeline=locked, actor=actor, spec=validated, comment=comment)
    audit.record(
        actor=actor,
        action="pipeline.revise",
        target_type="pipeline",
        target_id=locked.name,
        reason=comment,
        before=current.spec if current else None,
        after=revision.spec,
        details={"revision": revision.number, **described},
    )
    pipeline.refresh_from_db()
    return revision


def set_placement_labels(*, actor: User, pipeline: Pipeline, labels: Sequence[str], reason: str = "") -> bool:
    """Set the labels a runner host must all carry to run ``pipeline`` (``STREAMFORGE_RUNNER_LABELS`` on the
    host; an empty list: any host). Takes effect at the pipeline's next placement (a start, restart or
    failover), not on a running driver. Team admin only (PermissionDenied); audited ``pipeline.placement``.
    Returns whether the labels changed."""
    require_role(actor, pipeline.team, Role.ADMIN)
    wanted = sorted(set(labels))
    with transaction.atomic():
        locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
        before = list(locked.placement_labels)
        if sorted(before) == wanted:
            return False
        locked.placement_labels = wanted
        locked.save(update_fields=["placement_labels", "updated_at"])
        audit.record(
            actor=actor,
            action="pipeline.placement",
            target_type="pipeline",
            target_id=locked.name,
            reason=reason,
            before=before,
            after=wanted,
            details={"placement_labels_before": before, "placement_labels": wanted},
        )
    pipeline.placement_labels = wanted
    return True


def _claim_dlq_topic(spec: PipelineSpec, *, pipeline: Pipeline | None, cluster: KafkaCluster | None) -> None:
    """Refuse a DLQ topic another pipeline or a registered extra DLQ topic already owns on ``cluster``
    (``dlq_owners``); the lock held until the caller's transaction ends keeps a concurrent claim from taking
    it meanwhile."""
    dlq_owners.serialise_claims()
    problem = dlq_owners.dlq_topic_taken(spec.dlq.topic, cluster=cluster, pipeline=pipeline)
    if problem is not None:
        raise SpecError({"dlq.topic": [problem]})


class PipelineBusy(Exception):
    """The pipeline has a driver (or wants one): stop it before deleting."""


@transaction.atomic
def delete_pipeline(*, actor: User, pipeline: Pipeline, reason: str = "") -> None:
    """Delete a stopped pipeline with its revisions, runs and metrics. Needs the admin role.

    Raises PipelineBusy unless it is meant to be stopped and no driver is starting, running or stopping.
    """
    from pipelines.models import ACTIVE_STATES, DesiredState, PipelineRun

    require_role(actor, pipeline.team, Role.ADMIN)
    locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
    if (
        locked.desired_state != DesiredState.STOPPED
        or locked.state in ACTIVE_STATES
        or PipelineRun.objects.filter(pipeline=locked, state__in=ACTIVE_STATES).exists()
    ):
        raise PipelineBusy(f"pipeline {locked.name} is {locked.state}; stop it first")
    current = locked.current_revision
    audit.record(
        actor=actor,
        action="pipeline.delete",
        target_type="pipeline",
        target_id=locked.name,
        reason=reason,
        before=current.spec if current else None,
        details={"revision": current.number if current else None},
    )
    # Runs point at revisions (PROTECT) and the pipeline at its current one: remove those links first.
    PipelineRun.objects.filter(pipeline=locked).delete()
    Pipeline.objects.filter(pk=locked.pk).update(current_revision=None)
    locked.refresh_from_db()
    locked.delete()


def _add_revision(*, pipeline: Pipeline, actor: User, spec: PipelineSpec, comment: str) -> PipelineRevision:
    previous = pipeline.revisions.order_by("-number").first()
    number = previous.number + 1 if previous else 1
    data = spec.to_json()
    revision = PipelineRevision.objects.create(
        pipeline=pipeline,
        number=number,
        spec=data,
        author=actor,
        comment=comment,
        diff=spec_diff(
            previous.spec if previous else None,
            data,
            old_label=f"r{number - 1}" if previous else "(none)",
            new_label=f"r{number}",
        ),
    )
    pipeline.current_revision = revision
    pipeline.save(update_fields=["current_revision", "updated_at"])
    announce_status(pipeline)  # its page says "running r1, r2 saved" at once
    return revision


# ------------------------------------------------------------------------------------------------ dry run


class SampleError(ValueError):
    """A sample message is malformed; ``index`` is its position in the batch, ``field`` the bad field."""

    def __init__(self, index: int, field: str, message: str) -> None:
        self.index, self.field = index, field
        super().__init__(f"messages.{index}.{field}: {message}")


def sample_message(raw: Mapping[str, Any], *, index: int = 0) -> Message:
    """Build a Message from API/UI sample JSON.

    ``value``: a JSON object/array/number/bool is serialized compactly; a string is taken as the raw text of
    the value (so invalid JSON can be tried); ``value_base64`` gives raw bytes instead (invalid UTF-8).
    ``key``: text or null. ``headers``: ``{name: text-or-null}``. ``timestamp``: epoch milliseconds.
    Raises SampleError naming the field.
    """
    value: bytes | None
    if "value_base64" in raw:
        try:
            value = base64.b64decode(str(raw["value_base64"]), validate=True)
        except (binascii.Error, ValueError):
            raise SampleError(index, "value_base64", "is not valid base64") from None
    elif "value" not in raw or raw["value"] is None:
        value = None
    elif (bad := unencodable_path(raw["value"], "value")) is not None:
        raise SampleError(index, bad, UNENCODABLE)
    elif isinstance(raw["value"], str):
        value = raw["value"].encode("utf-8")
    else:
        value = json.dumps(raw["value"], separators=(",", ":"), ensure_ascii=False).encode()
    key = raw.get("key")
    if key is not None and not isinstance(key, str):
        raise SampleError(index, "key", "must be a string or null")
    if key is not None and not is_encodable(key):
        raise SampleError(index, "key", UNENCODABLE)
    headers_raw = raw.get("headers") or {}
    if not isinstance(headers_raw, Mapping):
        raise SampleError(index, "headers", "must be an object of header name to text")
    headers: list[tuple[str, bytes | None]] = []
    for name, text in headers_raw.items():
        if not is_encodable(str(name)):
            raise SampleError(index, "headers", f"a header name {UNENCODABLE}")
        if text is not None and not isinstance(text, str):
            raise SampleError(index, f"headers.{name}", "must be a string or null")
        if text is not None and not is_encodable(text):
            raise SampleError(index, f"headers.{name}", UNENCODABLE)
        headers.append((str(name), text.encode() if text is not None else None))
    timestamp = raw.get("timestamp")
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
        raise SampleError(index, "timestamp", "must be epoch milliseconds (an integer)")
    return Message(
        value=value,
        key=key.encode() if key is not None else None,
        headers=tuple(headers),
        timestamp_ms=timestamp,
    )


@dataclass(frozen=True)
class DestinationResult:
    """One destination's outcome for one sample message, in API shape."""

    destination: str
    topic: str
    outcome: Literal["produced", "filtered", "dead_lettered"]
    value: str | None
    key: str | None
    headers: dict[str, str | None]
    timestamp: int | None
    error_type: str | None
    error_message: str | None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "backslashreplace")


def _result(dest_name: str, topic: str, outcome: Outcome) -> DestinationResult:
    return DestinationResult(
        destination=dest_name,
        topic=topic,
        outcome=outcome.kind,
        value=_text(outcome.value),
        key=_text(outcome.key),
        headers={name: _text(value) for name, value in outcome.headers},
        timestamp=outcome.timestamp_ms,
        error_type=outcome.error_type,
        error_message=outcome.error_message,
    )


def dry_run(
    *,
    spec: PipelineSpec,
    messages: Sequence[Message],
    now_ms: int | None = None,
    formats: PipelineFormats | None = None,
) -> list[list[DestinationResult]]:
    """Run every message through every destination with the pure-Python evaluator, writing nothing.

    Returns one list per message, one DestinationResult per destination in spec order. The evaluator is the
    same code whose agreement with the Spark compilation is property-tested, so this is what the running
    pipeline would do (CACHE_* forms see an empty store).

    ``formats`` (``pipelines.formats.formats_for``; needed when the spec uses a registry format) does what
    the pipeline's decoder and writer do around the evaluator: a registry-format source value is decoded
    with its writer schema first (one that does not decode is ``MessageDeserialization`` at every
    destination, with the reason), and a record produced for a registry-format destination is encoded with
    its subject's latest schema (one that does not fit is ``SchemaValidation``). Without ``formats`` such a
    spec's values are evaluated as they are. Raises ``formats.RegistryUnreachable``.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    compiled = [(d, d.compiled()) for d in spec.destinations]
    runs: list[list[DestinationResult]] = []
    for message in messages:
        if formats is not None and formats.reads_registry:
            try:
                message = dataclasses.replace(message, value=formats.decoded_text(message.value))
            except DecodeError as exc:
                runs.append([_undecodable(d.name, d.topic, exc.reason) for d in spec.destinations])
                continue
        per_destination = []
        for config, dest in compiled:
            result = _result(
                config.name,
                config.topic,
                evaluate_destination(dest, message, error_handling=spec.error_handling, now_ms=now),
            )
            if formats is not None and config.format != "json" and result.outcome == "produced":
                result = _encoded(formats, config, result)
            per_destination.append(result)
        runs.append(per_destination)
    return runs


def _undecodable(name: str, topic: str, reason: str) -> DestinationResult:
    return DestinationResult(
        name, topic, "dead_lettered", None, None, {}, None, c.MESSAGE_DESERIALIZATION, reason
    )


def _encoded(
    formats: PipelineFormats, dest: DestinationConfig, result: DestinationResult
) -> DestinationResult:
    """``result`` (produced) as the writer would send it to a registry-format destination: unchanged when
    its value fits the subject's latest schema, else dead-lettered as ``SchemaValidation``."""
    try:
        formats.encode_for(dest, result.value or "")
    except SchemaValidation as exc:
        return dataclasses.replace(
            result,
            outcome="dead_lettered",
            value=None,
            key=None,
            headers={},
            timestamp=None,
            error_type=c.SCHEMA_VALIDATION,
            error_message=f"does not fit subject {dest.subject}: {exc}",
        )
    return result


@dataclass(frozen=True)
class MessageResults:
    """Every destination's outcome for the sample message at ``index`` (0-based) of a dry run."""

    index: int
    destinations: list[DestinationResult]


@dataclass(frozen=True)
class OutcomeCounts:
    """How many (message, destination) pairs of a dry run ended in each outcome."""

    produced: int
    filtered: int
    dead_lettered: int


@dataclass(frozen=True)
class DryRunReport:
    """A dry run as the API returns it: the revision run (None for a draft spec), per message each
    destination's outcome, and the outcome counts."""

    revision: int | None
    results: list[MessageResults]
    summary: OutcomeCounts


def dry_run_report(
    *,
    spec: PipelineSpec,
    messages: Sequence[Message],
    revision: int | None = None,
    now_ms: int | None = None,
    formats: PipelineFormats | None = None,
) -> DryRunReport:
    """``dry_run`` with each message's results numbered and the outcomes counted; ``revision`` is the
    number of the revision ``spec`` came from (None for a draft). Writes nothing."""
    results = dry_run(spec=spec, messages=messages, now_ms=now_ms, formats=formats)
    counts: Counter[str] = Counter(r.outcome for per_message in results for r in per_message)
    return DryRunReport(
        revision=revision,
        results=[MessageResults(index=i, destinations=per_message) for i, per_message in enumerate(results)],
        summary=OutcomeCounts(
            produced=counts["produced"], filtered=counts["filtered"], dead_lettered=counts["dead_lettered"]
        ),
    )


# ------------------------------------------------------------------------------------------ sampling


class SampledMessage(TypedDict):
    """A record read from a topic as sample-message JSON (``sample_message`` reads it back): ``value`` when
    it is UTF-8 text, else ``value_base64``; ``source`` is ``topic/partition/offset``."""

    key: str | None
    headers: dict[str, str | None]
    timestamp: int | None
    source: str
    value: NotRequired[str | None]
    value_base64: NotRequired[str]


class SampleUnavailable(Exception):
    """The source topics could not be read (Kafka does not answer, or none of the topics exists)."""


def sample_source_messages(
    *, topics: Sequence[str], limit: int = 10, timeout: float = 5.0, kafka: KafkaConnection | None = None
) -> list[SampledMessage]:
    """Up to ``limit`` of the newest records of ``topics``, as sample-message JSON for ``sample_message``
    (``value`` as text when it is UTF-8, else ``value_base64``; ``key`` as text; ``headers``; ``timestamp``
    in epoch ms), oldest first.

    Reads with a throwaway consumer assigned to the last records of each partition, without a consumer
    group commit, so no pipeline's offsets move. Raises SampleUnavailable when Kafka does not answer within
    ``timeout`` seconds or no topic exists; missing topics among existing ones are skipped.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from pipelines.clusters import default_kafka
    from streamforge_core.kafka import consumer_config

    consumer = Consumer(
        consumer_config(
            kafka or default_kafka(),
            group_id="streamforge-web-sampler",  # required by the client; never committed to
            extra={"enable.partition.eof": True},
        )
    )
    try:
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise SampleUnavailable(f"Kafka did not answer: {exc}") from exc
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            if topic in metadata.topics and metadata.topics[topic].error is None
            for partition in sorted(metadata.topics[topic].partitions)
        ]
        if not partitions:
            raise SampleUnavailable(f"none of the topics exists: {', '.join(topics) or '(none given)'}")
        per_partition = max(1, -(-limit // len(partitions)))  # ceiling: every partition gets a share
        assigned = []
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
            if high > low:
                assigned.append(TopicPartition(tp.topic, tp.partition, max(low, high - per_partition)))
        if not assigned:
            return []
        consumer.assign(assigned)
        records = []
        remaining = len(assigned)
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline:
            record = consumer.poll(0.2)
            if record is None:
                continue
            if record.error() is not None:
                remaining -= 1  # partition EOF: that partition's newest records are all read
                continue
            records.append(record)
    finally:
        consumer.close()
    records.sort(key=lambda r: (r.timestamp()[1], r.topic(), r.partition(), r.offset()))
    return [_sample_json(r) for r in records[-limit:]]


def _sample_json(record: Any) -> SampledMessage:
    value: bytes | None = record.value()
    key: bytes | None = record.key()
    sample: SampledMessage = {
        "key": key.decode("utf-8", "backslashreplace") if key is not None else None,
        "headers": {
            name: (data.decode("utf-8", "backslashreplace") if data is not None else None)
            for name, data in (record.headers() or [])
        },
        "timestamp": record.timestamp()[1] if record.timestamp()[1] >= 0 else None,
        "source": f"{record.topic()}/{record.partition()}/{record.offset()}",
    }
    try:
        sample["value"] = value.decode("utf-8") if value is not None else None
    except UnicodeDecodeError:
        sample["value_base64"] = base64.b64encode(value or b"").decode()
    return sample
