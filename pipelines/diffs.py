"""A revision's unified diff, line by line, classified for display (the pipeline page's history and the DLQ
console's revision comparison both show one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DiffLineKind = Literal["add", "remove", "hunk", "file", "same"]


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff and how to colour it: ``add``, ``remove``, ``hunk``, ``file`` or ``same``."""

    kind: DiffLineKind
    text: str


def diff_lines(diff: str) -> list[DiffLine]:
    """A revision's unified diff, line by line, classified for display."""
    lines = []
    for line in diff.splitlines():
        kind: DiffLineKind
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "remove"
        else:
            kind = "same"
        lines.append(DiffLine(kind, line))
    return lines
