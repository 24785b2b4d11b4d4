"""The OpenAPI schema's finishing pass (drf-spectacular ``POSTPROCESSING_HOOKS``): what every operation can
answer besides its success, documented once here rather than on each view, so a client generated from the
schema knows every status it must handle (OpenAPI 3.0.3, "Responses Object").

``complete_responses`` adds, where an operation lacks them:

* 400 (``FieldErrors``: ``{field: [reason, ...]}``) to operations taking a body or query parameters;
* 403 (``ErrorDetail``) to operations that are not open to anyone (DRF answers 403 for a missing session and
  for a missing right alike);
* 404 (``ErrorDetail``) to operations on a path with a parameter (the object is not there, or not the
  caller's: the API never says which);
* 409 (``Conflict``: ``detail``, and ``would_fail`` when a replay would fail again) to the mutations of the
  DLQ API, whose services refuse what the object's state does not allow (``dlq.api.views``);
* the ``Idempotency-Key`` request header to the operations whose body takes ``idempotency_key`` (the header
  is its other spelling: the draft standard "The Idempotency-Key HTTP Header Field",
  draft-ietf-httpapi-idempotency-key-header).

A paginated list's ``next`` / ``previous`` examples name that list's own path (DRF's paginators give
``http://api.example.org/accounts/``, which is not this API). It also removes the code's own names from the descriptions the docstrings give (``(``dlq.services.x``)``
asides and the like): they mean nothing to a client and change with the code.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework.permissions import AllowAny

#: Methods that change something.
MUTATIONS = frozenset({"post", "put", "patch", "delete"})
#: An aside naming the code: `` (``module.path``)`` or `` (``ClassName``, ...)``, or a bare ``module.path``.
_CODE_ASIDE = re.compile(r"\s*\(``[A-Za-z_][\w.]*(?:\(\))?``[^()]*\)")
_CODE_NAME = re.compile(r"``([a-z_]+(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")

_SCHEMAS: dict[str, dict[str, Any]] = {
    "ErrorDetail": {
        "type": "object",
        "description": "Why the request was refused, in a sentence.",
        "properties": {"detail": {"type": "string", "example": "You do not have permission to do this."}},
        "required": ["detail"],
    },
    "FieldErrors": {
        "type": "object",
        "description": "Bad input: each refused field (or parameter) with the reasons.",
        "additionalProperties": {"type": "array", "items": {"type": "string"}},
        "example": {"filter": ["unknown field 'sevrity'"]},
    },
    "Conflict": {
        "type": "object",
        "description": (
            "The object's state does not allow this (a dead letter already replayed, an approval already "
            "decided, a running pipeline); ``would_fail`` lists why a replay would fail again, when it would."
        ),
        "properties": {
            "detail": {"type": "string", "example": "dead letter 41 is replayed, not parked"},
            "would_fail": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "destination": {"type": "string"},
                        "error_type": {"type": "string"},
                        "error_message": {"type": "string"},
                    },
                },
            },
        },
        "required": ["detail"],
    },
}

_IDEMPOTENCY_HEADER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Makes a retried request safe: a request with a key already used answers with the first one's "
        "result instead of a conflict (the body's idempotency_key, spelled as a header)."
    ),
    "schema": {"type": "string", "maxLength": 128},
    "example": "7f1c2e9a-replay-41",
}


def _response(name: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


_PARAMETER = re.compile(r"\{[^}]*\}")


def path_key(path: str) -> str:
    """``path`` with its parameters unnamed (``/a/{pk}/`` and the schema's ``/a/{id}/`` are one path)."""
    return _PARAMETER.sub("{}", path)


def _views(generator: Any) -> dict[tuple[str, str], Any]:
    """``(path_key(path), method)`` -> the view class, from the generator's endpoints."""
    found = {}
    for path, _regex, method, view in getattr(generator, "endpoints", None) or []:
        found[(path_key(path), method.lower())] = getattr(view, "cls", view)
    return found


def _takes_idempotency_key(operation: dict[str, Any], schemas: dict[str, Any]) -> bool:
    for body in operation.get("requestBody", {}).get("content", {}).values():
        schema = body.get("schema", {})
        if "$ref" in schema:
            schema = schemas.get(schema["$ref"].rsplit("/", 1)[-1], {})
        if "idempotency_key" in schema.get("properties", {}):
            return True
    return False


def scrub(text: str) -> str:
    """``text`` without asides naming the code (`` (``dlq.services.bulk``)``) and with bare dotted code names
    reduced to their last part."""
    text = _CODE_ASIDE.sub("", text)
    return _CODE_NAME.sub(lambda m: f"``{m.group(1).rsplit('.', 1)[-1]}``", text)


def _scrub_all(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = scrub(value)
            else:
                _scrub_all(value)
    elif isinstance(node, list):
        for item in node:
            _scrub_all(item)


def complete_responses(result: dict[str, Any], generator: Any, **_kwargs: Any) -> dict[str, Any]:
    """The drf-spectacular postprocessing hook (see the module docstring); returns ``result`` changed."""
    from dlq.api.views import ServiceErrorsMixin  # the apps' views, loaded once the schema is generated

    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in _SCHEMAS.items():
        schemas.setdefault(name, schema)
    views = _views(generator)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in MUTATIONS and method != "get":
                continue
            responses = operation.setdefault("responses", {})
            view = views.get((path_key(path), method))
            params = operation.get("parameters", [])
            if "requestBody" in operation or any(p.get("in") == "query" for p in params):
                responses.setdefault("400", _response("FieldErrors", "Bad input, named field by field."))
            open_to_all = view is not None and any(
                p is AllowAny for p in getattr(view, "permission_classes", ())
            )
            if not open_to_all:
                responses.setdefault(
                    "403", _response("ErrorDetail", "Not signed in, or not allowed to do this.")
                )
            if "{" in path:
                responses.setdefault(
                    "404", _response("ErrorDetail", "No such object among those the caller may see.")
                )
            if method in MUTATIONS and view is not None and issubclass(view, ServiceErrorsMixin):
                responses.setdefault("409", _response("Conflict", "The object's state does not allow this."))
            if _takes_idempotency_key(operation, schemas) and not any(
                p.get("name") == "Idempotency-Key" for p in params
            ):
                operation["parameters"] = [*params, dict(_IDEMPOTENCY_HEADER)]
    _paginated_examples(result)
    _scrub_all(result)
    return result


def _paginated_examples(result: dict[str, Any]) -> None:
    """Point each ``Paginated*`` component's ``next``/``previous`` example at the first path answering it."""
    schemas = result.get("components", {}).get("schemas", {})
    answered_by: dict[str, str] = {}
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            for body in operation.get("responses", {}).get("200", {}).get("content", {}).values():
                name = str(body.get("schema", {}).get("$ref", "")).rsplit("/", 1)[-1]
                answered_by.setdefault(name, path)
    for name, component in schemas.items():
        path = answered_by.get(name)
        for link in ("next", "previous"):
            prop = component.get("properties", {}).get(link)
            if not (path and isinstance(prop, dict) and "example" in prop):
                continue
            query = str(prop["example"]).partition("?")[2]
            prop["example"] = f"{path}?{query}"
