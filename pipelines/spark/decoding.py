"""Registry-format sources in the Spark plan: each Confluent-framed value decoded to the JSON text the DSL parses.

A pipeline whose ``source.format`` is ``avro``, ``protobuf`` or ``json_schema`` gets one projection before
the parse (:func:`decode_source`): an Arrow UDF over the ``value`` column that returns, per record, ``j``
(the decoded record as compact JSON text, ``streamforge_core.record_formats.json_text``) and ``e`` (why it
does not decode, for a ``MessageDeserialization`` dead letter). The DSL then reads ``__dx.j`` exactly as it
reads a ``json`` source's value; ``value`` itself stays the original bytes, which DLQ records carry and a
destination without a transform passes on unchanged (``writer.BatchWriter``).

Why a Python UDF and not Spark's ``from_avro``/``from_protobuf``: both take one schema fixed when the query
is planned, while a topic's records name their own writer schema (several versions of a subject, new ones
registered while the pipeline runs), and their Spark types (a union as ``member0``/``member1``, decimals as
numbers, timestamps in the session's zone) are not the JSON mapping the DSL specifies; the measured cost is
in ``bench/FINDINGS.md`` ("Registry formats"). The codecs are the console's, so a dead letter decodes and
would-passes there exactly as here.

A registry that cannot serve raises ``contract.PipelineHalt(Config)`` after ``record_formats.call_registry``'s
backoff (about 31 s): the task fails, the query stops with nothing committed for the batch, the pipeline
halts with the reason (DESIGN.md "Record formats": never dead-letter a topic because the registry is down).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streamforge_core.codec_errors import DecodeError
from streamforge_core.record_formats import RecordDecoder, worker_decoder
from streamforge_core.schema_registry import RegistryConnection

__all__ = ["DECODED", "decode_source", "decoded_json"]

#: The struct column :func:`decode_source` adds: ``j`` the JSON text (null when ``e`` is set), ``e`` the reason.
DECODED = "__dx"
_RESULT_TYPE = "j string, e string"


def decoded_json(decoder: RecordDecoder, values: pa.Array) -> pa.StructArray:
    """``values`` (binary, nulls allowed) decoded one by one: a struct array of ``j``/``e`` (see ``DECODED``).
    Raises ``contract.PipelineHalt`` when the registry cannot serve."""
    texts: list[str | None] = []
    errors: list[str | None] = []
    for value in values.to_pylist():
        try:
            texts.append(decoder.decode_text(value))
            errors.append(None)
        except DecodeError as exc:
            texts.append(None)
            errors.append(exc.reason)
    return pa.StructArray.from_arrays(
        [pa.array(texts, pa.string()), pa.array(errors, pa.string())], names=["j", "e"]
    )


def _decode_udf(connection: RegistryConnection, fmt: str) -> Any:
    def decode(values: pa.Array) -> pa.Array:
        return decoded_json(worker_decoder(connection, fmt), values)

    return F.arrow_udf(decode, _RESULT_TYPE)  # type: ignore[attr-defined]  # pyspark 4.1+, stubs lag


def decoded_columns() -> tuple[Column, Column]:
    """The two columns the DSL plan reads instead of a registry source's raw value, from the ``DECODED``
    struct ``decode_source`` adds: the decoded JSON text as binary (what ``SourceColumns.value`` expects) and
    the decode error (text, null when the record decoded)."""
    return F.col(f"{DECODED}.j").cast("binary"), F.col(f"{DECODED}.e")


def decode_source(
    frame: DataFrame, connection: RegistryConnection, fmt: str
) -> tuple[DataFrame, Column, Column]:
    """``frame`` (Kafka source columns) with the ``DECODED`` struct added, and ``decoded_columns()``."""
    decoded = frame.select("*", _decode_udf(connection, fmt)(F.col("value")).alias(DECODED))
    return decoded, *decoded_columns()
