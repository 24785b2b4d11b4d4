"""A pipeline's record formats in the control plane: what dry runs, test messages and the DLQ console need to
read a registry-format record as the running pipeline reads it, and to write one back.

The running pipeline decodes in its Spark job (``pipelines.spark.decoding``) and encodes in its writer, with
``streamforge_core.record_formats``; this module gives the control plane the same codecs over the pipeline's
own cluster registry (``pipelines.registries.registry_for``), with one difference: a console request does
not wait out a registry outage (no backoff), it says so at once (:class:`RegistryUnreachable`, an HTTP 503).

* :func:`formats_for` -> :class:`PipelineFormats` (None-safe for ``json`` pipelines: nothing is looked up);
* :meth:`PipelineFormats.decode` -> the decoded record (JSON text and its writer schema), ``DecodeError``
  for a bad record;
* :meth:`PipelineFormats.encode_like` -> a JSON fix framed again with a schema of the record's subject
  (its writer schema, or a later version that the registry finds compatible), ``SchemaValidation`` naming
  the field;
* :meth:`PipelineFormats.encode_for` -> a destination's encoding check (what the writer does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipelines.models import KafkaCluster
from pipelines.registries import registry_for
from pipelines.spec import DestinationConfig, PipelineSpec
from streamforge_core import contract as c
from streamforge_core.codec_errors import SchemaValidation, UnusableSchema
from streamforge_core.record_formats import (
    REGISTRY_FORMATS,
    DecodedRecord,
    RecordDecoder,
    RecordEncoder,
    default_subject,
    shared_registry,
)
from streamforge_core.schema_codecs import codec_for
from streamforge_core.schema_registry import (
    RegisteredSchema,
    RegistryError,
    RegistryRejected,
    SchemaRegistry,
)
from streamforge_core.wire_format import frame

__all__ = [
    "PipelineFormats",
    "RegistryUnreachable",
    "formats_for",
    "source_record_value",
    "topic_decoder",
    "topic_format",
]


class RegistryUnreachable(Exception):
    """The pipeline's schema registry is not configured, not approved, or cannot serve now: the console
    cannot read or write the record (HTTP 503); nothing is decided about the record itself."""


@dataclass(frozen=True)
class PipelineFormats:
    """The registry side of one pipeline spec: ``source_format`` and the cluster's registry clients (shared
    per process, so schemas are fetched once)."""

    source_format: str
    decoder: RecordDecoder | None
    encoder: RecordEncoder | None

    @property
    def reads_registry(self) -> bool:
        """Is the source a registry format (its values Confluent-framed)?"""
        return self.decoder is not None

    def decode(self, value: bytes | None) -> DecodedRecord:
        """``value`` read with its writer schema. Raises ``DecodeError`` (the record's fault, as the pipeline
        would dead-letter it), ``RegistryUnreachable``."""
        assert self.decoder is not None, "a json source has nothing to decode"
        try:
            return self.decoder.decode(value)
        except c.PipelineHalt as exc:
            raise RegistryUnreachable(exc.detail) from None

    def decoded_text(self, value: bytes | None) -> bytes:
        """``decode(value)`` as the UTF-8 JSON text the DSL reads; the same errors."""
        return self.decode(value).text().encode()

    def encode_like(
        self,
        schema: RegisteredSchema,
        message_indexes: tuple[int, ...],
        text: bytes,
        *,
        version: int | None = None,
    ) -> tuple[bytes, RegisteredSchema]:
        """``text`` (a JSON fix) framed with ``schema`` (the dead letter's writer schema), or with ``version``
        of its subject after the registry found that version compatible with the writer schema's subject
        (``POST /compatibility/subjects/{s}/versions/{v}``). Returns the value and the schema used. Raises
        ``SchemaValidation`` naming the field (``$`` for text that is not JSON), ``ValueError`` for a version
        that does not exist or is not compatible, ``RegistryUnreachable``. Compatible means: the registry
        accepts ``version``'s schema after the writer schema's version under the subject's compatibility
        level, so whoever reads the subject reads the re-encoded record."""
        assert self.decoder is not None
        registry = self.decoder.registry
        chosen = schema
        if version is not None and version != schema.version:
            if schema.subject is None:
                raise ValueError("the registry does not say which subject the record's schema belongs to")
            try:
                chosen = registry.version(schema.subject, version)
                compatible = registry.check_compatibility(
                    schema.subject,
                    chosen.schema_str,
                    chosen.schema_type,
                    tuple((r.name, r.subject, r.version) for r in chosen.references),
                    version=schema.version or "latest",
                )
            except RegistryRejected as exc:
                raise ValueError(f"version {version} of subject {schema.subject}: {exc}") from None
            except RegistryError as exc:
                raise RegistryUnreachable(str(exc)) from None
            if not compatible:
                raise ValueError(
                    f"version {version} of subject {schema.subject} is not compatible with the record's "
                    f"schema (id {schema.schema_id}, version {schema.version})"
                )
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise SchemaValidation("$", f"not JSON: {exc}") from None
        try:
            body = codec_for(chosen, message_indexes).encode(value)
        except UnusableSchema as exc:
            raise ValueError(exc.reason) from None
        indexes = message_indexes if chosen.schema_type == "PROTOBUF" else None
        return frame(chosen.schema_id, body, indexes), chosen

    def encode_for(self, dest: DestinationConfig, text: bytes | str) -> bytes:
        """What the writer sends to ``dest`` for a transformed value ``text``: the value encoded with the
        subject's latest schema (``dest.format`` not ``json``). Raises ``SchemaValidation``,
        ``RegistryUnreachable`` (also for a subject that is missing: the destination cannot be written)."""
        assert self.encoder is not None
        assert dest.subject is not None
        try:
            return self.encoder.encode(dest.subject, dest.format, text)
        except c.PipelineHalt as exc:
            raise RegistryUnreachable(exc.detail) from None


def formats_for(spec: PipelineSpec, cluster: KafkaCluster | None) -> PipelineFormats:
    """The registry side of ``spec`` on ``cluster`` (None: the default cluster). Looks nothing up for a
    pipeline that uses no registry format. Raises ``RegistryUnreachable`` when it uses one and the cluster
    has no usable registry (``registries.registry_for``'s reasons)."""
    writes = any(d.format != "json" for d in spec.destinations)
    if not spec.source.uses_registry and not writes:
        return PipelineFormats(spec.source.format, None, None)
    try:
        connection = registry_for(cluster)
    except ValueError as exc:
        raise RegistryUnreachable(str(exc)) from None
    registry = shared_registry(connection)
    decoder = None
    if spec.source.format in REGISTRY_FORMATS:
        decoder = RecordDecoder(registry, spec.source.format, backoff=())
    encoder = RecordEncoder(registry, backoff=()) if writes else None
    return PipelineFormats(spec.source.format, decoder, encoder)


def topic_format(spec: PipelineSpec, topic: str) -> str:
    """The format of ``topic``'s record values as the pipeline sees them: a source topic's and the DLQ's
    (dead letters keep the source record's bytes) are ``source.format``; a destination topic's is its
    destination's ``format`` (the first destination writing it), except a destination without a transform
    over a registry-format source, which passes the source's bytes on; ``json`` for any other topic."""
    if topic in spec.source.topics or topic == spec.dlq.topic:
        return spec.source.format
    for dest in spec.destinations:
        if dest.topic == topic:
            if dest.transform is None and spec.source.uses_registry:
                return spec.source.format
            return dest.format
    return "json"


def topic_decoder(spec: PipelineSpec, cluster: KafkaCluster | None, topic: str) -> RecordDecoder | None:
    """A decoder of ``topic``'s values (``topic_format``) over ``cluster``'s registry, answering at once
    (no backoff: a page is waiting), or None for a ``json`` topic. Raises ``RegistryUnreachable`` when the
    topic is in a registry format and the cluster has no usable registry."""
    fmt = topic_format(spec, topic)
    if fmt not in REGISTRY_FORMATS:
        return None
    try:
        connection = registry_for(cluster)
    except ValueError as exc:
        raise RegistryUnreachable(str(exc)) from None
    return RecordDecoder(shared_registry(connection), fmt, backoff=())


class SchemaNotFound(ValueError):
    """A subject or version that a caller chose (a test message's) and the registry does not have: the
    caller's input, not a sick registry. ``field`` names the input (``subject`` or ``schema_version``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def source_record_value(
    spec: PipelineSpec,
    cluster: KafkaCluster | None,
    topic: str,
    value: bytes,
    *,
    subject: str = "",
    version: int | None = None,
) -> bytes:
    """A value typed for source ``topic`` (a test message) as the pipeline reads it: for a registry-format
    source, JSON text encoded with ``subject`` (default ``<topic>-value``), its latest schema or its
    ``version`` (a Protobuf schema's first message), unless it is Confluent-framed already (magic byte 0,
    which JSON text never starts with); unchanged for a ``json`` source. Raises ``SchemaValidation`` naming
    the field, ``SchemaNotFound`` for a chosen subject or version the registry does not have,
    ``RegistryUnreachable`` (no usable registry, the default subject missing, a registry that cannot
    answer)."""
    if not spec.source.uses_registry or value[:1] == b"\x00":
        return value
    try:
        connection = registry_for(cluster)
    except ValueError as exc:
        raise RegistryUnreachable(str(exc)) from None
    registry = shared_registry(connection)
    chosen = subject or default_subject(topic)
    if subject or version is not None:
        try:
            registry.latest(chosen) if version is None else registry.version(chosen, version)
        except RegistryRejected:
            if version is not None and subject_exists(registry, chosen):
                raise SchemaNotFound("schema_version", f"subject {chosen} has no version {version}") from None
            raise SchemaNotFound("subject", f"subject {chosen} is not in the registry") from None
        except RegistryError as exc:
            raise RegistryUnreachable(str(exc)) from None
    encoder = RecordEncoder(registry, backoff=())
    try:
        return encoder.encode(chosen, spec.source.format, value, version)
    except c.PipelineHalt as exc:
        raise RegistryUnreachable(exc.detail) from None


def subject_exists(registry: SchemaRegistry, subject: str) -> bool:
    """Whether the registry has ``subject`` (any version). Raises ``RegistryUnreachable``."""
    try:
        registry.latest(subject)
    except RegistryRejected:
        return False
    except RegistryError as exc:
        raise RegistryUnreachable(str(exc)) from None
    return True
