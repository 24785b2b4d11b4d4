"""A schema registry client over the Confluent-compatible REST API (no Django: the Spark driver uses it too).

``SchemaRegistry(connection)`` wraps confluent-kafka's ``SchemaRegistryClient`` built from a plain,
secret-resolved :class:`RegistryConnection`, and answers in this module's own small, stable types:
:class:`RegisteredSchema` and :class:`Reference`. Codecs (Avro, Protobuf, JSON Schema) call
:meth:`SchemaRegistry.lookup` with the schema id of a Confluent wire-format record.

Confluent Schema Registry API reference
(https://docs.confluent.io/platform/current/schema-registry/develop/api.html), endpoints used:

* ``GET /schemas/ids/{id}``: a schema's type, text and references (``lookup``);
* ``GET /schemas/ids/{id}/versions``: the subject-version pairs of an id (``lookup``'s subject/version);
* ``GET /subjects/{subject}/versions/{version|latest}``: one version (``latest``, ``version``, references);
* ``POST /subjects/{subject}/versions``: register (``register``);
* ``POST /compatibility/subjects/{subject}/versions/{version}``: compatibility (``check_compatibility``);
* ``GET /subjects``: the subject names (``subjects``).

Errors, for the callers' two different reactions:

* :class:`RegistryUnavailable`: the registry could not be reached, timed out, or answered 5xx/429. Transient:
  the caller retries with backoff, then halts; it never dead-letters a record for it.
* :class:`UnknownSchema`: the registry answered that the id does not exist. A property of the record: the
  caller dead-letters it (``MessageDeserialization``, "unknown schema id N").
* :class:`RegistryAuthFailed` (401/403), :class:`RegistryRejected` (any other 4xx, e.g. an invalid or
  incompatible schema on register), :class:`NotARegistry` (the answer is not the Confluent API's JSON).

Apicurio Registry 3.3 (``/apis/ccompat/v7``) quirks met here:

* an Avro schema's ``schemaType`` is left out of answers (as Confluent does): absent means ``AVRO``;
* ``GET /schemas/ids/{id}/versions`` answers as Confluent's does; registries without that endpoint
  (Confluent before 5.5) answer 404: ``lookup`` then returns the schema with ``subject``/``version`` None;
* ids are Apicurio's content ids: registering the same text under a second subject returns the same id;
* an unknown id answers 404 with Confluent's ``error_code`` 40403 (schema not found), as Confluent does;
  a 404 without a Confluent error code (Apicurio's RESTEASY "Could not find resource" JSON for a wrong base
  path) is :class:`NotARegistry`, never :class:`UnknownSchema`: a misconfigured URL must halt a pipeline,
  not dead-letter every record;
* a schema whose type cannot be detected is refused with 422 and code 42201 ("Failed to discover artifact
  type from content"), not Confluent's 42201 "Invalid schema" text: only the code is relied on.

How a caller reacts: :class:`UnknownSchema` is the record's fault (dead-letter it); every other
:class:`RegistryError` means the registry cannot serve now (retry with backoff, then halt).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Schema types as the Confluent API names them.
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")

#: How many schemas ``lookup`` keeps per process (ids are immutable: an entry never goes stale).
DEFAULT_CACHE_SIZE = 1000
#: How long (seconds) ``SchemaRegistry.lookup`` answers an id the registry did not have without asking again.
UNKNOWN_ID_TTL_S = 10.0


@dataclass(frozen=True)
class Reference:
    """A schema another schema refers to (a Protobuf ``import``, an Avro named type, a JSON Schema ``$ref``).

    ``name`` is the name the referring schema uses (Protobuf: the import path, e.g. ``"common/money.proto"``),
    ``subject``/``version`` where it is registered, ``schema_str`` its text."""

    name: str
    subject: str
    version: int
    schema_str: str


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it.

    ``schema_type`` is one of :data:`SCHEMA_TYPES`; ``schema_str`` the schema text (Avro/JSON Schema: JSON
    text; Protobuf: ``.proto`` text); ``references`` every schema it depends on, transitively, each once,
    dependencies before their dependents (a reference's own references come before it), so a Protobuf codec
    can build its file descriptors in this order; ``subject``/``version`` where the registry says this id is
    registered (None when it does not say)."""

    schema_id: int
    schema_type: str
    schema_str: str
    references: tuple[Reference, ...]
    subject: str | None
    version: int | None


@dataclass(frozen=True)
class SubjectSummary:
    """A subject with its latest version: ``name``, ``version`` (int), ``schema_id``, ``schema_type``."""

    name: str
    version: int
    schema_id: int
    schema_type: str


@dataclass(frozen=True)
class RegistryConnection:
    """How to reach one registry, secrets already resolved (never stored or logged as such).

    ``url`` the base of the Confluent-compatible API (e.g. ``http://127.0.0.1:8081`` or Apicurio's
    ``http://host:8080/apis/ccompat/v7``); ``username``/``password`` HTTP basic auth (both or neither);
    ``ca_file`` a PEM bundle to verify an https registry with; ``cert_file``/``key_file`` a client certificate
    for mTLS; ``timeout_s`` bounds each HTTP request (connect and read, seconds); ``retries`` extra attempts
    the HTTP layer makes on a transport error or 5xx before :class:`RegistryUnavailable`; ``latest_ttl_s`` how
    long ``latest()`` answers from memory."""

    url: str
    username: str = ""
    password: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    timeout_s: float = 5.0
    retries: int = 1
    latest_ttl_s: float = 30.0

    def __repr__(self) -> str:  # the password never reaches a log line through repr()
        return f"RegistryConnection(url={self.url!r}, username={self.username!r}, password={'***' if self.password else ''!r})"


#: The variables ``registry_environment`` writes and ``registry_from_environment`` reads (the default cluster's
#: registry is configured with the same names, ``pipelines.registries.default_registry``).
REGISTRY_ENV: dict[str, str] = {
    "url": "SCHEMA_REGISTRY_URL",
    "username": "SCHEMA_REGISTRY_USERNAME",
    "password": "SCHEMA_REGISTRY_PASSWORD",
    "ca_file": "SCHEMA_REGISTRY_SSL_CA_LOCATION",
    "cert_file": "SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION",
    "key_file": "SCHEMA_REGISTRY_SSL_KEY_LOCATION",
}


def registry_environment(connection: RegistryConnection) -> dict[str, str]:
    """``connection`` as ``SCHEMA_REGISTRY_*`` variables: how a runner hands a pipeline's registry to its Spark
    driver without a password on the command line (the environment is readable by the driver's user only).
    Empty settings are left out."""
    return {
        name: str(getattr(connection, field))
        for field, name in REGISTRY_ENV.items()
        if getattr(connection, field)
    }


def registry_from_environment(environ: Mapping[str, str]) -> RegistryConnection | None:
    """The registry ``registry_environment`` described, or None without ``SCHEMA_REGISTRY_URL``."""
    url = environ.get(REGISTRY_ENV["url"], "").strip()
    if not url:
        return None

    def get(field: str) -> str:
        return environ.get(REGISTRY_ENV[field], "")

    return RegistryConnection(
        url=url,
        username=get("username"),
        password=get("password"),
        ca_file=get("ca_file"),
        cert_file=get("cert_file"),
        key_file=get("key_file"),
    )


class RegistryError(Exception):
    """Base of this module's errors; ``str()`` is a reason fit for an operator (no secret in it)."""


class RegistryUnavailable(RegistryError):
    """The registry could not be reached, timed out or answered 5xx/429: transient, retry then halt."""


class UnknownSchema(RegistryError):
    """The registry has no schema with this id (``schema_id``): the record is bad, dead-letter it."""

    def __init__(self, schema_id: int) -> None:
        super().__init__(f"unknown schema id {schema_id}")
        self.schema_id = schema_id


class RegistryAuthFailed(RegistryError):
    """The registry refused the credentials (HTTP 401/403)."""


class RegistryRejected(RegistryError):
    """The registry answered another 4xx (unknown subject/version, invalid or incompatible schema); ``status``
    the HTTP status and ``error_code`` Confluent's error code (-1 when it gave none)."""

    def __init__(self, message: str, status: int, error_code: int) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class NotARegistry(RegistryError):
    """The server answered, but not with the Confluent Schema Registry API's JSON (wrong URL or path)."""


class RegistryTlsFailed(RegistryUnavailable):
    """The TLS handshake failed (untrusted server certificate, client certificate refused, unreadable
    certificate/key files). A subclass of RegistryUnavailable: a pipeline treats it the same way."""


def _client_conf(connection: RegistryConnection) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "url": connection.url,
        "timeout": connection.timeout_s,
        "max.retries": max(0, connection.retries),
        "retries.wait.ms": 200,
        "retries.max.wait.ms": 1000,
        "cache.latest.ttl.sec": connection.latest_ttl_s,
    }
    if connection.username or connection.password:
        conf["basic.auth.user.info"] = f"{connection.username}:{connection.password}"
    if connection.ca_file:
        conf["ssl.ca.location"] = connection.ca_file
    if connection.cert_file:
        conf["ssl.certificate.location"] = connection.cert_file
    if connection.key_file:
        conf["ssl.key.location"] = connection.key_file
    return conf


def _is_tls_error(exc: BaseException) -> bool:
    import ssl

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if (
            isinstance(current, ssl.SSLError)
            or "CERTIFICATE" in str(current).upper()
            or "SSL" in str(current)
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def _translate(exc: BaseException, *, schema_id: int | None = None) -> RegistryError:
    """Map confluent-kafka/httpx/ssl exceptions onto this module's errors."""
    from confluent_kafka.schema_registry.common._httpx_compat import (
        httpx,
    )  # httpx2 or httpx, as confluent-kafka
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, RegistryError):
        return exc
    if isinstance(exc, SchemaRegistryError):
        status = int(exc.http_status_code or 0)
        code = int(exc.error_code if exc.error_code is not None else -1)
        if status >= 500 or status == 429:
            return RegistryUnavailable(f"registry answered HTTP {status}")
        if status in (401, 403):
            return RegistryAuthFailed(f"authentication failed (HTTP {status})")
        if code < 40000:
            # no Confluent error code in the answer: another server (or the wrong path) answered, and an id
            # must never be called unknown on its word (a whole topic would be dead-lettered)
            return NotARegistry(f"not a Confluent-compatible API (HTTP {status} without an error code)")
        if status == 404 and schema_id is not None and code == 40403:
            return UnknownSchema(schema_id)
        return RegistryRejected(
            f"{exc.error_message or 'rejected'} (HTTP {status}, code {code})", status, code
        )
    if isinstance(exc, httpx.TransportError):
        if _is_tls_error(exc):
            return RegistryTlsFailed(f"TLS failed: {_first_line(exc)}")
        if isinstance(exc, httpx.TimeoutException):
            return RegistryUnavailable("registry timed out")
        return RegistryUnavailable(f"registry not reached: {_first_line(exc)}")
    if isinstance(exc, (OSError, ValueError)) and _is_tls_error(exc):
        return RegistryTlsFailed(f"TLS failed: {_first_line(exc)}")
    if isinstance(exc, (ValueError, KeyError, TypeError)):
        # a 2xx answer that is not the API's JSON (json.JSONDecodeError is a ValueError), or fields missing
        return NotARegistry("not a Confluent-compatible API (unexpected answer)")
    if isinstance(exc, OSError):
        return RegistryUnavailable(f"registry not reached: {_first_line(exc)}")
    return RegistryUnavailable(f"registry error: {type(exc).__name__}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _schema_type(value: str | None) -> str:
    return (value or "AVRO").upper()


class SchemaRegistry:
    """One registry, through confluent-kafka's ``SchemaRegistryClient``; thread-safe.

    ``lookup`` caches by id for the life of the process (at most ``cache_size`` entries, least recently used
    dropped first), and remembers an id the registry does not have for ``unknown_ttl_s`` seconds, so a topic
    whose producer frames records with a bogus id costs one request per id and interval, not one per record
    (ids are only ever handed out, so a short answer-lag for one registered just now is the price); other
    calls go to the registry (``latest`` within ``connection.latest_ttl_s``).
    Every method raises the errors in this module's docstring, never confluent-kafka's or httpx's. Building
    one does no I/O; ``close()`` (or ``with``) closes its HTTP connections."""

    def __init__(
        self,
        connection: RegistryConnection,
        cache_size: int = DEFAULT_CACHE_SIZE,
        unknown_ttl_s: float = UNKNOWN_ID_TTL_S,
    ) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        try:
            self._client = SchemaRegistryClient(_client_conf(connection))
        except Exception as exc:  # a bad certificate/key file, a malformed URL
            raise _translate(exc) from None
        self.connection = connection
        self._cache: OrderedDict[int, RegisteredSchema] = OrderedDict()
        self._cache_size = max(1, cache_size)
        self._unknown: OrderedDict[int, float] = OrderedDict()  # id -> monotonic time it is asked again
        self._unknown_ttl_s = unknown_ttl_s
        self._references: dict[tuple[str, int], tuple[str, tuple[tuple[str, str, int], ...]]] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    # -- reads -----------------------------------------------------------------------------------------

    def lookup(self, schema_id: int) -> RegisteredSchema:
        """The schema with this id (``GET /schemas/ids/{id}``, then ``/versions`` for subject/version and
        ``GET /subjects/{s}/versions/{v}`` per reference), cached. Raises UnknownSchema(schema_id) when the
        registry has no such id, RegistryUnavailable when it cannot answer."""
        with self._lock:
            hit = self._cache.get(schema_id)
            if hit is not None:
                self._cache.move_to_end(schema_id)
                return hit
            until = self._unknown.get(schema_id)
            if until is not None and time.monotonic() < until:
                raise UnknownSchema(schema_id)
        try:
            schema = self._client.get_schema(schema_id)
        except Exception as exc:
            error = _translate(exc, schema_id=schema_id)
            if isinstance(error, UnknownSchema) and self._unknown_ttl_s > 0:
                with self._lock:
                    self._unknown[schema_id] = time.monotonic() + self._unknown_ttl_s
                    self._unknown.move_to_end(schema_id)
                    while len(self._unknown) > self._cache_size:
                        self._unknown.popitem(last=False)
            raise error from None
        subject: str | None = None
        version: int | None = None
        try:
            pairs = self._client.get_schema_versions(schema_id)
        except Exception as exc:
            error = _translate(exc, schema_id=schema_id)
            if not isinstance(error, UnknownSchema | RegistryRejected):
                raise error from None
            pairs = []  # Apicurio: the mapping may be missing; the schema itself is known
        if pairs:
            first = min(pairs, key=lambda p: (str(p.subject), int(p.version or 0)))
            subject, version = first.subject, first.version
        refs = self._resolve((r.name, r.subject, r.version) for r in schema.references or [])
        found = RegisteredSchema(
            schema_id=schema_id,
            schema_type=_schema_type(schema.schema_type),
            schema_str=schema.schema_str or "",
            references=refs,
            subject=subject if isinstance(subject, str) else None,
            version=int(version) if version is not None else None,
        )
        with self._lock:
            self._cache[schema_id] = found
            self._cache.move_to_end(schema_id)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return found

    def latest(self, subject: str) -> RegisteredSchema:
        """The subject's latest version (``GET /subjects/{subject}/versions/latest``). Raises
        RegistryRejected (status 404) for an unknown subject, RegistryUnavailable."""
        try:
            registered = self._client.get_latest_version(subject)
        except Exception as exc:
            raise _translate(exc) from None
        return self._registered(registered, subject)

    def version(self, subject: str, number: int) -> RegisteredSchema:
        """Version ``number`` (>= 1) of the subject (``GET /subjects/{subject}/versions/{number}``). Raises
        RegistryRejected (status 404) when either is unknown, RegistryUnavailable."""
        try:
            registered = self._client.get_version(subject, number)
        except Exception as exc:
            raise _translate(exc) from None
        return self._registered(registered, subject)

    def subjects(self) -> list[str]:
        """The registry's subject names, sorted (``GET /subjects``)."""
        try:
            names = self._client.get_subjects()
        except Exception as exc:
            raise _translate(exc) from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise NotARegistry("not a Confluent-compatible API (GET /subjects is not a list of names)")
        return sorted(names)

    def subject_summaries(self) -> list[SubjectSummary]:
        """Every subject with its latest version, id and type (``GET /subjects`` then ``.../latest`` each),
        sorted by name. A subject deleted between the two calls is left out."""
        summaries = []
        for name in self.subjects():
            try:
                latest = self.latest(name)
            except RegistryRejected:
                continue
            summaries.append(SubjectSummary(name, latest.version or 0, latest.schema_id, latest.schema_type))
        return summaries

    # -- writes (tests, the demo, the console) ---------------------------------------------------------

    def register(
        self,
        subject: str,
        schema_str: str,
        schema_type: str = "AVRO",
        references: tuple[tuple[str, str, int], ...] = (),
    ) -> int:
        """Register ``schema_str`` under ``subject`` (``POST /subjects/{subject}/versions``) and return its id
        (the existing id when the same schema is registered already). ``references`` are ``(name, subject,
        version)`` triples. Raises RegistryRejected (invalid or incompatible: status 409/422),
        RegistryUnavailable."""
        try:
            return int(
                self._client.register_schema(subject, self._schema(schema_str, schema_type, references))
            )
        except Exception as exc:
            raise _translate(exc) from None

    def check_compatibility(
        self,
        subject: str,
        schema_str: str,
        schema_type: str = "AVRO",
        references: tuple[tuple[str, str, int], ...] = (),
        version: int | str = "latest",
    ) -> bool:
        """Whether ``schema_str`` is compatible with the subject's ``version`` under the subject's
        compatibility level (``POST /compatibility/subjects/{subject}/versions/{version}``). True for a subject
        without versions. Raises RegistryRejected (an invalid schema: 422), RegistryUnavailable."""
        try:
            return bool(
                self._client.test_compatibility(
                    subject, self._schema(schema_str, schema_type, references), version=version
                )
            )
        except Exception as exc:
            error = _translate(exc)
            if isinstance(error, RegistryRejected) and error.status == 404 and error.error_code == 40401:
                return True  # no such subject yet: anything is compatible with nothing
            raise error from None

    # -- helpers ---------------------------------------------------------------------------------------

    @staticmethod
    def _schema(schema_str: str, schema_type: str, references: tuple[tuple[str, str, int], ...]) -> Any:
        from confluent_kafka.schema_registry import Schema, SchemaReference

        kind = _schema_type(schema_type)
        if kind not in SCHEMA_TYPES:
            raise ValueError(f"schema_type must be one of {', '.join(SCHEMA_TYPES)}, not {schema_type!r}")
        refs = [
            SchemaReference(name, ref_subject, ref_version) for name, ref_subject, ref_version in references
        ]
        return Schema(schema_str, kind, refs)

    def _registered(self, registered: Any, subject: str) -> RegisteredSchema:
        schema = registered.schema
        refs = self._resolve((r.name, r.subject, r.version) for r in schema.references or [])
        return RegisteredSchema(
            schema_id=int(registered.schema_id),
            schema_type=_schema_type(schema.schema_type),
            schema_str=schema.schema_str or "",
            references=refs,
            subject=registered.subject or subject,
            version=int(registered.version) if registered.version is not None else None,
        )

    def _subject_version(self, subject: str, version: int) -> tuple[str, tuple[tuple[str, str, int], ...]]:
        key = (subject, int(version))
        with self._lock:
            hit = self._references.get(key)
        if hit is not None:
            return hit
        try:
            registered = self._client.get_version(subject, int(version))
        except Exception as exc:
            raise _translate(exc) from None
        schema = registered.schema
        found = (
            schema.schema_str or "",
            tuple((str(r.name), str(r.subject), int(r.version or 0)) for r in schema.references or []),
        )
        with self._lock:
            if len(self._references) >= self._cache_size:
                self._references.clear()
            self._references[key] = found
        return found

    def _resolve(self, direct: Any) -> tuple[Reference, ...]:
        """Every reference, transitively, dependencies first, each name once (depth-first post-order)."""
        ordered: list[Reference] = []
        seen: set[str] = set()

        def visit(name: str, subject: str, version: int, depth: int) -> None:
            if name in seen:
                return
            if depth > 32:
                raise RegistryRejected(f"references nested deeper than 32 at {name!r}", 422, -1)
            seen.add(name)
            text, nested = self._subject_version(subject, version)
            for child in nested:
                visit(*child, depth + 1)
            ordered.append(Reference(name=name, subject=subject, version=int(version), schema_str=text))

        for name, subject, version in direct:
            visit(name, subject, int(version), 0)
        return tuple(ordered)
