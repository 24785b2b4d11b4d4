"""devstack's throw-away CA and certificates (openssl): private files, a chain that verifies, the host names
each certificate carries, and re-use while valid."""

from __future__ import annotations

import stat
import subprocess

from devstack import tls


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_certificates_verify_against_the_ca_and_name_their_hosts(tmp_path):
    files = tls.ensure(tmp_path / "tls")
    for cert in (files.broker, files.wrong_host, *(files.client_cert(c) for c in tls.CLIENTS)):
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", str(files.ca), str(cert)], capture_output=True, text=True
        )
        assert verified.returncode == 0, verified.stderr

    def names(cert) -> str:
        return subprocess.run(
            ["openssl", "x509", "-in", str(cert), "-noout", "-ext", "subjectAltName"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    assert "IP Address:127.0.0.1" in names(files.broker)
    assert "127.0.0.1" not in names(files.wrong_host)
    assert tls.WRONG_HOST in names(files.wrong_host)
    # Kafka's PEM key store reads the key first, unencrypted PKCS#8.
    assert files.broker.read_text().startswith("-----BEGIN PRIVATE KEY-----")


def test_keys_are_private_and_a_second_call_keeps_what_is_valid(tmp_path):
    folder = tmp_path / "tls"
    files = tls.ensure(folder)
    assert _mode(folder) == 0o700
    for private in (folder / "ca.key", files.broker, files.wrong_host, files.client_key("alice")):
        assert _mode(private) == 0o600, private
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    tls.ensure(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    files.client_key("bob").unlink()  # anything missing: all of it is made again, under one new CA
    tls.ensure(folder)
    assert files.ca.read_bytes() != before["ca.pem"]
