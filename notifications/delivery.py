"""Sending one notification: a signed webhook POST, a Slack incoming-webhook POST, a PagerDuty Events API
v2 event, a Microsoft Teams or Discord webhook POST (their bodies: ``formats``) or an e-mail, each try stored
as a ``DeliveryAttempt`` row (saleor's webhook deliveries), with exponential backoff between tries.

PagerDuty, Teams and Discord answers are read as their APIs define them: any 2xx is delivered (PagerDuty
202, Discord 204, Teams 200 or 202); 429, 408 and 5xx are retried with the backoff, no sooner than the
answer's ``Retry-After`` header or Discord's ``retry_after`` (seconds) asks; any other 4xx (400: PagerDuty's
"invalid event", a card Teams refuses; 401/404: a removed Discord webhook) fails at once, since the same
message would be refused again.

Webhook signature (for receivers to check): ``X-StreamForge-Timestamp: <unix seconds>`` and
``X-StreamForge-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``; a receiver rejects a
timestamp more than a few minutes old, so a captured request cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import urllib3
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.utils import timezone

from notifications import formats, sealing, targets
from notifications.models import Channel, ChannelKind, DeliveryAttempt, Notification, NotificationState

SIGNATURE_HEADER = "X-StreamForge-Signature"
TIMESTAMP_HEADER = "X-StreamForge-Timestamp"
#: Characters of a receiver's answer kept on the attempt row.
EXCERPT_CHARS = 500
#: Longest wait between two attempts (seconds); the first wait is ``settings.NOTIFY_BACKOFF_SECONDS``.
BACKOFF_CAP = 3600.0


def slack_escape(text: str) -> str:
    """``text`` made inert for a Slack message: ``&``, ``<`` and ``>`` become ``&amp;``, ``&lt;`` and ``&gt;``
    (Slack's rule, "Escaping text" in its message-formatting documentation; ``&`` first, so an entity
    already in the text stays visible as typed). Nothing else is touched: Slack reads only these three as
    control characters, so no ``<!channel>``, ``<@user>`` or ``<http://...|label>`` can come from a value
    another person wrote (an error type, a reason, a name)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value for ``body`` sent at ``timestamp`` (unix seconds as text)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={mac}"


def backoff_seconds(attempt: int, *, jitter: bool = True) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based): ``NOTIFY_BACKOFF_SECONDS`` (5 by
    default), doubling per attempt (5, 10, 20 ...) up to an hour, plus up to 10 % random jitter so a receiver
    coming back is not hit by every retry at once."""
    delay: float = min(settings.NOTIFY_BACKOFF_SECONDS * 2.0 ** (attempt - 1), BACKOFF_CAP)
    return delay * (1 + random.random() / 10) if jitter else delay  # noqa: S311 (not cryptographic)


@dataclass(frozen=True)
class Outcome:
    """One attempt's result: ``ok``; the HTTP status (None for e-mail or no answer); the error and the
    start of the answer; ``permanent`` when trying again cannot help (the receiver refused the message
    itself); ``retry_after``: the receiver's own wait in seconds before the next try, when it said one."""

    ok: bool
    status_code: int | None = None
    error: str = ""
    response: str = ""
    permanent: bool = False
    retry_after: float | None = None


@dataclass(frozen=True)
class AttemptResult:
    """What ``attempt`` did: the stored row (None when there was nothing to do) and, when the notification
    should be tried again, after how many seconds."""

    row: DeliveryAttempt | None
    retry_in: float | None = None


def webhook_body(notification: Notification) -> bytes:
    """The JSON a generic webhook receives."""
    channel = notification.channel
    return json.dumps(
        {
            "id": notification.pk,
            "event": notification.event_type,
            "key": notification.event_key,
            "team": channel.team.name,
            "title": notification.title,
            "text": notification.text,
            "digest": notification.is_digest,
            "count": notification.event_count,
            "data": notification.data,
            "created_at": notification.created_at.isoformat(),
        },
        sort_keys=True,
    ).encode()


#: Answers a PagerDuty, Teams or Discord delivery tries again after (the rest of 4xx is permanent).
RETRIED_STATUSES = frozenset({408, 429})


def retry_after_seconds(answer: targets.Answer) -> float | None:
    """The wait a 429 or 503 answer asks for, in seconds: its ``Retry-After`` header (seconds; an HTTP
    date is not read) or a JSON body's ``retry_after`` (Discord's rate-limit answer, seconds as a float).
    None when it says nothing readable."""
    if answer.status not in (429, 503):
        return None
    candidates: list[Any] = [answer.retry_after]
    try:
        parsed = json.loads(answer.body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        candidates.insert(0, parsed.get("retry_after"))
    for candidate in candidates:
        try:
            seconds = float(candidate)
        except (TypeError, ValueError):
            continue
        if 0 <= seconds < float("inf"):
            return seconds
    return None


def _post(
    url: str, body: bytes, headers: dict[str, str], *, secret: str = "", api_statuses: bool = False
) -> Outcome:
    """POST through ``targets.post``: the host resolved once, checked, and connected to at the checked
    address (checked on save too; a name may resolve elsewhere by now). A 2xx answer is a success, anything
    else (a redirect included: never followed) a failure with the start of the answer. With
    ``api_statuses`` (PagerDuty, Teams, Discord) a 4xx other than 408 and 429 is a permanent failure, and a
    429 or 503 carries the receiver's ``retry_after``. ``secret`` (a webhook URL, a routing key) is masked
    wherever the error or the answer would quote it."""

    def masked(text: str) -> str:
        # An error may quote the address, an answer the key: secrets are never written down in clear.
        return text.replace(secret, sealing.mask(secret)) if secret else text

    try:
        answer = targets.post(
            url, body, headers, timeout=settings.NOTIFY_TIMEOUT_SECONDS, limit=EXCERPT_CHARS
        )
    except targets.TargetRefused as exc:
        return Outcome(ok=False, error=masked(str(exc)))
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        # urllib3 wraps the socket's error (ConnectionRefusedError, a timeout): that one says what happened.
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        return Outcome(ok=False, error=masked(f"{type(cause).__name__}: {cause}")[:1000])
    text = masked(answer.body.decode(errors="replace"))
    if 200 <= answer.status < 300:
        return Outcome(ok=True, status_code=answer.status, response=text)
    error = f"HTTP {answer.status} {answer.reason}"
    if not api_statuses:
        return Outcome(ok=False, status_code=answer.status, error=error, response=text)
    permanent = 400 <= answer.status < 500 and answer.status not in RETRIED_STATUSES
    return Outcome(
        ok=False,
        status_code=answer.status,
        error=f"{error} (refused: not retried)" if permanent else error,
        response=text,
        permanent=permanent,
        retry_after=retry_after_seconds(answer),
    )


def _post_json(url: str, message: dict[str, Any], *, secret: str) -> Outcome:
    """POST ``message`` as JSON to a PagerDuty, Teams or Discord endpoint (``_post`` with their statuses)."""
    body = json.dumps(message).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "StreamForge-Notifications/1"}
    return _post(url, body, headers, secret=secret, api_statuses=True)


def send(notification: Notification) -> Outcome:
    """One try at delivering ``notification`` to its channel; never raises for a delivery problem."""
    channel = notification.channel
    try:
        if channel.kind == ChannelKind.WEBHOOK:
            body = webhook_body(notification)
            timestamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "StreamForge-Notifications/1",
                "X-StreamForge-Event": notification.event_type,
                "X-StreamForge-Delivery": str(notification.pk),
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: sign(sealing.unseal(channel.secret_encrypted), timestamp, body),
            }
            return _post(channel.url, body, headers)
        if channel.kind == ChannelKind.SLACK:
            url = sealing.unseal(channel.secret_encrypted)
            # Every value in a notification's title and text (error types, reasons, names, digests of
            # titles) is someone's data: escaped here, where it becomes Slack markup, the one way out.
            text = f"*{slack_escape(notification.title)}*\n{slack_escape(notification.text)}"
            body = json.dumps({"text": text}).encode()
            return _post(url, body, {"Content-Type": "application/json"}, secret=url)
        if channel.kind == ChannelKind.PAGERDUTY:
            key = sealing.unseal(channel.secret_encrypted)
            event = formats.pagerduty_event(notification, routing_key=key)
            return _post_json(channel.url or formats.PAGERDUTY_EVENTS_URL, event, secret=key)
        if channel.kind == ChannelKind.TEAMS:
            url = sealing.unseal(channel.secret_encrypted)
            return _post_json(url, formats.teams_message(notification), secret=url)
        if channel.kind == ChannelKind.DISCORD:
            url = sealing.unseal(channel.secret_encrypted)
            return _post_json(url, formats.discord_message(notification), secret=url)
        return _send_email(channel, notification)
    except sealing.SecretUnreadable as exc:
        return Outcome(ok=False, error=str(exc))


def _send_email(channel: Channel, notification: Notification) -> Outcome:
    message = EmailMessage(
        subject=f"[StreamForge {channel.team.name}] {notification.title}"[:250],
        body=notification.text,
        to=list(channel.recipients),
        headers={"X-StreamForge-Event": notification.event_type},
    )
    try:
        sent = message.send(fail_silently=False)
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:1000])
    return Outcome(ok=bool(sent), error="" if sent else "the mail server accepted no recipient")


def attempt(notification_id: int, *, final: bool = False) -> AttemptResult:
    """Try to deliver the notification once, unless it is already SENT, FAILED or FOLDED (a redelivered
    task, a second worker). Stores the attempt; on failure the notification is RETRYING with
    ``next_attempt_at`` (and ``retry_in`` says when: the backoff, or the receiver's ``retry_after`` when
    that is longer, at most ``BACKOFF_CAP``), or FAILED after ``NOTIFY_MAX_ATTEMPTS`` tries, when ``final``,
    or when the failure is permanent (a receiver that refused the message itself).

    The notification row stays locked for the try (``select_for_update``), so two workers holding the same
    task never send it twice; the lock is one row of one channel, held at most the send timeout.
    """
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(of=("self",))
            .select_related("channel__team")
            .filter(pk=notification_id)
            .first()
        )
        if notification is None or notification.state not in (
            NotificationState.PENDING,
            NotificationState.RETRYING,
        ):
            return AttemptResult(row=None)
        started = time.monotonic()
        outcome = send(notification)
        number = notification.attempts + 1
        row = DeliveryAttempt.objects.create(
            notification=notification,
            channel=notification.channel,
            attempt=number,
            ok=outcome.ok,
            status_code=outcome.status_code,
            error=outcome.error,
            response_excerpt=outcome.response[:EXCERPT_CHARS],
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        retry_in = None
        notification.attempts = number
        if outcome.ok:
            notification.state, notification.next_attempt_at = NotificationState.SENT, None
        elif final or outcome.permanent or number >= settings.NOTIFY_MAX_ATTEMPTS:
            notification.state, notification.next_attempt_at = NotificationState.FAILED, None
        else:
            retry_in = min(max(backoff_seconds(number), outcome.retry_after or 0.0), BACKOFF_CAP)
            notification.state = NotificationState.RETRYING
            notification.next_attempt_at = timezone.now() + timedelta(seconds=retry_in)
        notification.save(update_fields=["attempts", "state", "next_attempt_at"])
    return AttemptResult(row=row, retry_in=retry_in)
