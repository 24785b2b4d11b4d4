"""Reading the parking lot: which dead letters a user may see, which payload paths are masked for them, and
the message inspection (everything the message page and ``GET /api/dlq/messages/<id>/`` show) as typed
results."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import QuerySet

from access.models import Membership, Role, Team
from access.permissions import AnyUser, is_admin, require_role, role_in, visible_teams
from dlq.models import DeadLetter
from dlq.services.claims import ClaimView, claims_for
from dlq.services.decoded import DecodedPayload, payload_reader
from dlq.services.fixes import PayloadCheck, payload_diff
from dlq.services.rendering import (
    UNMASKED,
    Masking,
    RenderedBytes,
    RenderedHeader,
    decode_headers,
)
from pipelines.spec import DestinationConfig, SpecError


@dataclass(frozen=True)
class DlqCoordinates:
    """Where the dead letter was read: DLQ topic, partition, offset and the record's timestamp (None when
    the broker gave none)."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime | None


@dataclass(frozen=True)
class SourceCoordinates:
    """The record that failed, as the DLQ headers name it (empty topic and None when they do not)."""

    topic: str
    partition: int | None
    offset: int | None


@dataclass(frozen=True)
class FailedRevision:
    """The pipeline revision that dead-lettered the message and its destination as configured there
    (None when the record names no destination the revision has, or the revision no longer parses)."""

    number: int
    destination: DestinationConfig | None


@dataclass(frozen=True)
class PayloadRevisionView:
    """One stored fix: who, when, why, the payload, its diff against the previous payload (recomputed with
    masking for viewers) and its DSL check when it was stored (None: nothing to check against)."""

    number: int
    author: str
    created_at: datetime
    reason: str
    value: RenderedBytes
    diff: str
    check: PayloadCheck | None


@dataclass(frozen=True)
class ProducedAt:
    """Where a replayed record landed on its target topic."""

    partition: int | None
    offset: int


@dataclass(frozen=True)
class ReplaySummary:
    """One replay attempt: its id (a UUID string, also the record's replay-id header), state, target, the
    pipeline destinations it is for (comma-separated; empty: every destination), who asked when, where it
    landed (None until produced), the broker's error, and its bulk action id."""

    replay_id: str
    state: str
    target_topic: str
    destinations: str
    requested_by: str
    requested_at: datetime
    produced: ProducedAt | None
    error: str
    bulk: int | None


@dataclass(frozen=True)
class ApprovalSummary:
    """An approval request about the dead letter (``kind`` is ``delete`` here)."""

    id: int
    kind: str
    state: str
    requested_by: str


@dataclass(frozen=True)
class Sibling:
    """Another dead letter of the same source record and pipeline: the record failed more than one
    destination, and each failure is parked (and replayed, for its destination only) on its own."""

    id: int
    destination: str
    error_type: str
    status: str


@dataclass(frozen=True)
class RecordFormatView:
    """How a registry-format payload was read for the console and the API: ``format`` (``avro``,
    ``protobuf``, ``json_schema``), ``decoded`` (read with its writer schema: then the message's ``value``
    is the decoded record's JSON), the writer schema's ``schema_id``, ``subject`` and ``version`` (None and
    ``""`` when it did not decode or the registry does not say), and ``error`` (why it did not decode)."""

    format: str
    decoded: bool
    schema_id: int | None
    subject: str
    version: int | None
    error: str

    @classmethod
    def of(cls, payload: DecodedPayload) -> RecordFormatView:
        """The view of a ``decoded.DecodedPayload``."""
        schema = payload.schema
        return cls(
            format=payload.format,
            decoded=payload.decoded,
            schema_id=schema.schema_id if schema else None,
            subject=(schema.subject or "") if schema else "",
            version=schema.version if schema else None,
            error=payload.error,
        )


@dataclass(frozen=True)
class MessageInspection:
    """Everything about one dead letter: the record (headers, key, value rendered), source coordinates,
    the failure, the pipeline revision that failed it, payload revisions with diffs, replays and their
    outcomes, later failures of replays (dead letter ids), the dead letter it is a replay of, the siblings
    (dead letters of the same source record at other destinations), and approval requests. For a pipeline
    that reads a registry format the value and the fixes are their decoded records (as JSON, masked like
    JSON) and ``value_format`` says how the value was read (None for a ``json`` pipeline). ``pipeline`` and
    ``team`` are names, the DLQ topic's registered owner; ``claimed_pipeline`` is what the record's pipeline
    header says and ``ownership_warning`` why that claim was not followed (empty when it agrees); ``group``
    is the failure group id."""

    id: int
    status: str
    dlq: DlqCoordinates
    source: SourceCoordinates
    pipeline: str
    team: str
    claimed_pipeline: str
    ownership_warning: str
    convention: str
    error_type: str
    error_message: str
    destination: str
    revision: FailedRevision | None
    attempts: int
    first_failed_at: datetime
    last_failed_at: datetime
    group: int
    headers: tuple[RenderedHeader, ...]
    key: RenderedBytes
    value: RenderedBytes
    value_format: RecordFormatView | None
    payload_revisions: tuple[PayloadRevisionView, ...]
    replays: tuple[ReplaySummary, ...]
    replay_of: int | None
    later_failures: tuple[int, ...]
    siblings: tuple[Sibling, ...]
    approvals: tuple[ApprovalSummary, ...]
    claim: ClaimView | None = None

    def has_pending_delete(self) -> bool:
        """Whether a delete request about the dead letter waits for an approver."""
        return any(a.kind == "delete" and a.state == "pending" for a in self.approvals)


def visible_dead_letters(user: AnyUser) -> QuerySet[DeadLetter]:
    """Dead letters of the teams the user may see (all for admins)."""
    if is_admin(user):
        return DeadLetter.objects.all()
    return DeadLetter.objects.filter(team__in=visible_teams(user))


def _viewer_masking() -> Masking:
    return Masking(
        paths=tuple(settings.DLQ_MASKED_PATHS),
        headers=frozenset(name.lower() for name in settings.DLQ_MASKED_HEADERS),
        keys=settings.DLQ_MASK_KEYS,
    )


def masking_for(user: AnyUser, team: Team) -> Masking:
    """What this user may not see of ``team``'s dead letters: for viewers, the configured
    ``STREAMFORGE_DLQ_MASKED_PATHS`` (and non-JSON payloads withheld while any is set),
    ``STREAMFORGE_DLQ_MASKED_HEADERS`` and ``STREAMFORGE_DLQ_MASK_KEYS``; nothing for operators and above."""
    role = role_in(user, team)
    if role is None or role == Role.VIEWER:
        return _viewer_masking()
    return UNMASKED


def masked_paths_for(user: AnyUser, team: Team) -> list[str]:
    """The JSON paths hidden from this user: ``STREAMFORGE_DLQ_MASKED_PATHS`` for viewers, none above."""
    return list(masking_for(user, team).paths)


def key_masked_teams(user: AnyUser) -> set[int]:
    """Ids of the teams whose record keys this user may not see (``STREAMFORGE_DLQ_MASK_KEYS``, viewers):
    lists show their keys masked, and a search does not match on them (it would tell a key's prefix)."""
    if not settings.DLQ_MASK_KEYS or not user.is_authenticated or is_admin(user):
        return set()
    return set(Membership.objects.filter(user_id=user.pk, role=Role.VIEWER).values_list("team_id", flat=True))


def _failed_revision(dead_letter: DeadLetter) -> FailedRevision | None:
    if dead_letter.pipeline is None or dead_letter.revision is None:
        return None
    row = dead_letter.pipeline.revisions.filter(number=dead_letter.revision).first()
    if row is None:
        return None
    try:
        destinations = row.parsed.destinations
    except SpecError:
        destinations = ()
    destination = next((d for d in destinations if d.name == dead_letter.destination), None)
    return FailedRevision(number=row.number, destination=destination)


def inspect_message(*, user: AnyUser, dead_letter: DeadLetter) -> MessageInspection:
    """Everything the message page shows (see ``MessageInspection``).

    What a viewer may not see is hidden everywhere in it (``masking_for``): masked paths in the value, the
    fixes and their diffs (payloads that are not JSON withheld), masked headers, and keys.
    Raises PermissionDenied when the user cannot see the dead letter's team.
    """
    require_role(user, dead_letter.team, Role.VIEWER)
    masking = masking_for(user, dead_letter.team)
    masked = list(masking.paths)
    original = bytes(dead_letter.value) if dead_letter.value is not None else None
    # A registry-format payload is shown as its decoded record, as on the message page (``decoded``).
    reader = payload_reader(dead_letter)
    read = reader(original) if reader is not None else None
    if read is not None and read.text is not None:
        original = read.text
    revisions = []
    previous = original
    for rev in dead_letter.payload_revisions.select_related("author").order_by("number"):
        value = bytes(rev.value)
        if reader is not None:
            fixed = reader(value)
            value = fixed.text if fixed.text is not None else value
        revisions.append(
            PayloadRevisionView(
                number=rev.number,
                author=rev.author.get_username(),
                created_at=rev.created_at,
                reason=rev.reason,
                value=masking.value(value),
                diff=payload_diff(previous, value, masked_paths=masked) if masked else rev.diff,
                check=PayloadCheck.from_json(rev.dsl_check),
            )
        )
        previous = value
    replays = dead_letter.replays.select_related("requested_by").order_by("requested_at")
    return MessageInspection(
        id=dead_letter.pk,
        status=dead_letter.status,
        dlq=DlqCoordinates(
            topic=dead_letter.dlq_topic,
            partition=dead_letter.dlq_partition,
            offset=dead_letter.dlq_offset,
            timestamp=dead_letter.dlq_timestamp,
        ),
        source=SourceCoordinates(
            topic=dead_letter.source_topic,
            partition=dead_letter.source_partition,
            offset=dead_letter.source_offset,
        ),
        pipeline=dead_letter.pipeline_name,
        team=dead_letter.team.name,
        claimed_pipeline=dead_letter.claimed_pipeline,
        ownership_warning=dead_letter.ownership_warning,
        convention=dead_letter.convention,
        error_type=dead_letter.error_type,
        error_message=dead_letter.error_message,
        destination=dead_letter.destination,
        revision=_failed_revision(dead_letter),
        attempts=dead_letter.attempts,
        first_failed_at=dead_letter.first_failed_at,
        last_failed_at=dead_letter.last_failed_at,
        group=dead_letter.group_id,
        headers=tuple(masking.header_values(decode_headers(dead_letter.headers))),
        key=masking.key(bytes(dead_letter.key) if dead_letter.key is not None else None),
        value=masking.value(original),
        value_format=RecordFormatView.of(read) if read is not None else None,
        payload_revisions=tuple(revisions),
        replays=tuple(
            ReplaySummary(
                replay_id=str(r.replay_id),
                state=r.state,
                target_topic=r.target_topic,
                destinations=r.destinations,
                requested_by=r.requested_by.get_username(),
                requested_at=r.requested_at,
                produced=None
                if r.produced_offset is None
                else ProducedAt(partition=r.produced_partition, offset=r.produced_offset),
                error=r.error,
                bulk=r.bulk_id,
            )
            for r in replays
        ),
        replay_of=dead_letter.replay_of_id,
        later_failures=tuple(dead_letter.later_failures.values_list("pk", flat=True)),
        siblings=tuple(Sibling(*row) for row in _siblings(dead_letter)),
        approvals=tuple(
            ApprovalSummary(id=a.pk, kind=a.kind, state=a.state, requested_by=a.requested_by.get_username())
            for a in dead_letter.approvals.select_related("requested_by")
        ),
        claim=claims_for([dead_letter]).get(dead_letter.pk),
    )


def _same_source(dead_letter: DeadLetter) -> QuerySet[DeadLetter]:
    if dead_letter.pipeline_id is None or dead_letter.source_offset is None:
        return DeadLetter.objects.none()
    return (
        DeadLetter.objects.filter(
            pipeline_id=dead_letter.pipeline_id,
            source_offset=dead_letter.source_offset,
            source_partition=dead_letter.source_partition,
            source_topic=dead_letter.source_topic,
            team_id=dead_letter.team_id,
        )
        .exclude(pk=dead_letter.pk)
        .order_by("id")
    )


def sibling_rows(dead_letter: DeadLetter) -> list[DeadLetter]:
    """The other dead letters of the same pipeline, team and source record (at most 50), oldest first
    (index ``dl_pipeline_source``); none when the writer did not say the source."""
    return list(_same_source(dead_letter).select_related("team", "pipeline__current_revision")[:50])


def _siblings(dead_letter: DeadLetter) -> list[tuple[int, str, str, str]]:
    """(id, destination, error type, status) of ``sibling_rows``, without loading the rows."""
    return list(_same_source(dead_letter).values_list("id", "destination", "error_type", "status")[:50])
