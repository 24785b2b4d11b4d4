"""The few DSL forms Spark's built-in functions cannot express, as Python UDFs calling the evaluator.

Forms compiled to a UDF (everything else in :mod:`pipelines.dsl.spark` is built-in):

- ``HASH:MURMUR64`` / ``HASH:MURMUR128`` (transform and key): StreamForge's MurmurHash3 x64_128
  layout (:func:`pipelines.dsl.hashing.hex_digest`); Spark only has 32-bit Murmur3 and xxHash64.
- ``CACHE_LOOKUP`` / ``CACHE_PUT``: they need a key-value store (Redis in production). The store
  comes from a ``store_factory`` (a picklable callable returning a
  :class:`~pipelines.dsl.evaluate.KeyValueStore`), called once per Python worker task.

(The regex forms run in the JVM on RE2/J: :data:`pipelines.dsl.spark.REGEX_FUNCTIONS`.)

The UDFs are Arrow-optimized when pandas and pyarrow are installed, else plain pickled Python
UDFs (both are batched; ``python -m bench.dsl_udfs`` measures their cost).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from pipelines.dsl import ast
from pipelines.dsl.errors import EvaluationError
from pipelines.dsl.evaluate import (
    ErrorHandling,
    KeyValueStore,
    apply_transform,
    decode_json_text,
    serialize_value,
)
from pipelines.dsl.hashing import hex_digest

__all__ = ["USE_ARROW", "cache_transform", "murmur_hex"]

USE_ARROW = importlib.util.find_spec("pyarrow") is not None and importlib.util.find_spec("pandas") is not None

_CACHE_RESULT = StructType(
    [
        StructField("j", StringType(), True),
        StructField("t", StringType(), True),
        StructField("m", StringType(), True),
    ]
)


def _udf(function: Callable[..., Any], return_type: Any) -> Callable[..., Column]:
    return F.udf(function, return_type, useArrow=USE_ARROW)


def murmur_hex(algorithm: str, data: Column) -> Column:
    """Hex digest (string) of ``data`` (binary) for ``MURMUR64``/``MURMUR128``; NULL stays NULL."""

    def digest(raw: bytes | bytearray | None) -> str | None:
        if raw is None:
            return None
        return hex_digest(algorithm, bytes(raw))

    return _udf(digest, StringType())(data)


def cache_transform(
    node: ast.CacheLookup | ast.CachePut,
    value: Column,
    error_handling: ErrorHandling,
    store_factory: Callable[[], KeyValueStore] | None,
) -> Column:
    """A ``CACHE_LOOKUP``/``CACHE_PUT`` transform result struct ``<v, j, t, m>`` (see
    :func:`pipelines.dsl.spark.compile_transform`), computed by ``evaluate.apply_transform``.

    Without ``store_factory`` the form fails with ``TransformEvaluation`` like the evaluator
    without a store, and no UDF runs. A ``CACHE_PUT`` may run more than once for a record when
    Spark retries a task; writing the same key and value again is harmless.
    """
    form = "CACHE_LOOKUP" if isinstance(node, ast.CacheLookup) else "CACHE_PUT"
    if store_factory is None:
        return F.struct(
            F.lit(None).cast("variant").alias("v"),
            F.lit(None).cast("string").alias("j"),
            F.lit("TransformEvaluation").alias("t"),
            F.lit(f"{form} needs a key-value store and none is configured").alias("m"),
        )
    stores: list[KeyValueStore] = []

    def run(text: str | None) -> tuple[str | None, str | None, str | None]:
        if text is None:
            return (None, None, None)
        if not stores:
            stores.append(store_factory())
        try:
            result = apply_transform(
                node, decode_json_text(text), error_handling=error_handling, store=stores[0]
            )
            return (serialize_value(result).decode("utf-8"), None, None)
        except EvaluationError as error:
            return (None, error.error_type, error.message)

    out = _udf(run, _CACHE_RESULT)(F.to_json(value))
    return F.struct(
        F.try_parse_json(out["j"]).alias("v"),
        out["j"].alias("j"),
        out["t"].alias("t"),
        out["m"].alias("m"),
    )
