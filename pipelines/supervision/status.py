"""The pipeline's state as the browser is told it: one ``pipeline.status`` message after commit, with the
lifecycle actions that make sense in that state and which revision the driver runs."""

from __future__ import annotations

from django.db import transaction

from pipelines import broadcast
from pipelines.lifecycle import available_actions, revision_numbers
from pipelines.models import Pipeline, PipelineRun


def announce_status(pipeline: Pipeline, run: PipelineRun | None = None) -> None:
    """Tell the pipeline's page and the overview its states (and ``run``'s id and attempt) after commit."""
    current, running = revision_numbers(pipeline)
    update: broadcast.StatusUpdate = {
        "type": "pipeline.status",
        "pipeline": pipeline.name,
        "state": pipeline.state,
        "desired_state": pipeline.desired_state,
        "reason": pipeline.state_reason,
        "run_id": str(run.run_id) if run else None,
        "attempt": run.attempt if run else None,
        "actions": available_actions(pipeline.state, pipeline.desired_state),
        "revision": current,
        "running_revision": running,
    }
    transaction.on_commit(lambda: broadcast.status(update))
