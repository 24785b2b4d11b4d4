"""Redrive policies: replay a pipeline's parked dead letters automatically, on a schedule, throttled, with a
limit of attempts per dead letter, and a brake.

A policy (``RedrivePolicy``) names what it replays (error types, by default only the transient
``RetryExhausted``, or one failure group; optionally one destination) and how: the delay a dead letter waits
parked first, at most ``max_attempts`` replays by this policy along a dead letter's chain of failing again
(a replayed record that fails again is a new dead letter whose ``replay_of`` is the one replayed), at most
``max_per_run`` per run at ``rate_limit`` messages per second, a run at most every ``interval_seconds``,
started only inside a UTC time-of-day window when one is set. Dead letters someone has claimed
(``dlq.services.claims``: "investigating") are left alone, and so are those a pending delete request holds
(the bulk runner's rule).

Each run is a bulk replay (``BulkAction`` with ``redrive_policy`` set) created by the beat's ``tick``: its
progress, pause and cancel, its audit events and its page are the bulk action's. A replay goes only to the
destinations the dead letter failed (``replays.PipelineTopics.scope``), as every bulk replay does.

The brake: on every tick an active policy looks at its replays since ``max(active_since, now - 4 x
interval)``; when at least ``pause_min_replays`` of them are settled and the share that failed again (came
back to the DLQ, or the broker refused the produce) is above ``pause_threshold``, the policy pauses itself,
says why, and sends ``dlq.signals.redrive_paused`` (a notification to the team's channels).

Four eyes: creating a policy, and any change that widens one (more error types, another group or none,
any destination, a shorter delay or interval, more attempts, a higher rate or run size, a larger window, a
more tolerant brake), waits for an approver other than the requester (``ApprovalRequest`` of kind
``redrive`` carrying the settings asked for). A change that only narrows applies at once. Every change is
audited with the settings before and after.

Two beats may tick at once: a run is claimed by a conditional UPDATE of the policy's ``next_run_at``
(``WHERE next_run_at = <the value read>``), so exactly one of them creates it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from access import audit
from access.models import Role
from access.permissions import AnyUser, require_role, visible_teams
from dlq import signals
from dlq.filters import MAX_IDS, MessageFilter
from dlq.models import (
    ApprovalKind,
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    BulkKind,
    BulkState,
    Claim,
    DeadLetter,
    FailureGroup,
    RedrivePolicy,
    RedriveState,
    Replay,
    ReplayState,
    Status,
)
from dlq.services import holds
from dlq.services.bulk import BULK_TRANSITIONS, enqueue_bulk
from dlq.services.errors import Conflict, InvalidRequest
from pipelines.models import Pipeline
from streamforge_core import contract as c

logger = logging.getLogger(__name__)

#: The beat's task that calls ``tick`` (``dlq.tasks.redrive_tick``).
TICK_TASK = "dlq.redrive_tick"
#: What a new policy replays when it names no error type and no group: the transient failures only.
DEFAULT_ERROR_TYPES = (c.RETRY_EXHAUSTED,)
#: Error types a policy may name: the dead-letter types of the StreamForge spec (``contract.DLQ_ERROR_TYPES``).
REDRIVABLE_TYPES = tuple(c.DLQ_ERROR_TYPES)
#: The brake looks back this many intervals.
BRAKE_INTERVALS = 4
#: Dead letters read per round while looking for a run's selection.
SCAN_CHUNK = 1000


@dataclass(frozen=True)
class PolicySettings:
    """What a policy replays and how (see ``RedrivePolicy``). Times are UTC; durations in seconds; the rate
    in messages per second; ``pause_threshold`` a share 0..1."""

    error_types: tuple[str, ...] = DEFAULT_ERROR_TYPES
    group: int | None = None
    destination: str = ""
    delay_seconds: int = 300
    max_attempts: int = 3
    rate_limit: int = 10
    max_per_run: int = 500
    interval_seconds: int = 300
    window_start: time | None = None
    window_end: time | None = None
    pause_threshold: float = 0.5
    pause_min_replays: int = 10

    #: (field, smallest, largest) of the integer settings.
    BOUNDS = (
        ("delay_seconds", 0, 30 * 86400),
        ("max_attempts", 1, 20),
        ("rate_limit", 1, 1000),
        ("max_per_run", 1, MAX_IDS),
        ("interval_seconds", 10, 86400),
        ("pause_min_replays", 1, 10_000),
    )

    @classmethod
    def of(cls, policy: RedrivePolicy) -> PolicySettings:
        """The settings a stored policy runs with."""
        values = {f.name: getattr(policy, "group_id" if f.name == "group" else f.name) for f in _FIELDS}
        return cls(**values | {"error_types": tuple(sorted(policy.error_types or ()))})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, base: PolicySettings | None = None) -> PolicySettings:
        """``base`` (the defaults when None) with the settings ``data`` gives (unknown keys are not read
        here; the API refuses them). ``error_types`` a list of error types, ``group`` a failure group id or
        null, the integers within ``BOUNDS``, ``window_start`` / ``window_end`` "HH:MM" (both or neither),
        ``pause_threshold`` 0..1. Raises InvalidRequest naming the field."""
        values = dataclasses.asdict(base or cls())
        values["error_types"] = tuple(values["error_types"])
        if "error_types" in data:
            raw = data["error_types"]
            if raw in (None, ""):
                raw = []
            if isinstance(raw, str):
                raw = [part.strip() for part in raw.split(",") if part.strip()]
            if not isinstance(raw, list | tuple) or not all(isinstance(t, str) for t in raw):
                raise InvalidRequest("error_types", "a list of error types")
            unknown = sorted(set(raw) - set(REDRIVABLE_TYPES))
            if unknown:
                raise InvalidRequest(
                    "error_types", f"unknown error type {unknown[0]!r}; one of {', '.join(REDRIVABLE_TYPES)}"
                )
            values["error_types"] = tuple(sorted(set(raw)))
        if "group" in data:
            values["group"] = _optional_id(data["group"])
        if "destination" in data:
            destination = str(data["destination"] or "").strip()
            if len(destination) > 128:
                raise InvalidRequest("destination", "at most 128 characters")
            values["destination"] = destination
        for name, low, high in cls.BOUNDS:
            if name in data:
                values[name] = _bounded_int(name, data[name], low, high)
        for name in ("window_start", "window_end"):
            if name in data:
                values[name] = _time_of_day(name, data[name])
        if "pause_threshold" in data:
            try:
                threshold = float(data["pause_threshold"])
            except (TypeError, ValueError):
                raise InvalidRequest("pause_threshold", "a share between 0 and 1, e.g. 0.5") from None
            if not 0 <= threshold <= 1:
                raise InvalidRequest("pause_threshold", "a share between 0 and 1, e.g. 0.5")
            values["pause_threshold"] = threshold
        made = cls(**values)
        if (made.window_start is None) != (made.window_end is None):
            raise InvalidRequest("window_end", "a window needs both its start and its end (HH:MM, UTC)")
        if made.window_start is not None and made.window_start == made.window_end:
            raise InvalidRequest("window_end", "an empty window: the end must differ from the start")
        if not made.error_types and made.group is None:
            raise InvalidRequest("error_types", "name at least one error type, or a failure group")
        return made

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: times as "HH:MM", error types as a list."""
        data = dataclasses.asdict(self)
        data["error_types"] = list(self.error_types)
        for name in ("window_start", "window_end"):
            data[name] = getattr(self, name).strftime("%H:%M") if getattr(self, name) else None
        return data

    def window_minutes(self) -> set[int]:
        """The minutes of the UTC day (0..1439) in which a run may start; every minute without a window."""
        if self.window_start is None or self.window_end is None:
            return set(range(1440))
        start = self.window_start.hour * 60 + self.window_start.minute
        end = self.window_end.hour * 60 + self.window_end.minute
        if start < end:
            return set(range(start, end))
        return set(range(start, 1440)) | set(range(0, end))  # across midnight

    def in_window(self, now: datetime) -> bool:
        """Whether a run may start at ``now``."""
        utc = now.astimezone(UTC)
        return utc.hour * 60 + utc.minute in self.window_minutes()


_FIELDS = dataclasses.fields(PolicySettings)
#: The names of the settings, as requests and ``as_json`` give them.
SETTING_NAMES = tuple(f.name for f in _FIELDS)


def _optional_id(raw: Any) -> int | None:
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw))
    except (TypeError, ValueError):
        raise InvalidRequest("group", "a failure group id (an integer) or null") from None
    if not 0 < value < 2**63:
        raise InvalidRequest("group", "a failure group id (an integer) or null")
    return value


def _bounded_int(name: str, raw: Any, low: int, high: int) -> int:
    if isinstance(raw, bool):
        raise InvalidRequest(name, f"an integer from {low} to {high}")
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        raise InvalidRequest(name, f"an integer from {low} to {high}") from None
    if not low <= value <= high:
        raise InvalidRequest(name, f"an integer from {low} to {high}")
    return value


def _time_of_day(name: str, raw: Any) -> time | None:
    if raw in (None, ""):
        return None
    if isinstance(raw, time):
        return raw
    try:
        hours, minutes = str(raw).strip().split(":")
        return time(int(hours), int(minutes))
    except ValueError:
        raise InvalidRequest(name, "a UTC time of day, HH:MM (e.g. 02:00)") from None


def widened(old: PolicySettings, new: PolicySettings) -> list[str]:
    """The settings in which ``new`` lets the policy replay more, sooner, faster or longer than ``old``
    (each one needs an approver), in field order; empty when ``new`` only narrows or keeps."""
    wider: list[str] = []
    if old.group is not None:
        if new.group != old.group:
            wider.append("group")
    elif new.group is None and not set(new.error_types) <= set(old.error_types):
        wider.append("error_types")
    if old.destination and new.destination != old.destination:
        wider.append("destination")
    more_is_wider = ("max_attempts", "rate_limit", "max_per_run", "pause_min_replays")
    wider += [name for name in more_is_wider if getattr(new, name) > getattr(old, name)]
    wider += [
        name for name in ("delay_seconds", "interval_seconds") if getattr(new, name) < getattr(old, name)
    ]
    if not new.window_minutes() <= old.window_minutes():
        wider.append("window")
    if new.pause_threshold > old.pause_threshold:
        wider.append("pause_threshold")
    return wider


# ----------------------------------------------------------------------------------------- who sees what


def visible_policies(user: AnyUser) -> QuerySet[RedrivePolicy]:
    """The policies of the teams ``user`` may see, deleted ones included (their runs keep their pages)."""
    return RedrivePolicy.objects.filter(team__in=visible_teams(user)).select_related("pipeline", "team")


def pending_change(policy: RedrivePolicy) -> ApprovalRequest | None:
    """The approval request of the policy waiting for a decision, if any (its creation or a widening)."""
    return (
        policy.approvals.filter(kind=ApprovalKind.REDRIVE, state=ApprovalState.PENDING)
        .select_related("requested_by")
        .first()
    )


# ------------------------------------------------------------------------------------------- life cycle


def _check_group(pipeline: Pipeline, settings: PolicySettings) -> None:
    if (
        settings.group is not None
        and not FailureGroup.objects.filter(
            pk=settings.group, pipeline_name=pipeline.name, team=pipeline.team
        ).exists()
    ):
        raise InvalidRequest("group", f"no failure group {settings.group} of pipeline {pipeline.name}")


def _request_approval(
    *, actor: User, policy: RedrivePolicy, settings: PolicySettings, reason: str
) -> ApprovalRequest:
    approval = ApprovalRequest.objects.create(
        kind=ApprovalKind.REDRIVE,
        team=policy.team,
        redrive_policy=policy,
        change=settings.as_json(),
        reason=reason,
        requested_by=actor,
    )
    signals.send_on_commit(signals.approval_requested, approval_id=approval.pk)
    return approval


def create_policy(*, actor: User, pipeline: Pipeline, name: str, settings: PolicySettings) -> RedrivePolicy:
    """A new policy for ``pipeline`` (its team is the pipeline's: the actor needs the operator role there),
    waiting for an approver other than the actor. ``name`` 1..100 characters, unique among the pipeline's
    live policies. Audited (``redrive_policy.create``). Raises PermissionDenied, InvalidRequest (``name``,
    ``group``)."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidRequest("name", "a name of 1 to 100 characters")
    _check_group(pipeline, settings)
    stored = settings.as_json() | {"window_start": settings.window_start, "window_end": settings.window_end}
    try:
        with transaction.atomic():
            policy = RedrivePolicy.objects.create(
                name=name,
                team=pipeline.team,
                pipeline=pipeline,
                state=RedriveState.AWAITING_APPROVAL,
                created_by=actor,
                **stored,
            )
            approval = _request_approval(
                actor=actor,
                policy=policy,
                settings=settings,
                reason=f"create redrive policy {name} of {pipeline.name}: {describe(settings)}",
            )
            audit.record(
                actor=actor,
                action="redrive_policy.create",
                target_type="redrive_policy",
                target_id=policy.pk,
                reason=f"{pipeline.name}: {name}",
                after=settings.as_json(),
                details={"pipeline": pipeline.name, "approval": approval.pk, "settings": settings.as_json()},
            )
    except IntegrityError:
        raise InvalidRequest(
            "name", f"pipeline {pipeline.name} has a redrive policy named {name!r}"
        ) from None
    return policy


def update_policy(
    *, actor: User, policy: RedrivePolicy, changes: Mapping[str, Any], reason: str = ""
) -> ApprovalRequest | None:
    """Change a policy's settings (operator role). A change that only narrows applies at once and returns
    None; one that widens any setting (``widened``) is stored as an approval request carrying the whole new
    settings, returned, and applied when an approver other than the actor approves it. Audited with the
    settings before and after (``redrive_policy.update`` / ``redrive_policy.widen_requested``).
    Raises PermissionDenied, InvalidRequest, Conflict (the policy is deleted or rejected, or a change of it
    already waits for a decision)."""
    require_role(actor, policy.team, Role.OPERATOR)
    with transaction.atomic():
        locked = (
            RedrivePolicy.objects.select_for_update().select_related("pipeline", "team").get(pk=policy.pk)
        )
        if locked.state in (RedriveState.DELETED, RedriveState.REJECTED):
            raise Conflict(f"redrive policy {locked.name} is {locked.state}")
        if pending_change(locked) is not None:
            raise Conflict(f"a change of redrive policy {locked.name} already waits for an approver")
        old = PolicySettings.of(locked)
        new = PolicySettings.from_mapping(changes, base=old)
        _check_group(locked.pipeline, new)
        if new == old:
            return None
        wider = widened(old, new)
        if wider:
            approval = _request_approval(
                actor=actor,
                policy=locked,
                settings=new,
                reason=f"widen redrive policy {locked.name} of {locked.pipeline.name} ({', '.join(wider)}): "
                f"{describe(new)}" + (f"; {reason.strip()}" if reason.strip() else ""),
            )
            audit.record(
                actor=actor,
                action="redrive_policy.widen_requested",
                target_type="redrive_policy",
                target_id=locked.pk,
                reason=reason,
                before=old.as_json(),
                after=new.as_json(),
                details={
                    "widens": wider,
                    "approval": approval.pk,
                    "before": old.as_json(),
                    "after": new.as_json(),
                },
            )
            return approval
        _apply(locked, new)
        audit.record(
            actor=actor,
            action="redrive_policy.update",
            target_type="redrive_policy",
            target_id=locked.pk,
            reason=reason,
            before=old.as_json(),
            after=new.as_json(),
            details={"before": old.as_json(), "after": new.as_json()},
        )
    return None


def _apply(policy: RedrivePolicy, settings: PolicySettings) -> None:
    for field in _FIELDS:
        value = getattr(settings, field.name)
        setattr(policy, "group_id" if field.name == "group" else field.name, value)
    policy.error_types = list(settings.error_types)
    policy.save()


def approval_decided(*, actor: User, approval: ApprovalRequest, approved: bool) -> None:
    """Carry out the decision on a ``redrive`` approval request, in the deciding transaction
    (``dlq.services.approvals`` has checked the approver and marked the request): a creation approved makes
    the policy ACTIVE (its first run is due now), rejected makes it REJECTED; a widening approved applies the
    settings the request carries, rejected leaves the policy as it was. Audited. Raises Conflict when the
    policy was deleted meanwhile (which rolls the decision back)."""
    assert approval.redrive_policy_id is not None
    policy = RedrivePolicy.objects.select_for_update().get(pk=approval.redrive_policy_id)
    if policy.state == RedriveState.DELETED:
        raise Conflict(f"redrive policy {policy.name} was deleted")
    now = timezone.now()
    creation = policy.state == RedriveState.AWAITING_APPROVAL
    if creation:
        policy.state = RedriveState.ACTIVE if approved else RedriveState.REJECTED
        if approved:
            policy.active_since = now
            policy.next_run_at = now
        policy.save()
    elif approved:
        old = PolicySettings.of(policy)
        new = PolicySettings.from_mapping(approval.change, base=old)
        _apply(policy, new)
        audit.record(
            actor=actor,
            action="redrive_policy.update",
            target_type="redrive_policy",
            target_id=policy.pk,
            reason=f"approved request {approval.pk} of {approval.requested_by.get_username()}",
            before=old.as_json(),
            after=new.as_json(),
            details={"approval": approval.pk, "before": old.as_json(), "after": new.as_json()},
        )


def _move(
    *, actor: User, policy: RedrivePolicy, sources: Iterable[str], target: str, action: str, reason: str,
    **fields: Any,
) -> RedrivePolicy:  # fmt: skip
    require_role(actor, policy.team, Role.OPERATOR)
    with transaction.atomic():
        moved = RedrivePolicy.objects.filter(pk=policy.pk, state__in=list(sources)).update(
            state=target, updated_at=timezone.now(), **fields
        )
        policy.refresh_from_db()
        if moved != 1:
            raise Conflict(f"redrive policy {policy.name} is {policy.state}")
        audit.record(
            actor=actor,
            action=action,
            target_type="redrive_policy",
            target_id=policy.pk,
            reason=reason,
            details={"pipeline": policy.pipeline.name, "to": target},
        )
    return policy


def pause_policy(*, actor: User, policy: RedrivePolicy, reason: str = "") -> RedrivePolicy:
    """Stop starting runs (a run under way goes on; pause or cancel it on its bulk page). Operator role.
    Raises PermissionDenied, Conflict (not active)."""
    why = f"paused by {actor.get_username()}" + (f": {reason.strip()}" if reason.strip() else "")
    return _move(
        actor=actor, policy=policy, sources=(RedriveState.ACTIVE,), target=RedriveState.PAUSED,
        action="redrive_policy.pause", reason=reason, paused_reason=why,
    )  # fmt: skip


def resume_policy(*, actor: User, policy: RedrivePolicy, reason: str = "") -> RedrivePolicy:
    """Start running again, its next run due now; replays before now no longer count to pause it.
    Operator role. Raises PermissionDenied, Conflict (not paused)."""
    now = timezone.now()
    return _move(
        actor=actor, policy=policy, sources=(RedriveState.PAUSED,), target=RedriveState.ACTIVE,
        action="redrive_policy.resume", reason=reason, paused_reason="", active_since=now, next_run_at=now,
    )  # fmt: skip


def delete_policy(*, actor: User, policy: RedrivePolicy, reason: str = "") -> RedrivePolicy:
    """Retire a policy for good (kept, as DELETED, for the audit trail and its runs); a pending approval
    request of it is cancelled. Operator role. Raises PermissionDenied, Conflict (already deleted)."""
    live = [s for s in RedriveState.values if s != RedriveState.DELETED]
    with transaction.atomic():
        policy = _move(
            actor=actor, policy=policy, sources=live, target=RedriveState.DELETED,
            action="redrive_policy.delete", reason=reason, next_run_at=None,
        )  # fmt: skip
        policy.approvals.filter(state=ApprovalState.PENDING).update(
            state=ApprovalState.CANCELLED, decided_at=timezone.now(), decision_reason="the policy was deleted"
        )
    return policy


# ------------------------------------------------------------------------------------------------ runs


def describe(settings: PolicySettings) -> str:
    """One line for people: what and how, e.g. "RetryExhausted after 300 s, at most 3 attempts, 500 per
    run at 10/s every 300 s, 02:00-05:00 UTC"."""
    what = (
        f"failure group {settings.group}" if settings.group is not None else ", ".join(settings.error_types)
    )
    where = f" at {settings.destination}" if settings.destination else ""
    window = (
        f", {settings.window_start:%H:%M}-{settings.window_end:%H:%M} UTC"
        if settings.window_start and settings.window_end
        else ""
    )
    return (
        f"{what}{where} after {settings.delay_seconds} s, at most {settings.max_attempts} attempts, "
        f"{settings.max_per_run} per run at {settings.rate_limit}/s every {settings.interval_seconds} s{window}"
    )


def eligible(policy: RedrivePolicy, *, now: datetime) -> QuerySet[DeadLetter]:
    """The parked dead letters the policy's filter and delay select at ``now``, before the attempt limit:
    its pipeline's, of its error types (or its group), at its destination if it names one, parked at least
    ``delay_seconds``, neither claimed (nor their group) nor held by a pending delete request."""
    qs = DeadLetter.objects.filter(
        pipeline_id=policy.pipeline_id,
        team_id=policy.team_id,
        status=Status.PARKED,
        last_failed_at__lte=now - timedelta(seconds=policy.delay_seconds),
    )
    if policy.group_id is not None:
        qs = qs.filter(group_id=policy.group_id)
    else:
        qs = qs.filter(error_type__in=list(policy.error_types))
    if policy.destination:
        qs = qs.filter(destination__in=(policy.destination, c.ALL_DESTINATIONS))
    open_claims = Claim.objects.filter(released_at__isnull=True)
    qs = qs.exclude(
        Exists(open_claims.filter(dead_letter=OuterRef("pk")))
        | Exists(open_claims.filter(group=OuterRef("group")))
    )
    return qs.exclude(Exists(holds.pending_deletes().filter(dead_letter=OuterRef("pk"))))


def attempts_made(policy: RedrivePolicy, ids: Iterable[int]) -> dict[int, int]:
    """For each dead letter id, how many times this policy replayed it or an earlier link of its chain of
    failing again (``replay_of``, followed back at most ``max_attempts`` links: beyond that the limit is
    reached anyway). One query per link for the whole list."""
    made = dict.fromkeys(ids, 0)
    link = {pk: pk for pk in made}  # dead letter -> the link of its chain looked at now
    for _ in range(policy.max_attempts + 1):
        if not link:
            break
        counted = dict(
            Replay.objects.filter(bulk__redrive_policy=policy, dead_letter_id__in=set(link.values()))
            .values("dead_letter_id")
            .annotate(n=Count("id"))
            .values_list("dead_letter_id", "n")
        )
        parents = dict(
            DeadLetter.objects.filter(pk__in=set(link.values()), replay_of__isnull=False).values_list(
                "pk", "replay_of_id"
            )
        )
        for pk, at in list(link.items()):
            made[pk] += counted.get(at, 0)
            if at in parents and made[pk] < policy.max_attempts:
                link[pk] = parents[at]
            else:
                del link[pk]
    return made


def select_run(policy: RedrivePolicy, *, now: datetime) -> list[int]:
    """The ids (oldest first, at most ``max_per_run``) a run of the policy replays at ``now``: ``eligible``
    ones that the policy replayed fewer than ``max_attempts`` times along their chain."""
    chosen: list[int] = []
    after = 0
    qs = eligible(policy, now=now).order_by("id")
    while len(chosen) < policy.max_per_run:
        ids = list(qs.filter(id__gt=after).values_list("id", flat=True)[:SCAN_CHUNK])
        if not ids:
            break
        made = attempts_made(policy, ids)
        chosen += [pk for pk in ids if made[pk] < policy.max_attempts]
        after = ids[-1]
    return chosen[: policy.max_per_run]


@dataclass(frozen=True)
class Brake:
    """The policy's replays since ``since`` that settled (``settled``) and those of them that failed again
    or were refused by the broker (``failed``), and whether that is above its threshold (``tripped``)."""

    since: datetime
    settled: int
    failed: int
    tripped: bool

    @property
    def reason(self) -> str:
        """Why it paused, for people."""
        return (
            f"{self.failed} of {self.settled} replays since {self.since:%Y-%m-%d %H:%M:%S} UTC failed again"
        )


def brake(policy: RedrivePolicy, *, now: datetime) -> Brake:
    """Judge the policy's recent replays (see the module's docstring)."""
    since = now - timedelta(seconds=policy.interval_seconds * BRAKE_INTERVALS)
    if policy.active_since is not None and policy.active_since > since:
        since = policy.active_since
    counts = (
        Replay.objects.filter(bulk__redrive_policy=policy, requested_at__gte=since)
        .exclude(state=ReplayState.PENDING)
        .aggregate(
            settled=Count("id"),
            failed=Count("id", filter=Q(state__in=(ReplayState.FAILED_AGAIN, ReplayState.FAILED))),
        )
    )
    settled, failed = int(counts["settled"]), int(counts["failed"])
    tripped = settled >= policy.pause_min_replays and failed > policy.pause_threshold * settled
    return Brake(since=since, settled=settled, failed=failed, tripped=tripped)


def _pause_itself(policy: RedrivePolicy, verdict: Brake) -> bool:
    reason = f"paused itself: {verdict.reason} (threshold {policy.pause_threshold:.0%})"
    with transaction.atomic():
        if not RedrivePolicy.objects.filter(pk=policy.pk, state=RedriveState.ACTIVE).update(
            state=RedriveState.PAUSED, paused_reason=reason, updated_at=timezone.now()
        ):
            return False
        audit.record(
            actor=None,
            action="redrive_policy.pause",
            target_type="redrive_policy",
            target_id=policy.pk,
            reason=reason,
            details={"pipeline": policy.pipeline.name, "settled": verdict.settled, "failed": verdict.failed,
                     "since": verdict.since.isoformat(), "threshold": policy.pause_threshold},
        )  # fmt: skip
        signals.send_on_commit(signals.redrive_paused, policy_id=policy.pk)
    return True


def _due(now: datetime) -> list[RedrivePolicy]:
    return list(
        RedrivePolicy.objects.filter(state=RedriveState.ACTIVE, next_run_at__lte=now)
        .select_related("pipeline", "team", "created_by")
        .order_by("next_run_at")
    )


def _claim_run(policy: RedrivePolicy, now: datetime) -> bool:
    """Move the policy's next run on by its interval, from the value this caller read: one caller wins."""
    claimed = RedrivePolicy.objects.filter(
        pk=policy.pk, state=RedriveState.ACTIVE, next_run_at=policy.next_run_at
    ).update(next_run_at=now + timedelta(seconds=policy.interval_seconds), last_run_at=now)
    return claimed == 1


def _run_under_way(policy: RedrivePolicy) -> bool:
    return policy.runs.exclude(
        state__in=(BulkState.COMPLETED, BulkState.CANCELLED, BulkState.REJECTED, BulkState.FAILED)
    ).exists()


def start_run(policy: RedrivePolicy, ids: list[int], *, now: datetime) -> BulkAction:
    """The bulk replay of ``ids`` for the policy, queued for a worker once this transaction commits. It
    is the policy's (``redrive_policy``), created in the name of the policy's creator, needs no approval
    of its own (the policy's was had) and does not count to its creator's bulk approval window."""
    row = BULK_TRANSITIONS["create"]
    reason = f"redrive policy {policy.name} (#{policy.pk}): {describe(PolicySettings.of(policy))}"
    selection = MessageFilter(pipeline=policy.pipeline.name, ids=tuple(ids))
    with transaction.atomic():
        bulk = BulkAction.objects.create(
            kind=BulkKind.REPLAY,
            team=policy.team,
            filters=selection.to_json(),
            max_id=max(ids),
            reason=reason,
            rate_limit=policy.rate_limit,
            state=row.target,
            approval_required=False,
            total=len(ids),
            created_by=policy.created_by,
            redrive_policy=policy,
        )
        audit.record(
            actor=None,
            action=row.event,
            target_type="bulk",
            target_id=bulk.pk,
            reason=reason,
            details={"kind": BulkKind.REPLAY, "redrive_policy": policy.pk, "total": len(ids),
                     "rate_limit": policy.rate_limit, "at": now.isoformat()},
        )  # fmt: skip
        enqueue_bulk(bulk)
    return bulk


@dataclass(frozen=True)
class TickResult:
    """What one tick did: the runs it started (bulk action ids) and the policies it paused."""

    started: tuple[int, ...]
    paused: tuple[int, ...]


def tick(*, now: datetime | None = None) -> TickResult:
    """The beat's work (every ``REDRIVE_TICK_SECONDS``): pause the active policies whose brake tripped,
    then start a run of each one due (its ``next_run_at`` passed) that is inside its window, has no run
    under way and selects anything. Safe to call from several beats at once."""
    now = now or timezone.now()
    paused: list[int] = []
    for policy in RedrivePolicy.objects.filter(state=RedriveState.ACTIVE, runs__isnull=False).distinct():
        verdict = brake(policy, now=now)
        if verdict.tripped and _pause_itself(policy, verdict):
            paused.append(policy.pk)
    started: list[int] = []
    for policy in _due(now):
        if policy.pk in paused or not _claim_run(policy, now):
            continue
        if not PolicySettings.of(policy).in_window(now) or _run_under_way(policy):
            continue
        ids = select_run(policy, now=now)
        if ids:
            started.append(start_run(policy, ids, now=now).pk)
    return TickResult(started=tuple(started), paused=tuple(paused))


def runs_of(policy: RedrivePolicy, *, limit: int = 50) -> list[BulkAction]:
    """The policy's latest runs, newest first."""
    return list(policy.runs.order_by("-created_at", "-id")[:limit])
