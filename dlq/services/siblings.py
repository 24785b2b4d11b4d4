"""Working one source record's dead letters together. A record that failed several destinations is parked
once per destination (its *siblings*, ``inspection.Sibling``), and each replay is for its own destination
only (``x-streamforge-replay-destinations``). An operator who fixed one of them usually means the source
record: ``replay_with_siblings`` copies that payload onto the parked siblings as their fix and replays them
all, each still for its own destination, so every destination receives the record once.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User

from access.models import Role
from access.permissions import require_role
from dlq.models import DeadLetter, Status
from dlq.services.errors import Conflict, InvalidRequest, ReplayFailed
from dlq.services.fixes import current_payload, fix_payload
from dlq.services.inspection import sibling_rows
from dlq.services.replays import replay


@dataclass(frozen=True)
class SiblingReplay:
    """What ``replay_with_siblings`` did for one dead letter: ``fixed`` when the payload was copied onto it,
    ``replay_id`` of its replay attempt, or ``error`` saying why it was not replayed (already replayed or
    skipped, would fail again, the broker refused)."""

    id: int
    destination: str
    fixed: bool
    replay_id: int | None
    error: str


def replay_with_siblings(
    *, actor: User, dead_letter: DeadLetter, reason: str, force: bool = False
) -> list[SiblingReplay]:
    """Replay ``dead_letter`` and each parked sibling, ``dead_letter`` first. The payload it would send now
    (its latest fix, else its original) becomes the fix of every sibling whose own payload differs, with
    ``reason``; then each is replayed (``replays.replay``: destination-precise, audited, refused when the
    current revision would dead-letter it again unless ``force``).

    Needs the operator role in the dead letter's team and a reason. Raises InvalidRequest (no reason),
    PermissionDenied; a message that cannot be fixed or replayed is reported in its ``SiblingReplay`` and
    the others go on.
    """
    require_role(actor, dead_letter.team, Role.OPERATOR)
    if not reason.strip():
        raise InvalidRequest("reason", "replaying a record's dead letters together needs a reason")
    value, _latest = current_payload(dead_letter)
    parked = [row for row in sibling_rows(dead_letter) if row.status == Status.PARKED]
    outcomes = []
    for member in [dead_letter, *parked]:
        fixed = False
        try:
            if member.pk != dead_letter.pk and value is not None and current_payload(member)[0] != value:
                fix_payload(
                    actor=actor,
                    dead_letter=member,
                    value=value,
                    reason=f"as #{dead_letter.pk}: {reason.strip()}",
                )
                fixed = True
            attempt = replay(actor=actor, dead_letter=member, force=force, reason=reason)
        except (Conflict, ReplayFailed, InvalidRequest) as exc:
            outcomes.append(SiblingReplay(member.pk, member.destination, fixed, None, str(exc)))
            continue
        outcomes.append(SiblingReplay(member.pk, member.destination, fixed, attempt.pk, ""))
    return outcomes
