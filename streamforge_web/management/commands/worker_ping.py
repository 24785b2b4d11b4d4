"""``manage.py worker_ping``: send a task through the broker and wait for a worker's reply."""

from __future__ import annotations

import time
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeoutError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from streamforge_web.tasks import ping


class Command(BaseCommand):
    help = "Round-trip a task through the Celery broker; fails when no worker answers in time."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a reply")

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        try:
            reply = ping.delay().get(timeout=options["timeout"])
        except CeleryTimeoutError:
            raise CommandError(f"no worker answered within {options['timeout']}s") from None
        elapsed = (time.perf_counter() - started) * 1000
        self.stdout.write(f"worker {reply['host']} pid {reply['pid']} answered in {elapsed:.0f} ms")
