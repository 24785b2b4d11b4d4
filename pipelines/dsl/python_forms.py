"""Which DSL forms the Spark compilation runs as Python UDFs: the one predicate both the compiler
(:mod:`pipelines.dsl.spark`) and spec validation (:mod:`pipelines.spec`, the ``low_latency`` rule) use.

A form needs Python when Spark's built-in functions cannot give the evaluator's result:

- ``HASH`` with ``MURMUR64`` / ``MURMUR128`` (transform or key_transform): Spark has no 64/128-bit Murmur3;
- ``CACHE_LOOKUP`` / ``CACHE_PUT``: they call a key-value store.

The regex forms (``REGEX:``, ``KEY_MATCHES:``, ``STRING:REGEX_REPLACE``) are not among them: they run in
the JVM on RE2/J (our Java UDFs, :data:`pipelines.dsl.spark.REGEX_FUNCTIONS`), whose replace-all loop
skips an empty match right after a match as Rust's does, in every mode.

Spark's real-time mode refuses Python operators, so a ``low_latency`` pipeline may use none of these
(DESIGN.md "Delivery modes"). Plain Python: no pyspark, no Django.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.dsl import ast
from pipelines.dsl.evaluate import DestinationSpec, ErrorHandling

__all__ = ["PythonForm", "hash_needs_python", "python_forms"]

_PYTHON_HASHES = frozenset({"MURMUR64", "MURMUR128"})


def hash_needs_python(algorithm: str) -> bool:
    """True for the hash algorithms Spark has no built-in for (``MURMUR64``, ``MURMUR128``)."""
    return algorithm in _PYTHON_HASHES


@dataclass(frozen=True)
class PythonForm:
    """One use of a Python-only form: the destination field it is in (``transform`` or ``key_transform``),
    the form as written back (``node.render()``), and why it needs Python."""

    field: str
    form: str
    reason: str


def _transform_forms(node: ast.Transform, *, passthrough: bool) -> list[tuple[ast.Transform, str]]:
    match node:
        case ast.Hash(algorithm=algorithm) if hash_needs_python(algorithm):
            return [(node, f"Spark has no built-in {algorithm} hash")]
        case ast.CacheLookup() | ast.CachePut():
            return [(node, "it calls the key-value store")]
        case ast.Try(inner=inner):
            # The compiler evaluates TRY's inner transform in passthrough mode only when the pipeline is.
            return _transform_forms(inner, passthrough=passthrough)
    return []


def python_forms(dest: DestinationSpec, handling: ErrorHandling) -> list[PythonForm]:
    """Every form of ``dest`` the Spark compilation runs as a Python UDF under ``handling``, in field order
    (transform, then key_transform). Empty when the destination compiles to built-in expressions only.
    Filters, header transforms and timestamp rules never need Python."""
    passthrough = handling.missing_field_behavior == "passthrough"
    found: list[PythonForm] = []
    if dest.transform is not None:
        for node, reason in _transform_forms(dest.transform, passthrough=passthrough):
            found.append(PythonForm("transform", node.render(), reason))
    key = dest.key_transform
    if isinstance(key, ast.KeyHash) and hash_needs_python(key.algorithm):
        found.append(PythonForm("key_transform", key.render(), f"Spark has no built-in {key.algorithm} hash"))
    return found
