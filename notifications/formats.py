"""The bodies PagerDuty, Microsoft Teams and Discord receive for one notification, built as plain dicts
(``delivery`` serialises and sends them). Every value that came from someone's data (an error type, a
reason, a pipeline name, a digest's titles) is made inert for the receiving app's markup here, the one way
out, as ``delivery.slack_escape`` does for Slack.

Sources of the shapes and limits:

- PagerDuty Events API v2, "Send an Alert Event" / "Send a Change Event" reference
  (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/ and
  https://developer.pagerduty.com/docs/events-api-v2/resolve-events/): ``routing_key``, ``event_action``
  (trigger, acknowledge, resolve), ``dedup_key`` (at most 255 characters), ``payload.summary`` (at most 1024
  characters), ``payload.source``, ``payload.severity`` (critical, error, warning, info), optional
  ``timestamp`` (ISO 8601), ``component``, ``group``, ``class``, ``custom_details``, and ``links``
  (``href``, ``text``). A resolve needs only ``routing_key``, ``event_action`` and ``dedup_key``.
- Microsoft Teams incoming webhooks and Workflows webhooks, "Create an Incoming Webhook" and "Format cards
  in Teams" (https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook,
  https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/cards-format): a
  ``message`` with one ``application/vnd.microsoft.card.adaptive`` attachment, an Adaptive Card 1.4
  (https://adaptivecards.io/explorer/) of ``TextBlock`` and ``FactSet`` elements and an ``Action.OpenUrl``;
  the message at most about 28 KB. TextBlock and Fact values read a Markdown subset (bold, italic, lists,
  ``[text](url)`` links); a mention needs an explicit ``msteams.entities`` entry, so text cannot ping.
- Discord "Execute Webhook" and the embed limits (https://discord.com/developers/docs/resources/webhook,
  https://discord.com/developers/docs/resources/message#embed-object-embed-limits): ``content`` (optional
  when there are embeds), ``embeds`` of ``title`` (256), ``description`` (4096), ``url``, ``color`` (an
  integer RGB), ``fields`` (at most 25, ``name`` 256, ``value`` 1024, ``inline``), ``timestamp`` (ISO 8601),
  at most 6000 characters over an embed's texts; ``allowed_mentions: {"parse": []}`` so nothing in the
  message pings anyone (https://discord.com/developers/docs/resources/message#allowed-mentions-object).
"""

from __future__ import annotations

import re
from typing import Any

from django.urls import NoReverseMatch, reverse

from notifications import incidents
from notifications.models import EventType, Notification

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
PAGERDUTY_SUMMARY_CHARS = 1024
PAGERDUTY_DEDUP_CHARS = 255
#: PagerDuty's severity of each event type (an alert's own ``critical``/``warning`` comes from its rule).
PAGERDUTY_SEVERITY: dict[str, str] = {
    EventType.ALERT_FIRING: "warning",
    EventType.ALERT_RESOLVED: "info",
    EventType.FAILURE_GROUP: "warning",
    EventType.PIPELINE_HALTED: "error",
    EventType.PIPELINE_FAILED: "critical",
    EventType.APPROVAL_WAITING: "info",
    EventType.BULK_FINISHED: "info",
    EventType.FIX_FORWARD: "info",
    EventType.REDRIVE_PAUSED: "warning",
    EventType.BREAK_GLASS: "warning",
    EventType.TEST: "info",
}
PAGERDUTY_SEVERITIES = ("critical", "error", "warning", "info")

DISCORD_TITLE_CHARS = 256
DISCORD_DESCRIPTION_CHARS = 4096
DISCORD_FIELDS = 25
DISCORD_FIELD_NAME_CHARS = 256
DISCORD_FIELD_VALUE_CHARS = 1024
DISCORD_EMBED_CHARS = 6000
#: Embed colours (RGB as an integer) by PagerDuty-style severity; green for a resolution.
COLOURS = {
    "critical": 0xD32F2F,
    "error": 0xF57C00,
    "warning": 0xFBC02D,
    "info": 0x1976D2,
    "resolved": 0x388E3C,
}

#: Characters of a Teams text block and of one fact's value (the message must stay under ~28 KB).
TEAMS_TEXT_CHARS = 4000
TEAMS_FACT_CHARS = 500
#: ``data`` facts shown at most (Teams facts, Discord fields), scalar values only.
FACTS = 10

# Discord's Markdown (simple-markdown) takes a backslash before any punctuation as "this character, as
# text": bold/italic/underline/strike/spoiler/code, masked links, mentions and channel or emoji tags. Line
# starts also make headings, subtext ("-#"), quotes and lists.
_DISCORD_INLINE = re.compile(r"([\\*_~`|<>\[\]()@])")
# Teams' Adaptive Card Markdown (a CommonMark subset): bold, italic, links, lists. HTML and mentions are
# not read from text, so only these need a backslash.
_TEAMS_INLINE = re.compile(r"([\\*_`~\[\]()<>])")
_LINE_START = re.compile(r"(?m)^(\s*)([#>+\-]|\d+[.)])")


def discord_escape(text: str) -> str:
    """``text`` made inert for a Discord message: every Markdown and mention character (``\\ * _ ~ ` | < >
    [ ] ( ) @``) behind a backslash, and a heading, quote or list marker at a line's start too. So no
    ``@everyone``, ``<@id>``, ``<#channel>`` or ``[disguised](link)`` comes from a value another person wrote;
    ``allowed_mentions`` with an empty ``parse`` is the second lock."""
    return _LINE_START.sub(r"\1\\\2", _DISCORD_INLINE.sub(r"\\\1", text))


def teams_escape(text: str) -> str:
    """``text`` made inert for an Adaptive Card's Markdown: ``\\ * _ ` ~ [ ] ( ) < >`` behind a backslash
    (CommonMark's escape) and line-start list and heading markers too, so no ``[disguised](link)`` or
    formatting comes from someone's data."""
    return _LINE_START.sub(r"\1\\\2", _TEAMS_INLINE.sub(r"\\\1", text))


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``…`` when cut; an escaping backslash left
    alone at the cut is dropped (it would escape the ellipsis)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    trailing = len(cut) - len(cut.rstrip("\\"))
    if trailing % 2:
        cut = cut[:-1]
    return cut + "…"


#: The list page of each event type, for digests and events that name nothing more precise.
_LIST_PAGES: dict[str, str] = {
    EventType.ALERT_FIRING: "overview",
    EventType.ALERT_RESOLVED: "overview",
    EventType.PIPELINE_HALTED: "overview",
    EventType.PIPELINE_FAILED: "overview",
    EventType.FAILURE_GROUP: "dlq-groups",
    EventType.APPROVAL_WAITING: "dlq-approvals",
    EventType.BULK_FINISHED: "dlq-bulk",
    EventType.FIX_FORWARD: "dlq-fix-forward",
}
_PIPELINE_EVENTS = frozenset(
    (EventType.ALERT_FIRING, EventType.ALERT_RESOLVED, EventType.PIPELINE_HALTED, EventType.PIPELINE_FAILED)
)


def console_link(notification: Notification) -> str | None:
    """The StreamForge page about this notification under the channel's ``console_url`` (None when the
    channel has none): the pipeline's page for alerts and halted or failed pipelines, the scan's page for a
    fix forward, the list page of the event type otherwise (a digest's too), the channel's team page for a
    test."""
    base = notification.channel.console_url.rstrip("/")
    if not base:
        return None
    data, kind = notification.data, notification.event_type
    name, kwargs = "notifications-team", {"team": notification.channel.team.name}
    if kind in _PIPELINE_EVENTS and isinstance(data.get("pipeline"), str) and data["pipeline"]:
        name, kwargs = "pipeline-detail", {"name": data["pipeline"]}
    elif kind == EventType.FIX_FORWARD and isinstance(data.get("scan"), int):
        name, kwargs = "dlq-fix-forward-scan", {"pk": data["scan"]}
    elif kind in _LIST_PAGES:
        name, kwargs = _LIST_PAGES[kind], {}
    try:
        return base + reverse(name, kwargs=kwargs)
    except NoReverseMatch:  # a name the URL pattern refuses: the console's home page
        return base + "/"


def _facts(notification: Notification) -> list[tuple[str, str]]:
    """(name, value) of the notification's team, event and scalar ``data`` (at most ``FACTS``), as text."""
    facts = [("team", notification.channel.team.name), ("event", notification.event_type)]
    if notification.is_digest:
        facts.append(("events", str(notification.event_count)))
    for name, value in notification.data.items():
        if len(facts) >= FACTS:
            break
        if isinstance(value, str | int | float | bool) and value != "" and name not in ("examples",):
            facts.append((str(name), str(value)))
    return facts


# ------------------------------------------------------------------------------------------------ PagerDuty


def pagerduty_dedup_key(notification: Notification) -> str:
    """The dedup key of the notification's incident: ``streamforge/<team>/<incident key>`` (see
    ``incidents.incident_key``), the same for an alert's trigger and its resolve, at most 255 characters."""
    key = incidents.incident_key(notification.event_type, notification.event_key)
    return f"streamforge/{notification.channel.team.name}/{key}"[:PAGERDUTY_DEDUP_CHARS]


def pagerduty_severity(notification: Notification) -> str:
    """critical, error, warning or info: an alert's own severity when it has one of those, else by type."""
    own = notification.data.get("severity")
    if notification.event_type == EventType.ALERT_FIRING and own in PAGERDUTY_SEVERITIES:
        return str(own)
    return PAGERDUTY_SEVERITY.get(notification.event_type, "info")


def pagerduty_event(notification: Notification, *, routing_key: str) -> dict[str, Any]:
    """The Events API v2 event for ``notification``: ``resolve`` for an event that closes its incident
    (``incidents.closes``), ``trigger`` otherwise, with the incident's stable ``dedup_key``. A trigger's
    ``payload`` says what happened (``summary`` cut to 1024 characters), where (``source``: the pipeline or the
    team; ``component``: the pipeline; ``group``: the team; ``class``: the event type), how bad
    (``severity``), when (``timestamp``, ISO 8601) and the facts (``custom_details``: the text and ``data``);
    ``links`` holds the console page when the channel has a ``console_url``."""
    dedup_key = pagerduty_dedup_key(notification)
    if incidents.closes(notification.event_type, is_digest=notification.is_digest):
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup_key}
    team = notification.channel.team.name
    pipeline = notification.data.get("pipeline")
    payload: dict[str, Any] = {
        "summary": clip(notification.title, PAGERDUTY_SUMMARY_CHARS),
        "source": f"streamforge/{team}/{pipeline}" if pipeline else f"streamforge/{team}",
        "severity": pagerduty_severity(notification),
        "timestamp": notification.created_at.isoformat(),
        "group": team,
        "class": notification.event_type,
        "custom_details": {
            "text": notification.text,
            "digest": notification.is_digest,
            "count": notification.event_count,
            **notification.data,
        },
    }
    if pipeline:
        payload["component"] = str(pipeline)
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": payload,
    }
    link = console_link(notification)
    if link:
        event["links"] = [{"href": link, "text": "Open in StreamForge"}]
    return event


# -------------------------------------------------------------------------------------------- Microsoft Teams


def teams_message(notification: Notification) -> dict[str, Any]:
    """The Teams webhook message: one Adaptive Card 1.4 with the title (bold), the text, a ``FactSet`` of
    the team, event and scalar facts, and an ``Action.OpenUrl`` to the console when the channel has a
    ``console_url``. Every text is escaped (``teams_escape``) and cut (``TEAMS_TEXT_CHARS``,
    ``TEAMS_FACT_CHARS``)."""
    resolved = incidents.closes(notification.event_type, is_digest=notification.is_digest)
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": clip(teams_escape(notification.title), TEAMS_FACT_CHARS),
            "weight": "Bolder",
            "size": "Medium",
            "color": "Good"
            if resolved
            else "Attention"
            if pagerduty_severity(notification) in ("critical", "error")
            else "Default",
            "wrap": True,
        },
        {"type": "TextBlock", "text": clip(teams_escape(notification.text), TEAMS_TEXT_CHARS), "wrap": True},
        {
            "type": "FactSet",
            "facts": [
                {"title": teams_escape(name), "value": clip(teams_escape(value), TEAMS_FACT_CHARS)}
                for name, value in _facts(notification)
            ],
        },
    ]
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    }
    link = console_link(notification)
    if link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in StreamForge", "url": link}]
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }


# -------------------------------------------------------------------------------------------------- Discord


def discord_message(notification: Notification) -> dict[str, Any]:
    """The Discord webhook message: one embed (title, description, the console ``url`` when known, a
    colour by severity or green for a resolution, inline fields of the facts, the timestamp) within
    Discord's limits (``DISCORD_*``: a description shortened so the embed stays under 6000 characters), and
    ``allowed_mentions`` parsing nothing. Every text is escaped (``discord_escape``)."""
    resolved = incidents.closes(notification.event_type, is_digest=notification.is_digest)
    title = clip(discord_escape(notification.title), DISCORD_TITLE_CHARS)
    named = [
        (
            clip(discord_escape(name), DISCORD_FIELD_NAME_CHARS),
            clip(discord_escape(value), DISCORD_FIELD_VALUE_CHARS),
        )
        for name, value in _facts(notification)[:DISCORD_FIELDS]
    ]
    fields = [{"name": name, "value": value, "inline": True} for name, value in named]
    used = len(title) + sum(len(name) + len(value) for name, value in named)
    room = min(DISCORD_DESCRIPTION_CHARS, DISCORD_EMBED_CHARS - used)
    embed: dict[str, Any] = {
        "title": title,
        "description": clip(discord_escape(notification.text), room),
        "color": COLOURS["resolved" if resolved else pagerduty_severity(notification)],
        "fields": fields,
        "timestamp": notification.created_at.isoformat(),
    }
    if not embed["description"]:
        del embed["description"]  # Discord refuses an empty string
    link = console_link(notification)
    if link:
        embed["url"] = link
    return {"embeds": [embed], "allowed_mentions": {"parse": []}}
