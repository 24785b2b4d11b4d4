"""Security review #28, finding 7 (lows): the webhook SSRF guard connects to exactly the address it checked,
and refuses the IPv6 forms that lead to loopback or the internal network.

Network rule of these tests: nothing leaves loopback. Names are answered by a fake resolver (no DNS query is
sent), and ``guarded_connect`` records every socket connection and refuses any to a non-loopback address,
so a "public" answer is proven to be the address the server tried, without a packet going there."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.test import Client

from notifications import channels, delivery, targets
from notifications.models import Channel
from tests.notifications.conftest import GROUP, webhook_channel

#: An address outside every special-purpose range (so the guard allows it); never actually reached.
PUBLIC = "93.184.215.14"

#: IPv6 forms of internal addresses, each with the form it is (the review's examples and their siblings).
INTERNAL_V6 = {
    "::127.0.0.1": "IPv4-compatible loopback",
    "::10.0.0.1": "IPv4-compatible private",
    "::ffff:127.0.0.1": "IPv4-mapped loopback",
    "::ffff:10.0.0.1": "IPv4-mapped private",
    "64:ff9b::127.0.0.1": "NAT64 of loopback",
    "64:ff9b::a9fe:a9fe": "NAT64 of the metadata address 169.254.169.254",
    "64:ff9b::10.0.0.1": "NAT64 of a private address",
    "64:ff9b:1::a00:1": "local-use NAT64",
    "2002:7f00:1::1": "6to4 of loopback",
    "2002:c0a8:101::1": "6to4 of 192.168.1.1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "Teredo whose client is 127.0.0.1",
    "2001:0:a00:1::1": "Teredo whose server is 10.0.0.1",
    "fec0::1": "site-local",
    "fd12:3456::1": "unique local",
    "fe80::1": "link-local",
    "ff02::1": "multicast",
    "::": "unspecified",
    "::1": "loopback",
}


@pytest.fixture
def connections(monkeypatch) -> list[tuple[str, int]]:
    """Every address a socket of this process connects to, in order; connections to anything but loopback
    are refused here (recorded, never sent)."""
    seen: list[tuple[str, int]] = []
    real_connect = socket.socket.connect

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = str(address[0]), int(address[1])
            seen.append((host, port))
            if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
                raise ConnectionRefusedError(111, f"the test refuses to leave loopback ({host})")
        real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    return seen


@pytest.fixture
def resolver(monkeypatch) -> Callable[[str, Callable[[int], str]], Counter[str]]:
    """``resolver(name, answer)``: from now on ``name`` resolves to ``answer(n)`` at its n-th lookup
    (1-based), without DNS; other names resolve as before. Returns the lookups per name."""
    real = socket.getaddrinfo
    answers: dict[str, Callable[[int], str]] = {}
    asked: Counter[str] = Counter()

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name in answers:
            asked[name] += 1
            address = answers[name](asked[name])
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (
                (address, int(port or 0), 0, 0) if family == socket.AF_INET6 else (address, int(port or 0))
            )
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    def add(name: str, answer: Callable[[int], str]) -> Counter[str]:
        answers[name] = answer
        return asked

    return add


@pytest.mark.django_db
def test_the_webhook_guard_refuses_every_ipv6_form_of_an_internal_address(
    team, manager, settings, connections
):
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = False
    client = Client()
    client.force_login(manager)
    base = {"team": team.name, "kind": "webhook", "events": [GROUP]}
    for i, (literal, form) in enumerate(INTERNAL_V6.items()):
        answer = client.post(
            "/api/notifications/channels/",
            {**base, "name": f"v6-{i}", "url": f"http://[{literal}]:8080/hook"},
            content_type="application/json",
        )

        assert answer.status_code == 400, form
        assert "internal address" in answer.json()["url"][0], form
        assert targets.address_problem(ipaddress.IPv6Address(literal)) is not None, form
    assert not Channel.objects.exists()
    assert [c for c in connections if c[1] == 8080] == []
    # Public addresses stay allowed, in both families and through NAT64 and 6to4 of a public IPv4 address.
    for public in (PUBLIC, "2606:4700:4700::1111", "64:ff9b::5db8:d70e", "2002:5db8:d70e::1"):
        assert targets.address_problem(ipaddress.ip_address(public)) is None, public


@pytest.mark.django_db
def test_a_rebinding_name_never_gets_the_delivery_to_loopback(
    team, manager, receiver, settings, resolver, connections
):
    """The name answers a public address to the first lookup and 127.0.0.1 (the receiver) to every later
    one, as a rebinding attacker's DNS with a zero TTL does: the delivery goes to the address that was
    checked (refused by the test's guard), never to the receiver."""
    channel = webhook_channel(manager, team, receiver)
    port = int(receiver.url.split(":")[2].split("/")[0])
    Channel.objects.filter(pk=channel.pk).update(url=f"http://hooks.rebind.test:{port}/hook")
    channel.refresh_from_db()
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = False
    lookups = resolver("hooks.rebind.test", lambda n: PUBLIC if n == 1 else "127.0.0.1")

    attempt = channels.send_test(actor=manager, channel=channel)

    assert receiver.requests == []
    assert (PUBLIC, port) in connections
    assert ("127.0.0.1", port) not in connections
    assert lookups["hooks.rebind.test"] == 1
    assert not attempt.ok
    assert "ConnectionRefusedError" in attempt.error


@pytest.mark.django_db
def test_a_delivery_is_refused_without_a_connection_when_the_name_now_resolves_inside(
    team, manager, receiver, settings, resolver, connections
):
    channel = webhook_channel(manager, team, receiver)
    Channel.objects.filter(pk=channel.pk).update(url="http://hooks.moved.test/hook")
    channel.refresh_from_db()
    settings.NOTIFY_ALLOW_PRIVATE_TARGETS = False
    resolver("hooks.moved.test", lambda n: "64:ff9b::7f00:1")  # NAT64 of 127.0.0.1

    attempt = channels.send_test(actor=manager, channel=channel)

    assert "internal address (NAT64 form of 127.0.0.1)" in attempt.error
    assert connections == []
    assert receiver.requests == []


# ------------------------------------------------------------------------------------------------ https


def _certificates(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for ``name`` it signed: (ca.pem, server.pem, server.key)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@pytest.fixture
def tls_receiver(tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    """An https receiver on 127.0.0.1 whose certificate names ``hooks.pinned.test`` (its CA trusted through
    ``SSL_CERT_FILE``, which OpenSSL's default paths read); it records the SNI name and the Host header."""
    ca, cert, key = _certificates(tmp_path, "hooks.pinned.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    heard: dict[str, Any] = {"sni": [], "hosts": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            heard["hosts"].append(self.headers["Host"])
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def sni(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, ctx: ssl.SSLContext) -> None:
        heard["sni"].append(name)

    context.sni_callback = sni
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    heard["port"] = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield heard
    server.shutdown()
    server.server_close()


def test_an_https_delivery_keeps_the_names_sni_host_and_certificate_check(
    tls_receiver, resolver, connections
):
    """Connecting to the checked address does not weaken TLS: the URL's name is the SNI, the Host header
    and the name the certificate must carry; a name the certificate does not cover is refused."""
    port = tls_receiver["port"]
    lookups = resolver("hooks.pinned.test", lambda n: "127.0.0.1")
    resolver("hooks.other.test", lambda n: "127.0.0.1")

    answer = targets.post(f"https://hooks.pinned.test:{port}/hook", b"{}", {}, timeout=5, limit=10)

    assert answer.status == 200
    assert tls_receiver["sni"] == ["hooks.pinned.test"]
    assert tls_receiver["hosts"] == [f"hooks.pinned.test:{port}"]
    assert lookups["hooks.pinned.test"] == 1
    assert connections == [("127.0.0.1", port)]
    outcome = delivery._post(f"https://hooks.other.test:{port}/hook", b"{}", {})
    assert not outcome.ok
    assert "hooks.other.test' doesn't match 'hooks.pinned.test'" in outcome.error
    assert tls_receiver["hosts"] == [f"hooks.pinned.test:{port}"]
