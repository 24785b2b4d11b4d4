"""The demo's notification receivers, on loopback only: a webhook receiver (HTTP) and a mail sink (SMTP,
aiosmtpd), so the demo's notification channels succeed and what they sent can be seen.

``python -m devstack.sinks --http-port P --smtp-port Q`` (devstack's dev profile starts it as ``sinks``) keeps
the last ``KEPT`` webhooks and mails in memory, writes a JSON line per received one to its log (stdout), and
shows them newest first at ``http://127.0.0.1:P/`` (a plain page, no script). Any POST is a webhook and is
answered ``200 {"received": true}``; a body over ``MAX_BODY`` bytes is answered 413. Nothing is checked
(not even a webhook's signature: only whether one was sent is shown): this is a demo's sink, not a receiver
to copy.
"""

from __future__ import annotations

import argparse
import html
import json
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Received items kept (webhooks and mails together); older ones are dropped.
KEPT = 200
#: The largest webhook body accepted, in bytes.
MAX_BODY = 1024 * 1024
#: What the sink answers on loopback only.
HOST = "127.0.0.1"


@dataclass
class Inbox:
    """What the sinks received, newest last: dicts with ``kind`` (``webhook`` or ``mail``), ``at`` (Unix
    seconds) and the kind's fields (webhook: ``path``, ``event``, ``signed``, ``body``; mail: ``sender``,
    ``recipients``, ``subject``, ``text``)."""

    items: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=KEPT))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, item: dict[str, Any]) -> None:
        """Keep ``item`` (stamped with ``at``) and log it as one JSON line on stdout."""
        item = {"at": round(time.time(), 3), **item}
        with self.lock:
            self.items.append(item)
        sys.stdout.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
        sys.stdout.flush()

    def snapshot(self) -> list[dict[str, Any]]:
        """The items kept, newest first."""
        with self.lock:
            return list(reversed(self.items))


def _page(items: list[dict[str, Any]]) -> bytes:
    rows = []
    for item in items:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(item["at"])) + " UTC"
        if item["kind"] == "webhook":
            body = item.get("body")
            title = body.get("title", "") if isinstance(body, dict) else ""
            what = f"{item.get('event') or '?'}: {title}" + ("" if item.get("signed") else " (unsigned)")
            where = item.get("path", "")
        else:
            what = item.get("subject", "")
            where = ", ".join(item.get("recipients", []))
        rows.append(
            f"<tr><td>{html.escape(when)}</td><td>{item['kind']}</td><td>{html.escape(where)}</td>"
            f"<td>{html.escape(what)}</td></tr>"
        )
    table = "".join(rows) or '<tr><td colspan="4">Nothing received yet.</td></tr>'
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Demo notifications</title>"
        "<h1>Notifications the demo received</h1><p>Webhooks posted here and mails sent to the SMTP sink, "
        "newest first. Reload to see new ones.</p><table border=1 cellpadding=4><thead><tr><th>time</th>"
        f"<th>kind</th><th>to</th><th>what</th></tr></thead><tbody>{table}</tbody></table></html>"
    ).encode()


def _handler(inbox: Inbox) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            if self.path.split("?")[0] == "/received.json":
                self._send(200, "application/json", json.dumps(inbox.snapshot(), default=str).encode())
            else:
                self._send(200, "text/html; charset=utf-8", _page(inbox.snapshot()))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, "application/json", b'{"received": false}')
                return
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            inbox.add(
                {
                    "kind": "webhook",
                    "path": self.path,
                    "event": self.headers.get("X-StreamForge-Event", ""),
                    "signed": bool(self.headers.get("X-StreamForge-Signature")),
                    "body": body,
                }
            )
            self._send(200, "application/json", b'{"received": true}')

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
            return  # one JSON line per item is the log

    return Handler


class _MailHandler:
    """aiosmtpd's handler: each message becomes an ``Inbox`` item."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's
        from email import message_from_bytes, policy

        message = message_from_bytes(envelope.content, policy=policy.default)
        part = message.get_body(preferencelist=("plain", "html"))
        self.inbox.add(
            {
                "kind": "mail",
                "sender": envelope.mail_from,
                "recipients": list(envelope.rcpt_tos),
                "subject": str(message.get("Subject", "")),
                "text": part.get_content()[:2000] if part is not None else "",
            }
        )
        return "250 OK"


@dataclass
class Sinks:
    """Both sinks running: ``url`` is the webhook receiver (and its page), ``smtp_port`` the mail sink's
    port, ``inbox`` what they received. ``stop()`` ends both."""

    url: str
    smtp_port: int
    inbox: Inbox
    _http: ThreadingHTTPServer
    _smtp: Any

    def stop(self) -> None:
        """Stop both servers (each at once; what was received stays in ``inbox``)."""
        self._http.shutdown()
        self._http.server_close()
        self._smtp.stop()


def start(http_port: int = 0, smtp_port: int = 0) -> Sinks:
    """Start both sinks on ``HOST`` (port 0: any free one), in threads of this process. Raises OSError
    when a port is taken."""
    from aiosmtpd.controller import Controller

    inbox = Inbox()
    if not smtp_port:  # aiosmtpd checks it is up by connecting to the port it was given: it needs a real one
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            smtp_port = probe.getsockname()[1]
    http = ThreadingHTTPServer((HOST, http_port), _handler(inbox))
    threading.Thread(target=http.serve_forever, daemon=True, name="webhook-sink").start()
    smtp = Controller(_MailHandler(inbox), hostname=HOST, port=smtp_port)
    smtp.start()
    return Sinks(f"http://{HOST}:{http.server_address[1]}", smtp.port, inbox, http, smtp)


def main(argv: list[str] | None = None) -> int:
    """Run both sinks until killed; prints ``sinks ready`` (devstack waits for it)."""
    parser = argparse.ArgumentParser(prog="python -m devstack.sinks", description=__doc__)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--smtp-port", type=int, required=True)
    args = parser.parse_args(argv)
    sinks = start(args.http_port, args.smtp_port)
    sys.stdout.write(
        f"sinks ready: webhooks and their page at {sinks.url}/, SMTP on {HOST}:{sinks.smtp_port}\n"
    )
    sys.stdout.flush()
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
