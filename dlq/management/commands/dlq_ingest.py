"""``manage.py dlq_ingest``: the long-running DLQ ingester (started by the stack as ``dlq-ingest``)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dlq.ingest import DEFAULT_BATCH_SIZE, DEFAULT_GROUP_ID, BatchResult, ClusterIngesters

log = logging.getLogger("dlq.ingest")


class Command(BaseCommand):
    help = (
        "Consume every pipeline's DLQ topic and the registered extra DLQ topics, on every Kafka cluster, into "
        "the parking lot, "
        "exactly one row per DLQ record; offsets are committed after the database commit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--group-id", default=DEFAULT_GROUP_ID, help="Kafka consumer group")
        parser.add_argument(
            "--instance-id",
            default=None,
            help="static group member id (default dlq-ingest-<host>); give each ingester on a host its own",
        )
        parser.add_argument(
            "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="records per poll (at most)"
        )
        parser.add_argument(
            "--refresh", type=float, default=10.0, help="seconds between topic list refreshes"
        )
        parser.add_argument(
            "--until-idle",
            type=float,
            default=0.0,
            help="stop after this many seconds with partitions but no new record (for scripts; 0: run until stopped)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        last_new = time.monotonic()
        started = time.monotonic()

        def on_batch(result: BatchResult) -> None:
            nonlocal last_new
            if result.inserted:
                last_new = time.monotonic()
                log.info(
                    "stored %d dead letter(s) (%d already stored)", result.inserted, result.already_stored
                )

        ingesters = ClusterIngesters(
            refresh_seconds=options["refresh"],
            group_id=options["group_id"],
            instance_id=options["instance_id"],
            batch_size=options["batch_size"],
            on_batch=on_batch,
        )
        ingesters.install_signal_handlers()
        idle = options["until_idle"]
        sys.stderr.write(f"dlq-ingest ready (consumer group {options['group_id']}, every Kafka cluster)\n")
        sys.stderr.flush()
        try:
            while not ingesters.stop.is_set():
                ingesters.refresh()  # clusters added or removed since
                ingesters.stop.wait(min(1.0, options["refresh"]))
                if not ingesters.assigned():
                    last_new = time.monotonic()  # idle time counts only once the group gave us partitions
                elif idle and time.monotonic() - last_new > idle:
                    break
        finally:
            ingesters.close()
        elapsed = time.monotonic() - started
        totals = ingesters.totals()
        self.stdout.write(
            f"stored {totals['inserted']} dead letter(s), skipped {totals['already_stored']} "
            f"already stored, in {elapsed:.1f} s"
        )
