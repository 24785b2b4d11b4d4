"""A pipeline's lifecycle as its pages and API present it: which start / stop / restart requests are worth
offering in a state, and which revision the driver runs against which is current."""

from __future__ import annotations

from pipelines.models import (
    ACTIVE_STATES,
    DesiredState,
    Pipeline,
    PipelineRevision,
    PipelineRun,
    PipelineState,
)


def available_actions(state: str, desired_state: str) -> list[str]:
    """The lifecycle requests that change something now, in button order: ``start`` while the pipeline is
    not wanted running, or is FAILED / HALTED (an operator's start is the way back from those); ``stop``
    while it is wanted running; ``restart`` while a driver runs, starts or waits for its restart. The
    requests themselves accept any state (``requests``); this only says which buttons are worth offering."""
    actions = []
    if desired_state != DesiredState.RUNNING or state in (PipelineState.FAILED, PipelineState.HALTED):
        actions.append("start")
    if desired_state == DesiredState.RUNNING:
        actions.append("stop")
    if desired_state == DesiredState.RUNNING and state in (
        PipelineState.STARTING,
        PipelineState.RUNNING,
        PipelineState.RESTARTING,
    ):
        actions.append("restart")
    return actions


def revision_numbers(pipeline: Pipeline) -> tuple[int | None, int | None]:
    """(the current revision's number, the number of the revision its active driver runs) of ``pipeline``;
    either is None when there is none. They differ after a revision was saved and before a restart applied
    it."""
    current = None
    if pipeline.current_revision_id is not None:
        current = (
            PipelineRevision.objects.filter(pk=pipeline.current_revision_id)
            .values_list("number", flat=True)
            .first()
        )
    running = (
        PipelineRun.objects.filter(pipeline_id=pipeline.pk, state__in=ACTIVE_STATES)
        .order_by("-started_at", "-id")
        .values_list("revision__number", flat=True)
        .first()
    )
    return current, running
