"""The StreamForge filter / transform DSL: parser, typed AST and pure-Python evaluator.

Importable without Django or pyspark (the Spark driver imports it on cluster nodes).
The contract is /work/shared/DSL.md; see :mod:`pipelines.dsl.evaluate` for the evaluation rules.
"""

from pipelines.dsl import ast
from pipelines.dsl.ast import (
    Filter,
    HeaderTransform,
    JsonPath,
    KeyTransform,
    TimestampRule,
    Transform,
    render,
)
from pipelines.dsl.errors import DslError, DslParseError, EvaluationError
from pipelines.dsl.evaluate import (
    JSON,
    DestinationSpec,
    DictStore,
    ErrorHandling,
    KeyValueStore,
    Message,
    Outcome,
    apply_transform,
    decode_value,
    evaluate_destination,
    evaluate_destinations,
    evaluate_filter,
    evaluate_header_transform,
    evaluate_key,
    evaluate_timestamp,
    serialize_value,
)
from pipelines.dsl.parser import (
    parse_filter,
    parse_header_transform,
    parse_key_transform,
    parse_timestamp,
    parse_transform,
)

__all__ = [
    "JSON",
    "DestinationSpec",
    "DictStore",
    "DslError",
    "DslParseError",
    "ErrorHandling",
    "EvaluationError",
    "Filter",
    "HeaderTransform",
    "JsonPath",
    "KeyTransform",
    "KeyValueStore",
    "Message",
    "Outcome",
    "TimestampRule",
    "Transform",
    "apply_transform",
    "ast",
    "decode_value",
    "evaluate_destination",
    "evaluate_destinations",
    "evaluate_filter",
    "evaluate_header_transform",
    "evaluate_key",
    "evaluate_timestamp",
    "parse_filter",
    "parse_header_transform",
    "parse_key_transform",
    "parse_timestamp",
    "parse_transform",
    "render",
    "serialize_value",
]
