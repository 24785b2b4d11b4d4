"""Kafka clusters: the installation's default one (the ``KAFKA_*`` environment) and the named ``KafkaCluster``
rows an admin adds; how each becomes a ``streamforge_core.kafka.KafkaConnection``; and their administration
(create, change, delete, test), admin-only and audited.

Every control-plane Kafka client (the driver's launch, lag reads, topic administration, DLQ ingest, replay,
readiness) asks ``connection_for(cluster)`` for its connection; ``None`` is the default cluster.

Secrets are references, never values (DESIGN.md "Kafka clusters"). A row names where the SASL password is:
``env:KAFKA_<NAME>`` (a variable of the processes' environment) or ``file:<path>`` (a mounted secret, e.g. a
Kubernetes Secret volume or Docker secret). Chosen over encrypting the password into the database because
then the database, its dumps and backups, the admin's screen and the audit trail never hold anything a
thief could use, rotation is the secret store's job (a new file is read by the next client), and there is
no key to manage. The cost: an admin cannot paste a password into the UI; the deployment has to provide it.
References are confined so a cluster cannot be used to send the server's other secrets to a broker of the
admin's choosing: variables must start with ``KAFKA_``, and files (passwords, CA, certificate, key) must lie
under ``STREAMFORGE_KAFKA_CREDENTIAL_DIRS``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import ProtectedError

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

#: An environment reference: ``env:`` and a variable name starting with ``KAFKA_``.
_ENV_REF = re.compile(r"^env:(?P<name>KAFKA_[A-Z0-9_]+)$")
_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_HOST_PORT = re.compile(r"^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}$")

#: The fields of a cluster an admin sets (``save_cluster``), in the order forms and the API show them.
FIELDS = (
    "description", "bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username",
    "password_ref", "ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "verify_hostname",
)  # fmt: skip


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
    """The directories referenced credential files must lie in (``STREAMFORGE_KAFKA_CREDENTIAL_DIRS``),
    resolved (symbolic links followed)."""
    return [Path(d).resolve() for d in settings.KAFKA_CREDENTIAL_DIRS if d]


def _file_problem(path: str) -> str | None:
    """Why ``path`` may not be referenced (None when it may): absolute, and inside a credential directory once
    ``..`` and symbolic links are resolved."""
    if not path.startswith("/"):
        return "must be an absolute path"
    try:
        real = Path(path).resolve()
    except (OSError, ValueError) as exc:  # a NUL byte, a symbolic-link loop
        return f"is not a usable path ({exc})"
    allowed = credential_dirs()
    if not any(real == d or d in real.parents for d in allowed):
        shown = ", ".join(str(d) for d in allowed) or "none configured"
        return f"must lie under a credential directory (STREAMFORGE_KAFKA_CREDENTIAL_DIRS: {shown})"
    return None


def reference_problem(ref: str) -> str | None:
    """Why ``ref`` is not a usable password reference (``env:KAFKA_<NAME>`` or ``file:<absolute path>`` under
    a credential directory), or None. Says nothing about whether the secret exists now (that is
    ``check_cluster``'s job): a secret may be mounted after the row is saved."""
    if ref.startswith("env:"):
        if _ENV_REF.match(ref) is None:
            return "env: references name a variable starting with KAFKA_ (upper case, digits, _)"
        return None
    if ref.startswith("file:"):
        return _file_problem(ref.removeprefix("file:"))
    return "must be env:KAFKA_<NAME> or file:<path>, a reference to the password, never the password"


def read_password(ref: str) -> Secret:
    """The password ``ref`` points at, read now (a rotated file is picked up by the next client). One
    trailing newline of a file is dropped. Raises CredentialUnavailable naming the reference."""
    if (problem := reference_problem(ref)) is not None:
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


def validate(values: Mapping[str, Any]) -> dict[str, list[str]]:
    """Field problems of a cluster's settings (``FIELDS``; ``name`` too when given): what a 400 names. The
    connection rules are ``KafkaConnection``'s; the reference and path rules are this module's."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

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
        if not username:
            add("sasl_username", f"needed with {protocol}")
        if not ref:
            add("password_ref", f"needed with {protocol}: env:KAFKA_<NAME> or file:<path>")
        elif (problem := reference_problem(ref)) is not None:
            add("password_ref", problem)
    else:
        for name in ("sasl_mechanism", "sasl_username", "password_ref"):
            if values.get(name):
                add(name, f"only with SASL_PLAINTEXT or SASL_SSL, not {protocol}")
    for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
        path = str(values.get(name, ""))
        if path and not tls:
            add(name, f"only with SSL or SASL_SSL, not {protocol}")
        elif path and (problem := _file_problem(path)) is not None:
            add(name, problem)
    if bool(values.get("ssl_certificate_location")) != bool(values.get("ssl_key_location")):
        add("ssl_key_location", "a client certificate needs both the certificate and its key")
    return errors


def connection_for(cluster: KafkaCluster | None) -> KafkaConnection:
    """The connection to ``cluster`` (None: the installation's default, ``default_kafka()``), its password
    read from its reference now. Raises CredentialUnavailable when the password cannot be read, ValueError
    when the stored settings no longer make a connection."""
    if cluster is None:
        return default_kafka()
    password = read_password(cluster.password_ref) if cluster.password_ref else None
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
    value), whether it comes from the ``KAFKA_*`` environment (the default cluster, not editable here) and
    how many pipelines use it."""

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
    pipelines: int


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
            pipelines=used,
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
        pipelines=used,
    )


def _require_admin(actor: User | AnonymousUser) -> None:
    if not is_admin(actor):
        raise PermissionDenied("managing Kafka clusters needs the admin role")


def _audited_settings(cluster: KafkaCluster) -> dict[str, Any]:
    # The reference says where the password is, not what it is: it may be audited and shown.
    return {name: getattr(cluster, name) for name in FIELDS}


def save_cluster(
    *, actor: User | AnonymousUser, values: Mapping[str, Any], cluster: KafkaCluster | None = None
) -> KafkaCluster:
    """Create a cluster (``cluster`` None; ``values`` has ``name``) or change one; only the keys of ``FIELDS``
    (and ``name`` on create) are read, missing ones keep their value (defaults on create). Needs the admin
    role. Audited (``kafka_cluster.create`` / ``.update``, with the settings before and after: no secret is
    among them). Raises PermissionDenied, ClusterError (field problems; a taken name)."""
    _require_admin(actor)
    target = cluster or KafkaCluster(name=str(values.get("name", "")))
    before = None if cluster is None else _audited_settings(cluster)
    merged: dict[str, Any] = {name: values.get(name, getattr(target, name)) for name in FIELDS}
    merged["verify_hostname"] = bool(merged["verify_hostname"])
    for name in FIELDS:
        if isinstance(merged[name], str):
            merged[name] = merged[name].strip()
    errors = validate({**merged, **({"name": target.name} if cluster is None else {})})
    if errors:
        raise ClusterError(errors)
    with transaction.atomic():
        if cluster is None and KafkaCluster.objects.filter(name=target.name).exists():
            raise ClusterError({"name": [f"a cluster named {target.name} exists"]})
        for name, value in merged.items():
            setattr(target, name, value)
        if cluster is None:
            target.created_by = actor if isinstance(actor, User) else None
        target.save()
        audit.record(
            actor=actor,
            action="kafka_cluster.create" if cluster is None else "kafka_cluster.update",
            target_type="kafka_cluster",
            target_id=target.name,
            before=before,
            after=_audited_settings(target),
            details={"changed": sorted(k for k in FIELDS if before is None or before[k] != merged[k])},
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
    count, per-topic operations, problems), and the topics checked for reading and for writing (those the
    cluster's pipelines name)."""

    cluster: str
    report: ProbeReport
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)


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


def check_cluster(
    *, actor: User | AnonymousUser, cluster: KafkaCluster | None, timeout: float = 10.0
) -> ClusterCheck:
    """Connect to the cluster now and check the principal may read and write what its pipelines name
    (``streamforge_core.kafka_probe.probe``): one problem per failure, worded for the operator
    (unreachable, TLS and why, authentication failed, not authorized to X on topic Y). Needs the admin role;
    changes nothing, so it is not audited. A password that cannot be read is an authentication problem."""
    _require_admin(actor)
    read, write = topics_of(cluster)
    name = cluster_name(cluster)
    try:
        conn = connection_for(cluster)
    except ValueError as exc:  # CredentialUnavailable among them
        report = ProbeReport(connection=name, problems=[Problem("authentication", str(exc))])
        return ClusterCheck(name, report, read, write)
    return ClusterCheck(name, probe(conn, read=read, write=write, timeout=timeout), read, write)
