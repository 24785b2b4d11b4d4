"""The DLQ console's figures (issue #8, and issue #5's 1,000,000-message target): ingest records/s, list and
search latency (p50/p95) with 1,000,000 parked messages, bulk replay records/s.

Runs against the real Kafka and Redis of the devstack test profile, with its own SQLite database in a
temporary folder (``--db-dir``), so nothing of a running demo is touched:

    eval "$(python -m devstack --profile test env)"
    python -m bench.dlq_measure --rows 1000000

Each function returns plain dicts; ``main`` prints them and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from streamforge_core.kafka import KafkaConnection, admin_config, producer_config

#: Error types and messages the parked rows cycle through: a few large groups and a long tail.
_FAILURES = [
    ("JsonPathNotFound", "path /payload/size not found"),
    ("JsonPathNotFound", "path /payload/ref not found"),
    ("MessageDeserialization", "invalid JSON: Expecting value: line 1 column 1 (char 0)"),
    ("TransformEvaluation", "ARITHMETIC: /payload/size is not a number"),
    ("RecordTooLarge", "record of 1200000 bytes exceeds the broker limit of 1048576"),
    ("RetryExhausted", "produce failed after 5 attempts: Local: Message timed out"),
]


def setup_django(db_dir: Path, *, postgres_url: str = "") -> str:
    """Point Django at a fresh database and migrate it: a SQLite file in ``db_dir``, or, with
    ``postgres_url`` (a server the URL's user may create databases on), a new database there. Returns the
    name of a PostgreSQL database to drop afterwards ("" for SQLite)."""
    created = ""
    if postgres_url:
        import psycopg

        created = f"streamforge_bench_{os.getpid()}"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{created}"')
        base, _, _name = postgres_url.rpartition("/")
        os.environ["DATABASE_URL"] = f"{base}/{created}"
    else:
        os.environ["DATABASE_URL"] = f"sqlite:///{db_dir / 'bench.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "streamforge_web.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    os.environ["STREAMFORGE_STATE_DIR"] = str(db_dir)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return created


def drop_database(postgres_url: str, name: str) -> None:
    """Drop the bench's own PostgreSQL database (after Django's connections are closed)."""
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _world() -> dict[str, Any]:
    """A team, an admin, an operator of the team, and two pipelines (their specs are only definitions)."""
    from django.contrib.auth.models import User

    from access.models import Membership, Role, Team
    from pipelines.services import create_pipeline

    team, _ = Team.objects.get_or_create(name="bench")
    admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_superuser": True})
    operator, _ = User.objects.get_or_create(username="bench-operator")
    Membership.objects.get_or_create(user=operator, team=team, defaults={"role": Role.OPERATOR})
    pipelines = []
    for name in ("bench-a", "bench-b"):
        from pipelines.models import Pipeline

        existing = Pipeline.objects.filter(name=name).first()
        pipelines.append(
            existing
            or create_pipeline(
                actor=admin,
                name=name,
                team=team,
                spec={
                    "source": {"topics": [f"{name}.src"]},
                    "destinations": [{"name": "out", "topic": f"{name}.out", "transform": "EXTRACT:/a,a"}],
                },
            )
        )
    return {"team": team, "admin": admin, "operator": operator, "pipelines": pipelines}


def fill(rows: int, *, world: dict[str, Any]) -> float:
    """Insert ``rows`` parked dead letters straight into SQLite (what ingest would store, without Kafka:
    ingest speed is measured separately). Returns seconds taken."""
    from django.db import connection
    from django.utils import timezone

    from dlq import counts
    from dlq.grouping import group_key, normalize_message
    from dlq.models import FailureGroup

    team = world["team"]
    groups = []
    now = timezone.now()
    for pipeline in world["pipelines"]:
        for error_type, message in _FAILURES:
            key = group_key(
                team_id=team.pk,
                pipeline=pipeline.name,
                dlq_topic=f"{pipeline.name}.src.dlq",
                error_type=error_type,
                signature=normalize_message(message),
            )
            group, _ = FailureGroup.objects.get_or_create(
                key=key,
                defaults={
                    "team": team, "pipeline": pipeline, "pipeline_name": pipeline.name,
                    "dlq_topic": f"{pipeline.name}.src.dlq", "error_type": error_type,
                    "signature": normalize_message(message), "sample_message": message,
                    "first_seen": now, "last_seen": now,
                },
            )  # fmt: skip
            groups.append((pipeline, error_type, message, group))
    if connection.vendor == "postgresql":
        took = _fill_postgres(rows, team=team, groups=groups, now=now)
        started = time.perf_counter()
        counts.compact()  # the COPY's deltas: a few rows per group, folded as the beat would
        return took + time.perf_counter() - started
    database = connection.settings_dict["NAME"]
    connection.close()
    started = time.perf_counter()
    db = sqlite3.connect(database)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    value = json.dumps({"type": "PushEvent", "pad": "x" * 180}).encode()
    headers = json.dumps([["x-streamforge-error-type", "SnNvblBhdGhOb3RGb3VuZA=="]])
    stamp = now.isoformat()
    columns = (
        "team_id, pipeline_id, pipeline_name, group_id, dlq_topic, dlq_topic_id, dlq_partition, dlq_offset, source_topic,"
        " source_partition, source_offset, key, value, headers, value_size, key_text, convention, error_type,"
        " error_message, destination, attempts, first_failed_at, last_failed_at, status, ingested_at"
    )
    sql = f"INSERT INTO dlq_deadletter ({columns}) VALUES ({', '.join('?' * 25)})"  # noqa: S608  # constants only

    def row(i: int) -> tuple[Any, ...]:
        pipeline, error_type, message, group = groups[(i * 7919) % len(groups)]
        key = f"key-{i:08d}"
        return (
            team.pk, pipeline.pk, pipeline.name, group.pk, f"{pipeline.name}.src.dlq", "", i % 3, i,
            f"{pipeline.name}.src", i % 3, i, key.encode(), value, headers, len(value), key, "streamforge",
            error_type, message, "out", 1, stamp, stamp, "parked", stamp,
        )  # fmt: skip

    chunk = 50_000
    for start in range(0, rows, chunk):
        db.executemany(sql, (row(i) for i in range(start, min(rows, start + chunk))))
        db.commit()
    db.execute(
        "UPDATE dlq_failuregroup SET count = (SELECT COUNT(*) FROM dlq_deadletter d WHERE d.group_id = dlq_failuregroup.id)"
    )
    db.commit()
    db.execute("ANALYZE")
    db.close()
    counts.compact()  # SQLite's row triggers wrote a delta per row: fold them as the beat would
    return time.perf_counter() - started


_COPY_COLUMNS = (
    "team_id", "pipeline_id", "pipeline_name", "group_id", "dlq_topic", "dlq_topic_id", "dlq_partition",
    "dlq_offset", "source_topic", "source_partition", "source_offset", "key", "value", "headers", "value_size",
    "key_text", "convention", "error_type", "error_message", "destination", "attempts", "first_failed_at",
    "last_failed_at", "status", "ingested_at", "claimed_pipeline", "ownership_warning",
)  # fmt: skip


def _fill_postgres(rows: int, *, team: Any, groups: list[Any], now: Any) -> float:
    """``fill`` on PostgreSQL: one COPY of every row (failure times spread over 30 days, one in twenty already
    replayed or skipped), then the group counts and VACUUM (ANALYZE): what autovacuum does on its own after a
    large insert (``autovacuum_vacuum_insert_threshold``, PostgreSQL 13+), and what sets the visibility map
    that lets the counting pages' index-only scans skip the table. Returns seconds taken."""
    from datetime import timedelta

    from django.db import connection

    value = json.dumps({"type": "PushEvent", "pad": "x" * 180}).encode()
    headers = json.dumps([["x-streamforge-error-type", "SnNvblBhdGhOb3RGb3VuZA=="]])
    statuses = ["parked"] * 18 + ["replayed", "skipped"]
    started = time.perf_counter()
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor: COPY
        columns = ", ".join(_COPY_COLUMNS)
        with raw.copy(f"COPY dlq_deadletter ({columns}) FROM STDIN") as copy:  # constants
            for i in range(rows):
                pipeline, error_type, message, group = groups[(i * 7919) % len(groups)]
                key = f"key-{i:08d}"
                failed = now - timedelta(seconds=(rows - i) * 2_592_000 / rows)  # oldest first, 30 days back
                copy.write_row((
                    team.pk, pipeline.pk, pipeline.name, group.pk, f"{pipeline.name}.src.dlq", "", i % 3, i,
                    f"{pipeline.name}.src", i % 3, i, key.encode(), value, headers, len(value), key,
                    "streamforge", error_type, message, "out", 1, failed, failed, statuses[i % 20], failed,
                    "", "",
                ))  # fmt: skip
        cursor.execute(
            "UPDATE dlq_failuregroup g SET count = c.n FROM (SELECT group_id, COUNT(*) n FROM dlq_deadletter"
            " GROUP BY group_id) c WHERE c.group_id = g.id"
        )
        cursor.execute("VACUUM (ANALYZE) dlq_deadletter")  # autocommit: VACUUM cannot run in a transaction
        cursor.execute("ANALYZE")
    return time.perf_counter() - started


def explain(sql: str, params: Any) -> tuple[str, bool]:
    """PostgreSQL's EXPLAIN (ANALYZE, BUFFERS) of one captured query, and whether it reads the whole
    dead-letter table (a Seq Scan on dlq_deadletter: the query has no index to use)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return plan, "Seq Scan on dlq_deadletter" in plan


def list_latency(*, world: dict[str, Any], requests: int = 100) -> dict[str, Any]:
    """p50/p95 (ms) of ``GET /api/dlq/messages/`` for the filters an operator uses, through Django's full
    request path (middleware, auth, serializer), first page and deep pages via the cursor."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from dlq.models import FailureGroup

    group = FailureGroup.objects.order_by("count").first()
    assert group is not None
    cases = {
        "newest (admin)": ("admin", {}),
        "newest (operator, team-scoped)": ("operator", {}),
        "status=parked": ("operator", {"status": "parked"}),
        "pipeline": ("operator", {"pipeline": "bench-b"}),
        "error_type": ("operator", {"error_type": "RecordTooLarge"}),
        "group": ("operator", {"group": str(group.pk)}),
        "pipeline+error_type+status": (
            "operator",
            {"pipeline": "bench-a", "error_type": "TransformEvaluation", "status": "parked"},
        ),
        "search key prefix": ("operator", {"q": "key-0004"}),
        "search error text": ("operator", {"q": "Message timed out"}),
        # Pages and counts beside the list: the failure groups (counts per group) and the overview, whose
        # DLQ backlog per pipeline counts parked messages.
        "groups (API)": ("operator", {"_url": "/api/dlq/groups/"}),
        "groups page": ("operator", {"_url": "/dlq/groups/"}),
        "DLQ console page": ("operator", {"_url": "/dlq/"}),
        "overview page (backlog)": ("operator", {"_url": "/"}),
    }
    results: dict[str, Any] = {}
    for label, (who, params) in cases.items():
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(world[who])
        timings = []
        url = params.pop("_url", "/api/dlq/messages/")
        for _ in range(requests):
            started = time.perf_counter()
            response = client.get(url, params)
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.content[:300]
        is_json = response["Content-Type"].startswith("application/json")
        results[label] = {
            "p50_ms": round(statistics.median(timings), 1),
            "p95_ms": round(_percentile(timings, 95), 1),
            "rows": len(response.json()["results"]) if is_json else None,
        }
        if connection.vendor == "postgresql":
            with CaptureQueriesContext(connection) as captured:
                client.get(url, params)
            # The request's slowest query on the console's tables, explained as it ran.
            ours = [q for q in captured.captured_queries if "dlq_" in q["sql"]]
            if ours:
                slowest = max(ours, key=lambda q: float(q["time"]))
                plan, seq_scan = explain(slowest["sql"], None)
                results[label].update(plan=plan, seq_scan=seq_scan)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(world["operator"])
    deep, url = [], "/api/dlq/messages/"
    for _ in range(min(requests, 60)):
        started = time.perf_counter()
        body = client.get(url).json()
        deep.append((time.perf_counter() - started) * 1000)
        url = body["next"]
    results["cursor pages 1-60"] = {
        "p50_ms": round(statistics.median(deep), 1),
        "p95_ms": round(_percentile(deep, 95), 1),
        "rows": 50,
    }
    return results


def ingest_rate(bootstrap: str, *, records: int, world: dict[str, Any]) -> dict[str, Any]:
    """Produce ``records`` StreamForge DLQ records to a new topic, then time the ingester storing them."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from dlq.ingest import Ingester
    from dlq.models import DeadLetter, DlqTopic
    from streamforge_core import contract as c

    topic = f"bench-dlq-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    try:
        DlqTopic.objects.create(topic=topic, team=world["team"], created_by=world["admin"])
        producer = Producer(
            producer_config(KafkaConnection(bootstrap), idempotent=False, extra={"linger.ms": 20})
        )
        value = json.dumps({"type": "PushEvent", "pad": "x" * 900}).encode()
        for i in range(records):
            error_type, message = _FAILURES[i % len(_FAILURES)]
            headers: list[tuple[str, str | bytes | None]] = [
                (c.H_ERROR, f"{message} (record {i})".encode()), (c.H_ERROR_TYPE, error_type.encode()),
                (c.H_SOURCE_TOPIC, b"github.events"), (c.H_SOURCE_PARTITION, b"0"),
                (c.H_SOURCE_OFFSET, str(i).encode()), (c.H_PIPELINE, b"bench-a"),
            ]  # fmt: skip
            while True:
                try:
                    producer.produce(topic, key=f"k{i}".encode(), value=value, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush(60)
        before = DeadLetter.objects.filter(dlq_topic=topic).count()
        ingester = Ingester(
            bootstrap_servers=bootstrap, group_id=f"bench-{topic}", instance_id="", refresh_seconds=60
        )
        started = time.perf_counter()
        first_row: float | None = None
        while DeadLetter.objects.filter(dlq_topic=topic).count() - before < records:
            result = ingester.run_once()
            if result.inserted and first_row is None:
                first_row = time.perf_counter()
            if time.perf_counter() - started > 600:
                raise RuntimeError("ingest did not finish within 10 minutes")
        elapsed = time.perf_counter() - (first_row or started)
        ingester.stop.set()
        ingester.run()
        return {"records": records, "seconds": round(elapsed, 2), "records_per_s": round(records / elapsed)}
    finally:
        admin.delete_topics([topic])


def bulk_replay_rate(bootstrap: str, *, records: int, world: dict[str, Any]) -> dict[str, Any]:
    """Park ``records`` messages through the ingest code, then time one unthrottled bulk replay of them all
    (claims, idempotent produce with acknowledgements, the answers recorded on a second connection, one
    audit event for the action)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from access.models import Membership, Role
    from dlq import services
    from dlq.filters import MessageFilter
    from dlq.ingest import TopicOwner, store_batch
    from dlq.models import BulkState
    from dlq.services import bulk as bulk_actions
    from streamforge_core import contract as c
    from streamforge_core.kafka import Record

    pipeline = world["pipelines"][1]
    # The owning pipeline's own source topic: an operator's bulk replay may go nowhere else (#14).
    source = pipeline.current_revision.spec["source"]["topics"][0]
    admin = AdminClient(admin_config(KafkaConnection(bootstrap)))
    admin.delete_topics([source])  # a previous run's, if any
    time.sleep(1)
    admin.create_topics([NewTopic(source, 3, 1)])[source].result(timeout=30)
    Membership.objects.update_or_create(
        user=world["operator"], team=world["team"], defaults={"role": Role.APPROVER}
    )
    try:
        topic = f"{pipeline.name}.replay-bench"
        value = json.dumps({"type": "PushEvent", "pad": "x" * 900}).encode()
        owners = {topic: TopicOwner(world["team"].pk, pipeline.pk, pipeline.name)}
        for start in range(0, records, 1000):
            batch = [
                Record(
                    topic=topic, partition=0, offset=i, key=f"k{i}".encode(), value=value,
                    headers=[(c.H_ERROR_TYPE, b"RetryExhausted"), (c.H_ERROR, b"timed out"),
                             (c.H_SOURCE_TOPIC, source.encode()), (c.H_PIPELINE, pipeline.name.encode())],
                    timestamp_ms=None,
                )
                for i in range(start, min(records, start + 1000))
            ]  # fmt: skip
            store_batch(batch, owners)
        queued: list[int] = []
        original = bulk_actions.enqueue_bulk
        bulk_actions.enqueue_bulk = lambda bulk: queued.append(bulk.pk)  # run it here
        try:
            bulk = services.create_bulk(
                actor=world["operator"],
                kind="replay",
                selection=MessageFilter(topic=topic),
                reason="bench",
                rate_limit=0,
            )
            if bulk.state == BulkState.AWAITING_APPROVAL:
                services.approve(actor=world["admin"], approval=bulk.approvals.get())
        finally:
            bulk_actions.enqueue_bulk = original
        started = time.perf_counter()
        done = services.run_bulk(bulk_id=bulk.pk)
        elapsed = time.perf_counter() - started
        assert done.state == BulkState.COMPLETED, done.state
        assert done.succeeded == records, f"{done.failed} of {records} failed: {done.last_error}"
        return {
            "records": done.succeeded,
            "seconds": round(elapsed, 2),
            "records_per_s": round(done.succeeded / elapsed),
        }
    finally:
        admin.delete_topics([source])


def render_markdown(figures: dict[str, Any]) -> str:
    """The figures of one run as a markdown report: ingest and bulk replay rates, the fill, then per list
    case p50/p95 and the EXPLAIN (ANALYZE, BUFFERS) of its slowest query on the dead-letter table."""
    lines = [f"# DLQ console at scale: {figures.get('database', '?')}", ""]
    fill_figures = figures.get("fill", {})
    lines.append(f"- rows: {fill_figures.get('rows', 0):,} (loaded in {fill_figures.get('seconds', '?')} s)")
    for name in ("ingest", "bulk_replay"):
        if name in figures:
            rate = figures[name]
            lines.append(
                f"- {name.replace('_', ' ')}: {rate['records_per_s']:,} records/s ({rate['records']:,} records)"
            )
    lines.append(f"- load average before/after: {figures.get('load_before')} / {figures.get('load_after')}")
    lines += ["", "| case | p50 ms | p95 ms | reads the whole table |", "|---|---:|---:|---|"]
    for label, timing in figures.get("list", {}).items():
        scan = "yes" if timing.get("seq_scan") else ("no" if "plan" in timing else "")
        lines.append(f"| {label} | {timing['p50_ms']} | {timing['p95_ms']} | {scan} |")
    for label, timing in figures.get("list", {}).items():
        if timing.get("plan"):
            lines += ["", f"## {label}", "", "```", timing["plan"], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements and print/write them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="parked messages for the list timings")
    parser.add_argument("--ingest-records", type=int, default=20_000)
    parser.add_argument("--bulk-records", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100, help="requests per list case")
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument(
        "--postgres",
        default="",
        help="a PostgreSQL URL whose user may create databases: measure there, in a database of its own",
    )
    parser.add_argument("--skip-kafka", action="store_true", help="only the fill and the list/search timings")
    parser.add_argument("--out", type=Path, default=Path("artifacts/bench/dlq.json"))
    parser.add_argument(
        "--render", type=Path, default=None, help="only write the markdown report of an earlier run's JSON"
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        report = args.render.with_suffix(".md")
        report.write_text(render_markdown(json.loads(args.render.read_text())))
        print(f"wrote {report}")
        return 0
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    with tempfile.TemporaryDirectory(prefix="dlq-bench-", dir=args.db_dir) as tmp:
        created = setup_django(Path(tmp), postgres_url=args.postgres)
        try:
            figures = _measure(args, bootstrap)
        finally:
            if created:
                drop_database(args.postgres, created)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))
    args.out.with_suffix(".md").write_text(render_markdown(figures))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


def _measure(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    from django.db import connection

    world = _world()
    figures: dict[str, Any] = {"database": connection.vendor, "load_before": os.getloadavg()}
    if not args.skip_kafka:
        figures["ingest"] = ingest_rate(bootstrap, records=args.ingest_records, world=world)
        print(f"ingest: {figures['ingest']}", flush=True)
        figures["bulk_replay"] = bulk_replay_rate(bootstrap, records=args.bulk_records, world=world)
        print(f"bulk replay: {figures['bulk_replay']}", flush=True)
    fill_s = fill(args.rows, world=world)
    figures["fill"] = {"rows": args.rows, "seconds": round(fill_s, 1)}
    print(f"filled {args.rows:,} parked messages in {fill_s:.0f}s", flush=True)
    figures["list"] = list_latency(world=world, requests=args.requests)
    for label, timing in figures["list"].items():
        flag = "  SEQ SCAN on dlq_deadletter" if timing.get("seq_scan") else ""
        print(
            f"  list {label:32} p50 {timing['p50_ms']:7.1f} ms   p95 {timing['p95_ms']:7.1f} ms{flag}",
            flush=True,
        )
    figures["load_after"] = os.getloadavg()
    return figures


if __name__ == "__main__":
    sys.exit(main())
