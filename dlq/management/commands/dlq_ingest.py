"""``manage.py dlq_ingest``: the long-running DLQ ingester (started by the stack as ``dlq-ingest``)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dlq.ingest import DEFAULT_GROUP_ID, BatchResult, Ingester

log = logging.getLogger("dlq.ingest")


class Command(BaseCommand):
    help = (
        "Consume every pipeline's DLQ topic and the registered extra DLQ topics into the parking lot, "
        "exactly one row per DLQ record; offsets are committed after the database commit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--group-id", default=DEFAULT_GROUP_ID, help="Kafka consumer group")
        parser.add_argument(
            "--instance-id",
            default=None,
            help="static group member id (default dlq-ingest-<host>); give each ingester on a host its own",
        )
        parser.add_argument("--batch-size", type=int, default=500, help="records per poll (at most)")
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

        ingester = Ingester(
            group_id=options["group_id"],
            instance_id=options["instance_id"],
            batch_size=options["batch_size"],
            refresh_seconds=options["refresh"],
            on_batch=on_batch,
        )
        ingester.install_signal_handlers()
        idle = options["until_idle"]
        sys.stderr.write(f"dlq-ingest ready (consumer group {options['group_id']})\n")
        sys.stderr.flush()
        try:
            while not ingester.stop.is_set():
                ingester.run_once()
                if not ingester.assigned():
                    last_new = time.monotonic()  # idle time counts only once the group gave us partitions
                elif idle and time.monotonic() - last_new > idle:
                    break
        finally:
            ingester.stop.set()
            ingester.run()  # closes the consumer (the loop exits at once: stop is set)
        elapsed = time.monotonic() - started
        self.stdout.write(
            f"stored {ingester.totals['inserted']} dead letter(s), skipped {ingester.totals['already_stored']} "
            f"already stored, in {elapsed:.1f} s"
        )
