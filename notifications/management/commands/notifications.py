"""``manage.py notifications list | test <channel id> | deliveries [--channel ID] [--limit N]``: the
channels (secrets masked), a test message sent now, and the latest delivery attempts. Runs as the system:
for operators with shell access to the server."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications import delivery
from notifications.models import Channel, DeliveryAttempt, EventType, Notification


class Command(BaseCommand):
    """List channels, send a test, show deliveries."""

    help = "Notification channels: list | test <channel id> | deliveries"

    def add_arguments(self, parser: CommandParser) -> None:
        """``what`` and its options."""
        parser.add_argument("what", choices=["list", "test", "deliveries"])
        parser.add_argument("channel", nargs="?", type=int)
        parser.add_argument("--limit", type=int, default=20)

    def handle(self, *args: Any, **options: Any) -> None:
        """Print what was asked for; CommandError for an unknown channel."""
        if options["what"] == "list":
            for c in Channel.objects.select_related("team"):
                where = c.url or c.secret_hint or ", ".join(c.recipients)
                self.stdout.write(f"{c.pk}\t{c.team.name}\t{c.name}\t{c.kind}\t{where}\t{','.join(c.events)}")
            return
        channel = Channel.objects.filter(pk=options["channel"]).first() if options["channel"] else None
        if options["what"] == "test":
            if channel is None:
                raise CommandError("name an existing channel id")
            notification = Notification.objects.create(
                channel=channel,
                event_type=EventType.TEST,
                event_key=f"test:cli:{Notification.objects.count()}:{channel.pk}",
                title=f"Test message for {channel.name}",
                text="sent with manage.py notifications test",
            )
            row = delivery.attempt(notification.pk, final=True).row
            assert row is not None
            self.stdout.write(f"{'ok' if row.ok else 'failed'} {row.status_code or ''} {row.error}".strip())
            return
        rows = DeliveryAttempt.objects.select_related("channel", "notification").order_by("-id")
        if channel is not None:
            rows = rows.filter(channel=channel)
        for d in rows[: options["limit"]]:
            self.stdout.write(
                f"{d.created_at:%Y-%m-%d %H:%M:%S}\t{d.channel.name}\t{d.notification.event_type}\t"
                f"#{d.attempt}\t{'ok' if d.ok else 'failed'}\t{d.status_code or ''}\t{d.error[:80]}"
            )
