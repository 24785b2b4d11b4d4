"""What the registry client hands the codecs: one registered schema and the schemas it references.

A stand-in with the shape agreed for issue #31: the registry part defines the same two dataclasses in
``streamforge_core.schema_registry`` (with the client that fetches them); when both are merged this module
only re-exports those, so codecs and callers import one name either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SchemaType = Literal["AVRO", "PROTOBUF", "JSON"]


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema another one imports (Confluent "schema references"): ``name`` as the referring schema
    names it (an Avro full name, a ``.proto`` import path, a JSON Schema ``$ref`` URL), the ``subject`` and
    ``version`` it is registered under, and its text ``schema_str``."""

    name: str
    subject: str
    version: int
    schema_str: str


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """A schema as the registry returns it for an id: ``schema_id``, ``schema_type`` (the registry's
    ``schemaType``, ``"AVRO"`` when it omits it), the schema text ``schema_str``, its ``references``
    (dependencies first, each already resolved to its text), and the ``subject`` and ``version`` it was
    looked up under (``""``/``0`` when only the id is known)."""

    schema_id: int
    schema_type: SchemaType
    schema_str: str
    references: tuple[Reference, ...] = ()
    subject: str = ""
    version: int = 0
