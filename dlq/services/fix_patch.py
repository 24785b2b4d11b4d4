"""The fix of a bulk fix, and its application to one chunk of messages (``fix_chunk``, called by the bulk
runner ``dlq.services.bulk.run_bulk``); ``dlq.services.bulk_fix`` has the preview and the creation, over
the bulk rules.

A fix is either a JSON Patch (RFC 6902, applied by the ``jsonpatch`` library; paths are JSON Pointers,
RFC 6901) or a transform of the project's DSL (``pipelines.dsl``: DSL.md "Transforms", parsed and
evaluated by the same code the pipelines' Python side uses). ``parse_fix`` checks it before anything
runs: a bad patch or expression is an InvalidRequest naming the field (``fix.patch[2].path``,
``fix.transform``) and the reason (for an expression, the character position where it stops parsing).
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer
from django.db import transaction

from access import audit
from dlq.models import BulkAction, DeadLetter, PayloadRevision, Status
from dlq.services import holds
from dlq.services.decoded import decoded_payload, stored_fix
from dlq.services.errors import InvalidRequest
from dlq.services.fixes import check_payload, payload_diff
from pipelines.dsl import DslParseError, EvaluationError, ast, parse_transform
from pipelines.dsl.evaluate import ErrorHandling, apply_transform, decode_value, serialize_value

#: The six operations of RFC 6902 section 4, and the members each needs besides ``op`` and ``path``.
PATCH_OPERATIONS: Mapping[str, tuple[str, ...]] = {
    "add": ("value",),
    "remove": (),
    "replace": ("value",),
    "move": ("from",),
    "copy": ("from",),
    "test": ("value",),
}
#: Most operations one patch may hold (a fix is a few edits, not a new document).
MAX_PATCH_OPERATIONS = 100
#: Longest DSL transform accepted, in characters.
MAX_TRANSFORM_CHARS = 4000


class FixDoesNotApply(Exception):
    """The fix cannot be applied to one message's payload; ``reason`` says why in words that do not
    depend on the payload's values (so failures of a group add up under one reason)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class BulkFix:
    """A checked fix: ``patch`` (RFC 6902 operations, as given) or ``transform`` (DSL text and its parsed
    form ``node``); exactly one is set."""

    patch: tuple[dict[str, Any], ...] = ()
    transform: str = ""
    node: ast.Transform | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored in ``BulkAction.fix``: ``{"patch": [...]}`` or ``{"transform": "..."}``."""
        return {"patch": list(self.patch)} if self.node is None else {"transform": self.transform}

    def apply(self, value: bytes | None) -> bytes:
        """The fixed payload (compact JSON, the pipelines' serialisation ``serialize_value``) of ``value``.
        Raises FixDoesNotApply: the payload is not JSON, an operation's path is missing, a ``test``
        operation fails (RFC 6902 section 4.6: the whole patch is then not applied), the transform fails
        on this message."""
        try:
            document = decode_value(value)
        except EvaluationError as exc:
            raise FixDoesNotApply(f"the payload is not JSON ({exc.message})") from None
        if self.node is not None:
            try:
                result = apply_transform(self.node, document, error_handling=ErrorHandling())
            except EvaluationError as exc:
                raise FixDoesNotApply(f"the transform fails: {exc.error_type}") from None
        else:
            result = document  # freshly decoded: patched in place
            for number, operation in enumerate(self.patch, start=1):
                where = f"operation {number} ({operation['op']} {operation['path']})"
                try:
                    result = jsonpatch.apply_patch(result, [operation], in_place=True)
                except jsonpatch.JsonPatchTestFailed:
                    raise FixDoesNotApply(f"{where}: the test fails") from None
                except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException):
                    raise FixDoesNotApply(f"{where}: a path it needs is not in this payload") from None
        try:
            return serialize_value(result)
        except EvaluationError as exc:
            raise FixDoesNotApply(f"the result is not JSON ({exc.message})") from None


def _check_pointer(field: str, pointer: object) -> None:
    if not isinstance(pointer, str):
        raise InvalidRequest(field, "a JSON Pointer (RFC 6901) as a string, e.g. /payload/user/id")
    try:
        jsonpointer.JsonPointer(pointer)
    except jsonpointer.JsonPointerException as exc:
        raise InvalidRequest(field, f"not a JSON Pointer (RFC 6901): {exc}") from None


def parse_fix(data: object) -> BulkFix:
    """Check a fix as sent: ``{"patch": [operation, ...]}`` (RFC 6902 section 4: each an object with
    ``op`` one of add, remove, replace, move, copy, test, a ``path`` JSON Pointer, ``from`` for move and
    copy, ``value`` for add, replace and test) or ``{"transform": "DSL expression"}`` (DSL.md
    "Transforms"). Raises InvalidRequest naming the field (``fix``, ``fix.patch``, ``fix.patch[i].op``,
    ``fix.patch[i].path``, ``fix.patch[i].from``, ``fix.patch[i].value``, ``fix.transform``) and the
    reason; for an expression, the 0-based character position where it stops parsing."""
    if not isinstance(data, Mapping) or set(data) not in ({"patch"}, {"transform"}):
        raise InvalidRequest("fix", 'give either {"patch": [RFC 6902 operations]} or {"transform": "DSL"}')
    if "transform" in data:
        expression = data["transform"]
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidRequest("fix.transform", "a DSL transform expression, e.g. /payload/id:STRING:TRIM")
        if len(expression) > MAX_TRANSFORM_CHARS:
            raise InvalidRequest("fix.transform", f"at most {MAX_TRANSFORM_CHARS} characters")
        try:
            node = parse_transform(expression)
        except DslParseError as exc:
            raise InvalidRequest("fix.transform", f"at character {exc.position}: {exc.message}") from None
        return BulkFix(transform=expression, node=node)
    patch = data["patch"]
    if not isinstance(patch, list) or not patch:
        raise InvalidRequest("fix.patch", "a JSON Patch: a non-empty list of operations (RFC 6902)")
    if len(patch) > MAX_PATCH_OPERATIONS:
        raise InvalidRequest("fix.patch", f"at most {MAX_PATCH_OPERATIONS} operations")
    for index, operation in enumerate(patch):
        field = f"fix.patch[{index}]"
        if not isinstance(operation, Mapping):
            raise InvalidRequest(field, 'an operation object, e.g. {"op": "remove", "path": "/a"}')
        op = operation.get("op")
        if op not in PATCH_OPERATIONS:
            raise InvalidRequest(f"{field}.op", f"one of {', '.join(PATCH_OPERATIONS)} (RFC 6902 section 4)")
        _check_pointer(f"{field}.path", operation.get("path"))
        for member in PATCH_OPERATIONS[str(op)]:
            if member not in operation:
                raise InvalidRequest(f"{field}.{member}", f"{op} needs {member!r} (RFC 6902 section 4)")
        if "from" in PATCH_OPERATIONS[str(op)]:
            _check_pointer(f"{field}.from", operation["from"])
            if op == "move" and str(operation["path"]).startswith(str(operation["from"]) + "/"):
                raise InvalidRequest(f"{field}.path", "a value cannot be moved into one of its children")
    return BulkFix(patch=tuple(dict(operation) for operation in patch))


@dataclass(frozen=True)
class FixedPayload:
    """A bulk fix applied to one payload: ``value`` (what is stored) and ``before``/``after`` (what its diff
    compares: the payloads themselves, or for a registry-format pipeline the decoded records)."""

    value: bytes
    before: bytes | None
    after: bytes


def fixed_payload(fix: BulkFix, dead_letter: DeadLetter, current: bytes | None) -> FixedPayload:
    """``fix`` applied to ``current`` (the dead letter's current payload) as its pipeline reads it. A
    registry-format payload is decoded, fixed as its JSON record and framed again with its writer schema
    (``decoded.stored_fix``). Raises FixDoesNotApply (as ``BulkFix.apply``, and for a registry-format payload
    that does not decode or whose fixed record does not fit its schema), RegistryUnavailable."""
    decoded = decoded_payload(dead_letter, current)
    if decoded is None:
        fixed = fix.apply(current)
        return FixedPayload(fixed, current, fixed)
    if decoded.text is None:
        raise FixDoesNotApply("the payload does not decode with its schema: fix it alone")
    after = fix.apply(decoded.text)
    if after == decoded.text:
        return FixedPayload(current or b"", decoded.text, after)  # unchanged: the caller says so
    try:
        framed = stored_fix(dead_letter, after)
    except InvalidRequest:
        raise FixDoesNotApply("the fixed record does not fit the record's schema") from None
    return FixedPayload(framed, decoded.text, after)


def current_payloads(ids: Sequence[int]) -> dict[int, tuple[int, bytes]]:
    """The newest payload revision of each of ``ids`` that has one, as (number, value) (one query)."""
    latest: dict[int, tuple[int, bytes]] = {}
    for dead_letter_id, number, value in (
        PayloadRevision.objects.filter(dead_letter_id__in=list(ids))
        .order_by("dead_letter_id", "number")
        .values_list("dead_letter_id", "number", "value")
    ):
        latest[dead_letter_id] = (number, bytes(value))
    return latest


#: The reason a message is left alone when the fix would not change its payload.
UNCHANGED = "the fix changes nothing in this payload"


def fix_chunk(bulk: BulkAction, ids: Sequence[int]) -> tuple[int, int, int]:
    """Apply ``bulk``'s fix to the still-parked of ``ids`` in one transaction; returns (handled, fixed,
    left unchanged). On PostgreSQL a row another transaction holds (a single fix or replay) is skipped
    (``SKIP LOCKED``), not waited for. Each fixed message gets a new ``PayloadRevision`` (its diff, its
    check against the pipeline's current revision) and one ``dlq.fix`` audit event by the bulk action's
    creator naming the bulk action; each message left unchanged is counted under its reason in
    ``bulk.fix_failures``; one a pending delete request holds is left alone too, listed in
    ``bulk.left_out`` with the reason (``holds``)."""
    fix = parse_fix(bulk.fix)
    reason = f"bulk fix #{bulk.pk}: {bulk.reason}"
    failures: Counter[str] = Counter()
    revisions: list[PayloadRevision] = []
    entries: list[audit.Entry] = []
    with transaction.atomic():
        rows = list(
            DeadLetter.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("pipeline__current_revision")
            .filter(id__in=list(ids), status=Status.PARKED)
            .order_by("id")
        )
        held = holds.held_by_pending_delete(row.pk for row in rows)
        holds.record_left_out(bulk.pk, held)
        rows = [row for row in rows if row.pk not in held]
        latest = current_payloads([row.pk for row in rows])
        specs: dict[int, Any] = {}  # one parsed spec per pipeline revision, not one per message
        for row in rows:
            number, current = latest.get(row.pk, (0, bytes(row.value) if row.value is not None else None))
            try:
                result = fixed_payload(fix, row, current)
            except FixDoesNotApply as exc:
                failures[exc.reason] += 1
                continue
            fixed = result.value
            if fixed == current:
                failures[UNCHANGED] += 1
                continue
            revision = row.pipeline.current_revision if row.pipeline is not None else None
            if revision is not None:
                row.pipeline.current_revision = specs.setdefault(revision.pk, revision)  # type: ignore[union-attr]
            check = check_payload(dead_letter=row, value=fixed)
            revisions.append(
                PayloadRevision(
                    dead_letter=row,
                    number=number + 1,
                    value=fixed,
                    diff=payload_diff(result.before, result.after),
                    reason=reason,
                    author=bulk.created_by,
                    dsl_check=check.to_json() if check is not None else {},
                )
            )
            entries.append(
                audit.Entry(
                    action="dlq.fix",
                    target_type="dead_letter",
                    target_id=row.pk,
                    reason=reason,
                    before=base64.b64encode(current or b"").decode(),
                    after=base64.b64encode(fixed).decode(),
                    details={
                        "payload_revision": number + 1,
                        "would_pass": check.would_pass if check is not None else None,
                        "bulk": bulk.pk,
                    },
                )
            )
        PayloadRevision.objects.bulk_create(revisions)
        audit.record_many(actor=bulk.created_by, entries=entries)
        if failures:
            stored = (
                BulkAction.objects.select_for_update().values_list("fix_failures", flat=True).get(pk=bulk.pk)
            )
            merged = Counter(stored or {})
            merged.update(failures)
            BulkAction.objects.filter(pk=bulk.pk).update(fix_failures=dict(merged))
    return len(rows) + len(held), len(revisions), sum(failures.values()) + len(held)
