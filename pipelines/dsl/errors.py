"""Errors raised by the DSL parser and evaluator.

``error_type`` is the StreamForge error-type name (see DESIGN.md): the driver copies it into the
``x-streamforge-error-type`` DLQ header, so it is part of the contract.
"""

from __future__ import annotations

__all__ = ["EVALUATION_ERROR_TYPES", "DslError", "DslParseError", "EvaluationError"]

EVALUATION_ERROR_TYPES = frozenset(
    {"MessageDeserialization", "FilterEvaluation", "TransformEvaluation", "JsonPathNotFound"}
)


class DslError(Exception):
    """Base class of every DSL error; ``error_type`` names the StreamForge error type."""

    error_type: str = "DslError"


class DslParseError(DslError):
    """An expression that does not parse: refused at save time, never run.

    ``position`` is the 0-based character offset into ``expr`` where the problem is
    (``len(expr)`` when something is missing at the end).
    """

    error_type = "DslParse"

    def __init__(self, expr: str, position: int, message: str) -> None:
        self.expr = expr
        self.position = position
        self.message = message
        super().__init__(f"DslParse at {position}: {message} in {expr!r}")

    def __reduce__(self) -> tuple[type[DslParseError], tuple[str, int, str]]:
        return (DslParseError, (self.expr, self.position, self.message))


class EvaluationError(DslError):
    """A message-level failure: the message goes to the DLQ with ``error_type``.

    ``error_type`` is one of ``MessageDeserialization``, ``FilterEvaluation``,
    ``TransformEvaluation``, ``JsonPathNotFound``.
    """

    def __init__(self, error_type: str, message: str) -> None:
        if error_type not in EVALUATION_ERROR_TYPES:
            raise ValueError(f"unknown evaluation error type {error_type!r}")
        self.error_type = error_type
        self.message = message
        super().__init__(f"{error_type}: {message}")

    def __reduce__(self) -> tuple[type[EvaluationError], tuple[str, str]]:
        return (EvaluationError, (self.error_type, self.message))
