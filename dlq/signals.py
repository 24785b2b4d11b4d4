"""Signals the DLQ console sends for others to react to (``notifications`` connects to them), after the
transaction that made the change commits.

- ``failure_group_created(group_id: int)``: ingest stored the first dead letter of a new failure group.
- ``approval_requested(approval_id: int)``: a delete or a bulk action waits for an approver.
- ``bulk_finished(bulk_id: int)``: a bulk action completed.
- ``fix_forward_found(scan_id: int)``: a fix-forward scan ended with dead letters its revision now passes.
- ``redrive_paused(policy_id: int)``: a redrive policy paused itself (its replays failed again too often).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import Signal

failure_group_created = Signal()
approval_requested = Signal()
bulk_finished = Signal()
fix_forward_found = Signal()
redrive_paused = Signal()


def send_on_commit(signal: Signal, **payload: Any) -> None:
    """Send ``signal`` from ``None`` with ``payload`` once the current transaction commits (at once
    outside one). Receivers' errors are logged by Django's ``send_robust`` and never reach the sender."""
    transaction.on_commit(lambda: signal.send_robust(sender=None, **payload))
