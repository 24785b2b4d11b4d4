"""Supervision of pipeline drivers: start, stop, restart, and the reconcile tick that keeps actual state
following desired state.

Two halves:

* ``request_start`` / ``request_stop`` / ``request_restart`` are what people do (API, UI): they check the
  role, record the desired state and an audit event, and hand the work to a Celery worker after commit.
* ``start_pipeline`` / ``stop_pipeline`` / ``reconcile`` run on a worker. ``start_pipeline`` launches
  ``python -m pipelines.spark.driver`` as a child in its own process session (so a worker restart does not
  take the driver with it and a kill can reach the whole group: driver, JVM, Python workers).

Claims: ``Pipeline.state`` moves to STARTING only by a conditional UPDATE from the state that was read, so
two workers or two beats racing to start one pipeline launch one driver; the loser sees 0 rows updated.
Ending a run is claimed the same way on ``PipelineRun.state``, so a crash is counted (and audited) once.

Failures: a driver that dies (its pid is gone, or it exited with 1) or goes silent (no heartbeat for
``DRIVER_HEARTBEAT_STALE_SECONDS``; none within ``DRIVER_START_TIMEOUT_SECONDS`` of its launch) is restarted
after ``backoff_seconds`` (exponential, capped); ``CRASH_LOOP_FAILURES`` failures within
``CRASH_LOOP_MINUTES`` make the pipeline FAILED with the last error. Exit codes 2 (Config/DslParse) and
3 (DeadLetterQueue) make it HALTED: restarting cannot help, so only an operator's start runs it again.

Liveness is judged from the pid only on the host that launched the driver; elsewhere the heartbeat (which
carries host and pid) is the evidence.

Runner hosts (issue #29): a run belongs to one runner host under a lease (``placement``); start, stop and
restart reach the owner through its own Celery queue, from any process.

The package, by concept: ``requests`` (what people ask), ``placement`` (which host, and the claim that takes
the lease), ``launcher`` (launching and stopping a driver process), ``processes`` (the driver's OS process and log), ``exits`` (the state machine of an ended run),
``reconciler`` (the tick), ``status`` (telling the browser). Its public names are importable from here.
"""

from pipelines.supervision.exits import Verdict, backoff_seconds, judge_exit
from pipelines.supervision.launcher import (
    _claim_start,
    checkpoint_dir,
    driver_command,
    launch_claimed_run,
    mark_stopping,
    restart_pipeline,
    route_stop,
    signal_stop,
    start_pipeline,
    stop_pipeline,
)
from pipelines.supervision.placement import place_and_claim
from pipelines.supervision.processes import LOG_TAIL_BYTES, LOG_TAIL_LINES, _children, read_log_tail
from pipelines.supervision.reconciler import HEARTBEAT_EPOCH_KEY, ReconcileReport, reconcile
from pipelines.supervision.requests import NotStartable, request_restart, request_start, request_stop

__all__ = [
    "HEARTBEAT_EPOCH_KEY",
    "LOG_TAIL_BYTES",
    "LOG_TAIL_LINES",
    "NotStartable",
    "ReconcileReport",
    "Verdict",
    "_children",
    "_claim_start",
    "backoff_seconds",
    "checkpoint_dir",
    "driver_command",
    "judge_exit",
    "launch_claimed_run",
    "mark_stopping",
    "place_and_claim",
    "read_log_tail",
    "reconcile",
    "request_restart",
    "request_start",
    "request_stop",
    "restart_pipeline",
    "route_stop",
    "signal_stop",
    "start_pipeline",
    "stop_pipeline",
]
