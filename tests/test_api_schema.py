"""The OpenAPI schema describes every response: generated without a warning or error, and no operation answers
a bare ``dict`` (an object schema with no properties), so clients generated from it get real types."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


def _is_bare_object(schema: dict[str, Any], components: dict[str, Any]) -> bool:
    if "$ref" in schema:
        return _is_bare_object(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    if schema.get("type") == "array":
        return _is_bare_object(schema.get("items", {}), components)
    composed = any(key in schema for key in ("allOf", "oneOf", "anyOf"))
    return schema.get("type") == "object" and not schema.get("properties") and not composed


def bare_responses(schema: dict[str, Any]) -> list[str]:
    """``METHOD path status`` of every response whose body schema is an object without properties."""
    components = schema.get("components", {}).get("schemas", {})
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status, response in operation.get("responses", {}).items():
                for body in response.get("content", {}).values():
                    if _is_bare_object(body.get("schema", {}), components):
                        found.append(f"{method.upper()} {path} {status}")
    return found


def test_a_bare_dict_response_is_named():
    schema = {
        "paths": {
            "/x/": {
                "get": {
                    "responses": {
                        "200": {
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/X"}}}
                        }
                    }
                }
            }
        },
        "components": {"schemas": {"X": {"type": "object", "additionalProperties": {}}}},
    }
    assert bare_responses(schema) == ["GET /x/ 200"]


def test_the_schema_is_generated_without_warnings_and_types_every_response():
    GENERATOR_STATS.reset()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert not GENERATOR_STATS, (
        f"schema generation warned: {dict(GENERATOR_STATS._warn_cache)} {dict(GENERATOR_STATS._error_cache)}"
    )
    assert bare_responses(schema) == []
