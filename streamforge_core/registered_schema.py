"""What the registry client hands the codecs: one registered schema and the schemas it references
(``streamforge_core.schema_registry``'s two dataclasses, re-exported so the codecs and their callers import
one small module, not the registry client's HTTP stack)."""

from __future__ import annotations

from streamforge_core.schema_registry import Reference, RegisteredSchema

__all__ = ["Reference", "RegisteredSchema"]
