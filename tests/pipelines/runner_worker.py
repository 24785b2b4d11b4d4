"""A runner host for the routing tests: a real Celery worker (``streamforge_web``'s app, threads pool)
reading only its own runner queue, whose drivers are ``fake_driver.py`` (same arguments, exit codes,
exit line and heartbeat key as the real driver, no Spark) and whose topic check is skipped.

``python runner_worker.py BEHAVIOUR QUEUE`` with ``STREAMFORGE_RUNNER_NAME`` and ``DATABASE_URL`` set in
the environment; BEHAVIOUR is one of ``fake_driver.py``'s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FAKE = Path(__file__).with_name("fake_driver.py")
#: Driver options the stand-in may not know (the fence's); dropped with their values.
_LEASE_OPTIONS = ("--epoch", "--lease-file")


def _without_lease_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _LEASE_OPTIONS:
            skip = True
        else:
            kept.append(arg)
    return kept


def main() -> None:
    behaviour, queue = sys.argv[1], sys.argv[2]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "streamforge_web.settings")
    import django

    django.setup()

    from confluent_kafka.admin import AdminClient

    import pipelines.topics
    from pipelines.spec import PipelineSpec
    from pipelines.supervision import launcher
    from pipelines.topics import TopicPlan
    from streamforge_web.celery import app

    real_command = launcher.driver_command

    def fake_command(run, spec_file, conn):
        return [
            sys.executable,
            str(FAKE),
            behaviour,
            *_without_lease_options(real_command(run, spec_file, conn)[3:]),
        ]

    def no_topic_changes(
        admin: AdminClient, spec: PipelineSpec, *, partitions: int = 1, replication_factor: int = 1
    ) -> TopicPlan:
        return TopicPlan([], [], [])

    launcher.driver_command = fake_command
    pipelines.topics.ensure_topics = no_topic_changes
    name = os.environ["STREAMFORGE_RUNNER_NAME"]
    app.worker_main(
        ["worker", "--pool", "threads", "--concurrency", "2", "--queues", queue, "--hostname", f"{name}@%h",
         "--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    )  # fmt: skip


if __name__ == "__main__":
    main()
