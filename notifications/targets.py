"""Where a webhook may point. A team admin types the URL, and the server (a worker) then POSTs to it: without
a check, any team could make the server reach its own network (Redis, PostgreSQL, the Kafka admin port,
a cloud metadata address) and read the answer in the delivery log. So a webhook or Slack URL whose host
resolves to a loopback, private, link-local, multicast, reserved or unspecified address is refused, when it
is saved and again before each delivery (a name may resolve differently later), and redirects are not
followed. ``STREAMFORGE_NOTIFY_ALLOW_PRIVATE=true`` lifts the address check for installations whose
receivers live on the internal network (and for the tests' local receiver).
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings


def target_problem(url: str) -> str | None:
    """Why the server must not POST to ``url``, or None when it may. Resolves the host (every address it
    has must be public); an unresolvable host is a problem too."""
    if settings.NOTIFY_ALLOW_PRIVATE_TARGETS:
        return None
    host = urlsplit(url).hostname
    if not host:
        return "the URL has no host"
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return f"the host {host} does not resolve"
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global or address.is_multicast:
            return (
                f"{host} resolves to {address}, an internal address; the server does not send there "
                "(STREAMFORGE_NOTIFY_ALLOW_PRIVATE=true allows it)"
            )
    return None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect could lead to an internal address after the check: it is answered as the error it is."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


#: The opener deliveries use: no redirects followed.
OPENER = urllib.request.build_opener(_NoRedirects)
