"""Bulk fix: one payload fix applied to every parked message a filter (a selection, a failure group)
selects, under the bulk rules of ``dlq.services.bulk`` (dry-run count, rate limit, approval above the
threshold, pause / resume / cancel, progress).

A fix is either a JSON Patch (RFC 6902, applied by the ``jsonpatch`` library; paths are JSON Pointers,
RFC 6901) or a transform of the project's DSL (``pipelines.dsl``: DSL.md "Transforms", parsed and
evaluated by the same code the pipelines' Python side uses). The flow:

- ``parse_fix`` (``fix_patch``, with the application): the fix checked before anything runs; a bad patch or expression is an InvalidRequest
  naming the field (``fix.patch[2].path``, ``fix.transform``) and the reason (for an expression, the
  character position where it stops parsing);
- ``preview_bulk_fix``: the dry-run count and whether an approver is needed, plus a sample (5 by default)
  of the selected messages each with its diff and would-pass check (``fixes.payload_diff``,
  ``fixes.check_payload``, as a single fix shows them), or why the fix does not apply to it;
- ``create_bulk_fix``: a ``BulkAction`` of kind ``fix`` (``bulk.create_bulk``), queued or awaiting an
  approver;
- ``fix_patch.fix_chunk``: what the runner (``bulk.run_bulk``) does per chunk: each message gets its own payload
  revision and ``dlq.fix`` audit event; a message the fix does not apply to (a path missing, a ``test``
  operation that fails, a payload that is not JSON, a fix that changes nothing) is left unchanged and
  counted under its reason in ``BulkAction.fix_failures``. Messages stay parked: a replay is a separate
  (bulk) action, offered once the fix is done.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User

from access.models import Role
from access.permissions import require_role
from dlq.filters import MessageFilter
from dlq.models import BulkAction, BulkKind, Status
from dlq.services.bulk import create_bulk, preview_bulk
from dlq.services.errors import InvalidRequest
from dlq.services.fix_patch import (
    UNCHANGED,
    BulkFix,
    FixDoesNotApply,
    current_payloads,
    fixed_payload,
    parse_fix,
)
from dlq.services.fixes import PayloadCheck, check_payload, payload_diff
from dlq.services.inspection import visible_dead_letters

__all__ = ["BulkFix", "BulkFixPreview", "FixSample", "create_bulk_fix", "parse_fix", "preview_bulk_fix"]

#: Messages a preview shows by default, and at most.
PREVIEW_SAMPLE = 5
MAX_PREVIEW_SAMPLE = 20


@dataclass(frozen=True)
class FixSample:
    """One sampled message of a preview: the diff of its payload (current -> fixed) and the check of the
    fixed payload (None when there is no pipeline revision to check against), or ``error``, why the fix
    does not apply to it (then no diff and no check)."""

    dead_letter_id: int
    coordinates: str
    diff: str
    check: PayloadCheck | None
    error: str


@dataclass(frozen=True)
class BulkFixPreview:
    """A bulk fix's dry run: ``count`` parked messages selected, whether creating it waits for an
    approver (more than ``approval_threshold``), and ``samples``, the first few selected messages fixed
    in memory."""

    count: int
    needs_approval: bool
    approval_threshold: int
    samples: tuple[FixSample, ...]
    held: int = 0  # of ``count``, held by a pending delete request: the run leaves them unchanged


def preview_bulk_fix(
    *, actor: User, selection: MessageFilter, fix: BulkFix, sample: int = PREVIEW_SAMPLE
) -> BulkFixPreview:
    """The dry run of a bulk fix (nothing stored): the count and approval of ``bulk.preview_bulk`` and the
    first ``sample`` (1..20) selected messages, each fixed in memory with its diff and check. Needs the
    operator role in each sampled message's team. Raises InvalidRequest (sample), PermissionDenied."""
    if not 1 <= sample <= MAX_PREVIEW_SAMPLE:
        raise InvalidRequest("sample", f"1 to {MAX_PREVIEW_SAMPLE} messages")
    counted = preview_bulk(actor=actor, selection=selection, kind=BulkKind.FIX)
    rows = list(
        selection.apply(visible_dead_letters(actor))
        .filter(status=Status.PARKED)
        .select_related("team", "pipeline__current_revision")
        .order_by("id")[:sample]
    )
    latest = current_payloads([row.pk for row in rows])
    samples = []
    for row in rows:
        require_role(actor, row.team, Role.OPERATOR)
        current = (
            latest[row.pk][1] if row.pk in latest else (bytes(row.value) if row.value is not None else None)
        )
        try:
            result = fixed_payload(fix, row, current)
        except FixDoesNotApply as exc:
            samples.append(FixSample(row.pk, row.coordinates, "", None, exc.reason))
            continue
        if result.value == current:
            samples.append(FixSample(row.pk, row.coordinates, "", None, UNCHANGED))
            continue
        check = check_payload(dead_letter=row, value=result.value)
        diff = payload_diff(result.before, result.after)
        samples.append(FixSample(row.pk, row.coordinates, diff, check, ""))
    return BulkFixPreview(
        count=counted.count,
        needs_approval=counted.needs_approval,
        approval_threshold=counted.approval_threshold,
        samples=tuple(samples),
        held=counted.held,
    )


def create_bulk_fix(
    *, actor: User, selection: MessageFilter, fix: BulkFix, reason: str, rate_limit: int = 100
) -> BulkAction:
    """Create the bulk fix of every parked message the filter selects now (``bulk.create_bulk`` with kind
    ``fix``: one team, operator role, queued or awaiting an approver above the threshold, audited as
    ``dlq.bulk_create`` with the fix in its details). ``rate_limit``: messages per second (0: unlimited).
    Raises InvalidRequest, PermissionDenied."""
    return create_bulk(
        actor=actor, kind=BulkKind.FIX, selection=selection, reason=reason, rate_limit=rate_limit, fix=fix
    )
