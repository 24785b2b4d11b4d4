"""The pipeline editor's structured form: every spec field as one input named by its dotted spec path
(``source.topics``, ``destinations.1.filter``), to and from spec JSON.

Because an input's name is its spec path, the field errors of ``pipelines.spec.SpecError`` land beside the
input they concern with no mapping table. Blank inputs are left out of the spec, so ``parse_spec`` fills in
its defaults; text that should be a number but is not is passed through as text, so ``parse_spec`` reports
it on that field. No Django here beyond the ``Mapping`` of submitted values (a QueryDict is one).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pipelines.spec import COMMIT_KINDS, DELIVERY_MODES, DESTINATION_KEYS
from streamforge_core import json_depth
from streamforge_core.record_formats import FORMATS
from streamforge_core.text import UNENCODABLE, unencodable_path

#: The input that says which editor the draft comes from: the structured ``form`` or the ``json`` textarea.
MODE_FIELD = "spec_mode"
JSON_FIELD = "spec_json"
#: The DSL parser behind each kind of expression input (``/api/dsl/validate/`` takes these kinds).
DslKind = Literal["filter", "transform", "key_transform", "header_transform", "timestamp"]
Widget = Literal["text", "number", "select", "checkbox", "textarea", "dsl", "pairs"]


@dataclass
class EditorField:
    """One input of the editor: ``name`` is the dotted spec path, ``value`` the text shown, ``errors`` the
    problems ``parse_spec`` (or the form itself) found at that path or below it."""

    name: str
    label: str
    widget: Widget
    value: str = ""
    help: str = ""
    choices: tuple[str, ...] = ()
    dsl_kind: DslKind | None = None
    placeholder: str = ""
    errors: list[str] = field(default_factory=list)


@dataclass
class EditorSection:
    """A titled group of inputs (source, delivery, one destination ...)."""

    title: str
    fields: list[EditorField]


def _source_and_policy_fields() -> list[EditorSection]:
    return [
        EditorSection(
            "Source",
            [
                EditorField(
                    "source.topics", "Topics", "text", help="Kafka topics to read, separated by commas"
                ),
                EditorField(
                    "source.starting_offsets",
                    "Starting offsets",
                    "select",
                    choices=("earliest", "latest"),
                    help="where a new pipeline starts; a restart resumes from its checkpoint",
                ),
                EditorField(
                    "source.consumer_group",
                    "Consumer group",
                    "text",
                    help="blank: streamforge-<pipeline name>; offsets are committed here for lag tools",
                ),
                EditorField(
                    "source.max_record_bytes", "Largest record (bytes)", "number", placeholder="1048576"
                ),
                EditorField(
                    "source.format",
                    "Record format",
                    "select",
                    choices=FORMATS,
                    help="avro, protobuf, json_schema: Confluent-framed, decoded through the cluster's schema "
                    "registry with each record's own writer schema; the DSL sees the decoded record as JSON",
                ),
            ],
        ),
        EditorSection(
            "Delivery",
            [
                EditorField("delivery.mode", "Delivery mode", "select", choices=DELIVERY_MODES),
                EditorField(
                    "delivery.commit_strategy.kind",
                    "Commit strategy",
                    "select",
                    choices=COMMIT_KINDS,
                    help="batch: up to N records per micro-batch; time: a trigger every interval; low_latency: "
                    "Spark real-time mode, at_least_once only, no Python-only DSL forms, record timestamps "
                    "CURRENT (Kafka auto-commit is refused: it guarantees nothing)",
                ),
                EditorField(
                    "delivery.commit_strategy.max_records",
                    "Records per micro-batch",
                    "number",
                    placeholder="20000 (not used by low_latency)",
                ),
                EditorField(
                    "delivery.commit_strategy.interval_ms",
                    "Interval (ms)",
                    "number",
                    help="time: the trigger interval; low_latency: the real-time batch duration (at least "
                    "5000, the default): offsets are committed and progress published once per batch; a "
                    "longer one pauses the flow less often (a lower p99) but reports less often and writes "
                    "more records again after a crash",
                ),
            ],
        ),
        EditorSection(
            "Retries of transient produce failures",
            [
                EditorField(
                    "retry.max_attempts",
                    "Attempts",
                    "number",
                    help="then RetryExhausted to the DLQ",
                    placeholder="5",
                ),
                EditorField("retry.initial_delay_ms", "First delay (ms)", "number", placeholder="100"),
                EditorField("retry.max_delay_ms", "Largest delay (ms)", "number", placeholder="10000"),
                EditorField("retry.multiplier", "Backoff multiplier", "number", placeholder="2.0"),
                EditorField(
                    "retry.jitter",
                    "Jitter (fraction)",
                    "number",
                    help="0.2 spreads each delay by +/-20%",
                    placeholder="0.2",
                ),
            ],
        ),
        EditorSection(
            "Dead-letter queue",
            [
                EditorField("dlq.topic", "DLQ topic", "text", help="blank: <first source topic>.dlq"),
                EditorField(
                    "dlq.include_original_headers", "Keep the original headers", "checkbox", value="1"
                ),
                EditorField("dlq.include_stack_trace", "Add a stack trace header", "checkbox"),
                EditorField(
                    "dlq.max_dlq_retries",
                    "DLQ write attempts",
                    "number",
                    help="then the pipeline halts",
                    placeholder="5",
                ),
            ],
        ),
        EditorSection(
            "Error handling",
            [
                EditorField(
                    "error_handling.missing_field_behavior",
                    "A transform's path is missing",
                    "select",
                    choices=("error", "passthrough", "null"),
                    help="error: to the DLQ; passthrough: unchanged (StreamForge); null: the field is null",
                ),
                EditorField(
                    "error_handling.null_value_behavior",
                    "A present JSON null",
                    "select",
                    choices=("passthrough", "error"),
                ),
            ],
        ),
    ]


def destination_fields(index: int | str) -> list[EditorField]:
    """The inputs of destination ``index`` (``"__i__"`` for the blank template the page clones)."""
    p = f"destinations.{index}"
    return [
        EditorField(f"{p}.name", "Name", "text", help="1-63 lowercase letters, digits, '-' or '_'"),
        EditorField(f"{p}.topic", "Topic", "text"),
        EditorField(f"{p}.filter", "Filter", "dsl", dsl_kind="filter", help="blank: every record"),
        EditorField(
            f"{p}.transform", "Transform", "dsl", dsl_kind="transform", help="blank: value unchanged"
        ),
        EditorField(
            f"{p}.key_transform", "Key", "dsl", dsl_kind="key_transform", help="blank: key unchanged"
        ),
        EditorField(f"{p}.headers", "Static headers", "pairs", help="one per line: name: value"),
        EditorField(
            f"{p}.header_transforms",
            "Header transforms",
            "pairs",
            dsl_kind="header_transform",
            help="one per line: name: FROM:/path | COPY:other | REMOVE",
        ),
        EditorField(f"{p}.timestamp", "Timestamp", "dsl", dsl_kind="timestamp", placeholder="PRESERVE"),
        EditorField(
            f"{p}.format",
            "Write as",
            "select",
            choices=FORMATS,
            help="a registry format encodes the transformed record with the subject's latest schema; "
            "a record that does not fit goes to the DLQ as SchemaValidation",
        ),
        EditorField(f"{p}.subject", "Subject", "text", help="registry formats only; blank: <topic>-value"),
    ]


# ----------------------------------------------------------------------------------------- form -> spec


class FormErrors(dict[str, list[str]]):
    """Problems of the form itself (a header line without ``name: value``), keyed like spec errors."""

    def add(self, path: str, message: str) -> None:
        self.setdefault(path, []).append(message)


def _number(text: str, kind: type[int] | type[float]) -> int | float | str:
    try:
        return kind(text)
    except ValueError:
        return text  # parse_spec reports "must be an integer" on this field


def _pairs(text: str, path: str, errors: FormErrors) -> dict[str, str]:
    result: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.strip().partition(": ")
        if not sep:
            name, sep, value = line.strip().partition(":")
            if not sep or value:  # "name:value" is ambiguous with expressions like FROM:/path
                errors.add(path, f"line {number}: write it as 'name: value' (a colon and a space)")
                continue
        result[name.strip()] = value.strip()
    return result


def _put(target: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value


def _destination_indexes(data: Mapping[str, str]) -> list[int]:
    indexes: set[int] = set()
    for key in data:
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "destinations" and parts[1].isdigit():
            indexes.add(int(parts[1]))
    return sorted(indexes)


def spec_from_form(data: Mapping[str, str]) -> tuple[dict[str, Any], FormErrors]:
    """The spec JSON a submitted editor describes, and the form's own errors (keyed by spec path).

    ``data`` maps input names to text (a QueryDict gives the last value of each). In JSON mode the spec is
    the ``spec_json`` textarea (an error at ``spec`` when it is not a JSON object). Destinations are taken
    in index order and renumbered from 0, so a removed one leaves no hole.
    """
    errors = FormErrors()
    if data.get(MODE_FIELD) == "json":
        try:
            parsed = json_depth.loads(data.get(JSON_FIELD) or "")
        except ValueError as exc:  # JsonTooDeep is one: json.loads would raise RecursionError instead
            errors.add("spec", f"not valid JSON: {exc}")
            return {}, errors
        if not isinstance(parsed, dict):
            errors.add("spec", "must be a JSON object")
            return {}, errors
        if (bad := unencodable_path(parsed)) is not None:
            # JSON escapes can spell text no page or database can hold: refuse it before it is shown again.
            errors.add(bad if bad != "non_field_errors" else "spec", UNENCODABLE)
            return {}, errors
        return parsed, errors

    spec: dict[str, Any] = {}
    for section in _source_and_policy_fields():
        for item in section.fields:
            text = (data.get(item.name) or "").strip()
            if item.widget == "checkbox":
                _put(spec, item.name, item.name in data and text not in ("", "0", "false"))
            elif not text:
                continue
            elif item.name == "source.topics":
                _put(spec, item.name, [t.strip() for t in text.replace("\n", ",").split(",") if t.strip()])
            elif item.widget == "number":
                kind = float if item.name in ("retry.multiplier", "retry.jitter") else int
                _put(spec, item.name, _number(text, kind))
            else:
                _put(spec, item.name, text)
    destinations: list[dict[str, Any]] = []
    for new_index, old_index in enumerate(_destination_indexes(data)):
        raw: dict[str, Any] = {}
        for key in DESTINATION_KEYS:
            text = data.get(f"destinations.{old_index}.{key}") or ""
            if key in ("headers", "header_transforms"):
                pairs = _pairs(text, f"destinations.{new_index}.{key}", errors)
                if pairs:
                    raw[key] = pairs
            elif text.strip():
                # Expressions keep inner spaces (a REGEX pattern or a literal may hold them), not outer ones.
                raw[key] = text.strip()
        destinations.append(raw)
    spec["destinations"] = destinations
    return spec, errors


# ----------------------------------------------------------------------------------------- spec -> form


def _text_of(value: Any, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else ""
    if isinstance(value, list) and name == "source.topics":
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def _lookup(spec: Mapping[str, Any], path: str) -> Any:
    value: Any = spec
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _attach(
    fields: Iterable[EditorField], spec: Mapping[str, Any], errors: Mapping[str, list[str]], used: set[str]
) -> None:
    for item in fields:
        value = _lookup(spec, item.name)
        if value is not None:  # else the field keeps its preset, the spec's default (a checked box)
            item.value = _text_of(value, item.name)
        for path, messages in errors.items():
            if path == item.name or path.startswith(item.name + "."):
                item.errors.extend(messages)
                used.add(path)


@dataclass
class EditorLayout:
    """Everything the editor template renders: the policy sections, one field list per destination, the
    blank destination template, the spec as JSON text, and the errors that belong to no input."""

    sections: list[EditorSection]
    destinations: list[list[EditorField]]
    destination_template: list[EditorField]
    spec_json: str
    other_errors: dict[str, list[str]]


def editor_layout(spec: Mapping[str, Any], errors: Mapping[str, list[str]] | None = None) -> EditorLayout:
    """Fill every input from ``spec`` (a draft, possibly invalid) and place ``errors`` beside their inputs.

    Errors whose path names no input (``destinations`` when there are none, ``spec`` for bad JSON) are
    returned in ``other_errors`` for the top of the page.
    """
    errors = errors or {}
    used: set[str] = set()
    sections = _source_and_policy_fields()
    for section in sections:
        _attach(section.fields, spec, errors, used)
    raw_destinations = spec.get("destinations")
    count = len(raw_destinations) if isinstance(raw_destinations, list) else 0
    destinations = []
    for index in range(max(count, 1)):
        fields = destination_fields(index)
        _attach(fields, spec, errors, used)
        destinations.append(fields)
    return EditorLayout(
        sections=sections,
        destinations=destinations,
        destination_template=destination_fields("__i__"),
        spec_json=json.dumps(spec, indent=2, ensure_ascii=False),
        other_errors={path: messages for path, messages in errors.items() if path not in used},
    )


def default_draft() -> dict[str, Any]:
    """What a new pipeline's editor starts from: the spec defaults shown explicitly, one empty destination."""
    return {
        "source": {"topics": [], "starting_offsets": "earliest"},
        "destinations": [{}],
        "delivery": {"mode": "at_least_once", "commit_strategy": {"kind": "batch"}},
        "dlq": {"include_original_headers": True, "include_stack_trace": False},
        "error_handling": {"missing_field_behavior": "error", "null_value_behavior": "passthrough"},
    }


def messages_from_text(text: str) -> list[dict[str, Any]]:
    """Sample messages for a dry run from what an operator pasted: a JSON array of sample-message objects
    (``{"value": ..., "key": ..., "headers": {...}, "timestamp": ms}``, the API shape), else one message per
    non-empty line whose text is the record value as written (so invalid JSON can be tried too)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            parsed = json_depth.loads(stripped)
        except ValueError:  # too deep too: then each line is a value, which the dry run reports on
            parsed = None
        if isinstance(parsed, list) and all(isinstance(m, dict) for m in parsed):
            return parsed
    return [{"value": line} for line in text.splitlines() if line.strip()]
