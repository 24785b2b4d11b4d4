"""Where a webhook may point, and the one way the server POSTs there. A team admin types the URL, and the
server (a worker) then POSTs to it: without a check, any team could make the server reach its own network
(Redis, PostgreSQL, the Kafka admin port, a cloud metadata address) and read the answer in the delivery log.

So a webhook or Slack URL whose host resolves to an address ``address_problem`` refuses is refused, when it
is saved and again at each delivery, and redirects are not followed. At delivery the host is resolved
**once**: every address it has is checked, and the connection goes to one of those very addresses
(``post``), with the URL's host name kept in the ``Host`` header and, for https, in the TLS SNI and the
certificate check. Nothing resolves the name a second time, so a name whose answer changes between the
check and the connection (DNS rebinding: public first, 127.0.0.1 a moment later) cannot slip an internal
address in. The HTTP side is urllib3's, connected to the checked address; the address policy is ours.

``STREAMFORGE_NOTIFY_ALLOW_PRIVATE=true`` lifts the address check for installations whose receivers live on
the internal network (and for the tests' local receiver); the connection is still made to the address
resolved once.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: IPv6 ranges refused whatever follows, with the reason shown. Python's ``is_global`` misses several of
#: them (and changes between releases), so the list is explicit. Sources: RFC 4291 (unspecified, loopback,
#: IPv4-compatible 2.5.5.1, link-local, multicast), RFC 3879 (site-local, deprecated), RFC 4193 (unique local),
#: RFC 8215 (local-use NAT64: its embedding depends on the local prefix length), RFC 6666 (discard-only).
_REFUSED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(network), reason)
    for network, reason in (
        ("::/128", "the unspecified address"),
        ("::1/128", "loopback"),
        ("::/96", "an IPv4-compatible address (deprecated; it embeds an IPv4 address)"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("100::/64", "a discard-only address"),
        ("fc00::/7", "a unique local address"),
        ("fec0::/10", "a site-local address"),
        ("fe80::/10", "a link-local address"),
        ("ff00::/8", "a multicast address"),
    )
)
#: RFC 6052's well-known NAT64 prefix: the last 32 bits are the IPv4 address it reaches.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class _NoRequestLines(logging.Filter):
    """urllib3's connection pool logs each request line (``"POST /path HTTP/1.1" 200``) at DEBUG; a Slack
    webhook's path is its secret, so below WARNING nothing of that logger is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


logging.getLogger("urllib3.connectionpool").addFilter(_NoRequestLines())


class TargetRefused(ValueError):
    """The server must not POST to this URL; the message says why (shown to people, never a secret)."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address leads to, each with the form that embeds it: IPv4-mapped
    (RFC 4291 2.5.5.2), NAT64 well-known prefix (RFC 6052), 6to4 (RFC 3056) and Teredo (RFC 4380: its
    server and its client, whose bits are inverted)."""
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if address.ipv4_mapped is not None:
        found.append(("IPv4-mapped", address.ipv4_mapped))
    if address in _NAT64:
        found.append(("NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)))
    if address.sixtofour is not None:
        found.append(("6to4", address.sixtofour))
    if address.teredo is not None:
        server, client = address.teredo
        found.extend((("Teredo server", server), ("Teredo client", client)))
    return found


def address_problem(address: Address) -> str | None:
    """Why the server must not connect to ``address`` (None when it may): anything but a public unicast
    address. IPv4: not ``is_global`` (loopback, RFC 1918 private, link-local, shared, reserved,
    documentation ...) or multicast. IPv6: the ranges of ``_REFUSED_V6``, any address that embeds an IPv4
    address this function refuses (IPv4-mapped, NAT64, 6to4, Teredo), and anything else not ``is_global``."""
    if isinstance(address, ipaddress.IPv4Address):
        if not address.is_global or address.is_multicast:
            return "an internal address"
        return None
    plain = ipaddress.IPv6Address(int(address))  # without a %zone
    for network, reason in _REFUSED_V6:
        if plain in network:
            return f"an internal address ({reason})"
    for form, ipv4 in _embedded_ipv4(plain):
        if address_problem(ipv4) is not None:
            return f"an internal address ({form} form of {ipv4})"
    if not plain.is_global:
        return "an internal address"
    return None


@dataclass(frozen=True)
class Target:
    """A URL resolved once: ``host`` as written (the ``Host`` header, SNI and certificate name), ``port``,
    ``path`` (with its query), ``https``, and ``addresses``: every address the name had, all checked."""

    host: str
    port: int
    path: str
    https: bool
    addresses: tuple[Address, ...]

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the host as in the URL, with the port when it is not the scheme's default."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.https else 80
        return shown if self.port == default else f"{shown}:{self.port}"


def resolve(url: str) -> Target:
    """Resolve ``url``'s host once and check every address (``address_problem``) unless
    ``NOTIFY_ALLOW_PRIVATE_TARGETS``. Raises TargetRefused saying why: not http(s), no host, a bad port,
    no address, or an internal one."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("the URL must start with http:// or https://")
    host = parts.hostname
    if not host:
        raise TargetRefused("the URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused("the URL's port is not a number from 1 to 65535") from exc
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"the host {host} does not resolve") from exc
    addresses: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]))
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise TargetRefused(f"the host {host} does not resolve")
    if not settings.NOTIFY_ALLOW_PRIVATE_TARGETS:
        for address in addresses:
            if (problem := address_problem(address)) is not None:
                raise TargetRefused(
                    f"{host} resolves to {address}, {problem}; the server does not send there "
                    "(STREAMFORGE_NOTIFY_ALLOW_PRIVATE=true allows it)"
                )
    path = parts.path or "/"
    return Target(
        host=host,
        port=port,
        path=f"{path}?{parts.query}" if parts.query else path,
        https=parts.scheme == "https",
        addresses=tuple(addresses),
    )


def target_problem(url: str) -> str | None:
    """Why the server must not POST to ``url``, or None when it may (``resolve``'s refusal as text): what a
    form or the API answers when the URL is saved."""
    try:
        resolve(url)
    except TargetRefused as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Answer:
    """A receiver's answer: ``status`` (HTTP), ``reason`` phrase, the first ``limit`` bytes of its body, and
    its ``retry_after`` header (the raw text, "" when absent: a 429 or 503 may say when to come back)."""

    status: int
    reason: str
    body: bytes
    retry_after: str = ""


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float, limit: int) -> Answer:
    """POST ``body`` to ``url``, connecting only to an address ``resolve`` checked (the first that accepts
    the connection, in the resolver's order), never following a redirect (a 3xx is the answer). ``timeout``
    in seconds for the connection and for each read; ``limit`` bytes of the answer are kept.

    Raises TargetRefused (the URL's host is not allowed), ``urllib3.exceptions.HTTPError`` or OSError (no
    connection, TLS refused, a bad answer)."""
    target = resolve(url)
    last: Exception | None = None
    for address in target.addresses:
        try:
            return _post_to(target, address, body, headers, timeout=timeout, limit=limit)
        except urllib3.exceptions.NewConnectionError as exc:  # that address does not answer: the next one
            last = exc
    assert last is not None  # resolve() returns at least one address
    raise last


def _post_to(
    target: Target, address: Address, body: bytes, headers: dict[str, str], *, timeout: float, limit: int
) -> Answer:
    pool: urllib3.HTTPConnectionPool
    if target.https:
        # Connected to the checked address; SNI and the certificate's name check use the URL's host.
        pool = urllib3.HTTPSConnectionPool(
            str(address),
            target.port,
            timeout=timeout,
            retries=False,
            maxsize=1,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
        )
    else:
        pool = urllib3.HTTPConnectionPool(
            str(address), target.port, timeout=timeout, retries=False, maxsize=1
        )
    with pool:
        response = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers={**headers, "Host": target.host_header},
            redirect=False,
            retries=False,
            assert_same_host=False,
            preload_content=False,
        )
        try:
            return Answer(
                status=response.status,
                reason=response.reason or "",
                body=response.read(limit),
                retry_after=response.headers.get("Retry-After", ""),
            )
        finally:
            response.release_conn()
