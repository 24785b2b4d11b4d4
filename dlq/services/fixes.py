"""Fixing a parked message's payload: the DSL check of a payload against the pipeline's current revision,
a draft check that stores nothing, storing a fix as a new payload revision, and the payload diffs.

The original payload is never changed: each fix is a ``PayloadRevision``; a replay sends the newest one
(``current_payload``).
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from django.contrib.auth.models import User
from django.db import transaction

from access import audit
from access.models import Role
from access.permissions import AnyUser, require_role
from dlq import headers
from dlq.models import DeadLetter, PayloadRevision, Status
from dlq.services import kafka_io
from dlq.services.decoded import current_spec, decoded_payload, pipeline_formats, stored_fix
from dlq.services.errors import Conflict, InvalidRequest, RegistryUnavailable
from dlq.services.rendering import decode_headers, render_bytes
from pipelines.dsl import Message
from pipelines.formats import RegistryUnreachable
from pipelines.services import DestinationResult, dry_run
from streamforge_core import contract as c
from streamforge_core.kafka import record_size

#: The lineage header's value is ``topic/partition/offset``; its offset is counted at its widest (a long)
#: so the size a check predicts is never below the record the driver writes.
_WIDEST_OFFSET = "9" * 19


@dataclass(frozen=True)
class DestinationOutcome:
    """What one destination of the pipeline would do with the payload: ``produced``, ``filtered`` or
    ``dead_lettered`` (then with the error type and message it would be dead-lettered with)."""

    destination: str
    topic: str
    outcome: Literal["produced", "filtered", "dead_lettered"]
    error_type: str | None
    error_message: str | None


@dataclass(frozen=True)
class PayloadCheck:
    """The DSL check of a payload against revision ``revision`` of the pipeline: one outcome per
    destination, in spec order; ``would_pass`` when no destination would dead-letter it. Stored on a
    payload revision as ``to_json()``."""

    would_pass: bool
    revision: int
    destinations: tuple[DestinationOutcome, ...]

    def to_json(self) -> dict[str, Any]:
        """The check as stored in ``PayloadRevision.dsl_check`` (plain JSON types)."""
        data = asdict(self)
        data["destinations"] = list(data["destinations"])
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PayloadCheck | None:
        """A stored ``PayloadRevision.dsl_check`` back as a check; None for the empty one stored when there
        was nothing to check against (no pipeline, or no revision)."""
        if not data:
            return None
        return cls(
            would_pass=bool(data["would_pass"]),
            revision=int(data["revision"]),
            destinations=tuple(
                DestinationOutcome(
                    destination=d["destination"],
                    topic=d["topic"],
                    outcome=d["outcome"],
                    error_type=d["error_type"],
                    error_message=d["error_message"],
                )
                for d in data["destinations"]
            ),
        )

    def dead_lettered(self) -> list[DestinationOutcome]:
        """The destinations that would dead-letter the payload again."""
        return [d for d in self.destinations if d.outcome == "dead_lettered"]


@dataclass(frozen=True)
class DraftCheck:
    """What saving a draft payload as a fix would give: its DSL check (None when there is no pipeline
    revision to check against), the diff against the original payload, and whether it equals the current
    payload (a fix that changes nothing is refused)."""

    check: PayloadCheck | None
    diff: str
    unchanged: bool


def current_payload(dead_letter: DeadLetter) -> tuple[bytes | None, PayloadRevision | None]:
    """The value a replay sends: the latest payload revision's (and that revision), else the original
    (and None)."""
    latest = dead_letter.payload_revisions.order_by("-number").first()
    if latest is not None:
        return bytes(latest.value), latest
    return (bytes(dead_letter.value) if dead_letter.value is not None else None), None


def payload_diff(old: bytes | None, new: bytes, *, masked_paths: Sequence[str] = ()) -> str:
    """A unified diff of the two payloads as the console renders them (pretty JSON when they are JSON),
    with ``masked_paths`` masked on both sides."""
    before = render_bytes(old, masked_paths=masked_paths).text.splitlines(keepends=True)
    after = render_bytes(new, masked_paths=masked_paths).text.splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, "original", "fixed"))


def check_payload(*, dead_letter: DeadLetter, value: bytes) -> PayloadCheck | None:
    """Would the pipeline's current revision now process this payload? Runs the record (new value,
    original key, headers and timestamp) through the pure-Python evaluator, the same semantics the Spark
    job has (property-tested), then each produced record against its topic's ``max.message.bytes`` read
    from the broker (``kafka_io.topic_limits``, cached briefly): larger is ``RecordTooLarge``, as the
    driver dead-letters it. A payload that does not parse is ``MessageDeserialization`` at every destination
    (the evaluator's). For a registry-format pipeline the payload is decoded with its writer schema first
    and a registry-format destination's record encoded, as the pipeline does (``services.dry_run``'s
    ``formats``). None when the dead letter has no pipeline (a foreign DLQ), the pipeline no
    revision, or the revision no longer passes validation. Raises ``errors.RegistryUnavailable``.
    """
    spec = current_spec(dead_letter)
    if spec is None:
        return None
    assert dead_letter.pipeline is not None
    assert dead_letter.pipeline.current_revision is not None
    message = replayed_message(dead_letter, value)
    try:
        results = dry_run(spec=spec, messages=[message], formats=pipeline_formats(dead_letter))[0]
    except RegistryUnreachable as exc:
        raise RegistryUnavailable(str(exc)) from None
    limits = kafka_io.topic_limits([r.topic for r in results], dead_letter.cluster_id)
    lineage = (
        c.H_LINEAGE,
        f"{dead_letter.source_topic}/{dead_letter.source_partition}/{_WIDEST_OFFSET}".encode(),
    )
    results = [_within_limit(r, limits.get(r.topic), lineage) for r in results]
    return PayloadCheck(
        would_pass=all(r.outcome != "dead_lettered" for r in results),
        revision=dead_letter.pipeline.current_revision.number,
        destinations=tuple(
            DestinationOutcome(
                destination=r.destination,
                topic=r.topic,
                outcome=r.outcome,
                error_type=r.error_type,
                error_message=r.error_message,
            )
            for r in results
        ),
    )


def replayed_message(dead_letter: DeadLetter, value: bytes | None) -> Message:
    """The record a replay of ``value`` puts back on the source topic, as the pipeline reads it: the new
    value with the original key, the original headers (the ``x-streamforge-*`` ones the DLQ added left
    out) and the dead letter's timestamp (epoch ms)."""
    raw_headers = headers.original_headers(decode_headers(dead_letter.headers))
    timestamp = int(dead_letter.dlq_timestamp.timestamp() * 1000) if dead_letter.dlq_timestamp else None
    return Message(
        value=value,
        key=bytes(dead_letter.key) if dead_letter.key is not None else None,
        headers=tuple(raw_headers),
        timestamp_ms=timestamp,
    )


def _within_limit(
    result: DestinationResult, limit: kafka_io.TopicLimit | None, lineage: tuple[str, bytes]
) -> DestinationResult:
    """``result``, or, when the record it would produce is larger than its topic's ``max.message.bytes``
    (``record_size`` with the lineage header the driver adds), the ``RecordTooLarge`` dead letter the driver
    writes instead (``pipelines.spark.writer``); or, when the topic cannot be written at all (missing and
    not auto-created, or forbidden: the driver halts on those), that problem. Unchanged when nothing is
    known."""
    if result.outcome != "produced" or limit is None:
        return result
    if limit.problem:  # the driver cannot write the topic at all: it halts, nothing lands there
        return dataclasses.replace(
            result,
            outcome="dead_lettered",
            error_type=limit.problem,
            error_message=limit.problem_text(result.topic),
        )
    if limit.max_message_bytes is None:
        return result
    value = result.value.encode() if result.value is not None else None
    key = result.key.encode() if result.key is not None else None
    headers = [(n, v.encode() if v is not None else None) for n, v in result.headers.items()]
    size = record_size(value, key, [*headers, lineage])
    if size <= limit.max_message_bytes:
        return result
    return dataclasses.replace(
        result,
        outcome="dead_lettered",
        error_type=c.RECORD_TOO_LARGE,
        error_message=f"record of about {size} bytes exceeds max.message.bytes={limit.max_message_bytes} "
        f"of topic {result.topic}",
    )


def for_its_replay(dead_letter: DeadLetter, check: PayloadCheck | None) -> PayloadCheck | None:
    """``check`` narrowed to the destinations a replay of ``dead_letter`` to its source topic is for (its
    own destination names, when the spec still has every one of them: ``replays.PipelineTopics.scope``),
    with ``would_pass`` over those only: the others never see the replayed record."""
    if check is None:
        return None
    names = {n.strip() for n in dead_letter.destination.split(",") if n.strip()}
    if not names or not names <= {d.destination for d in check.destinations}:
        return check
    kept = tuple(d for d in check.destinations if d.destination in names)
    return PayloadCheck(
        would_pass=all(d.outcome != "dead_lettered" for d in kept), revision=check.revision, destinations=kept
    )


def check_draft(
    *, actor: AnyUser, dead_letter: DeadLetter, value: bytes, schema_version: int | None = None
) -> DraftCheck:
    """What saving ``value`` as a fix would give, without storing anything (see ``DraftCheck``; the check
    lists the destinations its replay is for, ``for_its_replay``). Needs the operator role, like the fix it
    previews. For a registry-format pipeline ``value`` is the decoded record's JSON, framed as
    ``decoded.stored_fix`` would store it (``schema_version``: a later version of its subject). Raises
    PermissionDenied, InvalidRequest (a value that does not fit the schema), RegistryUnavailable."""
    require_role(actor, dead_letter.team, Role.OPERATOR)
    original = bytes(dead_letter.value) if dead_letter.value is not None else None
    current, _ = current_payload(dead_letter)
    stored = stored_fix(dead_letter, value, version=schema_version)
    return DraftCheck(
        check=for_its_replay(dead_letter, check_payload(dead_letter=dead_letter, value=stored)),
        diff=payload_diff(_shown(dead_letter, original), _shown(dead_letter, stored) or b""),
        unchanged=current == stored,
    )


def _shown(dead_letter: DeadLetter, value: bytes | None) -> bytes | None:
    """``value`` as a diff compares it: decoded JSON for a registry-format payload that decodes."""
    decoded = decoded_payload(dead_letter, value)
    return decoded.text if decoded is not None and decoded.text is not None else value


def fix_payload(
    *,
    actor: User,
    dead_letter: DeadLetter,
    value: bytes,
    reason: str,
    schema_version: int | None = None,
) -> PayloadRevision:
    """Store a new payload revision (the original and earlier fixes are kept) with its diff against the
    previous payload and the DSL check of the new one (``PayloadCheck.to_json()``, ``{}`` when there is
    nothing to check against). Needs the operator role; the dead letter must be PARKED. For a
    registry-format pipeline ``value`` is JSON and is stored framed with the record's writer schema, or
    ``schema_version`` of its subject (``decoded.stored_fix``); the diff compares the decoded records.
    Raises InvalidRequest (no reason, payload unchanged, a value that does not fit its schema, naming the
    field), Conflict, PermissionDenied, RegistryUnavailable.
    """
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "say why the payload is changed")
    value = stored_fix(dead_letter, value, version=schema_version)
    with transaction.atomic():
        # Only the dead letter's row is locked: the pipeline and its revision are read for the check, and
        # PostgreSQL refuses FOR UPDATE on the nullable side of the outer join to them anyway.
        locked = (
            DeadLetter.objects.select_for_update(of=("self",))
            .select_related("pipeline__current_revision")
            .get(pk=dead_letter.pk)
        )
        if locked.status != Status.PARKED:
            raise Conflict(f"dead letter {locked.pk} is {locked.status}; only parked messages can be fixed")
        previous, latest = current_payload(locked)
        if previous == value:
            raise InvalidRequest("value", "the payload is unchanged")
        check = for_its_replay(locked, check_payload(dead_letter=locked, value=value))
        revision = PayloadRevision.objects.create(
            dead_letter=locked,
            number=(latest.number + 1) if latest else 1,
            value=value,
            diff=payload_diff(_shown(locked, previous), _shown(locked, value) or b""),
            reason=reason.strip(),
            author=actor,
            dsl_check=check.to_json() if check is not None else {},
        )
        audit.record(
            actor=actor,
            action="dlq.fix",
            target_type="dead_letter",
            target_id=locked.pk,
            reason=reason,
            before=base64.b64encode(previous or b"").decode(),
            after=base64.b64encode(value).decode(),
            details={"payload_revision": revision.number, "would_pass": revision.dsl_check.get("would_pass")},
        )
    return revision
