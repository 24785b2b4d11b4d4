"""A dead letter of a registry-format pipeline as the console shows and fixes it: the payload decoded with its
writer schema (schema id, subject, version), and an operator's JSON fix framed again with that schema (or a
later, compatible version of its subject) before it is stored, so a replay sends what the pipeline reads.

For a ``json`` pipeline (or a dead letter without a pipeline) nothing here applies: ``decoded_payload``
returns None and ``stored_fix`` returns the value unchanged. The original bytes are never changed: a fix is
a new payload revision, as for JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlq.models import DeadLetter
from dlq.services.errors import InvalidRequest, RegistryUnavailable
from pipelines.formats import PipelineFormats, RegistryUnreachable, formats_for
from pipelines.spec import PipelineSpec, SpecError
from streamforge_core.codec_errors import DecodeError, SchemaValidation
from streamforge_core.contract import PipelineHalt
from streamforge_core.record_formats import RecordDecoder, default_subject
from streamforge_core.schema_registry import RegisteredSchema, RegistryError, RegistryRejected

__all__ = [
    "DecodedPayload",
    "current_spec",
    "decode_with",
    "decoded_payload",
    "pipeline_formats",
    "stored_fix",
]


@dataclass(frozen=True)
class DecodedPayload:
    """A registry-format payload read for the console: ``format`` (``avro``, ``protobuf``, ``json_schema``),
    ``text`` (the decoded record as UTF-8 JSON text, DSL.md's mapping; None when it did not decode),
    ``schema`` (the writer schema: id, subject, version, type; None when it did not decode), and ``error``
    (why it did not decode: the record's fault, or the registry that cannot answer; ``""`` when decoded)."""

    format: str
    text: bytes | None
    schema: RegisteredSchema | None
    message_indexes: tuple[int, ...]
    error: str

    @property
    def decoded(self) -> bool:
        """Was the payload read with its schema?"""
        return self.text is not None


def current_spec(dead_letter: DeadLetter) -> PipelineSpec | None:
    """The spec of the dead letter's pipeline's current revision; None when there is nothing to go by (no
    pipeline: a foreign DLQ; no revision; a revision that no longer validates)."""
    pipeline = dead_letter.pipeline
    if pipeline is None or pipeline.current_revision is None:
        return None
    try:
        return pipeline.current_revision.parsed
    except SpecError:
        return None


def pipeline_formats(dead_letter: DeadLetter) -> PipelineFormats | None:
    """The registry side of the dead letter's pipeline's current revision (``pipelines.formats``), or None
    when it uses no registry format (its source and destinations are ``json``) or ``current_spec`` is None.
    Raises ``errors.RegistryUnavailable`` when the pipeline needs a registry that its cluster does not have
    or that is not approved."""
    spec = current_spec(dead_letter)
    if spec is None or not (spec.source.uses_registry or any(d.format != "json" for d in spec.destinations)):
        return None
    assert dead_letter.pipeline is not None
    try:
        return formats_for(spec, dead_letter.pipeline.cluster)
    except RegistryUnreachable as exc:
        raise RegistryUnavailable(str(exc)) from None


def payload_reader(dead_letter: DeadLetter) -> Callable[[bytes | None], DecodedPayload] | None:
    """How the dead letter's payloads (the original and its fixes) are read as its pipeline reads them:
    a function from a value to its ``DecodedPayload``, with the pipeline's decoder looked up once; None for
    a ``json`` pipeline. Never raises for the record or the registry: what went wrong is ``error``."""
    try:
        formats = pipeline_formats(dead_letter)
    except RegistryUnavailable as exc:
        spec = current_spec(dead_letter)
        if spec is None or not spec.source.uses_registry:
            return None
        unusable = DecodedPayload(
            spec.source.format, None, None, (), f"the schema registry cannot be used: {exc}"
        )
        return lambda _value: unusable
    if formats is None or formats.decoder is None:
        return None
    decoder = formats.decoder
    return lambda value: decode_with(decoder, value)


def decoded_payload(dead_letter: DeadLetter, value: bytes | None) -> DecodedPayload | None:
    """``value`` (the dead letter's original payload or a fix) decoded as its pipeline reads it, or None for
    a ``json`` pipeline (``payload_reader``). Never raises for the record or the registry: what went wrong
    is ``error``."""
    reader = payload_reader(dead_letter)
    return reader(value) if reader is not None else None


def decode_with(decoder: RecordDecoder, value: bytes | None) -> DecodedPayload:
    """``value`` decoded with ``decoder`` (a pipeline's, ``pipeline_formats``, which a caller decoding many
    dead letters of one pipeline gets once; or a topic's, ``pipelines.formats.topic_decoder``). Never
    raises: what went wrong is ``error``."""
    try:
        decoded = decoder.decode(value)
        text = decoded.text().encode()
    except DecodeError as exc:
        return DecodedPayload(decoder.format, None, None, (), exc.reason)
    except PipelineHalt as exc:
        return DecodedPayload(
            decoder.format, None, None, (), f"the schema registry cannot answer: {exc.detail}"
        )
    return DecodedPayload(decoder.format, text, decoded.schema, decoded.message_indexes, "")


def stored_fix(dead_letter: DeadLetter, value: bytes, *, version: int | None = None) -> bytes:
    """What a fix of ``dead_letter`` to ``value`` stores. For a registry-format pipeline, ``value`` is the
    operator's JSON, framed with the original payload's writer schema, or with ``version`` of its subject
    when the registry finds that version compatible (``PipelineFormats.encode_like``); when the original
    did not decode (an unknown schema id, a body its schema cannot read), with the latest schema of the
    source topic's subject (``<topic>-value``). A value that is already Confluent-framed (magic byte 0,
    which no JSON text starts with) is stored as it is. Unchanged for a ``json`` pipeline.

    Raises ``InvalidRequest`` on ``value`` (does not fit the schema, naming the field) or on
    ``schema_version`` (no such version, not compatible), ``errors.RegistryUnavailable``."""
    found = pipeline_formats(dead_letter)
    formats = found if found is not None and found.reads_registry else None
    if formats is None or value[:1] == b"\x00":
        if version is not None and formats is None:
            raise InvalidRequest("schema_version", "the pipeline reads JSON: there is no schema to choose")
        return value
    original = bytes(dead_letter.value) if dead_letter.value is not None else None
    try:
        try:
            decoded = formats.decode(original)
            schema, indexes = decoded.schema, decoded.message_indexes
        except DecodeError:
            schema, indexes = _latest_of_source(formats, dead_letter.source_topic), ()
            if schema.schema_type == "PROTOBUF":
                indexes = (0,)
        framed, _used = formats.encode_like(schema, indexes, value, version=version)
    except SchemaValidation as exc:
        raise InvalidRequest("value", f"does not fit schema {schema.schema_id}: {exc}") from None
    except RegistryUnreachable as exc:
        raise RegistryUnavailable(str(exc)) from None
    except ValueError as exc:
        raise InvalidRequest("schema_version", str(exc)) from None
    return framed


def _latest_of_source(formats: PipelineFormats, topic: str) -> RegisteredSchema:
    assert formats.decoder is not None
    subject = default_subject(topic)
    try:
        return formats.decoder.registry.latest(subject)
    except RegistryRejected as exc:
        raise InvalidRequest(
            "value",
            f"the original payload does not decode and subject {subject} has no schema to write the fix with: {exc}",
        ) from None
    except RegistryError as exc:
        raise RegistryUnavailable(str(exc)) from None
