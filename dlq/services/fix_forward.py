"""Fix forward: when the pipeline was wrong, not the data. After a new revision of a pipeline goes live (a
restart applied it), which of its parked dead letters would that revision now pass, where the revision that
dead-lettered them did not?

A scan (``FixForwardScan``) is requested when a run of a new revision reaches RUNNING (the
``pipelines.signals.revision_live`` receiver, ``on_revision_live``) or by an operator (``request_scan``), and
computed by a worker off the request path (``run_scan``, chunk by chunk, ``checked`` of ``total``). Each parked
dead letter that an older revision dead-lettered (its ``DeadLetter.revision``), with the payload a replay
would send (its latest fix, else the original), is judged at the destination it failed:

- **candidate**: the live revision passes it there (``replays.would_fail_again`` is empty: the evaluator the
  Spark job agrees with, topic limits included) and its own revision still dead-letters it: the revision is
  what changed, so replaying it delivers it;
- **still failing**: the live revision dead-letters it too;
- **unchanged**: both revisions pass it: its failure was not the pipeline's logic (a broker refusal, a retry
  that ran out), so the revision diff is not why a replay would work now;
- **unknown**: nothing to compare with (no revision recorded, a revision that no longer parses, no value,
  a source topic the pipeline no longer reads).

Replaying exactly the candidates, to exactly the destinations they failed, is a bulk replay whose filter
names the scan (``MessageFilter(fix_forward=scan.id)``): the bulk rules apply unchanged (a dry-run count, a
rate limit, an approver above the threshold), and a replay is scoped to the failed destination already
(``PipelineTopics.scope``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Max, Q, QuerySet
from django.utils import timezone

from access import audit
from access.models import Role
from access.permissions import require_role
from dlq import signals
from dlq.models import DeadLetter, FixForwardCandidate, FixForwardScan, FixForwardState, Status
from dlq.services.bulk import latest_payloads
from dlq.services.errors import InvalidRequest, RegistryUnavailable
from dlq.services.fixes import replayed_message
from dlq.services.replays import PipelineTopics, pipeline_topics, would_fail_again
from pipelines.formats import RegistryUnreachable, formats_for
from pipelines.models import Pipeline, PipelineRevision
from pipelines.services import dry_run, spec_diff
from pipelines.spec import PipelineSpec, SpecError
from streamforge_core.contract import ALL_DESTINATIONS

logger = logging.getLogger(__name__)

#: The Celery task that runs a scan (``dlq.tasks.run_fix_forward``), sent by name: no import of the tasks.
RUN_FIX_FORWARD_TASK = "dlq.run_fix_forward"
#: Dead letters judged per chunk; progress is saved after each.
CHUNK_SIZE = 200
VERDICTS = ("candidates", "still_failing", "unchanged", "unknown")


def _older_parked(pipeline: Pipeline, revision: int) -> QuerySet[DeadLetter]:
    """The pipeline's parked dead letters that a revision before ``revision`` failed (or that carry none)."""
    return DeadLetter.objects.filter(pipeline=pipeline, status=Status.PARKED).filter(
        Q(revision__lt=revision) | Q(revision__isnull=True)
    )


def request_scan(
    *, pipeline: Pipeline, actor: User | None, trigger: str = "manual", previous_revision: int | None = None
) -> FixForwardScan:
    """Queue a scan of ``pipeline``'s parked dead letters against its current revision, frozen to the dead
    letters parked now (``max_id``); a worker runs it once this transaction commits. ``actor`` None is the
    system (a revision went live); a person needs the operator role in the pipeline's team. The diff shown
    is from ``previous_revision`` (default: the newest revision that dead-lettered any of them). Audited.
    Raises PermissionDenied, InvalidRequest (``pipeline``: it has no revision)."""
    if actor is not None:
        require_role(actor, pipeline.team, Role.OPERATOR)
    revision = pipeline.current_revision
    if revision is None:
        raise InvalidRequest("pipeline", f"pipeline {pipeline.name} has no revision to check against")
    with transaction.atomic():
        scope = _older_parked(pipeline, revision.number)
        max_id = scope.order_by("-id").values_list("id", flat=True).first() or 0
        if previous_revision is None:  # compare with the newest revision that dead-lettered any of them
            previous_revision = scope.aggregate(newest=Max("revision"))["newest"]
        scan = FixForwardScan.objects.create(
            pipeline=pipeline,
            team=pipeline.team,
            revision=revision.number,
            previous_revision=previous_revision,
            trigger=trigger,
            max_id=max_id,
            total=scope.filter(id__lte=max_id).count(),
            requested_by=actor,
        )
        audit.record(
            actor=actor,
            action="fix_forward.requested",
            target_type="fix_forward",
            target_id=scan.pk,
            reason=f"revision {revision.number} of {pipeline.name}",
            details={"pipeline": pipeline.name, "revision": revision.number, "trigger": trigger,
                     "total": scan.total},
        )  # fmt: skip
        transaction.on_commit(lambda: enqueue_scan(scan.pk))
    return scan


def revision_diff(scan: FixForwardScan) -> str:
    """The unified diff of the pipeline's spec from ``scan.previous_revision`` to ``scan.revision`` (empty
    when the scan names no previous revision)."""
    if scan.previous_revision is None:
        return ""
    specs = dict(
        PipelineRevision.objects.filter(
            pipeline_id=scan.pipeline_id, number__in=(scan.previous_revision, scan.revision)
        ).values_list("number", "spec")
    )
    if scan.revision not in specs:
        return ""
    return spec_diff(
        specs.get(scan.previous_revision),
        specs[scan.revision],
        old_label=f"revision {scan.previous_revision}",
        new_label=f"revision {scan.revision}",
    )


def replay_filters(scan: FixForwardScan) -> dict[str, Any]:
    """The ``MessageFilter`` JSON of exactly the scan's candidates (what a bulk replay of them takes)."""
    return {"pipeline": scan.pipeline.name, "fix_forward": scan.pk}


def enqueue_scan(scan_id: int) -> None:
    """Send scan ``scan_id`` to a Celery worker (``RUN_FIX_FORWARD_TASK``)."""
    current_app.send_task(RUN_FIX_FORWARD_TASK, args=(scan_id,))


def on_revision_live(*, pipeline_id: int, revision: int, previous_revision: int | None, **_: Any) -> None:
    """``pipelines.signals.revision_live`` receiver: a scan for the new revision when the pipeline has
    parked dead letters an older revision made, and none was requested for this revision yet."""
    pipeline = Pipeline.objects.select_related("team", "current_revision").filter(pk=pipeline_id).first()
    if pipeline is None or pipeline.current_revision is None or pipeline.current_revision.number != revision:
        return
    if FixForwardScan.objects.filter(pipeline=pipeline, revision=revision).exists():
        return
    if not _older_parked(pipeline, revision).exists():
        return
    request_scan(pipeline=pipeline, actor=None, trigger="revision_live", previous_revision=previous_revision)


@dataclass
class _Tally:
    """Verdict counts of one (destination, failure group, error type)."""

    destination: str
    group: int
    error_type: str
    sample: str
    candidates: int = 0
    still_failing: int = 0
    unchanged: int = 0
    unknown: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "destination": self.destination,
            "group": self.group,
            "error_type": self.error_type,
            "sample_error": self.sample,
            **{verdict: getattr(self, verdict) for verdict in VERDICTS},
        }


class _Judge:
    """Judges dead letters of one pipeline against its live revision and their own; specs parsed once."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.topics: PipelineTopics = pipeline_topics(pipeline.pk)
        self._specs: dict[int, PipelineSpec | None] = {}

    def old_spec(self, number: int | None) -> PipelineSpec | None:
        if number is None:
            return None
        if number not in self._specs:
            row = PipelineRevision.objects.filter(pipeline=self.pipeline, number=number).first()
            try:
                self._specs[number] = row.parsed if row is not None else None
            except SpecError:
                self._specs[number] = None
        return self._specs[number]

    def verdict(self, dead_letter: DeadLetter, value: bytes | None) -> str:
        """``candidates``, ``still_failing``, ``unchanged`` or ``unknown`` (see the module docstring).
        Raises RegistryUnavailable when a registry-format pipeline's registry cannot serve."""
        if value is None or dead_letter.source_topic not in self.topics.sources:
            return "unknown"
        if would_fail_again(dead_letter, value, topics=self.topics):
            return "still_failing"
        spec = self.old_spec(dead_letter.revision)
        if spec is None:
            return "unknown"
        return "candidates" if self._fails_under(spec, dead_letter, value) else "unchanged"

    def _fails_under(self, spec: PipelineSpec, dead_letter: DeadLetter, value: bytes) -> bool:
        uses_registry = spec.source.uses_registry or any(d.format != "json" for d in spec.destinations)
        try:
            formats = formats_for(spec, self.pipeline.cluster) if uses_registry else None
            [results] = dry_run(spec=spec, messages=[replayed_message(dead_letter, value)], formats=formats)
        except RegistryUnreachable as exc:
            raise RegistryUnavailable(str(exc)) from None
        names = _failed_destinations(dead_letter.destination)
        return any(
            r.outcome == "dead_lettered" and (names is None or r.destination in names) for r in results
        )


def _failed_destinations(destination: str) -> set[str] | None:
    """The destination names a dead letter failed (None: every one)."""
    names = {n.strip() for n in destination.split(",") if n.strip()}
    return None if not names or ALL_DESTINATIONS in names else names


def run_scan(*, scan_id: int, chunk_size: int = CHUNK_SIZE) -> FixForwardScan:
    """Run a queued scan (a worker's task): claim it (QUEUED -> RUNNING, so two workers cannot both run it),
    judge its dead letters chunk by chunk, store the candidates and the counts, end DONE (or FAILED with the
    reason: the revision changed again, the registry could not serve); one with candidates sends
    ``signals.fix_forward_found`` (notified). Returns the scan as it ended; a scan another worker claimed is
    returned untouched."""
    claimed = FixForwardScan.objects.filter(pk=scan_id, state=FixForwardState.QUEUED).update(
        state=FixForwardState.RUNNING, started_at=timezone.now()
    )
    scan = FixForwardScan.objects.select_related("pipeline__current_revision", "pipeline__cluster").get(
        pk=scan_id
    )
    if not claimed:
        return scan
    pipeline = scan.pipeline
    try:
        current = pipeline.current_revision.number if pipeline.current_revision else None
        if current != scan.revision:
            raise _Stop(f"revision {scan.revision} is no longer current (now {current}): run a new scan")
        tallies = _judge_all(scan, _Judge(pipeline), chunk_size)
    except (_Stop, RegistryUnavailable) as exc:
        FixForwardScan.objects.filter(pk=scan.pk).update(
            state=FixForwardState.FAILED, error=str(exc), finished_at=timezone.now()
        )
    else:
        groups = sorted(
            (t.as_json() for t in tallies.values()),
            key=lambda g: (-g["candidates"], -g["still_failing"], g["destination"], g["group"]),
        )
        FixForwardScan.objects.filter(pk=scan.pk).update(
            state=FixForwardState.DONE, groups=groups, finished_at=timezone.now()
        )
    scan.refresh_from_db()
    if scan.state == FixForwardState.DONE and scan.candidates:
        signals.send_on_commit(signals.fix_forward_found, scan_id=scan.pk)
    audit.record(
        actor=None,
        action=f"fix_forward.{scan.state}",
        target_type="fix_forward",
        target_id=scan.pk,
        details={"checked": scan.checked, "candidates": scan.candidates, "still_failing": scan.still_failing,
                 "unchanged": scan.unchanged, "unknown": scan.unknown, "error": scan.error},
    )  # fmt: skip
    return scan


class _Stop(Exception):
    """The scan cannot go on; its message is the reason shown."""


def _judge_all(scan: FixForwardScan, judge: _Judge, chunk_size: int) -> dict[tuple[str, int, str], _Tally]:
    scope = _older_parked(scan.pipeline, scan.revision).filter(id__lte=scan.max_id)
    tallies: dict[tuple[str, int, str], _Tally] = {}
    cursor = 0
    while True:
        rows = list(
            scope.filter(id__gt=cursor)
            .select_related("pipeline__current_revision", "group")
            .order_by("id")[:chunk_size]
        )
        if not rows:
            return tallies
        fixes = latest_payloads([r.pk for r in rows])
        found: list[FixForwardCandidate] = []
        counts = dict.fromkeys(VERDICTS, 0)
        for row in rows:
            value = (
                fixes[row.pk][1] if row.pk in fixes else (bytes(row.value) if row.value is not None else None)
            )
            verdict = judge.verdict(row, value)
            counts[verdict] += 1
            key = (row.destination, row.group_id, row.error_type)
            tally = tallies.setdefault(
                key, _Tally(row.destination, row.group_id, row.error_type, row.error_message[:300])
            )
            setattr(tally, verdict, getattr(tally, verdict) + 1)
            if verdict == "candidates":
                found.append(FixForwardCandidate(scan=scan, dead_letter=row, destination=row.destination))
        _save_chunk(scan.pk, found, counts, len(rows))
        cursor = rows[-1].pk


def _save_chunk(
    scan_id: int, found: Iterable[FixForwardCandidate], counts: dict[str, int], checked: int
) -> None:
    with transaction.atomic():
        FixForwardCandidate.objects.bulk_create(list(found), ignore_conflicts=True)
        FixForwardScan.objects.filter(pk=scan_id).update(
            checked=F("checked") + checked, **{verdict: F(verdict) + n for verdict, n in counts.items()}
        )
