"""Which DSL forms the Spark compilation runs as Python UDFs: the one predicate both the compiler
(:mod:`pipelines.dsl.spark`) and spec validation (:mod:`pipelines.spec`, the ``low_latency`` rule) use.

A form needs Python when Spark's built-in functions cannot give the evaluator's result:

- ``HASH`` with ``MURMUR64`` / ``MURMUR128`` (transform or key_transform): Spark has no 64/128-bit Murmur3;
- ``CACHE_LOOKUP`` / ``CACHE_PUT``: they call a key-value store;
- ``STRING:REGEX_REPLACE`` in ``passthrough`` mode with a pattern that can match the empty string: Rust's
  regex (StreamForge's behaviour) skips an empty match right after a match, Java's does not.

Spark's real-time mode refuses Python operators, so a ``low_latency`` pipeline may use none of these
(DESIGN.md "Delivery modes"). Plain Python: no pyspark, no Django.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from pipelines.dsl import ast
from pipelines.dsl.evaluate import DestinationSpec, ErrorHandling

__all__ = ["PythonForm", "can_match_empty", "hash_needs_python", "python_forms", "regex_replace_needs_python"]

_PYTHON_HASHES = frozenset({"MURMUR64", "MURMUR128"})


def hash_needs_python(algorithm: str) -> bool:
    """True for the hash algorithms Spark has no built-in for (``MURMUR64``, ``MURMUR128``)."""
    return algorithm in _PYTHON_HASHES


def can_match_empty(pattern: str) -> bool:
    """Can this (Python-syntax) regular expression match the empty string? True when unsure (a pattern
    CPython's parser does not read): the UDF then gives the evaluator's answer in every case."""
    try:
        parsed = importlib.import_module("re._parser").parse(pattern)  # CPython's regex parser
        return bool(parsed.getwidth()[0] == 0)
    except Exception:
        return True


def regex_replace_needs_python(pattern: str, *, passthrough: bool) -> bool:
    """``STRING:REGEX_REPLACE`` runs in Python in ``passthrough`` mode when the pattern can match empty."""
    return passthrough and can_match_empty(pattern)


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
        case ast.StringRegexReplace(pattern=pattern) if regex_replace_needs_python(
            pattern, passthrough=passthrough
        ):
            return [(node, "its pattern can match the empty string in passthrough mode")]
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
