"""The pipeline's state as the browser is told it: one ``pipeline.status`` message after commit."""

from __future__ import annotations

from django.db import transaction

from pipelines import broadcast
from pipelines.models import Pipeline, PipelineRun


def _status(pipeline: Pipeline, run: PipelineRun | None = None) -> None:
    """Tell the pipeline's page and the overview its states (and ``run``'s id and attempt) after commit."""
    update: broadcast.StatusUpdate = {
        "type": "pipeline.status",
        "pipeline": pipeline.name,
        "state": pipeline.state,
        "desired_state": pipeline.desired_state,
        "reason": pipeline.state_reason,
        "run_id": str(run.run_id) if run else None,
        "attempt": run.attempt if run else None,
    }
    transaction.on_commit(lambda: broadcast.status(update))
