"""``manage.py topics``: the topic browser and test messages from a shell, as the API does them, as a user
(``--as <username>``: what that user may see, masked as for them; mutations audited as them). Prints JSON.

    manage.py topics browse github-events github.events --as alice [--from-offset N | --from-time ISO]
        [--partition P] [--order newest|oldest] [--limit 50] [--cursor C]
    manage.py topics test-message github-events --as alice --value @event.json --reason "check the filter"
        [--topic T] [--key K]
    manage.py topics outcomes github-events github.events 0 42 --as alice
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dlq import test_messages, topic_browser
from dlq.services import InvalidRequest, ReplayFailed


def _user(name: str) -> User:
    user = User.objects.filter(username=name, is_active=True).first()
    if user is None:
        raise CommandError(f"no active user {name!r}")
    return user


def _value(text: str) -> bytes:
    """``@path`` reads the file's bytes; anything else is the value as UTF-8 text."""
    if text.startswith("@"):
        try:
            return Path(text[1:]).read_bytes()
        except OSError as exc:
            raise CommandError(f"--value: {exc}") from None
    return text.encode()


class Command(BaseCommand):
    """Browse a pipeline's topics, produce a test message, follow a source record's outcomes."""

    help = "Browse a pipeline's topics and produce test messages (see the module docstring)."

    def add_arguments(self, parser: CommandParser) -> None:
        """Sub-commands ``browse``, ``test-message`` and ``outcomes``."""
        sub = parser.add_subparsers(dest="command", required=True)
        browse = sub.add_parser("browse")
        browse.add_argument("pipeline")
        browse.add_argument("topic")
        browse.add_argument("--as", dest="user", required=True)
        position = browse.add_mutually_exclusive_group()
        position.add_argument("--from-offset", type=int)
        position.add_argument("--from-time", help="ISO-8601, UTC unless it names a zone")
        browse.add_argument("--partition", type=int)
        browse.add_argument("--order", choices=["newest", "oldest"], default="newest")
        browse.add_argument("--limit", type=int, default=topic_browser.PAGE_SIZE)
        browse.add_argument("--cursor", default="")
        test = sub.add_parser("test-message")
        test.add_argument("pipeline")
        test.add_argument("--as", dest="user", required=True)
        test.add_argument("--value", required=True, help="the value, or @file")
        test.add_argument("--key")
        test.add_argument("--topic", help="a source topic (default: the first)")
        test.add_argument("--reason", required=True)
        outcomes = sub.add_parser("outcomes")
        outcomes.add_argument("pipeline")
        outcomes.add_argument("topic")
        outcomes.add_argument("partition", type=int)
        outcomes.add_argument("offset", type=int)
        outcomes.add_argument("--as", dest="user", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the sub-command and print its result as JSON; CommandError for what the API answers 4xx/5xx."""
        user = _user(options["user"])
        try:
            pipeline = topic_browser.pipeline_for(user, options["pipeline"])
            result = getattr(self, options["command"].replace("-", "_"))(user, pipeline, options)
        except topic_browser.TopicNotFound as exc:
            raise CommandError(f"not found: {exc}") from None
        except (topic_browser.BadPosition, InvalidRequest, PermissionDenied, ReplayFailed) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(dataclasses.asdict(result), indent=2, ensure_ascii=False))

    def browse(self, user: User, pipeline: Any, options: dict[str, Any]) -> Any:
        """One page of records (``dlq.topic_browser.browse``)."""
        from_time_ms = None
        if options["from_time"]:
            try:
                moment = datetime.fromisoformat(options["from_time"].replace("Z", "+00:00"))
            except ValueError:
                raise CommandError("--from-time: an ISO-8601 time, e.g. 2025-01-31T12:00:00Z") from None
            moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            from_time_ms = int(moment.timestamp() * 1000)
        return topic_browser.browse(
            pipeline,
            options["topic"],
            user=user,
            partition=options["partition"],
            from_offset=options["from_offset"],
            from_time_ms=from_time_ms,
            order=options["order"],
            cursor=options["cursor"],
            limit=options["limit"],
        )

    def test_message(self, user: User, pipeline: Any, options: dict[str, Any]) -> Any:
        """Produce a test message (``dlq.test_messages.produce_test_message``)."""
        spec = topic_browser.spec_of(pipeline)
        return test_messages.produce_test_message(
            actor=user,
            pipeline=pipeline,
            topic=options["topic"] or spec.source.topics[0],
            value=_value(options["value"]),
            key=options["key"].encode() if options["key"] else None,
            reason=options["reason"],
        )

    def outcomes(self, user: User, pipeline: Any, options: dict[str, Any]) -> Any:
        """A source record's outcome per destination (``dlq.test_messages.record_outcomes``)."""
        return test_messages.record_outcomes(
            pipeline, topic=options["topic"], partition=options["partition"], offset=options["offset"]
        )
