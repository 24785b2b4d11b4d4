"""What people ask of a pipeline's driver (API, UI): ``request_start`` / ``request_stop`` /
``request_restart`` check the role, record the desired state and an audit event, and hand the work to a
Celery worker after commit. The task is sent by its Celery name (``pipelines.tasks`` imports this package,
never the reverse).
"""

from __future__ import annotations

from celery import current_app
from django.contrib.auth.models import User
from django.db import transaction

from access import audit
from access.models import Role
from access.permissions import require_role
from pipelines.models import DesiredState, Pipeline, PipelineState
from pipelines.supervision.launcher import mark_stopping, route_stop
from pipelines.supervision.status import announce_status


class NotStartable(Exception):
    """The pipeline cannot be started as it is (it has no revision yet)."""


def _after_commit_enqueue(task_name: str, pipeline_id: int) -> None:
    """Send the Celery task ``task_name`` (``pipelines.start`` ...) for ``pipeline_id`` once the caller's
    transaction commits. By name: a process that has the task registered applies it as Celery is set up
    (eagerly in tests that ask for it), any other sends it to the broker."""
    task = current_app.signature(task_name, args=(pipeline_id,))
    # robust: a broker hiccup must not fail a request whose change is committed; the reconcile tick acts on
    # the desired state anyway.
    transaction.on_commit(task.delay, robust=True)


def _stop_active_run(pipeline: Pipeline, cause: str, fallback_task: str) -> bool:
    """Claim the stop of the pipeline's active run here (any process) and have its owner signal it after
    commit (``launcher.route_stop``: the owner's queue); a run on an unregistered machine goes through
    ``fallback_task`` on the shared queue, as on a one-machine install. False when no run was active."""
    run = mark_stopping(pipeline_id=pipeline.pk, cause=cause)
    if run is None:
        return False
    if not route_stop(run):
        _after_commit_enqueue(fallback_task, pipeline.pk)
    return True


def _request_running(*, actor: User, pipeline: Pipeline, action: str, reason: str, task: str) -> Pipeline:
    """Shared by start and restart: lock the pipeline, want it running with a fresh failure series (a
    FAILED or HALTED pipeline goes back to STOPPED), audit ``action``, then for a restart with a driver
    active claim its stop and route it to the owner, else enqueue ``task`` after commit."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
    if locked.current_revision_id is None:
        raise NotStartable(f"pipeline {locked.name} has no revision to run")
    before = {"desired_state": locked.desired_state, "state": locked.state}
    locked.desired_state = DesiredState.RUNNING
    locked.consecutive_failures = 0
    locked.next_restart_at = None
    if locked.state in (PipelineState.FAILED, PipelineState.HALTED):
        locked.state = PipelineState.STOPPED
    locked.save(
        update_fields=["desired_state", "consecutive_failures", "next_restart_at", "state", "updated_at"]
    )
    audit.record(
        actor=actor,
        action=action,
        target_type="pipeline",
        target_id=locked.name,
        reason=reason,
        before=before,
        after={"desired_state": locked.desired_state, "state": locked.state},
        details={"revision": locked.current_revision_id},
    )
    announce_status(locked)
    if task == "pipelines.restart" and _stop_active_run(locked, "restart", task):
        return locked
    _after_commit_enqueue(task, locked.pk)
    return locked


@transaction.atomic
def request_start(*, actor: User, pipeline: Pipeline, reason: str = "") -> Pipeline:
    """Ask for the pipeline to run its current revision; a worker launches the driver after commit.

    Needs the operator role in the pipeline's team (PermissionDenied otherwise); NotStartable when the
    pipeline has no revision. A FAILED or HALTED pipeline is reset to STOPPED with a fresh failure series:
    an operator's start is the one way back from those states.
    """
    return _request_running(
        actor=actor, pipeline=pipeline, action="pipeline.start", reason=reason, task="pipelines.start"
    )


@transaction.atomic
def request_stop(*, actor: User, pipeline: Pipeline, reason: str = "") -> Pipeline:
    """Ask for the pipeline to stop: the running micro-batch finishes, then the driver exits. The run's stop
    is claimed here (STOPPING, ``stop_cause="operator"``) and its owner runner signals the driver after
    commit, reached through its own queue wherever it runs; the reconcile tick forces it after
    ``DRIVER_STOP_TIMEOUT_SECONDS``. Needs the operator role. A pending automatic restart is cancelled."""
    require_role(actor, pipeline.team, Role.OPERATOR)
    locked = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
    before = {"desired_state": locked.desired_state, "state": locked.state}
    locked.desired_state = DesiredState.STOPPED
    locked.next_restart_at = None
    if locked.state == PipelineState.RESTARTING:
        locked.state = PipelineState.STOPPED
    locked.save(update_fields=["desired_state", "next_restart_at", "state", "updated_at"])
    audit.record(
        actor=actor,
        action="pipeline.stop",
        target_type="pipeline",
        target_id=locked.name,
        reason=reason,
        before=before,
        after={"desired_state": locked.desired_state, "state": locked.state},
    )
    announce_status(locked)
    if not _stop_active_run(locked, "operator", "pipelines.stop"):
        _after_commit_enqueue("pipelines.stop", locked.pk)
    return locked


@transaction.atomic
def request_restart(*, actor: User, pipeline: Pipeline, reason: str = "") -> Pipeline:
    """Ask for a clean restart: the running driver stops gracefully and the current revision starts
    again (the way to roll out a new revision). Needs the operator role; NotStartable without a revision."""
    return _request_running(
        actor=actor, pipeline=pipeline, action="pipeline.restart", reason=reason, task="pipelines.restart"
    )
