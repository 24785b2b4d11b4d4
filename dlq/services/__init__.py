"""DLQ console operations: inspect, fix the payload, replay, skip, delete with approval, bulk actions, runbooks.

Each mutation is one function with keyword-only arguments: it checks the caller's role in the dead
letter's team, changes state through a guarded transition (a conditional UPDATE, so a double click or two
workers cannot do a thing twice) and records one audit event per changed dead letter in the same
transaction. Views, API viewsets, tasks and management commands call these and nothing else.

One module per workflow; this package re-exports their public names, so ``services.replay(...)`` works:

- ``inspection``: which dead letters a user sees, masking, the message inspection (``inspect_message``);
- ``rendering``: keys, values and headers as the console shows them (JSON, text, the one hex dump);
- ``fixes``: the DSL check of a payload, the draft check, storing a fix, payload diffs;
- ``kafka_io``: the replay producer, producing records, finding replay ids on a topic;
- ``replays``: the replay state machine (its protocol is in that module's docstring), settling replays
  left in doubt, and skip;
- ``siblings``: one source record's dead letters fixed and replayed together;
- ``approvals``: delete requests, approve and reject (four eyes);
- ``bulk``: bulk replay and skip, their preview, pause / resume / cancel, and the runner; their life
  cycle is one table of transitions (``BULK_TRANSITIONS``);
- ``bulk_fix``: a JSON Patch or DSL transform applied to a selection under the bulk rules (its preview
  and creation); ``fix_patch``: the fix itself and the runner's chunk;
- ``fix_forward``: after a new revision goes live, which parked dead letters it now passes (a scan a
  worker runs), replayed as a bulk replay of the scan's candidates;
- ``claims``: who is on a failure group or a dead letter, released by hand or on resolution;
- ``admin``: extra DLQ topics and runbooks;
- ``retention``: retention policies and the purge of closed dead letters;
- ``notify``: after-commit notifications of the console pages;
- ``exports``: CSV / JSON Lines export of a filter's dead letters, masked and audited;
- ``decoded``: a registry-format payload decoded with its writer schema, and a JSON fix framed again;
- ``errors``: InvalidRequest (400), Conflict (409), ReplayFailed and RegistryUnavailable (503).
"""

from dlq.services.admin import Recount, delete_runbook, recount, register_topic, runbooks_for, save_runbook
from dlq.services.approvals import approve, reject, request_delete
from dlq.services.bulk import (
    BULK_RUNNABLE,
    BULK_TRANSITIONS,
    BulkPreview,
    BulkTransition,
    cancel_bulk,
    create_bulk,
    pause_bulk,
    preview_bulk,
    resume_bulk,
    run_bulk,
    stale_bulk_ids,
)
from dlq.services.bulk_fix import (
    BulkFix,
    BulkFixPreview,
    FixSample,
    create_bulk_fix,
    parse_fix,
    preview_bulk_fix,
)
from dlq.services.claims import ClaimView, claim, claims_for, group_claims, release_resolved
from dlq.services.claims import release as release_claim
from dlq.services.decoded import DecodedPayload, decode_with, decoded_payload, stored_fix
from dlq.services.errors import Conflict, InvalidRequest, RegistryUnavailable, ReplayFailed, WouldFailAgain
from dlq.services.exports import EXPORT_MAX_ROWS, DeadLetterExport, export_dead_letters
from dlq.services.fix_forward import replay_filters, revision_diff
from dlq.services.fix_forward import request_scan as request_fix_forward_scan
from dlq.services.fix_forward import run_scan as run_fix_forward_scan
from dlq.services.fixes import (
    DestinationOutcome,
    DraftCheck,
    PayloadCheck,
    check_draft,
    check_payload,
    current_payload,
    fix_payload,
    payload_diff,
)
from dlq.services.inspection import (
    ApprovalSummary,
    DlqCoordinates,
    FailedRevision,
    MessageInspection,
    PayloadRevisionView,
    ProducedAt,
    RecordFormatView,
    ReplaySummary,
    Sibling,
    SourceCoordinates,
    inspect_message,
    key_masked_teams,
    masked_paths_for,
    masking_for,
    visible_dead_letters,
)
from dlq.services.rendering import (
    MASK,
    UNMASKED,
    Masking,
    RenderedBytes,
    RenderedHeader,
    decode_headers,
    hex_dump,
    render_bytes,
    render_headers,
    withheld_payload,
)
from dlq.services.replays import (
    SettledReplays,
    allowed_targets,
    replay,
    replay_plan,
    resolve_in_doubt,
    skip,
    would_fail_again,
)
from dlq.services.retention import apply_retention, set_policy
from dlq.services.siblings import SiblingReplay, replay_with_siblings

__all__ = [
    "BULK_RUNNABLE",
    "BULK_TRANSITIONS",
    "EXPORT_MAX_ROWS",
    "MASK",
    "UNMASKED",
    "ApprovalSummary",
    "BulkFix",
    "BulkFixPreview",
    "BulkPreview",
    "BulkTransition",
    "ClaimView",
    "Conflict",
    "DeadLetterExport",
    "DecodedPayload",
    "DestinationOutcome",
    "DlqCoordinates",
    "DraftCheck",
    "FailedRevision",
    "FixSample",
    "InvalidRequest",
    "Masking",
    "MessageInspection",
    "PayloadCheck",
    "PayloadRevisionView",
    "ProducedAt",
    "RecordFormatView",
    "Recount",
    "RegistryUnavailable",
    "RenderedBytes",
    "RenderedHeader",
    "ReplayFailed",
    "ReplaySummary",
    "SettledReplays",
    "Sibling",
    "SiblingReplay",
    "SourceCoordinates",
    "WouldFailAgain",
    "allowed_targets",
    "apply_retention",
    "approve",
    "cancel_bulk",
    "check_draft",
    "check_payload",
    "claim",
    "claims_for",
    "create_bulk",
    "create_bulk_fix",
    "current_payload",
    "decode_headers",
    "decode_with",
    "decoded_payload",
    "delete_runbook",
    "export_dead_letters",
    "fix_payload",
    "group_claims",
    "hex_dump",
    "inspect_message",
    "key_masked_teams",
    "masked_paths_for",
    "masking_for",
    "parse_fix",
    "pause_bulk",
    "payload_diff",
    "preview_bulk",
    "preview_bulk_fix",
    "recount",
    "register_topic",
    "reject",
    "release_claim",
    "release_resolved",
    "render_bytes",
    "render_headers",
    "replay",
    "replay_filters",
    "replay_plan",
    "replay_with_siblings",
    "request_delete",
    "request_fix_forward_scan",
    "resolve_in_doubt",
    "resume_bulk",
    "revision_diff",
    "run_bulk",
    "run_fix_forward_scan",
    "runbooks_for",
    "save_runbook",
    "set_policy",
    "skip",
    "stale_bulk_ids",
    "stored_fix",
    "visible_dead_letters",
    "withheld_payload",
    "would_fail_again",
]
