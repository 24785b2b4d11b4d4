"""Fault 4: the Celery worker killed (``kill -9`` of its process group) during a bulk replay: the service whose
process runs the bulk, the plain worker or a runner host (runners read the shared queue too).

One bulk replay per pipeline of every parked dead letter (rate-limited, so it is mid-way when the worker
dies), to a topic of its own so the replays can be counted without feeding the pipeline. After the kill the
worker is started again (devstack); the beat's ``dlq.resume_stale_bulks`` hands the RUNNING bulk, whose
heartbeat went stale, to the new worker, which settles the in-doubt chunk from the target topic and
continues. Expected: COMPLETED, and every selected message replayed exactly once (its coordinates appear
once in ``x-streamforge-replay-of`` on the target topic). The drivers, in their own sessions, survive.

Then the messages parked since are replayed through the pipelines: a bulk replay per pipeline to each
record's source topic, which all three pipelines read. Each replay carries the destinations it is for and
the DLQ it came from, so only its own pipeline writes it, and only there; the identity check that follows
expects exactly that (``chaos.accounting``: "replay_skipped" everywhere else) and fails on any replay
written to a destination it was not for, which would be a second copy of a record that destination had.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from functools import partial

from confluent_kafka.admin import AdminClient, NewTopic

from chaos import accounting
from chaos.context import Context, FaultResult, ModeResult
from chaos.workload import wait_until
from dlq.filters import MessageFilter
from dlq.models import BulkAction, BulkState, DeadLetter, Replay, Status
from dlq.services import create_bulk
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, admin_config

TITLE = (
    "Celery worker killed (kill -9) during a bulk replay; the bulk completes, each message replayed once; "
    "replays through the pipelines reach only the destinations they are for"
)
RATE = 40  # messages/s per bulk at most: slow enough that the kill lands mid-way
LASTS_S = 10  # ... and at least this long, whatever the backlog (a quick run parks about a hundred)


def _completed(pk: int) -> bool:
    return BulkAction.objects.get(pk=pk).state == BulkState.COMPLETED


def _services_running(ctx: Context, bulks: list[BulkAction]) -> list[str]:
    """The Celery services whose process runs one of ``bulks``: the plain worker or a runner host, which
    reads the shared queue too (``BulkAction.worker`` is ``host:pid:thread``; each service is a process group
    of its own). ``["worker"]`` when none is found (a bulk between two chunks' claims)."""
    groups: dict[int, str] = {}
    for name in ("worker", *ctx.stack.profile.runners):
        pid = ctx.stack.pid(name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                groups[os.getpgid(pid)] = name
    found: list[str] = []
    for bulk in bulks:
        bulk.refresh_from_db()
        parts = bulk.worker.split(":")
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        with contextlib.suppress(ProcessLookupError):
            service = groups.get(os.getpgid(int(parts[1])))
            if service is not None and service not in found:
                found.append(service)
    return found or ["worker"]


def run(ctx: Context) -> FaultResult:
    result = FaultResult("worker_kill_bulk", TITLE)
    admin = AdminClient(admin_config(KafkaConnection(ctx.bootstrap)))
    began = time.monotonic()
    bulks: dict[str, BulkAction] = {}
    targets: dict[str, str] = {}
    for mode, handle in ctx.pipelines.items():
        target = f"{handle.spec.dlq.topic}.replayed"
        for future in admin.create_topics([NewTopic(target, 1, 1)]).values():
            future.result(timeout=30)
        targets[mode] = target
        parked = DeadLetter.objects.filter(pipeline_name=handle.name, status=Status.PARKED).count()
        if not parked:
            result.modes[mode] = ModeResult(mode, failures=["no parked dead letter to replay"])
            continue
        bulks[mode] = create_bulk(
            actor=ctx.actor,
            kind="replay",
            selection=MessageFilter.from_mapping({"pipeline": handle.name}),
            reason="chaos: worker killed mid-bulk",
            rate_limit=max(1, min(RATE, parked // LASTS_S)),
            target_topic=target,
        )
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s {mode}: bulk #{bulks[mode].pk} replays {bulks[mode].total} to {target}"
        )
    runs_before = {mode: h.active_run() for mode, h in ctx.pipelines.items()}

    def midway() -> bool:
        states = [BulkAction.objects.get(pk=b.pk) for b in bulks.values()]
        return all(b.state == BulkState.RUNNING and b.processed > 0 for b in states)

    wait_until(midway, 120, 0.2)
    time.sleep(ctx.rng.uniform(0.5, 3.0))
    progress = {mode: BulkAction.objects.get(pk=b.pk).processed for mode, b in bulks.items()}
    victims = _services_running(ctx, list(bulks.values()))
    pids = {name: ctx.stack.kill9(name) for name in victims}
    killed = time.monotonic()
    result.actions.append(
        f"+{killed - began:.0f}s kill -9 of the process group of {', '.join(f'{n} (pid {p})' for n, p in pids.items())}, "
        f"the Celery worker(s) running the bulks; processed so far {progress}"
    )
    time.sleep(2)
    for name in victims:
        took = ctx.stack.start(name)
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s {name} started again (ready after {took:.0f}s)"
        )
    for mode, bulk in bulks.items():
        done = wait_until(partial(_completed, bulk.pk), 300, 1.0)
        bulk.refresh_from_db()
        r = result.modes.setdefault(mode, ModeResult(mode))
        r.recovery_s = None if done is None else time.monotonic() - killed
        replays = accounting.consume_all(ctx.bootstrap, targets[mode], timeout=120)
        seen = Counter(rec.header(c.H_REPLAY_OF) for rec in replays)
        selected = {
            d.coordinates
            for d in DeadLetter.objects.filter(pk__in=Replay.objects.filter(bulk=bulk).values("dead_letter"))
        }
        missing = [x for x in selected if seen.get(x, 0) == 0]
        r.produced = bulk.total
        r.lost = len(missing)
        r.duplicates = sum(n - 1 for n in seen.values() if n > 1)
        r.checks.update(
            {
                "bulk": bulk.pk,
                "state": bulk.state,
                "total": bulk.total,
                "processed": bulk.processed,
                "succeeded": bulk.succeeded,
                "failed": bulk.failed,
                "worker_runs": bulk.runs,
                "processed_at_kill": progress[mode],
                "replayed_records_on_target": len(replays),
                "distinct_replay_of": len(seen),
                "not_from_this_bulk": len(set(seen) - selected),
                "still_parked_or_replaying": DeadLetter.objects.filter(
                    pipeline_name=ctx.pipelines[mode].name,
                    id__lte=bulk.max_id,
                    status__in=(Status.PARKED, Status.REPLAYING),
                ).count(),
                "driver_survived_worker_kill": runs_before[mode] is not None
                and ctx.pipelines[mode].active_run() is not None
                and ctx.pipelines[mode].active_run().run_id == runs_before[mode].run_id,  # type: ignore[union-attr]
            }
        )
        r.examples = [f"never replayed: {x}" for x in missing[:10]]
        if bulk.state != BulkState.COMPLETED:
            r.failures.append(
                f"bulk #{bulk.pk} is {bulk.state}, not completed, 300s after the worker came back"
            )
        if bulk.runs < 2:
            r.failures.append("the kill did not interrupt the bulk (one worker run only)")
        if missing:
            r.failures.append(f"{len(missing)} selected messages never reached the target topic")
        if r.duplicates:
            r.failures.append(f"{r.duplicates} messages replayed more than once")
        if len(selected) != bulk.total or bulk.succeeded != bulk.total:
            r.failures.append(
                f"{len(selected)} replays recorded, {bulk.succeeded} succeeded, of {bulk.total} selected"
            )
    _replay_through_pipelines(ctx, result, began)
    result.duration_s = time.monotonic() - began
    return result


def _replay_through_pipelines(ctx: Context, result: FaultResult, began: float) -> None:
    """The second part (module docstring): replay what was parked since, to the source, and check the
    identity over the replayed records."""
    bulks: dict[str, BulkAction] = {}
    for mode, handle in ctx.pipelines.items():
        parked = DeadLetter.objects.filter(pipeline_name=handle.name, status=Status.PARKED)
        # The feeder corrupts every 10th record: new dead letters arrive within seconds unless ingest is stuck.
        if wait_until(parked.exists, 90, 1.0) is None:
            result.modes.setdefault(mode, ModeResult(mode)).failures.append(
                "nothing parked within 90 s to replay through the pipeline"
            )
            continue
        bulks[mode] = create_bulk(
            actor=ctx.actor,
            kind="replay",
            selection=MessageFilter.from_mapping({"pipeline": handle.name}),
            reason="chaos: replay through the pipelines",
            rate_limit=0,
        )
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s {mode}: bulk #{bulks[mode].pk} replays "
            f"{bulks[mode].total} parked since to the source topic (read by every pipeline)"
        )
    for mode, bulk in bulks.items():
        if wait_until(partial(_completed, bulk.pk), 300, 1.0) is None:
            result.modes[mode].failures.append(f"bulk #{bulk.pk} through the pipeline did not complete")
    check = FaultResult("replays_through_pipelines", "identity over the replayed records")
    ctx.settle(check, time.monotonic())
    for mode, checked in check.modes.items():
        r = result.modes.setdefault(mode, ModeResult(mode))
        replayed = BulkAction.objects.get(pk=bulks[mode].pk).succeeded if mode in bulks else 0
        r.checks["through_pipeline"] = {
            "replayed": replayed,
            "window_records": checked.produced,
            "lost": checked.lost,
            "wrong": checked.wrong,
            **{k: v for k, v in checked.checks.items() if k.startswith("replays_")},
        }
        r.failures.extend(f"through the pipeline: {f}" for f in checked.failures)
        r.examples.extend(checked.examples[:5])
