"""Record values in a pipeline's ``format``: Confluent-framed registry records <-> the JSON text the DSL reads.

``source.format`` and a destination's ``format`` are one of :data:`FORMATS`. ``json`` values are JSON text
already and never come here; the three registry formats are read by :class:`RecordDecoder` and written by
:class:`RecordEncoder`, both over one :class:`~streamforge_core.schema_registry.SchemaRegistry` (schemas
cached by id for the life of the process; a subject's latest version for ``latest_ttl_s``).

What a caller does with each outcome (DESIGN.md "Record formats"):

* :class:`~streamforge_core.codec_errors.DecodeError`: the record is bad (no magic byte, an unknown schema
  id, a schema of another format, a body its writer schema cannot read, a schema that cannot be used):
  dead-letter it as ``MessageDeserialization`` with ``reason``;
* :class:`~streamforge_core.codec_errors.SchemaValidation`: the transformed value does not fit the
  destination subject's schema: dead-letter it for that destination as ``SchemaValidation``;
* :class:`~streamforge_core.schema_registry.RegistryError` other than ``UnknownSchema``: the registry cannot
  serve now. :func:`call_registry` retries it with backoff and then raises a ``Config``
  :class:`~streamforge_core.contract.PipelineHalt`: a pipeline stops, it never dead-letters a topic because
  the registry is down.

Pure logic, no Django, no Spark: the Spark job's Python workers, the console and the tests share it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from streamforge_core import contract as c
from streamforge_core.codec_errors import JSON, DecodeError, SchemaValidation, UnusableSchema
from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import (
    RegisteredSchema,
    RegistryConnection,
    RegistryError,
    RegistryRejected,
    SchemaRegistry,
    UnknownSchema,
)
from streamforge_core.wire_format import WireFormatError, frame, unframe

__all__ = [
    "FORMATS",
    "REGISTRY_FORMATS",
    "DecodedRecord",
    "RecordDecoder",
    "RecordEncoder",
    "call_registry",
    "default_subject",
    "json_text",
    "shared_registry",
    "worker_decoder",
    "worker_encoder",
]

#: ``source.format`` / a destination's ``format``: ``json`` is plain JSON text, the rest Confluent-framed.
FORMATS: tuple[str, ...] = ("json", "avro", "protobuf", "json_schema")
#: The registry's schema type (Confluent API ``schemaType``) of each registry format.
REGISTRY_FORMATS: dict[str, str] = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}
#: Seconds waited before each retry of a registry that cannot serve (then the pipeline halts): about 31 s.
REGISTRY_BACKOFF_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)

T = TypeVar("T")


def default_subject(topic: str) -> str:
    """The subject a destination writes with when it names none: ``<topic>-value`` (Confluent's
    ``TopicNameStrategy`` for record values)."""
    return f"{topic}-value"


def json_text(value: JSON) -> str:
    """``value`` as compact JSON text, non-ASCII kept (what the DSL parses and a ``json`` destination writes).
    Raises ValueError for NaN or infinities, which JSON cannot carry."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def call_registry(
    call: Callable[[], T],
    url: str,
    *,
    backoff: tuple[float, ...] = REGISTRY_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried after each of ``backoff``'s delays (seconds) while the registry cannot serve
    (``RegistryError`` other than ``UnknownSchema`` and a 404 ``RegistryRejected``, which are answers about
    the record or the subject, raised at once). Raises ``contract.PipelineHalt(Config)`` naming ``url``, the
    attempts and the last reason when every attempt failed."""
    last: RegistryError | None = None
    for delay in (*backoff, None):
        try:
            return call()
        except UnknownSchema:
            raise
        except RegistryRejected as exc:
            if exc.status == 404:
                raise
            last = exc
        except RegistryError as exc:
            last = exc
        if delay is None:
            break
        sleep(delay)
    waited = sum(backoff)
    raise c.PipelineHalt(
        c.CONFIG,
        f"schema registry {url} could not serve after {len(backoff) + 1} attempts over {waited:g} s: {last}",
    )


@dataclass(frozen=True)
class DecodedRecord:
    """A registry record read: ``value`` (the JSON mapping of ``../shared/DSL.md`` "Decoded records"),
    ``schema`` (the writer schema, with subject and version when the registry says them) and, for Protobuf,
    ``message_indexes`` (the message of the schema the record holds)."""

    value: JSON
    schema: RegisteredSchema
    message_indexes: tuple[int, ...]

    def text(self) -> str:
        """``value`` as JSON text (``json_text``). Raises ``DecodeError`` for a value JSON cannot carry (a NaN
        or an infinity in an Avro or Protobuf double)."""
        try:
            return json_text(self.value)
        except ValueError as exc:
            raise DecodeError(f"value has no JSON form: {exc}") from None


class RecordDecoder:
    """Reads Confluent-framed values of one registry ``fmt`` (``avro``, ``protobuf``, ``json_schema``).

    ``decode`` takes each record's writer schema from its own schema id, so records written with several
    versions of a subject each decode with theirs. Not thread-safe beyond what ``SchemaRegistry`` is; one per
    Python worker."""

    def __init__(
        self,
        registry: SchemaRegistry,
        fmt: str,
        *,
        backoff: tuple[float, ...] = REGISTRY_BACKOFF_S,
    ) -> None:
        if fmt not in REGISTRY_FORMATS:
            raise ValueError(f"{fmt!r} is not a registry format ({', '.join(REGISTRY_FORMATS)})")
        self.registry = registry
        self.format = fmt
        self._schema_type = REGISTRY_FORMATS[fmt]
        self._backoff = backoff

    def decode(self, value: bytes | None) -> DecodedRecord:
        """The record ``value`` holds. Raises ``DecodeError`` for a record that is bad (reason and byte:
        "record has no value (tombstone)", the wire format's reasons, "unknown schema id N", "schema N is
        PROTOBUF, not AVRO", "schema N cannot be used: ...", the codec's reasons); ``contract.PipelineHalt``
        (``call_registry``) when the registry cannot serve."""
        if value is None:
            raise DecodeError("record has no value (tombstone)")
        try:
            framed = unframe(value, protobuf=self.format == "protobuf")
        except WireFormatError as exc:
            raise DecodeError(exc.reason) from None
        try:
            schema = call_registry(
                lambda: self.registry.lookup(framed.schema_id),
                self.registry.connection.url,
                backoff=self._backoff,
            )
        except UnknownSchema:
            raise DecodeError(f"unknown schema id {framed.schema_id}", 1) from None
        if schema.schema_type != self._schema_type:
            raise DecodeError(
                f"schema {framed.schema_id} is {schema.schema_type}, not {self._schema_type} "
                f"(the pipeline reads {self.format})",
                1,
            )
        try:
            codec = codec_for(schema, framed.message_indexes)
        except UnusableSchema as exc:
            raise DecodeError(f"schema {framed.schema_id} cannot be used: {exc.reason}", 1) from None
        return DecodedRecord(codec.decode(framed.body), schema, framed.message_indexes)

    def decode_text(self, value: bytes | None) -> str:
        """``decode(value)`` as JSON text (``DecodedRecord.text``); the same errors."""
        return self.decode(value).text()


class RecordEncoder:
    """Writes JSON values as Confluent-framed values of a subject's latest schema, for destinations with a
    registry ``format``. Protobuf values are written as the schema's first message (message indexes ``[0]``)."""

    def __init__(self, registry: SchemaRegistry, *, backoff: tuple[float, ...] = REGISTRY_BACKOFF_S) -> None:
        self.registry = registry
        self._backoff = backoff

    def schema_of(self, subject: str, fmt: str, version: int | None = None) -> RegisteredSchema:
        """The subject's latest schema (or its ``version``), checked to be ``fmt``'s type. Raises
        ``contract.PipelineHalt(Config)`` for a subject or version the registry does not have, a schema of
        another type, or a registry that cannot serve: the destination's configuration is wrong or the
        registry is down, not the record."""
        url = self.registry.connection.url

        def look_up() -> RegisteredSchema:
            if version is None:
                return self.registry.latest(subject)
            return self.registry.version(subject, version)

        try:
            schema = call_registry(look_up, url, backoff=self._backoff)
        except RegistryRejected as exc:
            which = f"subject {subject!r}" if version is None else f"version {version} of subject {subject!r}"
            raise c.PipelineHalt(c.CONFIG, f"{which} is not in schema registry {url}: {exc}") from None
        expected = REGISTRY_FORMATS[fmt]
        if schema.schema_type != expected:
            raise c.PipelineHalt(
                c.CONFIG,
                f"subject {subject!r}'s latest schema (id {schema.schema_id}) is {schema.schema_type}, "
                f"not {expected}",
            )
        return schema

    def encode(self, subject: str, fmt: str, value_text: bytes | str, version: int | None = None) -> bytes:
        """``value_text`` (JSON text) written with ``subject``'s latest schema (or its ``version``), framed.
        Raises ``SchemaValidation`` naming the field that does not fit (``$`` for text that is not JSON) and
        ``contract.PipelineHalt(Config)`` as ``schema_of`` does, or when the schema cannot be used."""
        schema = self.schema_of(subject, fmt, version)
        try:
            value = json.loads(value_text)
        except ValueError as exc:
            raise SchemaValidation("$", f"not JSON: {exc}") from None
        protobuf = fmt == "protobuf"
        indexes = (0,) if protobuf else ()
        try:
            codec = codec_for(schema, indexes)
        except UnusableSchema as exc:
            raise c.PipelineHalt(
                c.CONFIG, f"subject {subject!r}'s latest schema cannot be used: {exc.reason}"
            ) from None
        return frame(schema.schema_id, codec.encode(value), indexes if protobuf else None)


_registries: dict[RegistryConnection, SchemaRegistry] = {}
_decoders: dict[tuple[RegistryConnection, str], RecordDecoder] = {}
_encoders: dict[RegistryConnection, RecordEncoder] = {}
_workers_lock = threading.Lock()
_registry_lock = threading.Lock()


def shared_registry(connection: RegistryConnection) -> SchemaRegistry:
    """The process's one ``SchemaRegistry`` for ``connection``: its schemas are fetched once per process
    whoever asks (a Spark Python worker, a web process)."""
    with _registry_lock:
        found = _registries.get(connection)
        if found is None:
            found = _registries[connection] = SchemaRegistry(connection)
    return found


def worker_decoder(connection: RegistryConnection, fmt: str) -> RecordDecoder:
    """The process's decoder for ``connection`` and ``fmt``: one per Python worker, sharing one
    ``SchemaRegistry`` (its id cache, its HTTP connections) with ``worker_encoder``, and the codecs cached by
    ``schema_codecs.codec_for``, so a schema is fetched and parsed once per worker for as long as Spark keeps
    the worker (``spark.python.worker.reuse``)."""
    with _workers_lock:
        found = _decoders.get((connection, fmt))
        if found is None:
            found = _decoders[(connection, fmt)] = RecordDecoder(shared_registry(connection), fmt)
    return found


def worker_encoder(connection: RegistryConnection) -> RecordEncoder:
    """The process's encoder for ``connection`` (see ``worker_decoder``)."""
    with _workers_lock:
        found = _encoders.get(connection)
        if found is None:
            found = _encoders[connection] = RecordEncoder(shared_registry(connection))
    return found
