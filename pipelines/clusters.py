"""Kafka clusters: the installation's default one (the ``KAFKA_*`` environment) and the named ``KafkaCluster``
rows an admin adds; how each becomes a ``streamforge_core.kafka.KafkaConnection``; and their administration
(create, change, delete, test), admin-only and audited.

Every control-plane Kafka client (the driver's launch, lag reads, topic administration, DLQ ingest, replay,
test messages, readiness) asks ``connection_for(cluster)`` for its connection; ``None`` is the default
cluster. That is the one gate: a named cluster is connected to only once an admin's connection test passed
on its current settings (``is_verified``); until then ``connection_for`` raises ``ClusterNotVerified``.

Secrets are references, never values (DESIGN.md "Kafka clusters"). A row names where the SASL password is:
``env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD`` (a variable of the processes' environment) or ``file:<path>`` (a
mounted secret, e.g. a Kubernetes Secret volume or Docker secret). Chosen over encrypting the password into
the database because then the database, its dumps and backups, the admin's screen and the audit trail never
hold anything a thief could use, rotation is the secret store's job (a new file is read by the next client),
and there is no key to manage. The cost: an admin cannot paste a password into the UI; the deployment has to
provide it.

References are bound to their cluster (security review #28, finding 2), so a cluster cannot be used to send
the server's other secrets, another cluster's among them, to a broker of the admin's choosing:

* an ``env:`` reference names exactly the cluster's own variable, ``password_variable(name)``:
  ``STREAMFORGE_CLUSTER_`` + the name upper-cased with ``-`` as ``_`` + ``_PASSWORD`` (``prod-eu`` ->
  ``STREAMFORGE_CLUSTER_PROD_EU_PASSWORD``). Names are lower-case letters, digits and ``-``, so the mapping
  is one-to-one and no cluster can name another's variable; the default cluster's ``KAFKA_*`` variables are
  never reachable from a row;
* a file (password, CA, certificate, key) lies in the cluster's own folder, ``<dir>/<name>/``, under one of
  the credential directories (``STREAMFORGE_KAFKA_CREDENTIAL_DIRS``), once ``..`` and symbolic links are
  resolved. The top of a credential directory (where the default cluster's files may be) belongs to no row.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from access import audit
from access.permissions import is_admin
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline
from pipelines.spec import parse_spec
from streamforge_core.kafka import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    KafkaConnection,
    Secret,
    connection_from_environment,
)
from streamforge_core.kafka_probe import ProbeReport, Problem, probe

_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_HOST_PORT = re.compile(r"^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}$")

#: The fields of a cluster an admin sets (``save_cluster``), in the order forms and the API show them.
FIELDS = (
    "description", "bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username",
    "password_ref", "ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "verify_hostname",
)  # fmt: skip
#: The fields that say where and how to connect: an admin's passing test approves these values (with the
#: name), and a change to any of them withdraws the approval (``settings_fingerprint``).
CONNECTION_FIELDS = FIELDS[1:]
#: A row's registry fields, in the order forms and the API show them.
REGISTRY_FIELDS = (
    "registry_url", "registry_username", "registry_password_ref",
    "registry_ca_location", "registry_certificate_location", "registry_key_location",
)  # fmt: skip
#: The registry's file fields (PEM paths in the cluster's own credential folder).
REGISTRY_FILE_FIELDS = ("registry_ca_location", "registry_certificate_location", "registry_key_location")
#: Every field an admin sets: the Kafka ones, then the schema registry's (``pipelines.registries`` uses them). A
#: registry change does not withdraw the Kafka approval (it is not among ``CONNECTION_FIELDS``).
ALL_FIELDS = FIELDS + REGISTRY_FIELDS
#: The file fields of a cluster, each a path that must lie in the cluster's own credential folder.
FILE_FIELDS = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")


class ClusterError(ValueError):
    """A cluster's settings are invalid or incomplete. ``errors`` maps each field to its problems (the API's
    400 body); the message lists them."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in sorted(errors.items())))


class CredentialUnavailable(ValueError):
    """A referenced password or file cannot be read right now (unset variable, missing or unreadable
    file); the message names the reference and the reason, never the value."""


def credential_dirs() -> list[Path]:
    """The credential directories (``STREAMFORGE_KAFKA_CREDENTIAL_DIRS``), resolved (symbolic links
    followed). A named cluster's files lie in its own folder of one of them (``cluster_folders``)."""
    return [Path(d).resolve() for d in settings.KAFKA_CREDENTIAL_DIRS if d]


def cluster_folders(name: str) -> list[Path]:
    """The folders ``name``'s files may lie in: ``<credential dir>/<name>`` for each credential directory.
    The folder itself is not resolved: a folder that is a link elsewhere is refused by ``_file_problem``."""
    return [d / name for d in credential_dirs()]


def password_variable(name: str) -> str:
    """The one environment variable cluster ``name`` may take its password from:
    ``STREAMFORGE_CLUSTER_<NAME>_PASSWORD``, ``<NAME>`` the name upper-cased with ``-`` as ``_`` (names are
    lower-case letters, digits and ``-``, so no two clusters share a variable)."""
    return f"STREAMFORGE_CLUSTER_{name.upper().replace('-', '_')}_PASSWORD"


def _file_problem(path: str, cluster: str) -> str | None:
    """Why ``path`` may not be referenced by cluster ``cluster`` (None when it may): absolute, and inside the
    cluster's own folder of a credential directory once ``..`` and symbolic links are resolved."""
    if not path.startswith("/"):
        return "must be an absolute path"
    try:
        real = Path(path).resolve()
    except (OSError, ValueError) as exc:  # a NUL byte, a symbolic-link loop
        return f"is not a usable path ({exc})"
    folders = cluster_folders(cluster)
    if not any(folder in real.parents for folder in folders):
        shown = ", ".join(f"{folder}/" for folder in folders) or "no credential directory is configured"
        return (
            f"must lie in cluster {cluster}'s own credential folder ({shown}; "
            "STREAMFORGE_KAFKA_CREDENTIAL_DIRS/<cluster name>/), not another cluster's or the directory's top"
        )
    return None


def reference_problem(ref: str, cluster: str) -> str | None:
    """Why ``ref`` is not a usable password reference of cluster ``cluster`` (``env:`` +
    ``password_variable(cluster)``, or ``file:<absolute path>`` in the cluster's credential folder), or
    None. Says nothing about whether the secret exists now (that is ``check_cluster``'s job): a secret may
    be mounted after the row is saved."""
    variable = password_variable(cluster)
    if ref.startswith("env:"):
        if ref.removeprefix("env:") != variable:
            return f"an env: reference names cluster {cluster}'s own variable, env:{variable}"
        return None
    if ref.startswith("file:"):
        return _file_problem(ref.removeprefix("file:"), cluster)
    return (
        f"must be env:{variable} or file:<path in {cluster}'s credential folder>, a reference to the "
        "password, never the password"
    )


def read_password(ref: str, cluster: str) -> Secret:
    """The password ``ref`` (a reference of cluster ``cluster``) points at, read now (a rotated file is picked
    up by the next client). One trailing newline of a file is dropped. Raises CredentialUnavailable naming
    the reference."""
    if (problem := reference_problem(ref, cluster)) is not None:
        raise CredentialUnavailable(f"password reference {ref!r}: {problem}")
    if ref.startswith("env:"):
        name = ref.removeprefix("env:")
        value = os.environ.get(name)
        if not value:
            raise CredentialUnavailable(f"the environment variable {name} (the password) is not set")
        return Secret(value)
    path = ref.removeprefix("file:")
    try:
        return Secret(Path(path).read_text().removesuffix("\n"))
    except OSError as exc:
        raise CredentialUnavailable(f"the password file {path} cannot be read: {exc.strerror}") from None


def registry_password_variable(name: str) -> str:
    """The one environment variable cluster ``name``'s registry password may come from:
    ``STREAMFORGE_CLUSTER_<NAME>_REGISTRY_PASSWORD`` (``<NAME>`` as in ``clusters.password_variable``)."""
    return f"STREAMFORGE_CLUSTER_{name.upper().replace('-', '_')}_REGISTRY_PASSWORD"


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable registry base URL (None when it is): ``http`` or ``https``, a host, no
    user or password in it (credentials go in the username and the password reference), no query or
    fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials: use the username and the password reference"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment"
    if port == 0:
        return "port 0 is not a port"
    return None


def registry_reference_problem(ref: str, owner: str) -> str | None:
    """Why ``ref`` is not a usable registry password reference of cluster ``owner`` (None when it is):
    ``env:`` + ``registry_password_variable(owner)``, or ``file:`` + a path in the cluster's folder."""
    variable = registry_password_variable(owner)
    if ref.startswith("env:"):
        if ref.removeprefix("env:") != variable:
            return f"an env: reference names cluster {owner}'s own variable, env:{variable}"
        return None
    if ref.startswith("file:"):
        return _file_problem(ref.removeprefix("file:"), owner)
    return (
        f"must be env:{variable} or file:<path in {owner}'s credential folder>, a reference to the "
        "password, never the password"
    )


def validate_registry(values: Mapping[str, Any], owner: str) -> dict[str, list[str]]:
    """Field problems of cluster ``owner``'s registry settings (``REGISTRY_FIELDS``; missing keys are empty):
    what a 400 names. Every other registry field needs a URL; the password reference follows the cluster
    password's binding (its own ``registry_password_variable`` or a file in the cluster's folder) and needs
    a username; the files need https and lie in the cluster's folder; a certificate needs its key."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    url, username, ref = (str(values.get(k) or "").strip() for k in REGISTRY_FIELDS[:3])
    if not url:
        for name in REGISTRY_FIELDS[1:]:
            if values.get(name):
                add(name, "only with a registry URL")
        return errors
    if (problem := url_problem(url)) is not None:
        add("registry_url", problem)
    https = url.lower().startswith("https://")
    if ref:
        if (problem := registry_reference_problem(ref, owner)) is not None:
            add("registry_password_ref", problem)
        if not username:
            add("registry_username", "needed with a password reference")
    for name in REGISTRY_FILE_FIELDS:
        path = str(values.get(name) or "").strip()
        if path and not https:
            add(name, "only with an https:// registry URL")
        elif path and (problem := _file_problem(path, owner)) is not None:
            add(name, problem)
    if bool(values.get("registry_certificate_location")) != bool(values.get("registry_key_location")):
        add("registry_key_location", "a client certificate needs both the certificate and its key")
    return errors


def registry_environment_settings() -> dict[str, str]:
    """The default registry's settings to show, as ``REGISTRY_FIELDS`` (the password as where it is)."""
    env = os.environ
    ref = (
        f"file:{env['SCHEMA_REGISTRY_PASSWORD_FILE']}"
        if env.get("SCHEMA_REGISTRY_PASSWORD_FILE")
        else ("env:SCHEMA_REGISTRY_PASSWORD" if env.get("SCHEMA_REGISTRY_PASSWORD") else "")
    )
    return {
        "registry_url": env.get("SCHEMA_REGISTRY_URL", ""),
        "registry_username": env.get("SCHEMA_REGISTRY_USERNAME", ""),
        "registry_password_ref": ref,
        "registry_ca_location": env.get("SCHEMA_REGISTRY_SSL_CA_LOCATION", ""),
        "registry_certificate_location": env.get("SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION", ""),
        "registry_key_location": env.get("SCHEMA_REGISTRY_SSL_KEY_LOCATION", ""),
    }


def validate(values: Mapping[str, Any], *, cluster: str | None = None) -> dict[str, list[str]]:
    """Field problems of cluster ``cluster``'s settings (``FIELDS``; ``name`` too when given, which is also
    the cluster's name when ``cluster`` is None): what a 400 names. The connection rules are
    ``KafkaConnection``'s; the reference and path rules (bound to the cluster's name) are this module's, and
    SASL/PLAIN needs TLS (PLAIN sends the password itself to the broker, RFC 4616 section 4: without TLS,
    to anyone on the path)."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    owner = cluster if cluster is not None else str(values.get("name", ""))
    if "name" in values:
        name = str(values["name"])
        if _SLUG.match(name) is None:
            add("name", "lower-case letters, digits and '-', at most 63, not starting or ending with '-'")
        elif name == DEFAULT_CLUSTER_NAME:
            add("name", f"{DEFAULT_CLUSTER_NAME!r} is the installation's cluster (KAFKA_* environment)")
    servers = [s.strip() for s in str(values.get("bootstrap_servers", "")).split(",") if s.strip()]
    if not servers:
        add("bootstrap_servers", "name at least one host:port")
    for server in servers:
        if _HOST_PORT.match(server) is None or not 0 < int(server.rsplit(":", 1)[1]) < 65536:
            add("bootstrap_servers", f"{server!r} is not host:port")
    protocol = str(values.get("security_protocol", "PLAINTEXT"))
    if protocol not in SECURITY_PROTOCOLS:
        add("security_protocol", f"one of {', '.join(SECURITY_PROTOCOLS)}")
        return errors
    sasl = protocol.startswith("SASL_")
    tls = protocol.endswith("SSL")
    mechanism, username, ref = (
        str(values.get(k, "")) for k in ("sasl_mechanism", "sasl_username", "password_ref")
    )
    if sasl:
        if mechanism not in SASL_MECHANISMS:
            add("sasl_mechanism", f"one of {', '.join(SASL_MECHANISMS)} with {protocol}")
        elif mechanism == "PLAIN" and not tls:
            add(
                "sasl_mechanism",
                "PLAIN sends the password in clear; without TLS anyone on the path reads it: use SASL_SSL, "
                "or SCRAM-SHA-256/512",
            )
        if not username:
            add("sasl_username", f"needed with {protocol}")
        if not ref:
            add("password_ref", f"needed with {protocol}: env:{password_variable(owner)} or file:<path>")
        elif (problem := reference_problem(ref, owner)) is not None:
            add("password_ref", problem)
    else:
        for name in ("sasl_mechanism", "sasl_username", "password_ref"):
            if values.get(name):
                add(name, f"only with SASL_PLAINTEXT or SASL_SSL, not {protocol}")
    for name in FILE_FIELDS:
        path = str(values.get(name, ""))
        if path and not tls:
            add(name, f"only with SSL or SASL_SSL, not {protocol}")
        elif path and (problem := _file_problem(path, owner)) is not None:
            add(name, problem)
    if bool(values.get("ssl_certificate_location")) != bool(values.get("ssl_key_location")):
        add("ssl_key_location", "a client certificate needs both the certificate and its key")
    for name, problems in validate_registry(values, owner).items():
        errors.setdefault(name, []).extend(problems)
    return errors


def settings_fingerprint(cluster: KafkaCluster) -> str:
    """The SHA-256 (hex) of the cluster's name and ``CONNECTION_FIELDS`` values, canonical JSON: what an
    admin's passing test approves. Any change to where or how to connect (servers, protocol, mechanism,
    user, references, TLS files, hostname verification) gives another fingerprint. The password itself is
    not in it: a rotated secret behind the same reference stays approved."""
    canonical = {"name": cluster.name, **{name: getattr(cluster, name) for name in CONNECTION_FIELDS}}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def is_verified(cluster: KafkaCluster | None) -> bool:
    """Whether the product may connect to ``cluster`` on its own: the default cluster (None, the
    deployment's own) always; a row when an admin's test passed on exactly its current settings (its stored
    ``verified_fingerprint`` is ``settings_fingerprint`` of the row as it is)."""
    if cluster is None:
        return True
    stored = cluster.verified_fingerprint
    return bool(stored) and hmac.compare_digest(stored, settings_fingerprint(cluster))


class ClusterNotVerified(ValueError):
    """The product was about to connect to a named cluster that no admin's connection test approved on its
    current settings (new, changed, or its references no longer valid). The message names the cluster and
    what to do; a ValueError, so every caller that reports a cluster it cannot connect to reports this."""


def _not_verified(cluster: KafkaCluster) -> ClusterNotVerified:
    return ClusterNotVerified(
        f"Kafka cluster {cluster.name} has not been tested by an admin since its settings last changed; "
        "nothing connects to it until an admin's connection test passes (Clusters page, "
        f"POST /api/clusters/{cluster.name}/test/, or manage.py kafka_cluster test {cluster.name})"
    )


def connection_for(cluster: KafkaCluster | None) -> KafkaConnection:
    """The connection to ``cluster`` (None: the installation's default, ``default_kafka()``), its password
    read from its reference now: the one place every client the product opens gets its connection from.

    A row is read again from the database (a caller's copy may be older than a change), and refused unless
    an admin's test approved its current settings and they still validate. Raises ClusterNotVerified (new,
    changed, deleted, or settings that no longer validate), CredentialUnavailable when the password cannot
    be read, ValueError when the stored settings no longer make a connection; all ValueErrors."""
    if cluster is None:
        return default_kafka()
    current = KafkaCluster.objects.filter(pk=cluster.pk).first()
    if current is None:
        raise ClusterNotVerified(f"Kafka cluster {cluster.name} no longer exists")
    if not is_verified(current):
        raise _not_verified(current)
    errors = validate({name: getattr(current, name) for name in FIELDS}, cluster=current.name)
    if errors:
        raise ClusterNotVerified(
            f"Kafka cluster {current.name}'s settings are no longer valid ({ClusterError(errors)}); an admin "
            "must change and test them"
        )
    return _connection(current)


def _connection(cluster: KafkaCluster) -> KafkaConnection:
    """``cluster``'s connection as its row says, with no verification: for the admin's test alone."""
    password = read_password(cluster.password_ref, cluster.name) if cluster.password_ref else None
    return KafkaConnection(
        bootstrap_servers=cluster.bootstrap_servers,
        security_protocol=cluster.security_protocol,
        sasl_mechanism=cluster.sasl_mechanism,
        sasl_username=cluster.sasl_username,
        sasl_password=password,
        ssl_ca_location=cluster.ssl_ca_location,
        ssl_certificate_location=cluster.ssl_certificate_location,
        ssl_key_location=cluster.ssl_key_location,
        verify_hostname=cluster.verify_hostname,
    )


def default_kafka() -> KafkaConnection:
    """The installation's default cluster: the bootstrap servers from settings (tests may override them),
    security from the environment, read at call time (a rotated password file is picked up). Raises
    ValueError naming the ``KAFKA_*`` variable that is missing or wrong."""
    return connection_from_environment(os.environ, bootstrap_servers=str(settings.KAFKA_BOOTSTRAP_SERVERS))


def cluster_name(cluster: KafkaCluster | None) -> str:
    """The name to show and label metrics with: the row's, or ``default``."""
    return DEFAULT_CLUSTER_NAME if cluster is None else cluster.name


def clusters() -> list[KafkaCluster | None]:
    """Every cluster of the installation: the default (None) first, then the rows by name."""
    return [None, *KafkaCluster.objects.order_by("name")]


class ClusterSettings(TypedDict):
    """A cluster as the UI and the API show it: every setting (the password as its reference, never its
    value), whether it comes from the ``KAFKA_*`` environment (the default cluster, not editable here), how
    many pipelines use it, and whether the product may connect to it (``verified``: an admin's test passed
    on these settings; ``verified_at``, ISO 8601, and ``verified_by``, a user name, of that test, empty when
    not verified; the default cluster is always verified)."""

    name: str
    description: str
    from_environment: bool
    bootstrap_servers: str
    security_protocol: str
    sasl_mechanism: str
    sasl_username: str
    password_ref: str
    ssl_ca_location: str
    ssl_certificate_location: str
    ssl_key_location: str
    verify_hostname: bool
    registry_url: str
    registry_username: str
    registry_password_ref: str
    registry_ca_location: str
    registry_certificate_location: str
    registry_key_location: str
    pipelines: int
    verified: bool
    verified_at: str
    verified_by: str


def _environment_reference() -> str:
    if os.environ.get("KAFKA_SASL_PASSWORD_FILE"):
        return f"file:{os.environ['KAFKA_SASL_PASSWORD_FILE']}"
    return "env:KAFKA_SASL_PASSWORD" if os.environ.get("KAFKA_SASL_PASSWORD") else ""


def describe(cluster: KafkaCluster | None) -> ClusterSettings:
    """``cluster``'s settings to show (None: the default cluster, read from the environment as the clients
    read it; when that is incomplete, what is set)."""
    used = Pipeline.objects.filter(cluster=cluster).count()
    if cluster is not None:
        return ClusterSettings(
            name=cluster.name,
            description=cluster.description,
            from_environment=False,
            bootstrap_servers=cluster.bootstrap_servers,
            security_protocol=cluster.security_protocol,
            sasl_mechanism=cluster.sasl_mechanism,
            sasl_username=cluster.sasl_username,
            password_ref=cluster.password_ref,
            ssl_ca_location=cluster.ssl_ca_location,
            ssl_certificate_location=cluster.ssl_certificate_location,
            ssl_key_location=cluster.ssl_key_location,
            verify_hostname=cluster.verify_hostname,
            registry_url=cluster.registry_url,
            registry_username=cluster.registry_username,
            registry_password_ref=cluster.registry_password_ref,
            registry_ca_location=cluster.registry_ca_location,
            registry_certificate_location=cluster.registry_certificate_location,
            registry_key_location=cluster.registry_key_location,
            pipelines=used,
            verified=(verified := is_verified(cluster)),
            verified_at=cluster.verified_at.isoformat() if verified and cluster.verified_at else "",
            verified_by=cluster.verified_by.get_username() if verified and cluster.verified_by else "",
        )
    env = os.environ
    return ClusterSettings(
        name=DEFAULT_CLUSTER_NAME,
        description="the installation's cluster, from the KAFKA_* environment",
        from_environment=True,
        bootstrap_servers=str(settings.KAFKA_BOOTSTRAP_SERVERS),
        security_protocol=env.get("KAFKA_SECURITY_PROTOCOL", "").upper() or "PLAINTEXT",
        sasl_mechanism=env.get("KAFKA_SASL_MECHANISM", ""),
        sasl_username=env.get("KAFKA_SASL_USERNAME", ""),
        password_ref=_environment_reference(),
        ssl_ca_location=env.get("KAFKA_SSL_CA_LOCATION", ""),
        ssl_certificate_location=env.get("KAFKA_SSL_CERTIFICATE_LOCATION", ""),
        ssl_key_location=env.get("KAFKA_SSL_KEY_LOCATION", ""),
        verify_hostname=env.get("KAFKA_SSL_VERIFY_HOSTNAME", "true").lower() not in {"false", "0", "no"},
        registry_url=(registry := registry_environment_settings())["registry_url"],
        registry_username=registry["registry_username"],
        registry_password_ref=registry["registry_password_ref"],
        registry_ca_location=registry["registry_ca_location"],
        registry_certificate_location=registry["registry_certificate_location"],
        registry_key_location=registry["registry_key_location"],
        pipelines=used,
        verified=True,
        verified_at="",
        verified_by="",
    )


def _require_admin(actor: User | AnonymousUser) -> None:
    if not is_admin(actor):
        raise PermissionDenied("managing Kafka clusters needs the admin role")


def _audited_settings(cluster: KafkaCluster) -> dict[str, Any]:
    # The reference says where the password is, not what it is: it may be audited and shown.
    return {name: getattr(cluster, name) for name in ALL_FIELDS}


def save_cluster(
    *, actor: User | AnonymousUser, values: Mapping[str, Any], cluster: KafkaCluster | None = None
) -> KafkaCluster:
    """Create a cluster (``cluster`` None; ``values`` has ``name``) or change one; only the keys of ``ALL_FIELDS``
    (and ``name`` on create) are read, missing ones keep their value (defaults on create). Needs the admin
    role. A new cluster is unverified, and a change to any of ``CONNECTION_FIELDS`` withdraws an admin's
    approval (``is_verified``): nothing connects to it until a test passes again. Audited
    (``kafka_cluster.create`` / ``.update``, with the settings before and after: no secret is among them,
    and whether the approval was withdrawn). Raises PermissionDenied, ClusterError (field problems; a taken
    name)."""
    _require_admin(actor)
    target = cluster or KafkaCluster(name=str(values.get("name", "")))
    before = None if cluster is None else _audited_settings(cluster)
    merged: dict[str, Any] = {name: values.get(name, getattr(target, name)) for name in ALL_FIELDS}
    merged["verify_hostname"] = bool(merged["verify_hostname"])
    for name in ALL_FIELDS:
        if isinstance(merged[name], str):
            merged[name] = merged[name].strip()
    errors = validate({**merged, **({"name": target.name} if cluster is None else {})}, cluster=target.name)
    if errors:
        raise ClusterError(errors)
    connection_changed = before is None or any(before[k] != merged[k] for k in CONNECTION_FIELDS)
    was_verified = cluster is not None and is_verified(cluster)
    with transaction.atomic():
        if cluster is None and KafkaCluster.objects.filter(name=target.name).exists():
            raise ClusterError({"name": [f"a cluster named {target.name} exists"]})
        for name, value in merged.items():
            setattr(target, name, value)
        if cluster is None:
            target.created_by = actor if isinstance(actor, User) else None
        if connection_changed:
            target.verified_fingerprint, target.verified_at, target.verified_by = "", None, None
        target.save()
        audit.record(
            actor=actor,
            action="kafka_cluster.create" if cluster is None else "kafka_cluster.update",
            target_type="kafka_cluster",
            target_id=target.name,
            before=before,
            after=_audited_settings(target),
            details={
                "changed": sorted(k for k in ALL_FIELDS if before is None or before[k] != merged[k]),
                **({"verification_withdrawn": True} if was_verified and connection_changed else {}),
            },
        )
    return target


class ClusterInUse(Exception):
    """The cluster still has pipelines, registered DLQ topics or parked dead letters (HTTP 409)."""


def delete_cluster(*, actor: User | AnonymousUser, cluster: KafkaCluster) -> None:
    """Delete a cluster nothing uses any more. Needs the admin role; audited. Raises PermissionDenied, or
    ClusterInUse naming what still uses it."""
    _require_admin(actor)
    name = cluster.name
    pipelines = list(Pipeline.objects.filter(cluster=cluster).values_list("name", flat=True)[:5])
    if pipelines:
        raise ClusterInUse(f"cluster {name} is used by pipeline(s) {', '.join(pipelines)}")
    try:
        with transaction.atomic():
            before = _audited_settings(cluster)
            cluster.delete()
            audit.record(
                actor=actor,
                action="kafka_cluster.delete",
                target_type="kafka_cluster",
                target_id=name,
                before=before,
            )
    except ProtectedError:
        raise ClusterInUse(
            f"cluster {name} still has registered DLQ topics or dead letters; remove those first"
        ) from None


@dataclass
class ClusterCheck:
    """``check_cluster``'s answer: the cluster's name, the probe's report (reachability, cluster id, broker
    count, per-topic operations, problems), the topics checked for reading and for writing (those the
    cluster's pipelines name), and whether the cluster is now ``verified`` (approved for the product's own
    clients)."""

    cluster: str
    report: ProbeReport
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    verified: bool = False


def topics_of(cluster: KafkaCluster | None) -> tuple[list[str], list[str]]:
    """The topics the cluster's pipelines read (sources) and write (destinations and DLQ), sorted."""
    read: set[str] = set()
    write: set[str] = set()
    for pipeline in (
        Pipeline.objects.filter(cluster=cluster)
        .exclude(current_revision=None)
        .select_related("current_revision")
    ):
        assert pipeline.current_revision is not None
        spec = parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)
        read.update(spec.source.topics)
        write.update(spec.output_topics())
    return sorted(read), sorted(write)


#: The problems that mean the connection itself did not work (as opposed to a topic's ACL or absence).
_CONNECTION_KINDS = frozenset({"unreachable", "tls", "authentication"})


def connected(report: ProbeReport) -> bool:
    """Whether the probe reached the cluster and authenticated: what approves a cluster's settings. Topic
    problems (an ACL missing, a topic not created yet) are the pipelines' business, not the connection's."""
    return (
        bool(report.cluster_id)
        and report.brokers > 0
        and not any(p.kind in _CONNECTION_KINDS for p in report.problems)
    )


def check_cluster(
    *, actor: User | AnonymousUser, cluster: KafkaCluster | None, timeout: float = 10.0
) -> ClusterCheck:
    """Connect to the cluster now and check the principal may read and write what its pipelines name
    (``streamforge_core.kafka_probe.probe``): one problem per failure, worded for the operator
    (unreachable, TLS and why, authentication failed, not authorized to X on topic Y). A password that
    cannot be read, or settings that no longer validate, is an authentication problem (nothing connects).

    The one connection to a named cluster that needs no approval, because it is the approval: when the
    probe reached the cluster and authenticated, the row's ``settings_fingerprint`` is stored as verified
    (only if the row still holds the settings tested), and the product's own clients may connect to it.
    A failing test withdraws nothing (an outage or a rotated password is not a change of settings; a change
    is what withdraws an approval). Needs the admin role; audited (``kafka_cluster.test``: ok, verified,
    the problems' kinds, the connection as ``KafkaConnection.describe`` words it, never a secret)."""
    _require_admin(actor)
    read, write = topics_of(cluster)
    name = cluster_name(cluster)
    errors = (
        {} if cluster is None else validate({f: getattr(cluster, f) for f in FIELDS}, cluster=cluster.name)
    )
    if errors:
        problem = Problem(
            "authentication", f"the settings are not valid, change them first: {ClusterError(errors)}"
        )
        report = ProbeReport(connection=name, problems=[problem])
    else:
        try:
            conn = default_kafka() if cluster is None else _connection(cluster)
        except ValueError as exc:  # CredentialUnavailable among them
            report = ProbeReport(connection=name, problems=[Problem("authentication", str(exc))])
        else:
            report = probe(conn, read=read, write=write, timeout=timeout)
    verified = cluster is None
    with transaction.atomic():
        if cluster is not None and connected(report):
            tested = {f: getattr(cluster, f) for f in CONNECTION_FIELDS}
            verified = bool(
                KafkaCluster.objects.filter(pk=cluster.pk, **tested).update(
                    verified_fingerprint=settings_fingerprint(cluster),
                    verified_at=timezone.now(),
                    verified_by=actor if isinstance(actor, User) else None,
                )
            )
        audit.record(
            actor=actor,
            action="kafka_cluster.test",
            target_type="kafka_cluster",
            target_id=name,
            details={
                "ok": report.ok,
                "verified": verified,
                "problems": sorted({p.kind for p in report.problems}),
                "connection": report.connection,
            },
        )
    return ClusterCheck(name, report, read, write, verified)


#: How long "Test connection" on the cluster form waits for the brokers, in seconds (``probe`` blocks up to
#: about twice this: the whole answer comes within a few seconds, and the form says so while it waits).
TRY_TIMEOUT_SECONDS = 3.0


def try_settings(
    *,
    actor: User | AnonymousUser,
    values: Mapping[str, Any],
    cluster: KafkaCluster | None = None,
    timeout: float = TRY_TIMEOUT_SECONDS,
) -> ProbeReport:
    """Connect once with settings typed in the cluster form, before (and without) saving them: whether the
    brokers were reached, how many, the cluster id, and whether authentication passed, or why not (the
    problems of ``streamforge_core.kafka_probe.probe``: unreachable, TLS, authentication). ``values`` as for
    ``save_cluster`` (``cluster`` None: a new cluster, ``values`` has ``name``; else a change of
    ``cluster``, missing keys keeping their value). No topic is checked, nothing is stored and nothing is
    verified: only ``check_cluster`` on the saved row approves a cluster for the product's clients.

    Needs the admin role (PermissionDenied). Raises ClusterError when the settings do not validate (the
    same rules as saving: the password and files must be the cluster's own, so a test cannot send another
    cluster's secret to a broker). Audited (``kafka_cluster.try``: ok, the problems' kinds and the
    connection as ``KafkaConnection.describe`` words it, never a secret)."""
    _require_admin(actor)
    target = KafkaCluster(name=str(values.get("name", "")) if cluster is None else cluster.name)
    for name in ALL_FIELDS:
        value = values.get(name, getattr(cluster if cluster is not None else target, name))
        setattr(target, name, value.strip() if isinstance(value, str) else value)
    target.verify_hostname = bool(target.verify_hostname)
    errors = validate(
        {f: getattr(target, f) for f in ALL_FIELDS} | {"name": target.name}, cluster=target.name
    )
    if errors:
        raise ClusterError(errors)
    try:
        conn = _connection(target)
    except ValueError as exc:  # CredentialUnavailable among them
        report = ProbeReport(connection=target.name, problems=[Problem("authentication", str(exc))])
    else:
        report = probe(conn, timeout=timeout)
    audit.record(
        actor=actor,
        action="kafka_cluster.try",
        target_type="kafka_cluster",
        target_id=target.name,
        details={
            "ok": connected(report),
            "saved": cluster is not None,
            "problems": sorted({p.kind for p in report.problems}),
            "connection": report.connection,
        },
    )
    return report


def try_verdict(report: ProbeReport) -> str:
    """``try_settings``' answer in a line, for the heading above the form: ``Reached: 3 brokers,
    authentication ok``, or what stopped it (``Authentication failed``, ``TLS failed``, ``Not reached``)."""
    if connected(report):
        return f"Reached: {report.brokers} broker{'' if report.brokers == 1 else 's'}, authentication ok"
    kinds = {p.kind for p in report.problems}
    if "authentication" in kinds:
        return "Authentication failed"
    if "tls" in kinds:
        return "TLS failed"
    return "Not reached"
