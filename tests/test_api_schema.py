"""The OpenAPI schema describes every response: generated without a warning or error, and no operation answers
a bare ``dict`` (an object schema with no properties), so clients generated from it get real types."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import pytest
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

from streamforge_web.openapi import path_key

pytestmark = pytest.mark.django_db


def _is_bare_object(schema: dict[str, Any], components: dict[str, Any]) -> bool:
    if "$ref" in schema:
        return _is_bare_object(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    if schema.get("type") == "array":
        return _is_bare_object(schema.get("items", {}), components)
    composed = any(key in schema for key in ("allOf", "oneOf", "anyOf"))
    # A map of typed values (``{field: [reason]}``) is typed; ``additionalProperties: {}`` is not.
    typed_map = bool(schema.get("additionalProperties"))
    return schema.get("type") == "object" and not schema.get("properties") and not composed and not typed_map


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


# --- every status documented, nothing internal, a way back to the app (issue #30 item 10) ----------------

#: Names of the code that must not reach a client: module paths and the framework's class-name suffixes.
INTERNAL = re.compile(
    r"\b(?:dlq|pipelines|access|notifications|streamforge_\w+)\.[a-z_]+\b|\w+(?:Serializer|ViewSet|Mixin)\b"
)
#: ``status.HTTP_409_CONFLICT`` and the like in a handler's source: statuses it answers itself.
STATUS_IN_CODE = re.compile(r"HTTP_(\d{3})_")


def _handler(view: Any, method: str) -> Any:
    actions = getattr(view, "actions", None)
    name = actions.get(method.lower()) if actions else method.lower()
    return getattr(view.cls, name, None)


def schema_defects(schema: dict[str, Any], endpoints: list[tuple[str, str, str, Any]]) -> list[str]:
    """Each defect of the schema as a line: a status a handler answers that its operation does not document,
    a refusal without a body, a mutation without 403, a path with a parameter without 404, a body taking
    ``idempotency_key`` without the ``Idempotency-Key`` header, a ``format`` parameter (DRF's suffix, not an
    API feature), a description naming the code, and no link back to the app."""
    found = []
    if not schema.get("externalDocs", {}).get("url"):
        found.append("no externalDocs link back to the app")
    handlers = {
        (path_key(path), method.lower()): _handler(view, method) for path, _r, method, view in endpoints
    }
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            where = f"{method.upper()} {path}"
            responses = op.get("responses", {})
            handler = handlers.get((path_key(path), method))
            if handler is not None:
                for code in sorted(set(STATUS_IN_CODE.findall(inspect.getsource(handler)))):
                    if code not in responses:
                        found.append(f"{where}: answers {code}, undocumented")
            for code, response in responses.items():
                if code[0] == "4" and "content" not in response:
                    found.append(f"{where}: {code} without a body")
            if method != "get" and "403" not in responses:
                found.append(f"{where}: no 403")
            if "{" in path and "404" not in responses:
                found.append(f"{where}: no 404")
            params = op.get("parameters", [])
            body = json.dumps(op.get("requestBody", {})) + json.dumps(
                schema.get("components", {}).get("schemas", {}).get(_body_ref(op), {})
            )
            header = any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in params)
            if "idempotency_key" in body and not header:
                found.append(f"{where}: no Idempotency-Key header parameter")
            if any(p["name"] == "format" for p in params):
                found.append(f"{where}: a stray format parameter")
            for text in _descriptions(op):
                if INTERNAL.search(text):
                    found.append(f"{where}: names the code: {INTERNAL.search(text).group(0)}")  # type: ignore[union-attr]
    paths = {path_key(p) for p in schema["paths"]}
    for where, example in _examples(schema):
        if isinstance(example, str) and example.startswith(("http://", "https://", "/")):
            target = "/" + example.split("://", 1)[-1].partition("/")[2] if "://" in example else example
            if path_key(target.partition("?")[0]) not in paths:
                found.append(f"{where}: example {example} is not this API")
    for name, component in schema.get("components", {}).get("schemas", {}).items():
        for text in _descriptions(component):
            if INTERNAL.search(text):
                found.append(f"component {name}: names the code: {INTERNAL.search(text).group(0)}")  # type: ignore[union-attr]
    return found


def _examples(node: Any, where: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        found = (
            [(where, node["example"])] if "example" in node and not isinstance(node["example"], dict) else []
        )
        return found + [e for k, v in node.items() if k != "example" for e in _examples(v, f"{where}/{k}")]
    if isinstance(node, list):
        return [e for item in node for e in _examples(item, where)]
    return []


def _body_ref(operation: dict[str, Any]) -> str:
    for body in operation.get("requestBody", {}).get("content", {}).values():
        return str(body.get("schema", {}).get("$ref", "")).rsplit("/", 1)[-1]
    return ""


def _descriptions(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [
            *([node["description"]] if isinstance(node.get("description"), str) else []),
            *[t for k, v in node.items() if k != "description" for t in _descriptions(v)],
        ]
    if isinstance(node, list):
        return [t for item in node for t in _descriptions(item)]
    return []


def test_the_walker_names_each_class_of_defect():
    """A schema with one of each defect gives one line each (the walker is not blind to any)."""
    operation = {
        "description": "See ``dlq.services.replays`` (ReplaySerializer).",
        "parameters": [{"name": "format", "in": "query", "schema": {"type": "string"}}],
        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/R"}}}},
        "responses": {
            "200": {
                "description": "ok",
                "content": {"a/b": {"schema": {"example": "http://api.example.org/x/"}}},
            },
            "400": {"description": "bad"},
        },
    }
    schema = {
        "paths": {"/x/{id}/": {"post": operation}},
        "components": {"schemas": {"R": {"properties": {"idempotency_key": {"type": "string"}}}}},
    }
    defects = schema_defects(schema, [])
    assert defects[:-1] == [
        "no externalDocs link back to the app",
        "POST /x/{id}/: 400 without a body",
        "POST /x/{id}/: no 403",
        "POST /x/{id}/: no 404",
        "POST /x/{id}/: no Idempotency-Key header parameter",
        "POST /x/{id}/: a stray format parameter",
        "POST /x/{id}/: names the code: dlq.services",
    ]
    assert defects[-1].endswith("example http://api.example.org/x/ is not this API")


def test_the_schema_documents_every_status_and_names_no_code():
    """On the real schema: every status a handler answers is documented with a body, the DLQ's 409 with its
    ``would_fail`` list, the replay's ``Idempotency-Key`` header, and a link back to the app."""
    generator = SchemaGenerator()
    schema = generator.get_schema(request=None, public=True)
    assert schema_defects(schema, generator.endpoints) == []
    replay = schema["paths"]["/api/dlq/messages/{id}/replay/"]["post"]
    conflict = replay["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert "would_fail" in schema["components"]["schemas"][conflict]["properties"]
    assert {"name": "Idempotency-Key", "in": "header"}.items() <= next(
        p for p in replay["parameters"] if p["name"] == "Idempotency-Key"
    ).items()
