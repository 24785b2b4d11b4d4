"""Schema registries: one per Kafka cluster. The default cluster's comes from the ``SCHEMA_REGISTRY_*``
environment; a named cluster's from its row's ``registry_*`` fields (validated with the cluster's other
settings by ``pipelines.clusters.validate_registry``). This module turns a cluster (or the default) into a
secret-resolved ``streamforge_core.schema_registry.RegistryConnection``, tries typed settings for the cluster
form's "Test connection", and lists a registry's subjects.

Secrets follow ``pipelines.clusters``' rules (references bound to their cluster, never values):

* the basic-auth password is ``env:STREAMFORGE_CLUSTER_<NAME>_REGISTRY_PASSWORD`` (``registry_password_variable``)
  or ``file:<credential dir>/<name>/<file>``;
* the mTLS certificate, key and CA files lie in the cluster's own credential folder;
* the URL may not carry credentials (``https://user:pw@host`` would put a password in the database).

The default registry: ``SCHEMA_REGISTRY_URL``, ``SCHEMA_REGISTRY_USERNAME``, the password from the file
``SCHEMA_REGISTRY_PASSWORD_FILE`` (or the variable ``SCHEMA_REGISTRY_PASSWORD``), and
``SCHEMA_REGISTRY_SSL_CA_LOCATION`` / ``_CERTIFICATE_LOCATION`` / ``_KEY_LOCATION``: as the default Kafka
cluster's ``KAFKA_SASL_PASSWORD_FILE`` and ``KAFKA_SSL_*``.

There is no outbound-address policy on registry URLs, as there is none on a cluster's bootstrap servers:
clusters and their registries are managed by admins only, and a registry usually lives on the internal
network beside the brokers.

Changing registry settings does not withdraw the cluster's Kafka approval (``clusters.is_verified`` covers
where the brokers are); the product uses a named cluster's registry only while the cluster is approved.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from access import audit
from access.permissions import is_admin, visible_teams
from pipelines.clusters import (
    REGISTRY_FIELDS,
    ClusterError,
    ClusterNotVerified,
    CredentialUnavailable,
    cluster_name,
    is_verified,
    registry_reference_problem,
    url_problem,
    validate_registry,
)
from pipelines.models import KafkaCluster, Pipeline
from streamforge_core.record_formats import shared_registry
from streamforge_core.schema_registry import (
    NotARegistry,
    RegisteredSchema,
    RegistryAuthFailed,
    RegistryConnection,
    RegistryError,
    RegistryTlsFailed,
    SchemaRegistry,
    SubjectSummary,
)

#: How long a "Test connection" of the registry may take, in seconds (one request, no retry).
TRY_TIMEOUT_SECONDS = 3.0


class RegistryNotConfigured(ValueError):
    """The cluster has no schema registry (no URL)."""


def _read_reference(ref: str, cluster: str) -> str:
    """The password behind a registry reference of ``cluster``, read now. Raises
    ``clusters.CredentialUnavailable`` naming the reference, never the value."""
    if (problem := registry_reference_problem(ref, cluster)) is not None:
        raise CredentialUnavailable(f"registry password reference {ref!r}: {problem}")
    if ref.startswith("env:"):
        value = os.environ.get(ref.removeprefix("env:"))
        if not value:
            raise CredentialUnavailable(f"the environment variable {ref.removeprefix('env:')} is not set")
        return value
    path = ref.removeprefix("file:")
    try:
        return Path(path).read_text().removesuffix("\n")
    except OSError as exc:
        raise CredentialUnavailable(
            f"the registry password file {path} cannot be read: {exc.strerror}"
        ) from None


def _row_connection(values: Mapping[str, Any], cluster: str, timeout: float) -> RegistryConnection:
    ref = str(values.get("registry_password_ref") or "")
    return RegistryConnection(
        url=str(values["registry_url"]).strip(),
        username=str(values.get("registry_username") or ""),
        password=_read_reference(ref, cluster) if ref else "",
        ca_file=str(values.get("registry_ca_location") or ""),
        cert_file=str(values.get("registry_certificate_location") or ""),
        key_file=str(values.get("registry_key_location") or ""),
        timeout_s=timeout,
    )


def default_registry(timeout: float = 5.0) -> RegistryConnection | None:
    """The default cluster's registry from the ``SCHEMA_REGISTRY_*`` environment, its password read now;
    None when ``SCHEMA_REGISTRY_URL`` is unset. Raises ``clusters.CredentialUnavailable`` for a password file
    that cannot be read, ValueError for a URL ``url_problem`` refuses (naming the variable)."""
    env = os.environ
    url = env.get("SCHEMA_REGISTRY_URL", "").strip()
    if not url:
        return None
    if (problem := url_problem(url)) is not None:
        raise ValueError(f"SCHEMA_REGISTRY_URL {problem}")
    password = env.get("SCHEMA_REGISTRY_PASSWORD", "")
    if env.get("SCHEMA_REGISTRY_PASSWORD_FILE"):
        path = env["SCHEMA_REGISTRY_PASSWORD_FILE"]
        try:
            password = Path(path).read_text().removesuffix("\n")
        except OSError as exc:
            raise CredentialUnavailable(
                f"SCHEMA_REGISTRY_PASSWORD_FILE {path} cannot be read: {exc.strerror}"
            ) from None
    return RegistryConnection(
        url=url,
        username=env.get("SCHEMA_REGISTRY_USERNAME", ""),
        password=password,
        ca_file=env.get("SCHEMA_REGISTRY_SSL_CA_LOCATION", ""),
        cert_file=env.get("SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION", ""),
        key_file=env.get("SCHEMA_REGISTRY_SSL_KEY_LOCATION", ""),
        timeout_s=timeout,
    )


def registry_for(cluster: KafkaCluster | None, timeout: float = 5.0) -> RegistryConnection:
    """The registry of ``cluster`` (None: the default), secret resolved: what pipelines, the console and the
    topic browser build ``SchemaRegistry`` from. A row is read again and must be approved
    (``clusters.connection_for``'s gate). Raises RegistryNotConfigured (no URL), ``clusters.ClusterNotVerified``,
    ``clusters.CredentialUnavailable``; all ValueErrors."""
    if cluster is None:
        found = default_registry(timeout)
        if found is None:
            raise RegistryNotConfigured("the default cluster has no schema registry (SCHEMA_REGISTRY_URL)")
        return found
    current = KafkaCluster.objects.filter(pk=cluster.pk).first()
    if current is None or not is_verified(current):
        raise ClusterNotVerified(f"Kafka cluster {cluster_name(cluster)} is not approved by an admin's test")
    values = {name: getattr(current, name) for name in REGISTRY_FIELDS}
    if not values["registry_url"]:
        raise RegistryNotConfigured(f"Kafka cluster {current.name} has no schema registry")
    if errors := validate_registry(values, current.name):
        raise ClusterNotVerified(
            f"cluster {current.name}'s registry settings are not valid: {ClusterError(errors)}"
        )
    return _row_connection(values, current.name, timeout)


@dataclass(frozen=True)
class RegistryTry:
    """What trying a registry found: ``ok``, the ``verdict`` in a line (``Registry reached: 3 subjects``,
    ``Registry not reached``, ``Registry authentication failed``, ``Registry TLS failed``, ``Registry
    answered, but not with a Confluent-compatible API``), the subject count when reached (else None), and
    the ``reason`` (never a secret)."""

    ok: bool
    verdict: str
    subjects: int | None
    reason: str


def probe_registry(connection: RegistryConnection) -> RegistryTry:
    """One ``GET /subjects`` (bounded by ``connection.timeout_s``, no retry), worded for the operator."""
    try:
        with SchemaRegistry(dataclasses.replace(connection, retries=0)) as registry:
            count = len(registry.subjects())
    except RegistryAuthFailed as exc:
        return RegistryTry(False, "Registry authentication failed", None, str(exc))
    except RegistryTlsFailed as exc:
        return RegistryTry(False, "Registry TLS failed", None, str(exc))
    except NotARegistry as exc:
        return RegistryTry(
            False, "Registry answered, but not with a Confluent-compatible API", None, str(exc)
        )
    except RegistryError as exc:
        return RegistryTry(False, "Registry not reached", None, str(exc))
    return RegistryTry(True, f"Registry reached: {count} subject{'' if count == 1 else 's'}", count, "")


def try_registry(
    *,
    actor: User | AnonymousUser,
    values: Mapping[str, Any],
    cluster: str,
    timeout: float = TRY_TIMEOUT_SECONDS,
) -> RegistryTry | None:
    """Try the registry settings typed in cluster ``cluster``'s form (already validated by
    ``clusters.validate``), unsaved: None when no URL is given. Needs the admin role (PermissionDenied).
    Audited (``kafka_cluster.try_registry``: ok, the verdict, the URL; never a secret)."""
    from django.core.exceptions import PermissionDenied

    if not is_admin(actor):
        raise PermissionDenied("managing Kafka clusters needs the admin role")
    url = str(values.get("registry_url") or "").strip()
    if not url:
        return None
    try:
        tried = probe_registry(_row_connection(values, cluster, timeout))
    except CredentialUnavailable as exc:
        tried = RegistryTry(False, "Registry authentication failed", None, str(exc))
    audit.record(
        actor=actor,
        action="kafka_cluster.try_registry",
        target_type="kafka_cluster",
        target_id=cluster,
        details={"ok": tried.ok, "verdict": tried.verdict, "url": url},
    )
    return tried


def may_see_subjects(user: User | AnonymousUser, cluster: KafkaCluster | None) -> bool:
    """Whether ``user`` may list the cluster's subjects: an admin, or a member of a team with a pipeline on
    the cluster (who may browse its topics)."""
    if is_admin(user):
        return True
    return Pipeline.objects.filter(cluster=cluster, team__in=visible_teams(user)).exists()


def subjects(cluster: KafkaCluster | None) -> list[SubjectSummary]:
    """The cluster's registry subjects with their latest version, id and type, by name. Raises what
    ``registry_for`` raises, and ``streamforge_core.schema_registry.RegistryError`` when the registry cannot
    answer."""
    with SchemaRegistry(registry_for(cluster)) as registry:
        return registry.subject_summaries()


def schema(cluster: KafkaCluster | None, schema_id: int) -> RegisteredSchema:
    """Schema ``schema_id`` of the cluster's registry (text, type, references, subject and version), from
    the process's shared client (``record_formats.shared_registry``: cached by id). Raises what
    ``registry_for`` raises, ``schema_registry.UnknownSchema`` for an id the registry does not have, and
    ``RegistryError`` when it cannot answer."""
    return shared_registry(registry_for(cluster)).lookup(schema_id)
