"""What the registry client hands the codecs: one registered schema and the schemas it references.

A stand-in with exactly the shape of ``streamforge_core.schema_registry``'s two dataclasses (the registry
part of issue #31, on its own branch): when both are merged this module only re-exports those
(``from streamforge_core.schema_registry import Reference, RegisteredSchema``), so the codecs and their
callers import one name either way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    """A schema another one imports (Confluent "schema references"): ``name`` as the referring schema
    names it (an Avro full name, a ``.proto`` import path, a JSON Schema ``$ref`` URL), the ``subject`` and
    ``version`` it is registered under, and its text ``schema_str``."""

    name: str
    subject: str
    version: int
    schema_str: str


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: ``schema_id``, ``schema_type`` (``"AVRO"``, ``"PROTOBUF"`` or
    ``"JSON"``), the schema text ``schema_str``, every schema it ``references`` (transitively, each once,
    dependencies first), and the ``subject``/``version`` the registry says it is registered under (None
    when it does not say)."""

    schema_id: int
    schema_type: str
    schema_str: str
    references: tuple[Reference, ...]
    subject: str | None
    version: int | None
