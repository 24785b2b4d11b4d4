"""Fault 6: the dlq-ingest process killed (``kill -9`` of its group) mid-batch, again and again.

A backlog is built first (the ingester stopped while failures keep arriving), so each restarted ingester
has full batches (500 records) to store when it is killed a random 0.3-2.5 s after it reported ready.
Expected: once it runs undisturbed, every DLQ record (read with read_committed, as the ingester reads) is
exactly one DeadLetter row: none missing, none twice, none for a record that does not exist.
"""

from __future__ import annotations

import time
from collections import Counter

from chaos.context import Context, FaultResult, ModeResult
from chaos.workload import wait_until
from dlq.models import DeadLetter

TITLE = "dlq-ingest killed (kill -9) mid-batch, repeatedly: every DLQ record becomes exactly one row"


def _rows(topic: str) -> Counter[tuple[str, int, int]]:
    return Counter(
        (t, p, o)
        for t, p, o in DeadLetter.objects.filter(dlq_topic=topic).values_list(
            "dlq_topic", "dlq_partition", "dlq_offset"
        )
    )


def run(ctx: Context) -> FaultResult:
    result = FaultResult("ingest_kill", TITLE)
    kills = 2 if ctx.quick else 5
    backlog_s = 10.0 if ctx.quick else 25.0
    began = time.monotonic()
    ctx.stack.stop("dlq-ingest")
    result.actions.append(f"+0s dlq-ingest stopped for {backlog_s:.0f}s to build a backlog")
    time.sleep(backlog_s)
    topics = {mode: h.spec.dlq.topic for mode, h in ctx.pipelines.items()}
    for n in range(1, kills + 1):
        before = DeadLetter.objects.filter(dlq_topic__in=topics.values()).count()
        ctx.stack.start("dlq-ingest")
        time.sleep(ctx.rng.uniform(0.3, 2.5))
        pid = ctx.stack.kill9("dlq-ingest")
        after = DeadLetter.objects.filter(dlq_topic__in=topics.values()).count()
        result.actions.append(
            f"+{time.monotonic() - began:.0f}s kill -9 #{n} of dlq-ingest (pid {pid}); rows {before} -> {after}"
        )
        time.sleep(ctx.rng.uniform(0.0, 2.0))
    ctx.stack.start("dlq-ingest")
    end = time.monotonic()
    result.actions.append(f"+{end - began:.0f}s dlq-ingest started for good")
    ctx.settle(result, end)  # also reads every DLQ record so far into the accountants
    for mode, topic in topics.items():
        accountant = ctx.accountants[mode]
        records = set(accountant.dlq_records)
        ends: dict[int, int] = {}
        for _t, p, o in records:
            ends[p] = max(ends.get(p, 0), o + 1)

        def complete(t: str = topic, want: set[tuple[str, int, int]] = records) -> bool:
            return want <= set(_rows(t))

        took = wait_until(complete, 300, 2.0)
        rows = _rows(topic)
        r = result.modes.setdefault(mode, ModeResult(mode))
        # This fault's figures are about rows: the pipeline's identity over the window stays in checks.
        r.checks["identity"] = {"source_records": r.produced, "lost": r.lost, "duplicates": r.duplicates}
        in_range = {k: v for k, v in rows.items() if k[2] < ends.get(k[1], 0)}
        missing = records - set(rows)
        phantom = set(in_range) - records
        twice = sum(v - 1 for v in rows.values() if v > 1)
        r.checks.update(
            {
                "dlq_records": len(records),
                "rows": sum(in_range.values()),
                "missing_rows": len(missing),
                "rows_without_record": len(phantom),
                "rows_twice": twice,
                "ingested_all_after_s": None if took is None else round(took, 1),
            }
        )
        r.recovery_s = None if took is None else time.monotonic() - end
        r.produced, r.lost, r.duplicates = len(records), len(missing), twice + len(phantom)
        if missing:
            r.failures.append(f"{len(missing)} DLQ records have no DeadLetter row")
            r.examples = [f"no row: {m}" for m in sorted(missing)[:10]]
        if phantom or twice:
            r.failures.append(f"{len(phantom)} rows without a DLQ record, {twice} rows twice")
    result.duration_s = time.monotonic() - began
    return result
