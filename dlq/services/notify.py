"""Telling open console pages what changed, through the ``dlq.broadcast`` helpers: after the transaction
commits (a page must never see a change that was rolled back), or at once where no transaction is open
(the bulk runner, between chunks)."""

from __future__ import annotations

from django.db import transaction

from dlq import broadcast
from dlq.models import BulkAction, DeadLetter


def message_changed_on_commit(dead_letter: DeadLetter, *, status: str, action: str, actor: str) -> None:
    """Announce the dead letter's new ``status`` (after ``action`` by the user named ``actor``) to its
    team's console once the current transaction commits."""
    team_id, pk = dead_letter.team_id, dead_letter.pk
    transaction.on_commit(
        lambda: broadcast.message_changed(
            team_id=team_id, dead_letter_id=pk, status=status, action=action, actor=actor
        )
    )


def bulk_changed_on_commit(bulk: BulkAction) -> None:
    """Announce the bulk action's state and progress, as they are now, once the transaction commits."""
    if bulk.team_id is None:
        return
    team_id, pk, state, progress = bulk.team_id, bulk.pk, bulk.state, bulk.progress()
    transaction.on_commit(
        lambda: broadcast.bulk_changed(team_id=team_id, bulk_id=pk, state=state, progress=progress)
    )


def bulk_changed_now(bulk: BulkAction) -> None:
    """Announce the bulk action's state and progress at once (the runner reports between chunks)."""
    if bulk.team_id is not None:
        broadcast.bulk_changed(
            team_id=bulk.team_id, bulk_id=bulk.pk, state=bulk.state, progress=bulk.progress()
        )
