"""``python -m demo``: set up the demo (people, team, pipeline, runbook), start the pipeline, feed real
GitHub events into it until Ctrl-C, then stop the pipeline. ``python -m devstack demo`` (``make demo``)
starts the stack around it; this module sets Django up itself (``DJANGO_SETTINGS_MODULE`` defaults to the
project's settings), like a script.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's options: ``--rate`` and ``--avro-rate`` (records/s), ``--corrupt-every`` (N),
    ``--duration`` (s), ``--web-url``, ``--sinks-url``."""
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description="Run the demo pipeline over real GitHub events with a live DLQ console (Ctrl-C stops it).",
    )
    parser.add_argument("--rate", type=float, default=200.0, help="records per second into the source topic")
    parser.add_argument(
        "--corrupt-every",
        type=int,
        default=50,
        help="every N-th record is corrupted (0: none; default 2%%)",
    )
    parser.add_argument(
        "--avro-rate",
        type=float,
        default=20.0,
        help="records per second into the Avro topic and its pipeline (0: no Avro pipeline)",
    )
    parser.add_argument(
        "--duration", type=float, default=0.0, help="stop after this many seconds (0: Ctrl-C)"
    )
    parser.add_argument("--web-url", default="http://127.0.0.1:8000", help="printed for the operator")
    parser.add_argument(
        "--sinks-url",
        default="",
        help="the webhook receiver of devstack.sinks: the demo's notification channels point at it (none: no channels)",
    )
    return parser.parse_args(argv)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Set Django up, run the demo until Ctrl-C, SIGTERM or ``--duration``, stop the pipeline; exit code 0."""
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "streamforge_web.settings")
    import django

    django.setup()
    # Django must be set up before the models (and the scenario that uses them) are imported.
    from django.conf import settings

    from demo import avro_topic
    from demo import scenario as demo
    from pipelines import supervision
    from pipelines.models import Pipeline, PipelineState
    from pipelines.registries import registry_for
    from streamforge_core.record_formats import shared_registry

    bootstrap = settings.KAFKA_BOOTSTRAP_SERVERS
    people = demo.setup_people()
    demo.ensure_topics(bootstrap)
    pipeline = demo.setup_pipeline(people)
    # The Avro pipeline's schemas go to the default cluster's registry (SCHEMA_REGISTRY_URL).
    registry = shared_registry(registry_for(None)) if args.avro_rate > 0 else None
    versions = avro_topic.register_schemas(registry) if registry is not None else None
    avro = (
        demo.setup_pipeline(people, demo.AVRO_PIPELINE, demo.AVRO_SPEC, demo.AVRO_DESCRIPTION)
        if registry is not None
        else None
    )
    notified = demo.setup_notifications(people, args.sinks_url) if args.sinks_url else []
    started_pipelines = [p for p in (pipeline, avro) if p is not None]
    for each in started_pipelines:
        supervision.request_start(actor=people.admin, pipeline=each, reason="demo")
    web = args.web_url.rstrip("/")
    _say(
        "\n".join(
            [
                "",
                "StreamForge Web demo",
                f"  dashboard:   {web}/",
                f"  DLQ console: {web}/dlq/",
                f"  API docs:    {web}/api/docs/",
                f"  sign in as   admin / {people.admin_password}      (admin of team '{demo.TEAM}')",
                f"  second user  approver / {people.approver_password}   (approves deletes and large bulk actions)",
                f"  API token:   {people.token}",
                "",
                f"Feeding real GitHub events into '{demo.SOURCE}' at {args.rate:g}/s "
                f"(every {args.corrupt_every}th one corrupted). Try:",
                f"  1. watch '{demo.PIPELINE}' start on the dashboard (Spark takes ~30 s), then its rate and lag;",
                "  2. open the DLQ console: JsonPathNotFound, MessageDeserialization, TransformEvaluation and",
                "     RecordTooLarge dead letters arrive as they happen, grouped, with a runbook on the main group;",
                '  3. open a JsonPathNotFound message, add "size" to its payload, check it would pass, replay it,',
                "     and see it arrive on github.pushes (its status turns to replayed, the audit trail shows it);",
                "  4. request a delete as admin and approve it as approver.",
                *(
                    [
                        f"Notifications ({', '.join(notified)}) go to local sinks: what they sent is listed at "
                        f"{args.sinks_url}/ (webhooks and mails; also in .stack/*/logs/sinks.log)."
                    ]
                    if notified
                    else []
                ),
                *(
                    [
                        f"  5. '{demo.AVRO_PIPELINE}' reads the same events as Avro from '{avro_topic.SOURCE}' "
                        f"at {args.avro_rate:g}/s (schema versions 1 and 2,",
                        "     some with an unknown schema id or a cut body): its dead letters show decoded;",
                        "     a push without its commit count is fixed as JSON and replayed framed with its schema.",
                    ]
                    if avro is not None
                    else []
                ),
                "Ctrl-C stops the feeders, the pipelines and the stack.",
                "",
            ]
        )
    )
    events = demo.load_events()
    feeder = demo.Feeder(bootstrap, rate=args.rate)
    feeders = [(feeder, demo.stream(events, corrupt_every=args.corrupt_every))]
    if registry is not None and versions is not None:
        avro_records = avro_topic.avro_stream(
            registry,
            events,
            versions,
            bad_every=args.corrupt_every,
            clock=lambda: datetime.now(UTC),
        )
        feeders.append((demo.Feeder(bootstrap, rate=args.avro_rate, topic=avro_topic.SOURCE), avro_records))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threads = [threading.Thread(target=f.run, args=(records,), daemon=True) for f, records in feeders]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    runbook = None
    last_report = started
    while not stop.wait(2.0):
        if runbook is None:
            runbook = demo.attach_runbook(people, pipeline)
            if runbook is not None:
                _say(f"runbook '{runbook.title}' attached to the JsonPathNotFound failure group")
        if time.monotonic() - last_report >= 30:
            last_report = time.monotonic()
            for (each_feeder, _), each in zip(feeders, started_pipelines, strict=True):
                each.refresh_from_db()
                _say(
                    f"fed {sum(each_feeder.counts.values()):,} records to {each.name} "
                    f"({dict(each_feeder.counts)}); pipeline {each.state}"
                )
        if args.duration and time.monotonic() - started >= args.duration:
            break
    for each_feeder, _ in feeders:
        each_feeder.stop.set()
    for thread in threads:
        thread.join(timeout=30)
    fed = sum(sum(f.counts.values()) for f, _ in feeders)
    names = ", ".join(p.name for p in started_pipelines)
    _say(f"feeders stopped after {fed:,} records; stopping {names} ...")
    for each in started_pipelines:
        each.refresh_from_db()
        supervision.request_stop(actor=people.admin, pipeline=each, reason="demo ended")
    deadline = time.monotonic() + 120
    ended = {PipelineState.STOPPED, PipelineState.FAILED, PipelineState.HALTED}
    while time.monotonic() < deadline:
        states = dict(
            Pipeline.objects.filter(pk__in=[p.pk for p in started_pipelines]).values_list("name", "state")
        )
        if all(state in ended for state in states.values()):
            _say(", ".join(f"{name} is {state}" for name, state in sorted(states.items())))
            return 0
        time.sleep(1)
    _say(f"{names} did not all report stopped within 120 s; the supervisor will finish the stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
