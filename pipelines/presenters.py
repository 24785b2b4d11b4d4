"""Pipeline specs laid out for reading on the pipeline page: each DSL expression as an indented outline,
each destination of a revision with its expressions outlined. Pure presentation: no queries, no Django."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipelines import dsl
from pipelines.dsl import ast
from pipelines.spec import PipelineSpec

#: The deepest indentation static/css/app.css draws (``.dsl-depth-1`` ... ``.dsl-depth-12``); deeper lines
#: are drawn at this level (their text still reads in order).
MAX_INDENT = 12


@dataclass(frozen=True)
class OutlineLine:
    """One line of an expression laid out as a tree: ``depth`` levels of indentation, then ``text``."""

    depth: int
    text: str

    @property
    def indent(self) -> int:
        """The indentation level drawn: ``depth``, up to the deepest level the stylesheet has a class for."""
        return min(self.depth, MAX_INDENT)


_PARSERS: dict[str, Callable[[str], Any]] = {
    "filter": dsl.parse_filter,
    "transform": dsl.parse_transform,
    "key_transform": dsl.parse_key_transform,
    "header_transform": dsl.parse_header_transform,
    "timestamp": dsl.parse_timestamp,
}


def _outline(node: Any, depth: int, out: list[OutlineLine]) -> None:
    if isinstance(node, ast.And | ast.Or):
        out.append(OutlineLine(depth, "all of:" if isinstance(node, ast.And) else "any of:"))
        for condition in node.conditions:
            _outline(condition, depth + 1, out)
    elif isinstance(node, ast.Not):
        out.append(OutlineLine(depth, "not:"))
        _outline(node.condition, depth + 1, out)
    elif isinstance(node, ast.Construct):
        out.append(OutlineLine(depth, "a new object:"))
        for name, path in node.fields:
            out.append(OutlineLine(depth + 1, f"{name} = {path.text}"))
    elif isinstance(node, ast.Try):
        out.append(OutlineLine(depth, "try:"))
        _outline(node.inner, depth + 1, out)
        out.append(OutlineLine(depth, f"else: {node.fallback_text}"))
    else:
        out.append(OutlineLine(depth, node.render()))


def dsl_outline(kind: str, expr: str) -> list[OutlineLine]:
    """``expr`` (a ``kind`` expression: filter, transform, key_transform, header_transform, timestamp) as
    an indented tree: AND/OR/NOT and CONSTRUCT/TRY are broken into one line per part, the rest is shown as
    written. An expression that does not parse (a saved spec never holds one) is shown as written."""
    try:
        node = _PARSERS[kind](expr)
    except dsl.DslParseError:
        return [OutlineLine(0, expr)]
    out: list[OutlineLine] = []
    _outline(node, 0, out)
    return out


@dataclass(frozen=True)
class DestinationView:
    """One destination of a revision, for reading: each expression as an outline (None when not set)."""

    name: str
    topic: str
    filter: list[OutlineLine] | None
    transform: list[OutlineLine] | None
    key_transform: list[OutlineLine] | None
    headers: dict[str, str]
    header_transforms: list[tuple[str, list[OutlineLine]]]
    timestamp: str


def destination_views(spec: PipelineSpec) -> list[DestinationView]:
    """The destinations of a validated spec (``PipelineRevision.parsed``), laid out for reading."""
    return [
        DestinationView(
            name=d.name,
            topic=d.topic,
            filter=dsl_outline("filter", d.filter) if d.filter else None,
            transform=dsl_outline("transform", d.transform) if d.transform else None,
            key_transform=dsl_outline("key_transform", d.key_transform) if d.key_transform else None,
            headers=dict(d.headers),
            header_transforms=[
                (name, dsl_outline("header_transform", expr)) for name, expr in d.header_transforms.items()
            ],
            timestamp=d.timestamp or "PRESERVE",
        )
        for d in spec.destinations
    ]
