"""Live updates for the browser: small typed helpers over the Channels layer.

Code that wants to notify the UI calls these (after its transaction commits), never the channel layer
directly. Every update goes to the ``pipelines`` group (the list page) and to ``pipeline.<name>`` (one
pipeline's page). A broadcast is best effort: an unreachable layer is logged, never raised, because the
database is the record and the page reloads it on reconnect.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

ALL_PIPELINES_GROUP = "pipelines"


def pipeline_group(name: str) -> str:
    """The Channels group of one pipeline's page (pipeline names are slugs, valid in group names)."""
    return f"pipeline.{name}"


class PartitionLagUpdate(TypedDict):
    """Lag of one source partition right after a batch: ``latest - end`` offsets."""

    topic: str
    partition: int
    end: int
    latest: int
    lag: int


class WorstPartition(TypedDict):
    """The source partition furthest behind: its topic, number and lag (records)."""

    topic: str
    partition: int
    lag: int


class LiveFigures(TypedDict):
    """What the overview shows per pipeline, as of one moment: records consumed and produced per second over
    the last ``progress.RATE_WINDOW_SECONDS``, the lag summed over every source partition the pipeline has
    read (None before its first batch), the worst partition, and since creation: ``dlq_records``, the records
    written to the DLQ topic (what the DLQ console holds, one per failed record and destination, one for a
    record no destination could read), and ``dead_lettered``, the per-destination outcomes (a malformed
    record counts once per destination, so this can exceed ``dlq_records``)."""

    consumed_per_second: float
    produced_per_second: float
    lag: int | None
    worst_partition: WorstPartition | None
    dead_lettered: int
    dlq_records: int


class ProgressUpdate(TypedDict):
    """One micro-batch, compact: record counts of the batch, its duration (ms), the lag over the partitions
    the batch read and their per-partition lag, dead-lettered records by error type, and the pipeline's
    ``figures`` right after the batch (rates and lag over all partitions). ``time_ms`` is epoch milliseconds."""

    type: Literal["pipeline.progress"]
    pipeline: str
    run_id: str
    batch_id: int
    time_ms: int
    duration_ms: float
    consumed: int
    produced: int
    filtered: int
    dead_lettered: int
    retries: int
    dlq_records: int
    dead_lettered_by_type: dict[str, int]
    lag: int | None
    partitions: list[PartitionLagUpdate]
    figures: LiveFigures


class StatusUpdate(TypedDict):
    """The pipeline's actual and desired state changed (a run started, ended, was restarted...)."""

    type: Literal["pipeline.status"]
    pipeline: str
    state: str
    desired_state: str
    reason: str
    run_id: str | None
    attempt: int | None
    #: ``supervision.available_actions``: the lifecycle buttons worth offering in this state.
    actions: list[str]
    #: The current revision's number, and the one the active driver runs (None: no driver runs).
    revision: int | None
    running_revision: int | None


class AlertUpdate(TypedDict):
    """An alert rule started or stopped firing for a pipeline."""

    type: Literal["pipeline.alert"]
    pipeline: str
    rule: str
    severity: str
    summary: str
    firing: bool


def _send(pipeline: str, message: ProgressUpdate | StatusUpdate | AlertUpdate) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    payload: dict[str, Any] = dict(message)
    try:
        send = async_to_sync(layer.group_send)
        send(ALL_PIPELINES_GROUP, payload)
        send(pipeline_group(pipeline), payload)
    except Exception as exc:  # the UI catches up on reconnect; the caller's work must not fail for it
        log.warning("could not broadcast %s for %s: %s", message["type"], pipeline, exc)


def progress(update: ProgressUpdate) -> None:
    """Push one batch's progress to the pipeline list and the pipeline's page."""
    _send(update["pipeline"], update)


def status(update: StatusUpdate) -> None:
    """Push a state change to the pipeline list and the pipeline's page."""
    _send(update["pipeline"], update)


def alert(update: AlertUpdate) -> None:
    """Push an alert that started or stopped firing."""
    _send(update["pipeline"], update)
