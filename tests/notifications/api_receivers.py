"""Local stand-ins for PagerDuty's Events API v2, a Microsoft Teams webhook and a Discord webhook: real HTTP
servers on 127.0.0.1 that check every body they get against the rules of the API they stand in for (the
checkers below, each a list of problems, empty when the body is valid) and answer as that API does: its
success status, or 400 with the problems, or whatever the test scripted (a 429 with ``retry_after``, a 500).

The rules checked, from each API's reference (the same sources as ``notifications.formats``):

- PagerDuty (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/): ``routing_key`` a
  32-character string, ``event_action`` trigger|acknowledge|resolve, ``dedup_key`` 1-255 characters; a
  trigger's ``payload`` with ``summary`` (1-1024 characters), ``source`` (non-empty), ``severity``
  critical|error|warning|info, an ISO 8601 ``timestamp``, text ``component``/``group``/``class``, an object
  ``custom_details``; ``links`` of ``{href: http(s) URL, text}``; nothing else at the top level.
- Teams (https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook,
  https://adaptivecards.io/explorer/): ``{"type": "message", "attachments": [one adaptive card]}``, the
  card ``type`` AdaptiveCard, ``version`` "1.4", a non-empty ``body`` of TextBlock (text) and FactSet
  (facts of text title and value) elements, ``actions`` of Action.OpenUrl with an http(s) ``url``; the
  whole message under 28 KB.
- Discord (https://discord.com/developers/docs/resources/webhook#execute-webhook,
  https://discord.com/developers/docs/resources/message#embed-object-embed-limits): ``content`` at most 2000
  characters, at most 10 ``embeds`` with ``title`` <= 256, ``description`` 1-4096, an http(s) ``url``, an
  integer RGB ``color``, at most 25 ``fields`` (``name`` 1-256, ``value`` 1-1024, boolean ``inline``), an ISO
  8601 ``timestamp``, at most 6000 characters over an embed's texts; and (our rule, not Discord's)
  ``allowed_mentions`` exactly ``{"parse": []}``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Checker = Callable[[Any], list[str]]


def _text(value: Any, low: int, high: int) -> bool:
    return isinstance(value, str) and low <= len(value) <= high


def _iso8601(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _http_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://")) and len(value) > 8


def pagerduty_problems(body: Any) -> list[str]:
    """What PagerDuty's Events API v2 would refuse in ``body`` (empty: a valid event)."""
    if not isinstance(body, dict):
        return ["the event is not a JSON object"]
    problems = []
    allowed = {
        "routing_key",
        "event_action",
        "dedup_key",
        "payload",
        "links",
        "images",
        "client",
        "client_url",
    }
    problems += [f"unknown field {name}" for name in sorted(set(body) - allowed)]
    if not _text(body.get("routing_key"), 32, 32):
        problems.append("routing_key must be a 32-character string")
    action = body.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        problems.append("event_action must be trigger, acknowledge or resolve")
    if not _text(body.get("dedup_key"), 1, 255):
        problems.append("dedup_key must be 1 to 255 characters")
    if action == "trigger":
        payload = body.get("payload")
        if not isinstance(payload, dict):
            return [*problems, "payload is required for a trigger"]
        if not _text(payload.get("summary"), 1, 1024):
            problems.append("payload.summary must be 1 to 1024 characters")
        if not _text(payload.get("source"), 1, 10_000):
            problems.append("payload.source is required")
        if payload.get("severity") not in ("critical", "error", "warning", "info"):
            problems.append("payload.severity must be critical, error, warning or info")
        if "timestamp" in payload and not _iso8601(payload["timestamp"]):
            problems.append("payload.timestamp must be ISO 8601")
        for name in ("component", "group", "class"):
            if name in payload and not isinstance(payload[name], str):
                problems.append(f"payload.{name} must be a string")
        if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
            problems.append("payload.custom_details must be an object")
    for link in body.get("links", []):
        if not (isinstance(link, dict) and _http_url(link.get("href")) and isinstance(link.get("text"), str)):
            problems.append("links must be objects with an http(s) href and a text")
    return problems


def teams_problems(body: Any) -> list[str]:
    """What a Teams webhook would refuse (or show broken) in ``body`` (empty: a valid card message)."""
    if not isinstance(body, dict) or body.get("type") != "message":
        return ["the body must be an object of type message"]
    problems = []
    if len(json.dumps(body).encode()) > 28_000:
        problems.append("the message is over 28 KB")
    attachments = body.get("attachments")
    if not isinstance(attachments, list) or len(attachments) != 1:
        return [*problems, "one attachment expected"]
    attachment = attachments[0]
    if attachment.get("contentType") != "application/vnd.microsoft.card.adaptive":
        problems.append("the attachment must be an adaptive card")
    card = attachment.get("content")
    if not isinstance(card, dict) or card.get("type") != "AdaptiveCard":
        return [*problems, "content must be an AdaptiveCard"]
    if card.get("version") != "1.4":
        problems.append('version must be "1.4"')
    elements = card.get("body")
    if not isinstance(elements, list) or not elements:
        problems.append("body must be a non-empty list")
        elements = []
    for element in elements:
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == "TextBlock":
            if not isinstance(element.get("text"), str) or not element["text"]:
                problems.append("a TextBlock needs a text")
        elif kind == "FactSet":
            facts = element.get("facts")
            if not isinstance(facts, list) or not all(
                isinstance(f, dict) and isinstance(f.get("title"), str) and isinstance(f.get("value"), str)
                for f in facts
            ):
                problems.append("a FactSet needs facts of text title and value")
        else:
            problems.append(f"unexpected element {kind}")
    for action in card.get("actions", []):
        if not (
            isinstance(action, dict)
            and action.get("type") == "Action.OpenUrl"
            and _http_url(action.get("url"))
            and isinstance(action.get("title"), str)
        ):
            problems.append("actions must be Action.OpenUrl with an http(s) url and a title")
    return problems


def discord_problems(body: Any) -> list[str]:
    """What Discord's Execute Webhook would refuse in ``body``, plus our rule that it mentions nobody."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = []
    allowed = {"content", "embeds", "allowed_mentions", "username", "avatar_url", "tts", "flags"}
    problems += [f"unknown field {name}" for name in sorted(set(body) - allowed)]
    if "content" in body and not _text(body["content"], 0, 2000):
        problems.append("content must be at most 2000 characters")
    if body.get("allowed_mentions") != {"parse": []}:
        problems.append('allowed_mentions must be {"parse": []}')
    embeds = body.get("embeds", [])
    if not body.get("content") and not embeds:
        problems.append("content or embeds are required")
    if not isinstance(embeds, list) or len(embeds) > 10:
        return [*problems, "embeds must be a list of at most 10"]
    for embed in embeds:
        total = 0
        if "title" in embed:
            problems += [] if _text(embed["title"], 1, 256) else ["embed title must be 1 to 256 characters"]
            total += len(str(embed["title"]))
        if "description" in embed:
            if not _text(embed["description"], 1, 4096):
                problems.append("embed description must be 1 to 4096 characters")
            total += len(str(embed["description"]))
        if "url" in embed and not _http_url(embed["url"]):
            problems.append("embed url must be an http(s) URL")
        if "color" in embed and not (
            isinstance(embed["color"], int)
            and not isinstance(embed["color"], bool)
            and 0 <= embed["color"] <= 0xFFFFFF
        ):
            problems.append("embed color must be an integer RGB")
        if "timestamp" in embed and not _iso8601(embed["timestamp"]):
            problems.append("embed timestamp must be ISO 8601")
        fields = embed.get("fields", [])
        if not isinstance(fields, list) or len(fields) > 25:
            problems.append("an embed has at most 25 fields")
            fields = []
        for f in fields:
            if not (_text(f.get("name"), 1, 256) and _text(f.get("value"), 1, 1024)):
                problems.append("a field needs a name of 1-256 and a value of 1-1024 characters")
            if "inline" in f and not isinstance(f["inline"], bool):
                problems.append("a field's inline must be a boolean")
            total += len(str(f.get("name", ""))) + len(str(f.get("value", "")))
        if total > 6000:
            problems.append("an embed's texts are over 6000 characters")
    return problems


@dataclass
class Answer:
    """A scripted answer: status, JSON body (None: empty) and headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ApiReceiver:
    """What the stand-in got: every (path, headers, parsed body) and each body's problems; ``script`` answers
    the next requests in order, then the API's own success (``success``) or its 400 for an invalid body."""

    url: str
    checker: Checker
    success: Answer
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    problems: list[list[str]] = field(default_factory=list)
    script: list[Answer] = field(default_factory=list)

    def bodies(self) -> list[Any]:
        return [body for _, _, body in self.requests]


@contextmanager
def api_receiver(checker: Checker, success: Answer) -> Iterator[ApiReceiver]:
    """An ``ApiReceiver`` listening on 127.0.0.1 for the duration of the ``with``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    found = ApiReceiver(url=f"http://127.0.0.1:{server.server_address[1]}", checker=checker, success=success)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
            problems = (
                checker(body) if self.headers.get("Content-Type") == "application/json" else ["not JSON"]
            )
            found.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            found.problems.append(problems)
            if found.script:
                answer = found.script.pop(0)
            elif problems:
                answer = Answer(400, {"status": "invalid event", "errors": problems})
            else:
                answer = found.success
            payload = b"" if answer.body is None else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
