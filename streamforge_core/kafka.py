"""The Kafka boundary: every Kafka client of the product is configured here, and nowhere else.

One function per client role builds the librdkafka configuration (``producer_config``,
``transactional_producer_config``, ``consumer_config``, ``admin_config``) or the Spark Kafka source/sink
options (``spark_kafka_options``, the ``kafka.``-prefixed Java client settings of Spark's Structured Streaming
Kafka integration guide) from one ``KafkaConnection``: how to reach one cluster. A setting that every client
needs (the bootstrap servers today; TLS and SASL settings later) is added to ``KafkaConnection.client_settings``
once and reaches the driver, the writer, DLQ ingest, replay, lag reads, topic administration, chaos and bench.

Also here: one ``Record`` (a consumed record as plain data), the one list of transient errors with
``is_transient`` and ``retrying``, ``record_size``, the size rule the writer and the accounting share, and
``topic_name_problem``, Kafka's own rule for topic names, which every topic a user names is checked with.
Plain Python on confluent-kafka: no Django, no pyspark.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message

#: librdkafka's client settings (string keys such as ``linger.ms``; values as librdkafka takes them).
ClientConfig = dict[str, Any]


#: Kafka's longest topic name (``org.apache.kafka.common.internals.Topic.MAX_NAME_LENGTH``).
TOPIC_NAME_MAX = 249
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None when it is: Kafka's own rule
    (``org.apache.kafka.common.internals.Topic.validate``): 1 to 249 ASCII letters, digits, '.', '_' and
    '-', and neither "." nor "..". The broker refuses anything else, so it is refused before it gets there."""
    if not name:
        return "a topic name is required"
    if len(name) > TOPIC_NAME_MAX:
        return f"a Kafka topic name is at most {TOPIC_NAME_MAX} characters"
    if name in {".", ".."}:
        return 'a Kafka topic may not be named "." or ".."'
    if not _TOPIC_NAME.fullmatch(name):
        return "not a valid Kafka topic name (only ASCII letters, digits, '.', '_' and '-')"
    return None


#: ``security.protocol`` values (Kafka's ``SecurityProtocol``; librdkafka takes the same names).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms a connection may use (user name and password; no Kerberos or OAuth yet).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class Secret:
    """A credential in memory: its text only through ``reveal()``; ``repr``/``str`` never show it, so a
    connection that ends up in a log line, an exception or a debugger's display does not leak it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret's text, for the one place that hands it to a client library."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)


@dataclass(frozen=True)
class KafkaConnection:
    """How to reach and authenticate to one Kafka cluster.

    ``bootstrap_servers``: the comma-separated ``host:port`` list (``bootstrap.servers``).
    ``security_protocol``: one of ``SECURITY_PROTOCOLS``. With SASL_*: ``sasl_mechanism`` (one of
    ``SASL_MECHANISMS``), ``sasl_username`` and ``sasl_password``. With SSL/SASL_SSL: ``ssl_ca_location``
    (PEM file of the authorities to trust; empty: the system's), and for a client certificate (mTLS)
    ``ssl_certificate_location`` and ``ssl_key_location`` (PEM; the key unencrypted PKCS#8, which both
    librdkafka and the Java client read). ``verify_hostname`` (default on) checks the broker certificate
    names the host connected to (``ssl.endpoint.identification.algorithm=https``).

    Raises ValueError naming the field when a combination is incomplete or unknown.
    """

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret | None = None
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    verify_hostname: bool = True

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ValueError("a Kafka connection needs at least one bootstrap server (host:port)")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}")
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError(f"{self.security_protocol} needs sasl_username and sasl_password")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password is not None:
            raise ValueError(f"SASL settings were given but security_protocol is {self.security_protocol}")
        if not self.uses_tls and (
            self.ssl_ca_location or self.ssl_certificate_location or self.ssl_key_location
        ):
            raise ValueError(f"TLS files were given but security_protocol is {self.security_protocol}")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise ValueError("a client certificate needs both ssl_certificate_location and ssl_key_location")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    def client_settings(self) -> ClientConfig:
        """The librdkafka settings every client of this cluster starts from, whatever its role (librdkafka's
        CONFIGURATION.md names). Holds the password in clear: hand it to the client, never log it."""
        settings: ClientConfig = {"bootstrap.servers": self.bootstrap_servers}
        if self.security_protocol == "PLAINTEXT":
            return settings
        settings["security.protocol"] = self.security_protocol
        if self.uses_sasl:
            assert self.sasl_password is not None  # __post_init__
            settings.update(
                {
                    "sasl.mechanisms": self.sasl_mechanism,
                    "sasl.username": self.sasl_username,
                    "sasl.password": self.sasl_password.reveal(),
                }
            )
        if self.uses_tls:
            settings["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else "none"
            if self.ssl_ca_location:
                settings["ssl.ca.location"] = self.ssl_ca_location
            if self.ssl_certificate_location:
                settings["ssl.certificate.location"] = self.ssl_certificate_location
                settings["ssl.key.location"] = self.ssl_key_location
        return settings

    def java_client_settings(self) -> dict[str, str]:
        """The same connection for Kafka's Java client (the names of Kafka's client configuration reference;
        what Spark's Kafka source and sink take with a ``kafka.`` prefix). SASL credentials go in
        ``sasl.jaas.config``; PEM files are read with ``ssl.truststore.type=PEM`` and, for a client
        certificate, ``ssl.keystore.type=PEM`` with the key and chain inline (KIP-651)."""
        settings = {"bootstrap.servers": self.bootstrap_servers}
        if self.security_protocol == "PLAINTEXT":
            return settings
        settings["security.protocol"] = self.security_protocol
        if self.uses_sasl:
            assert self.sasl_password is not None  # __post_init__
            settings["sasl.mechanism"] = self.sasl_mechanism
            settings["sasl.jaas.config"] = (
                f"{_JAAS_MODULES[self.sasl_mechanism]} required username={_jaas_quoted(self.sasl_username)} "
                f"password={_jaas_quoted(self.sasl_password.reveal())};"
            )
        if self.uses_tls:
            settings["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else ""
            if self.ssl_ca_location:
                settings["ssl.truststore.type"] = "PEM"
                settings["ssl.truststore.location"] = self.ssl_ca_location
            if self.ssl_certificate_location:
                settings["ssl.keystore.type"] = "PEM"
                settings["ssl.keystore.certificate.chain"] = _read_pem(self.ssl_certificate_location)
                settings["ssl.keystore.key"] = _read_pem(self.ssl_key_location)
        return settings

    def describe(self) -> str:
        """The connection for people and logs: servers, protocol, mechanism, user, files; never a secret."""
        parts = [self.bootstrap_servers, self.security_protocol]
        if self.uses_sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username}")
        if self.ssl_certificate_location:
            parts.append(f"client certificate {self.ssl_certificate_location}")
        if self.uses_tls and not self.verify_hostname:
            parts.append("hostname verification OFF")
        return ", ".join(parts)


def _jaas_quoted(value: str) -> str:
    """A JAAS option value in double quotes, with backslashes and quotes escaped (JAAS's ConfigFile syntax)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read_pem(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc


#: The environment variables ``connection_from_environment`` reads (the README's table).
ENVIRONMENT = (
    "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME",
    "KAFKA_SASL_PASSWORD", "KAFKA_SASL_PASSWORD_FILE", "KAFKA_SSL_CA_LOCATION",
    "KAFKA_SSL_CERTIFICATE_LOCATION", "KAFKA_SSL_KEY_LOCATION", "KAFKA_SSL_VERIFY_HOSTNAME",
)  # fmt: skip


def connection_from_environment(
    environ: Mapping[str, str], *, bootstrap_servers: str = ""
) -> KafkaConnection:
    """The installation's default cluster from ``KAFKA_*`` variables (``ENVIRONMENT``).

    The password is never a setting of its own: it is read, each time a connection is built, from
    ``KAFKA_SASL_PASSWORD`` or from the file ``KAFKA_SASL_PASSWORD_FILE`` names (a mounted secret; one
    trailing newline dropped). ``bootstrap_servers`` overrides ``KAFKA_BOOTSTRAP_SERVERS``.
    Raises ValueError naming the variable that is missing or wrong.
    """
    protocol = environ.get("KAFKA_SECURITY_PROTOCOL", "").strip().upper() or "PLAINTEXT"
    password: Secret | None = None
    if protocol.startswith("SASL_"):
        if environ.get("KAFKA_SASL_PASSWORD_FILE"):
            path = environ["KAFKA_SASL_PASSWORD_FILE"]
            try:
                password = Secret(Path(path).read_text().removesuffix("\n"))
            except OSError as exc:
                raise ValueError(f"KAFKA_SASL_PASSWORD_FILE: cannot read {path}: {exc.strerror}") from exc
        elif environ.get("KAFKA_SASL_PASSWORD"):
            password = Secret(environ["KAFKA_SASL_PASSWORD"])
        else:
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={protocol} needs KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE"
            )
    verify = environ.get("KAFKA_SSL_VERIFY_HOSTNAME", "true").strip().lower()
    if verify not in {"true", "false", "1", "0", "yes", "no"}:
        raise ValueError(f"KAFKA_SSL_VERIFY_HOSTNAME must be true or false, not {verify!r}")
    try:
        return KafkaConnection(
            bootstrap_servers=bootstrap_servers or environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
            security_protocol=protocol,
            sasl_mechanism=environ.get("KAFKA_SASL_MECHANISM", "").strip().upper() if password else "",
            sasl_username=environ.get("KAFKA_SASL_USERNAME", "") if password else "",
            sasl_password=password,
            ssl_ca_location=environ.get("KAFKA_SSL_CA_LOCATION", ""),
            ssl_certificate_location=environ.get("KAFKA_SSL_CERTIFICATE_LOCATION", ""),
            ssl_key_location=environ.get("KAFKA_SSL_KEY_LOCATION", ""),
            verify_hostname=verify in {"true", "1", "yes"},
        )
    except ValueError as exc:
        raise ValueError(f"the KAFKA_* settings: {exc}") from exc


def connection_environment(conn: KafkaConnection) -> dict[str, str]:
    """``conn`` as the ``KAFKA_*`` variables ``connection_from_environment`` reads: how a parent process hands
    its connection to a child (the Spark driver) without putting the password on a command line. The
    password travels in ``KAFKA_SASL_PASSWORD`` of the child's environment, readable by its user only."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": conn.bootstrap_servers,
        "KAFKA_SECURITY_PROTOCOL": conn.security_protocol,
    }
    if conn.uses_sasl:
        assert conn.sasl_password is not None
        env.update(
            KAFKA_SASL_MECHANISM=conn.sasl_mechanism,
            KAFKA_SASL_USERNAME=conn.sasl_username,
            KAFKA_SASL_PASSWORD=conn.sasl_password.reveal(),
        )
    if conn.uses_tls:
        env.update(
            KAFKA_SSL_CA_LOCATION=conn.ssl_ca_location,
            KAFKA_SSL_CERTIFICATE_LOCATION=conn.ssl_certificate_location,
            KAFKA_SSL_KEY_LOCATION=conn.ssl_key_location,
            KAFKA_SSL_VERIFY_HOSTNAME="true" if conn.verify_hostname else "false",
        )
    return env


def _merged(conn: KafkaConnection, role: ClientConfig, extra: Mapping[str, Any] | None) -> ClientConfig:
    # The connection's settings come last but one: a role never silently replaces where or how to connect;
    # ``extra`` (a caller's tuning) comes last and may, which tests and benchmarks need.
    return {**role, **conn.client_settings(), **(extra or {})}


def producer_config(
    conn: KafkaConnection,
    *,
    client_id: str | None = None,
    idempotent: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A producer's configuration. ``idempotent`` (the default) turns on ``enable.idempotence`` with
    ``acks=all``, so a retried send is written once per partition (KIP-98); ``extra`` adds or overrides
    librdkafka settings (``linger.ms``, ``message.max.bytes`` ...)."""
    role: ClientConfig = {}
    if idempotent:
        role.update({"enable.idempotence": True, "acks": "all"})
    if client_id:
        role["client.id"] = client_id
    return _merged(conn, role, extra)


def transactional_producer_config(
    conn: KafkaConnection,
    *,
    transactional_id: str,
    transaction_timeout_ms: int = 60_000,
    client_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A transactional producer's configuration (idempotent, ``transactional.id`` set). The coordinator
    aborts a transaction left open longer than ``transaction_timeout_ms`` (milliseconds); a new producer with
    the same ``transactional_id`` fences every earlier one in ``init_transactions`` (KIP-98)."""
    role = producer_config(conn, client_id=client_id, extra=extra)
    role.update({"transactional.id": transactional_id, "transaction.timeout.ms": transaction_timeout_ms})
    return role


def consumer_config(
    conn: KafkaConnection,
    *,
    group_id: str,
    read_committed: bool = True,
    offset_reset: str | None = None,
    client_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ClientConfig:
    """A consumer's configuration in consumer group ``group_id``. Offsets are never auto-committed (the
    product commits after its own work is durable). ``read_committed`` (librdkafka's default too) hides
    aborted transactional records and open transactions, and makes watermark reads answer the last stable
    offset; False reads everything written (``read_uncommitted``). ``offset_reset`` is ``auto.offset.reset``
    (``earliest``/``latest``) for a group with no committed offset."""
    role: ClientConfig = {
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
    }
    if offset_reset:
        role["auto.offset.reset"] = offset_reset
    if client_id:
        role["client.id"] = client_id
    return _merged(conn, role, extra)


def admin_config(conn: KafkaConnection, *, extra: Mapping[str, Any] | None = None) -> ClientConfig:
    """An admin client's configuration (topics, configs, consumer-group offsets)."""
    return _merged(conn, {}, extra)


def spark_kafka_options(conn: KafkaConnection) -> dict[str, str]:
    """The connection as options of Spark's Kafka source and sink: each Java client setting prefixed with
    ``kafka.`` (Spark's Structured Streaming + Kafka Integration Guide, "Kafka Specific Configurations").
    Spark redacts ``sasl.jaas.config`` and keys matching ``spark.redaction.regex`` where it shows options."""
    return {f"kafka.{name}": value for name, value in conn.java_client_settings().items()}


@dataclass(frozen=True)
class Record:
    """One consumed record as plain data. ``headers`` keep their order and duplicates; ``timestamp_ms`` is
    epoch milliseconds, None when the broker gave none; ``topic_id`` is Kafka's id of the topic it was read
    from when the reader knows it (a message does not carry it), else empty."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int | None
    topic_id: str = ""

    @classmethod
    def from_message(cls, message: Message, topic_id: str = "") -> Record:
        """Copy a confluent-kafka message; ValueError when it is an error event, not a record."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            raise ValueError(f"not a record but an error event: {message.error()}")
        kind, millis = message.timestamp()
        raw_headers = message.headers() or []
        pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
        return cls(
            topic=topic,
            partition=partition,
            offset=offset,
            key=_as_bytes(message.key()),
            value=_as_bytes(message.value()),
            headers=[(name, _as_bytes(value)) for name, value in pairs],
            timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE or millis is None or millis < 0 else millis,
            topic_id=topic_id,
        )

    def header(self, name: str) -> str | None:
        """The first header called ``name`` as text, or None when absent (or a null value)."""
        for key, value in self.headers:
            if key == name:
                return None if value is None else value.decode()
        return None


def _as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


# Record batch v2 framing (Kafka protocol guide, "Record Batch"): 61 bytes of batch header plus per-record
# varints and attributes; 96 bytes covers one record's framing with room to spare.
RECORD_OVERHEAD = 96
#: Per header: its varint lengths and framing, in bytes, on top of the name and value.
HEADER_OVERHEAD = 10


def record_size(value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """An upper bound, in bytes, of one record alone in a batch on the wire, to compare with a topic's
    ``max.message.bytes`` before producing (the broker checks the whole batch against it)."""
    size = RECORD_OVERHEAD + len(value or b"") + len(key or b"")
    for name, data in headers:
        size += len(name) + len(data or b"") + HEADER_OVERHEAD
    return size


#: Errors a broker or the client answers while a broker starts, a leader or coordinator moves, or the network
#: blips; the same request succeeds a moment later. Kafka marks most of these retriable itself
#: (``KafkaError.retriable()``); librdkafka's local ones (``_TRANSPORT``, ``_TIMED_OUT``...) it does not.
TRANSIENT_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
    }
)


def is_transient(error: KafkaError) -> bool:
    """Whether repeating the failed request later may succeed (see ``TRANSIENT_ERRORS``)."""
    return error.retriable() or error.code() in TRANSIENT_ERRORS


def reached_end(event: Message, end: int) -> bool:
    """Whether consumer ``event`` (a ``_PARTITION_EOF`` event, with ``enable.partition.eof``) says its
    partition has been read up to ``end`` (an exclusive offset the caller took from the watermarks, the last
    stable offset under read_committed).

    librdkafka posts the event with the offset its fetcher stood at (the end it saw); the event is a
    notification, never a promise that earlier offsets were delivered. One below ``end`` is not the end:
    the caller keeps reading, so a read never reports a range as complete, or moves past records, that it
    did not see (librdkafka's CONFIGURATION.md, ``enable.partition.eof``)."""
    error = event.error()
    if error is None or error.code() != KafkaError._PARTITION_EOF:
        return False
    return (event.offset() or 0) >= end


T = TypeVar("T")


def retrying(call: Callable[[], T], *, within: float = 60.0) -> T:
    """``call()``, repeated (0.5 s, doubling to 4 s) while it raises a KafkaException with a transient error
    (``is_transient``), for at most ``within`` seconds; then, or on any other error, the exception is raised."""
    deadline = time.monotonic() + within
    delay = 0.5
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or not is_transient(error) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 4.0)
