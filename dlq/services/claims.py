"""Who is on it: claims on failure groups and dead letters ("investigating: alice", with a note).

An operator of the team claims a group or one parked dead letter (``claim``); a second claim of the same
target by someone else is refused (Conflict naming who is on it and since when), and the claimer claiming
again updates the note. A claim is released by hand (``release``: the claimer, or an admin of the team) or on
resolution (``release_resolved``, the beat's, every minute: a dead letter no longer parked, a group with no
parked dead letter left). Lists, the message page and notifications show a dead letter's own claim, else its
group's (``claims_for``), so a group's claim is shown on its new arrivals. Each claim, change and release is
audited. The one-open-claim rule is also the database's (``Claim``'s partial unique constraints), so two
concurrent claims cannot both win.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from access import audit
from access.models import Role
from access.permissions import require_role
from dlq.models import Claim, DeadLetter, FailureGroup, Status
from dlq.services.errors import Conflict, InvalidRequest

#: The longest note kept (characters).
MAX_NOTE = 500


@dataclass(frozen=True)
class ClaimView:
    """An open claim as the console shows it: who, since when (UTC), the note, and whether it is on the
    ``group`` (a dead letter showing its group's claim) or on the ``message`` itself."""

    by: str
    since: datetime
    note: str
    on: str

    def as_json(self) -> dict[str, str]:
        return {"by": self.by, "since": self.since.isoformat(), "note": self.note, "on": self.on}


def _target(group: FailureGroup | None, dead_letter: DeadLetter | None) -> tuple[Q, str, int]:
    if (group is None) == (dead_letter is None):
        raise ValueError("a claim is on a group or on a dead letter")
    if group is not None:
        return Q(group=group), "failure_group", group.pk
    assert dead_letter is not None
    return Q(dead_letter=dead_letter), "dead_letter", dead_letter.pk


def _describe(claim: Claim) -> str:
    return f"investigating: {claim.claimed_by.get_username()} since {claim.created_at:%Y-%m-%d %H:%M} UTC"


def claim(
    *, actor: User, group: FailureGroup | None = None, dead_letter: DeadLetter | None = None, note: str = ""
) -> Claim:
    """Claim ``group`` or ``dead_letter`` (operator role in its team) with ``note`` (at most ``MAX_NOTE``
    characters). Returns the open claim (the actor's existing one with the new note when they claimed it
    already). Raises PermissionDenied, InvalidRequest (``note``; a dead letter that is not parked, ``status``),
    Conflict (someone else is on it)."""
    target, kind, target_id = _target(group, dead_letter)
    team = group.team if group is not None else dead_letter.team  # type: ignore[union-attr]
    require_role(actor, team, Role.OPERATOR)
    note = note.strip()
    if len(note) > MAX_NOTE:
        raise InvalidRequest("note", f"at most {MAX_NOTE} characters")
    if dead_letter is not None and dead_letter.status != Status.PARKED:
        raise InvalidRequest(
            "status", f"only a parked dead letter is claimed; this one is {dead_letter.status}"
        )
    try:
        with transaction.atomic():
            current = Claim.objects.select_for_update().filter(target, released_at__isnull=True).first()
            if current is not None and current.claimed_by_id != actor.pk:
                raise Conflict(_describe(current))
            if current is not None:
                current.note = note
                current.save(update_fields=["note", "updated_at"])
                made, action = current, "dlq.claim_note"
            else:
                made = Claim.objects.create(
                    team=team, group=group, dead_letter=dead_letter, claimed_by=actor, note=note
                )
                action = "dlq.claim"
            audit.record(
                actor=actor, action=action, target_type=kind, target_id=target_id, reason=note,
                details={"claim": made.pk},
            )  # fmt: skip
    except IntegrityError:  # another claim committed between our read and our insert
        winner = Claim.objects.select_related("claimed_by").filter(target, released_at__isnull=True).first()
        raise Conflict(_describe(winner) if winner else "someone else claimed it just now") from None
    return made


def release(
    *, actor: User, group: FailureGroup | None = None, dead_letter: DeadLetter | None = None, reason: str = ""
) -> Claim:
    """Release the open claim of ``group`` or ``dead_letter`` by hand: its claimer, or an admin of the team.
    Raises InvalidRequest (``claim``: none is open), PermissionDenied."""
    target, kind, target_id = _target(group, dead_letter)
    with transaction.atomic():
        current = (
            Claim.objects.select_for_update()
            .select_related("team")
            .filter(target, released_at__isnull=True)
            .first()
        )
        if current is None:
            raise InvalidRequest("claim", "nobody has claimed it")
        if current.claimed_by_id != actor.pk:
            require_role(actor, current.team, Role.ADMIN)
        current.released_at = timezone.now()
        current.released_by = actor
        current.release_reason = reason.strip()[:200] or "released by hand"
        current.save(update_fields=["released_at", "released_by", "release_reason", "updated_at"])
        audit.record(
            actor=actor, action="dlq.claim_released", target_type=kind, target_id=target_id,
            reason=current.release_reason, details={"claim": current.pk},
        )  # fmt: skip
    return current


def release_resolved() -> int:
    """Release every open claim whose target is resolved: a dead letter no longer parked, a group with no
    parked dead letter left (reason ``resolved``, by the system, audited). Returns how many."""
    parked_in_group = DeadLetter.objects.filter(group=OuterRef("group"), status=Status.PARKED)
    done = (
        Claim.objects.filter(released_at__isnull=True)
        .filter(
            Q(dead_letter__isnull=False) & ~Q(dead_letter__status=Status.PARKED)
            | Q(group__isnull=False) & ~Exists(parked_in_group)
        )
        .select_related("team")
    )
    released = 0
    for row in done:
        with transaction.atomic():
            if not Claim.objects.filter(pk=row.pk, released_at__isnull=True).update(
                released_at=timezone.now(), release_reason="resolved"
            ):
                continue
            audit.record(
                actor=None,
                action="dlq.claim_released",
                target_type="failure_group" if row.group_id else "dead_letter",
                target_id=row.group_id or row.dead_letter_id or 0,
                reason="resolved",
                details={"claim": row.pk},
            )
            released += 1
    return released


def claims_for(dead_letters: Iterable[DeadLetter]) -> dict[int, ClaimView]:
    """The claim each of these dead letters shows (two queries): its own open claim, else its group's.
    A dead letter nobody is on is absent."""
    rows = list(dead_letters)
    own = {
        c.dead_letter_id: c
        for c in Claim.objects.filter(dead_letter__in=[r.pk for r in rows], released_at__isnull=True)
        .select_related("claimed_by")
    }  # fmt: skip
    by_group = {
        c.group_id: c
        for c in Claim.objects.filter(group__in={r.group_id for r in rows}, released_at__isnull=True)
        .select_related("claimed_by")
    }  # fmt: skip
    shown: dict[int, ClaimView] = {}
    for row in rows:
        if row.pk in own:
            c = own[row.pk]
            shown[row.pk] = ClaimView(c.claimed_by.get_username(), c.created_at, c.note, "message")
        elif row.group_id in by_group:
            c = by_group[row.group_id]
            shown[row.pk] = ClaimView(c.claimed_by.get_username(), c.created_at, c.note, "group")
    return shown


def group_claims(group_ids: Iterable[int] | QuerySet[FailureGroup, int]) -> dict[int, ClaimView]:
    """The open claim of each of these groups (``group_ids``: ids, or a ``values_list("pk")`` queryset used
    as a subquery; one query); a group nobody is on is absent."""
    ids = group_ids if isinstance(group_ids, QuerySet) else list(group_ids)
    return {
        c.group_id: ClaimView(c.claimed_by.get_username(), c.created_at, c.note, "group")
        for c in Claim.objects.filter(group_id__in=ids, released_at__isnull=True).select_related("claimed_by")
        if c.group_id is not None
    }
