"""Managing a team's notification channels: create, update, delete, send a test. Admins and the team's
team admins (``Membership.manages_team``) manage; the team's members read (secrets masked). Every change is
audited (``notification_channel.*``), never with a secret in it."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import URLValidator, validate_email, validate_slug
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from access import audit
from access.models import Role, Team
from access.people import manages
from access.permissions import AnyUser, require_role, visible_teams
from dlq.services.errors import InvalidRequest
from notifications import delivery, formats, sealing
from notifications.models import Channel, ChannelKind, DeliveryAttempt, EventType, Notification
from notifications.targets import target_problem

#: Event types a channel may subscribe to (``test`` is sent on request only).
SUBSCRIBABLE = [value for value in EventType.values if value != EventType.TEST]
#: The kinds whose webhook URL is itself the credential (stored sealed, shown masked), with its field.
SECRET_URL_FIELDS: dict[str, str] = {
    ChannelKind.SLACK: "slack_url",
    ChannelKind.TEAMS: "teams_url",
    ChannelKind.DISCORD: "discord_url",
}
#: A PagerDuty Events API v2 routing key: the 32-character integration key of a service's "Events API V2"
#: integration (or of an event orchestration), letters and digits.
_ROUTING_KEY = re.compile(r"[A-Za-z0-9]{32}")


@dataclass(frozen=True)
class Created:
    """A new channel and, for a webhook, its signing secret: shown this once, stored only encrypted."""

    channel: Channel
    signing_secret: str | None


def visible_channels(user: AnyUser) -> QuerySet[Channel]:
    """Channels of the teams the user may see."""
    return Channel.objects.filter(team__in=visible_teams(user)).select_related("team")


def may_manage(user: AnyUser, team: Team) -> bool:
    """Admins and the team's team admins manage its channels."""
    return manages(user, team)


def _require_manager(actor: AnyUser, team: Team) -> None:
    require_role(actor, team, Role.VIEWER)  # not a member: PermissionDenied naming the team
    if not may_manage(actor, team):
        raise PermissionDenied(f"managing team {team.name}'s notifications needs an admin or a team admin")


def _http_url(field: str, value: str) -> str:
    value = value.strip()
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError as exc:
        raise InvalidRequest(field, "an http:// or https:// URL") from exc
    problem = target_problem(value)
    if problem is not None:
        raise InvalidRequest(field, problem)
    return value


def _routing_key(value: str) -> str:
    value = value.strip()
    if not _ROUTING_KEY.fullmatch(value):
        raise InvalidRequest(
            "routing_key",
            "the 32-character integration key (letters and digits) of an Events API v2 integration",
        )
    return value


def _pagerduty_url(value: str) -> str:
    """PagerDuty's events endpoint when blank (not resolved now: it is checked like any other at each
    delivery), else an http(s) URL the target checks allow (a test receiver, a regional endpoint)."""
    return _http_url("url", value) if value.strip() else formats.PAGERDUTY_EVENTS_URL


def _console_url(value: str) -> str:
    """This StreamForge's address for links in messages: blank, or an http(s) URL. The server never
    connects to it, so it is not a target to check."""
    value = value.strip()
    if not value:
        return ""
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError as exc:
        raise InvalidRequest("console_url", "an http:// or https:// URL, or nothing") from exc
    if len(value) > 500:
        raise InvalidRequest("console_url", "at most 500 characters")
    return value


def _seal_into(channel: Channel, secret: str) -> None:
    channel.secret_encrypted, channel.secret_hint = sealing.seal(secret), sealing.mask(secret)


def _recipients(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > 50:
        raise InvalidRequest("recipients", "a list of 1 to 50 e-mail addresses")
    for address in value:
        try:
            validate_email(address)
        except (ValidationError, TypeError) as exc:
            raise InvalidRequest("recipients", f"not an e-mail address: {str(address)[:100]}") from exc
    return [str(a) for a in value]


def _events(value: Any) -> list[str]:
    if not isinstance(value, list) or any(e not in SUBSCRIBABLE for e in value):
        raise InvalidRequest("events", f"a list of: {', '.join(SUBSCRIBABLE)}")
    return sorted(set(value))


def _name(value: str) -> str:
    try:
        validate_slug(value)
    except ValidationError as exc:
        raise InvalidRequest("name", "letters, digits, - and _ only") from exc
    if not value or len(value) > 63:
        raise InvalidRequest("name", "1 to 63 characters")
    return value


def describe(channel: Channel) -> dict[str, Any]:
    """The channel's settings for the audit trail and people: never a secret."""
    return {
        "team": channel.team.name,
        "name": channel.name,
        "kind": channel.kind,
        "url": channel.url,
        "secret": channel.secret_hint,
        "console_url": channel.console_url,
        "recipients": channel.recipients,
        "events": channel.events,
        "enabled": channel.enabled,
    }


def create_channel(
    *,
    actor: User,
    team: Team,
    name: str,
    kind: str,
    events: list[str],
    url: str = "",
    slack_url: str = "",
    teams_url: str = "",
    discord_url: str = "",
    routing_key: str = "",
    console_url: str = "",
    recipients: list[str] | None = None,
    enabled: bool = True,
) -> Created:
    """Add a channel to ``team``. A webhook needs ``url`` and gets a new signing secret (returned once);
    Slack, Teams and Discord need their webhook URL (``slack_url``, ``teams_url``, ``discord_url``: stored
    encrypted, shown masked); PagerDuty needs ``routing_key`` (stored encrypted, shown masked) and takes
    ``url`` for another events endpoint than ``formats.PAGERDUTY_EVENTS_URL``; e-mail needs ``recipients``.
    ``console_url`` (optional) is this StreamForge's address for the links PagerDuty, Teams and Discord
    messages carry. Fields of other kinds are ignored. Raises InvalidRequest naming the field,
    PermissionDenied."""
    _require_manager(actor, team)
    if kind not in ChannelKind.values:
        raise InvalidRequest("kind", f"one of {', '.join(ChannelKind.values)}")
    channel = Channel(
        team=team,
        name=_name(name),
        kind=kind,
        events=_events(events),
        enabled=enabled,
        console_url=_console_url(console_url),
    )
    secret = None
    secret_urls = {"slack_url": slack_url, "teams_url": teams_url, "discord_url": discord_url}
    if kind == ChannelKind.WEBHOOK:
        channel.url = _http_url("url", url)
        secret = sealing.new_signing_secret()
        _seal_into(channel, secret)
    elif kind in SECRET_URL_FIELDS:
        field = SECRET_URL_FIELDS[kind]
        _seal_into(channel, _http_url(field, secret_urls[field]))
    elif kind == ChannelKind.PAGERDUTY:
        key = _routing_key(routing_key)
        channel.url = _pagerduty_url(url)
        _seal_into(channel, key)
    else:
        channel.recipients = _recipients(recipients)
    channel.created_by = actor
    try:
        with transaction.atomic():
            channel.save()
            audit.record(
                actor=actor,
                action="notification_channel.create",
                target_type="notification_channel",
                target_id=channel.pk,
                after=describe(channel),
                details=describe(channel),
            )
    except IntegrityError as exc:
        raise InvalidRequest("name", "the team already has a channel of this name") from exc
    return Created(channel, secret)


def update_channel(
    *,
    actor: User,
    channel: Channel,
    events: list[str] | None = None,
    enabled: bool | None = None,
    url: str | None = None,
    slack_url: str | None = None,
    teams_url: str | None = None,
    discord_url: str | None = None,
    routing_key: str | None = None,
    console_url: str | None = None,
    recipients: list[str] | None = None,
) -> Channel:
    """Change a channel's subscriptions, on/off switch, address, links or recipients (None: unchanged;
    ``console_url=""`` removes the links). A new ``slack_url``, ``teams_url``, ``discord_url`` or
    ``routing_key`` of the channel's kind replaces the encrypted one (blank: unchanged); a PagerDuty
    channel's blank ``url`` is PagerDuty's endpoint again. Raises InvalidRequest, PermissionDenied."""
    _require_manager(actor, channel.team)
    before = describe(channel)
    if events is not None:
        channel.events = _events(events)
    if enabled is not None:
        channel.enabled = enabled
    if console_url is not None:
        channel.console_url = _console_url(console_url)
    if url is not None and channel.kind == ChannelKind.WEBHOOK:
        channel.url = _http_url("url", url)
    if url is not None and channel.kind == ChannelKind.PAGERDUTY:
        channel.url = _pagerduty_url(url)
    new_url = {"slack_url": slack_url, "teams_url": teams_url, "discord_url": discord_url}.get(
        SECRET_URL_FIELDS.get(channel.kind, "")
    )
    if new_url:
        _seal_into(channel, _http_url(SECRET_URL_FIELDS[channel.kind], new_url))
    if routing_key and channel.kind == ChannelKind.PAGERDUTY:
        _seal_into(channel, _routing_key(routing_key))
    if recipients is not None and channel.kind == ChannelKind.EMAIL:
        channel.recipients = _recipients(recipients)
    with transaction.atomic():
        channel.save()
        audit.record(
            actor=actor,
            action="notification_channel.update",
            target_type="notification_channel",
            target_id=channel.pk,
            before=before,
            after=describe(channel),
            details=describe(channel),
        )
    return channel


def delete_channel(*, actor: User, channel: Channel) -> None:
    """Delete a channel with its notifications and delivery rows. Raises PermissionDenied."""
    _require_manager(actor, channel.team)
    with transaction.atomic():
        audit.record(
            actor=actor,
            action="notification_channel.delete",
            target_type="notification_channel",
            target_id=channel.pk,
            before=describe(channel),
            details=describe(channel),
        )
        channel.delete()


def send_test(*, actor: User, channel: Channel) -> DeliveryAttempt:
    """Send a test message to the channel now, once (no retry), and return the attempt row. Needs the
    operator role in the channel's team. Raises PermissionDenied."""
    require_role(actor, channel.team, Role.OPERATOR)
    with transaction.atomic():
        notification = Notification.objects.create(
            channel=channel,
            event_type=EventType.TEST,
            event_key=f"test:{uuid.uuid4()}",
            title=f"Test message for {channel.name}",
            text=f"{actor.get_username()} sent a test from StreamForge to team {channel.team.name}'s channel.",
            data={"test": True},
        )
        audit.record(
            actor=actor,
            action="notification_channel.test",
            target_type="notification_channel",
            target_id=channel.pk,
            details={"notification": notification.pk},
        )
    result = delivery.attempt(notification.pk, final=True)
    assert result.row is not None  # a new PENDING notification is always tried
    return result.row
