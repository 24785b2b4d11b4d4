"""Real receivers for notification tests: an HTTP server in a thread that checks the webhook signature and
counts requests, and an SMTP server (aiosmtpd) that keeps the mail it receives."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from notifications import delivery, dispatch


@pytest.fixture(autouse=True)
def local_receivers_allowed(settings):
    """The receivers these tests start listen on 127.0.0.1, which the server refuses by default
    (``notifications.targets``); the test about that refusal turns it back off."""
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = True


@dataclass
class Receiver:
    """Requests received: (headers, body); ``signing_secret`` checks ``X-StreamForge-Signature``."""

    url: str
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    signing_secret: str = ""
    bad_signatures: int = 0

    def bodies(self) -> list[Any]:
        return [json.loads(body) for _, body in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    found = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            if found.signing_secret:
                mac = hmac.new(
                    found.signing_secret.encode(),
                    headers.get("x-streamforge-timestamp", "").encode() + b"." + body,
                    hashlib.sha256,
                ).hexdigest()
                if not hmac.compare_digest(headers.get("x-streamforge-signature", ""), f"sha256={mac}"):
                    found.bad_signatures += 1
            found.requests.append((headers, body))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"thanks")

        def log_message(self, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    server.shutdown()
    server.server_close()


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture
def smtp(settings) -> Iterator[_Inbox]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    yield inbox
    controller.stop()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/down"


@pytest.fixture
def inline_delivery(monkeypatch) -> list[int]:
    """Deliveries run in process right after commit (one attempt each, as a worker's first try); digest
    flushes are collected (tests flush with ``dispatch.flush_due_digests``)."""
    from django.db import transaction

    queued: list[int] = []

    def deliver(notification_id: int) -> None:
        queued.append(notification_id)
        transaction.on_commit(lambda: delivery.attempt(notification_id))

    monkeypatch.setattr(dispatch, "enqueue_delivery", deliver)
    monkeypatch.setattr(dispatch, "enqueue_flush", lambda channel_id, event_type, countdown: None)
    return queued
