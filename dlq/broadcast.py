"""Live DLQ updates for the browser (``/ws/dlq/``): typed helpers over the Channels layer, per team.

Callers use these after their transaction commits. Best effort, as in ``pipelines.broadcast``: an
unreachable layer is logged, never raised, because the database is the record and pages reload it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def team_group(team_id: int) -> str:
    """The Channels group of one team's DLQ console."""
    return f"dlq.team.{team_id}"


@dataclass(frozen=True)
class Arrival:
    """New dead letters of one pipeline, error type and failure group in one ingest batch."""

    team_id: int
    pipeline: str
    error_type: str
    group: int
    count: int


class ArrivalUpdate(TypedDict):
    """``dlq.arrived``: ``count`` new dead letters in failure group ``group``."""

    type: Literal["dlq.arrived"]
    pipeline: str
    error_type: str
    group: int
    count: int


class MessageUpdate(TypedDict):
    """``dlq.message``: a dead letter changed status (replayed, skipped, deleted, ...)."""

    type: Literal["dlq.message"]
    id: int
    status: str
    action: str
    actor: str


class BulkUpdate(TypedDict):
    """``dlq.bulk``: a bulk action's progress or state changed."""

    type: Literal["dlq.bulk"]
    id: int
    state: str
    total: int
    processed: int
    succeeded: int
    failed: int


def _send(team_id: int, message: ArrivalUpdate | MessageUpdate | BulkUpdate) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    # The consumer checks the team against its user's teams before forwarding (and drops the field).
    payload: dict[str, Any] = {**message, "team_id": team_id}
    try:
        async_to_sync(layer.group_send)(team_group(team_id), payload)
    except Exception as exc:  # the page catches up on reconnect; the caller's work must not fail for it
        log.warning("could not broadcast %s to team %s: %s", message["type"], team_id, exc)


def dead_letters_arrived(arrivals: Iterable[Arrival]) -> None:
    """Tell each team's console how many dead letters arrived, per failure group."""
    for a in arrivals:
        _send(
            a.team_id,
            ArrivalUpdate(
                type="dlq.arrived", pipeline=a.pipeline, error_type=a.error_type, group=a.group, count=a.count
            ),
        )


def message_changed(*, team_id: int, dead_letter_id: int, status: str, action: str, actor: str) -> None:
    """Tell the team's console that one dead letter changed."""
    _send(
        team_id,
        MessageUpdate(type="dlq.message", id=dead_letter_id, status=status, action=action, actor=actor),
    )


def bulk_changed(*, team_id: int, bulk_id: int, state: str, progress: dict[str, Any]) -> None:
    """Tell the team's console about a bulk action's progress (``BulkAction.progress()``)."""
    _send(
        team_id,
        BulkUpdate(
            type="dlq.bulk",
            id=bulk_id,
            state=state,
            total=int(progress["total"]),
            processed=int(progress["processed"]),
            succeeded=int(progress["succeeded"]),
            failed=int(progress["failed"]),
        ),
    )
