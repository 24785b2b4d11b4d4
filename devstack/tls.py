"""A throw-away certificate authority and the certificates the test stack's secured Kafka broker uses,
made with ``openssl`` under ``.stack/<profile>/kafka-secure/tls/`` (0700; keys 0600) and never committed.

- ``ca.pem``: the authority every client trusts (``ssl.ca.location`` / ``ssl.truststore.location``).
- ``broker.pem``: the broker's key (PKCS#8, unencrypted, as Kafka's PEM key store reads it: KIP-651) and
  certificate for ``IP:127.0.0.1`` and ``DNS:localhost``.
- ``wrong-host.pem``: the same for ``DNS:wrong-host.invalid`` only, so hostname verification against
  127.0.0.1 fails on the listener that presents it.
- ``<client>.crt`` / ``<client>.key`` for each client (``CN=<client>``: the broker maps that to the principal
  ``User:<client>``).

``ensure`` is idempotent: what exists and is valid for another day is kept; anything missing or expiring is
made again (all of it, so every certificate stays signed by the one CA on disk).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Days a certificate is valid; re-made when less than a day is left.
VALID_DAYS = 30
CLIENTS = ("alice", "bob")
WRONG_HOST = "wrong-host.invalid"


class TlsError(RuntimeError):
    """openssl is missing or refused a step; the message says which, with openssl's own words."""


@dataclass(frozen=True)
class TlsFiles:
    """Paths of everything ``ensure`` made (all PEM)."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def broker(self) -> Path:
        """Key and certificate chain in one file (Kafka's ``ssl.keystore.type=PEM`` location)."""
        return self.folder / "broker.pem"

    @property
    def wrong_host(self) -> Path:
        return self.folder / "wrong-host.pem"

    def client_cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def all(self) -> list[Path]:
        clients = [p for name in CLIENTS for p in (self.client_cert(name), self.client_key(name))]
        return [self.ca, self.folder / "ca.key", self.broker, self.wrong_host, *clients]


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise TlsError("openssl is not on PATH (Debian package openssl)")
    result = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TlsError(f"openssl {args[0]} failed: {result.stderr.strip()[-800:]}")


def _valid_for_a_day(cert: Path, cwd: Path) -> bool:
    binary = shutil.which("openssl")
    if binary is None or not cert.exists():
        return False
    result = subprocess.run(
        [binary, "x509", "-checkend", "86400", "-noout", "-in", str(cert)],
        cwd=cwd, capture_output=True, check=False,
    )  # fmt: skip
    return result.returncode == 0


def _issue(folder: Path, name: str, subject: str, san: str | None) -> tuple[Path, Path]:
    """A PKCS#8 key ``<name>.key`` and a certificate ``<name>.crt`` signed by the CA in ``folder``."""
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt"
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key.name, cwd=folder
    )
    _openssl("req", "-new", "-key", key.name, "-subj", subject, "-out", csr.name, cwd=folder)
    extensions = folder / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment"]
    lines.append("extendedKeyUsage=serverAuth" if san else "extendedKeyUsage=clientAuth")
    if san:
        lines.append(f"subjectAltName={san}")
    extensions.write_text("\n".join(lines) + "\n")
    _openssl(
        "x509", "-req", "-in", csr.name, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", str(VALID_DAYS), "-sha256", "-extfile", extensions.name, "-out", cert.name,
        cwd=folder,
    )  # fmt: skip
    csr.unlink()
    extensions.unlink()
    key.chmod(0o600)
    return key, cert


def ensure(folder: Path) -> TlsFiles:
    """Make (or keep) the CA and every certificate in ``folder``; returns their paths. Raises TlsError."""
    files = TlsFiles(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    if all(p.exists() for p in files.all()) and all(
        _valid_for_a_day(p, folder) for p in (files.ca, files.broker, files.wrong_host)
    ):
        return files
    for stale in folder.iterdir():
        stale.unlink()
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key", cwd=folder
    )
    (folder / "ca.key").chmod(0o600)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=StreamForge devstack test CA",
        "-days", str(VALID_DAYS), "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.pem",
        cwd=folder,
    )  # fmt: skip
    for name, san, target in (
        ("broker", "IP:127.0.0.1,DNS:localhost", files.broker),
        ("wrong-host", f"DNS:{WRONG_HOST}", files.wrong_host),
    ):
        key, cert = _issue(folder, name, f"/CN={name}", san)
        # Kafka's PEM key store location: the key first, then the certificate chain.
        target.write_text(key.read_text() + cert.read_text() + files.ca.read_text())
        target.chmod(0o600)
        key.unlink()
        cert.unlink()
    for client in CLIENTS:
        _issue(folder, client, f"/CN={client}", None)
    (folder / "ca.srl").unlink(missing_ok=True)
    return files
