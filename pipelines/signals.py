"""Signals the pipelines app sends for others to react to (``notifications`` connects to them). Sent after
the transaction that made the change commits, so a receiver never sees a change that was rolled back.

- ``alert_changed(alert_id: int, firing: bool)``: an alert started firing (or changed its summary) or
  was resolved.
- ``pipeline_stopped_for_good(pipeline_id: int, run_id: str, state: str, reason: str)``: a pipeline became HALTED or
  FAILED (restarting will not help; a person has to look).
- ``revision_live(pipeline_id: int, revision: int, previous_revision: int | None)``: a run of ``revision``
  reached RUNNING and the run before it ran another revision (``previous_revision``): a restart applied a
  new revision (``dlq`` computes what it now passes: fix forward).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import Signal

alert_changed = Signal()
pipeline_stopped_for_good = Signal()
revision_live = Signal()


def send_on_commit(signal: Signal, **payload: Any) -> None:
    """Send ``signal`` from ``None`` with ``payload`` once the current transaction commits (at once
    outside one). Receivers' errors are logged by Django's ``send_robust`` and never reach the sender."""
    transaction.on_commit(lambda: signal.send_robust(sender=None, **payload))
