"""The bulk fix's figures (issue #30 item 3): one JSON Patch applied to 2,000 dead letters of the demo's
main failure group (pushes without ``payload.size``, JsonPathNotFound) on real PostgreSQL: the preview's
time, the approval step (2,000 is above the default threshold of 1,000), the run's messages/s, and the
audit events and payload revisions it wrote.

Uses a database of its own on the PostgreSQL of the devstack test profile (no Kafka: a fix writes only
the database), so nothing of a running demo is touched:

    eval "$(STREAMFORGE_DB=postgres python -m devstack --profile test env)"
    python -m bench.bulk_fix_measure --messages 2000

Prints the figures and writes them as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.dlq_measure import drop_database, setup_django

#: The demo runbook's fix: the distinct commit count where the commit count is missing.
PATCH = [{"op": "copy", "from": "/payload/distinct_size", "path": "/payload/size"}]


def park_group(messages: int) -> tuple[Any, Any]:
    """The demo's people and pipeline, and ``messages`` real GitHub events parked through the ingest code
    as the demo's pushes-without-size dead letters (one failure group). Returns (people, pipeline)."""
    from datetime import UTC, datetime

    from demo import scenario
    from dlq.ingest import TopicOwner, store_batch
    from streamforge_core import contract as c
    from streamforge_core.kafka import Record

    people = scenario.setup_people()
    pipeline = scenario.setup_pipeline(people)
    events = [e for e in scenario.load_events() if isinstance(e.get("payload"), dict)]
    revision = pipeline.current_revision
    assert revision is not None, "the demo pipeline has no revision"
    topic = revision.spec["dlq"]["topic"]
    owners = {topic: TopicOwner(pipeline.team_id, pipeline.pk, pipeline.name)}
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    for start in range(0, messages, 500):
        batch = [
            Record(
                topic=topic, partition=0, offset=i, key=f"repo-{i}".encode(),
                value=scenario._push_without_size(events[i % len(events)]),  # the demo's own corruption
                headers=[(c.H_ERROR_TYPE, b"JsonPathNotFound"), (c.H_ERROR, b"path /payload/size not found"),
                         (c.H_SOURCE_TOPIC, scenario.SOURCE.encode()), (c.H_SOURCE_PARTITION, b"0"),
                         (c.H_SOURCE_OFFSET, str(i).encode()), (c.H_TIMESTAMP, when),
                         (c.H_PIPELINE, pipeline.name.encode()), (c.H_DESTINATION, b"pushes"),
                         (c.H_REVISION, str(revision.number).encode()), (c.H_ATTEMPTS, b"1")],
                timestamp_ms=None,
            )
            for i in range(start, min(messages, start + 500))
        ]  # fmt: skip
        store_batch(batch, owners)
    return people, pipeline


def measure(messages: int) -> dict[str, Any]:
    """Park the group, then preview, create, approve and run the bulk fix of it (unthrottled); the figures."""
    from access.models import AuditEvent
    from dlq import services
    from dlq.filters import MessageFilter
    from dlq.models import BulkState, FailureGroup, PayloadRevision
    from dlq.services import bulk as bulk_actions

    people, pipeline = park_group(messages)
    group = FailureGroup.objects.filter(pipeline=pipeline).order_by("-count").first()
    assert group is not None, "no failure group"
    assert group.count == messages, group.count
    selection = MessageFilter(group=group.pk)
    fix = services.parse_fix({"patch": PATCH})
    started = time.perf_counter()
    preview = services.preview_bulk_fix(actor=people.admin, selection=selection, fix=fix)
    preview_ms = (time.perf_counter() - started) * 1000
    queued: list[int] = []
    original = bulk_actions.enqueue_bulk
    bulk_actions.enqueue_bulk = lambda bulk: queued.append(bulk.pk)  # run it here, not on a Celery worker
    audit_before = AuditEvent.objects.count()
    try:
        started = time.perf_counter()
        bulk = services.create_bulk_fix(
            actor=people.admin, selection=selection, fix=fix, reason="bench: copy distinct_size", rate_limit=0
        )
        create_ms = (time.perf_counter() - started) * 1000
        awaited = bulk.state == BulkState.AWAITING_APPROVAL
        started = time.perf_counter()
        if awaited:  # by the demo's approver: never the action's creator
            services.approve(actor=people.approver, approval=bulk.approvals.get(), reason="bench")
        approve_ms = (time.perf_counter() - started) * 1000
    finally:
        bulk_actions.enqueue_bulk = original
    started = time.perf_counter()
    done = services.run_bulk(bulk_id=bulk.pk)
    elapsed = time.perf_counter() - started
    assert done.state == BulkState.COMPLETED, (done.state, done.last_error)
    revisions = PayloadRevision.objects.filter(reason__startswith=f"bulk fix #{bulk.pk}")
    return {
        "database": "postgresql",
        "messages": messages,
        "preview": {
            "count": preview.count,
            "needs_approval": preview.needs_approval,
            "samples_would_pass": sum(
                1 for s in preview.samples if s.check is not None and s.check.would_pass
            ),
            "samples": len(preview.samples),
            "ms": round(preview_ms, 1),
        },
        "approval": {
            "awaited_approval": awaited,
            "create_ms": round(create_ms, 1),
            "approve_ms": round(approve_ms, 1),
        },
        "run": {
            "fixed": done.succeeded,
            "left_unchanged": done.failed,
            "reasons": done.fix_failures,
            "seconds": round(elapsed, 2),
            "messages_per_s": round(done.processed / elapsed) if elapsed else None,
        },
        "written": {
            "payload_revisions": revisions.count(),
            "would_pass": sum(
                1 for check in revisions.values_list("dsl_check", flat=True) if check.get("would_pass")
            ),
            "audit_events": AuditEvent.objects.count() - audit_before,
            "dlq_fix_events": AuditEvent.objects.filter(action="dlq.fix", details__bulk=bulk.pk).count(),
        },
        "load": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure and print/write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("DATABASE_URL", ""),
        help="a PostgreSQL URL whose user may create databases (default: $DATABASE_URL)",
    )
    parser.add_argument("--out", type=Path, default=Path("artifacts/bench/bulk_fix.json"))
    args = parser.parse_args(argv)
    if not args.postgres.startswith("postgres"):
        parser.error("needs PostgreSQL: --postgres or DATABASE_URL (STREAMFORGE_DB=postgres ... env)")
    with tempfile.TemporaryDirectory(prefix="bulk-fix-bench-") as tmp:
        created = setup_django(Path(tmp), postgres_url=args.postgres)
        try:
            figures = measure(args.messages)
        finally:
            drop_database(args.postgres, created)
    print(json.dumps(figures, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
