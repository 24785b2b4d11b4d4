"""Fault 5: the DLQ topic made unwritable (its ``max.message.bytes`` set to 160, smaller than any DLQ record).

Why not delete it: deleting a topic also deletes the DLQ records already in it, and a recreated topic
starts its offsets at 0 again, so the run could no longer prove where earlier failures went. A topic whose
limit refuses every record is just as unwritable for the driver (the broker answers MESSAGE_TOO_LARGE).

Why 160 and not less: the limit also applies to the transaction markers the coordinator writes when an
effectively_once transaction that touched the DLQ is aborted (a control batch of 78 bytes: the 61-byte batch
header and a 17-byte control record). Kafka's coordinator treats RecordTooLarge on a marker as fatal and
leaves the transaction in PrepareAbort until it reloads (a broker restart); read_committed readers stall at
that point and a new producer with the same transactional.id gets CONCURRENT_TRANSACTIONS forever. The first
full run used 64 and found exactly that. Every DLQ record is far larger than 160 bytes (the
``x-streamforge-*`` headers alone are), so the topic still refuses all of them.

Expected: the pipeline HALTS with DeadLetterQueue (exit 3, not restarted automatically), and it has
committed no source offset whose failure did not reach the DLQ. After the repair (the limit restored) an
operator's start resumes from the checkpoint and nothing is lost.
"""

from __future__ import annotations

import time
from functools import partial

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from django.conf import settings

from chaos import accounting
from chaos.context import Context, FaultResult, ModeResult
from chaos.workload import PipelineHandle, wait_until
from pipelines.models import PipelineState
from pipelines.supervision import request_start
from streamforge_core import contract as c
from streamforge_core.kafka import KafkaConnection, admin_config

TITLE = (
    "DLQ topic made unwritable: HALT with DeadLetterQueue, nothing committed past it, no loss after repair"
)
TINY = "160"


def _set_limit(admin: AdminClient, topic: str, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", value, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def _limit(admin: AdminClient, topic: str) -> str:
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return str(next(iter(futures.values())).result(timeout=30)["max.message.bytes"].value)


def in_state(handle: PipelineHandle, states: tuple[str, ...]) -> bool:
    return handle.refresh().state in states


def run(ctx: Context) -> FaultResult:
    result = FaultResult("dlq_unwritable", TITLE)
    admin = AdminClient(admin_config(KafkaConnection(ctx.bootstrap)))
    ctx.wait_processing()
    began = time.monotonic()
    originals = {}
    for mode, handle in ctx.pipelines.items():
        topic = handle.spec.dlq.topic
        originals[mode] = _limit(admin, topic)
        _set_limit(admin, topic, TINY)
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s {mode}: {topic} max.message.bytes {originals[mode]} -> {TINY}"
        )
    halted: dict[str, float | None] = {}
    for mode, handle in ctx.pipelines.items():
        halted[mode] = wait_until(partial(in_state, handle, (PipelineState.HALTED,)), 180, 1.0)
    for mode, handle in ctx.pipelines.items():
        r = result.modes.setdefault(mode, ModeResult(mode))
        run = handle.last_run()
        pipeline = handle.refresh()
        r.checks["halted_after_s"] = None if halted[mode] is None else round(halted[mode] or 0.0, 1)
        r.checks["exit_code"] = run.exit_code if run else None
        r.checks["error_type"] = run.error_type if run else ""
        r.checks["state"] = pipeline.state
        r.checks["reason"] = pipeline.state_reason[:300]
        if pipeline.state != PipelineState.HALTED or run is None or run.error_type != c.DEAD_LETTER_QUEUE:
            r.failures.append(
                f"expected HALTED with DeadLetterQueue, got {pipeline.state} / {run.error_type if run else '-'}"
            )
        if run is not None and run.exit_code != c.EXIT_DLQ:
            r.failures.append(f"expected exit code {c.EXIT_DLQ}, got {run.exit_code}")
        # Nothing committed past a failure that did not reach the DLQ: every source record below the
        # committed offsets has all its outcomes (the DLQ records included) on the topics.
        committed = handle.committed()
        accountant = ctx.accountants[mode]
        below = accounting.consume_all(
            ctx.bootstrap,
            handle.spec.source.topics[0],
            ends={p: max(o, 0) for p, o in committed.items()},
            timeout=120,
        )
        expected = accounting.expected_fates(
            handle.spec, below, accountant.limits, replay_key=settings.REPLAY_KEY.encode()
        )
        accountant.read_outputs()
        lost = accounting.tally(expected, accountant.observed)
        lost_count = sum(t.lost for t in lost.values())
        r.checks["committed_at_halt"] = committed
        r.checks["committed_without_outcome"] = lost_count
        if lost_count:
            r.failures.append(f"{lost_count} outcomes missing below the offsets committed at the halt")
    time.sleep(2.0 if ctx.quick else 10.0)  # the operator's reaction time: records pile up meanwhile
    for mode, handle in ctx.pipelines.items():
        _set_limit(admin, handle.spec.dlq.topic, originals[mode])
        request_start(actor=ctx.actor, pipeline=handle.refresh(), reason="chaos: DLQ repaired")
    end = time.monotonic()
    result.actions.append(f"+{end - began:.0f}s limits restored, pipelines started by the operator")
    ctx.settle(result, end)
    result.duration_s = time.monotonic() - began
    return result
