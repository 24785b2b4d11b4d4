"""The pipeline specification: what one immutable revision configures, validated field by field.

The spec is stored as JSON on ``PipelineRevision`` and handed, as JSON, to the Spark driver, so this module
imports neither Django nor pyspark. ``parse_spec`` turns untrusted JSON into a ``PipelineSpec`` or raises
``SpecError`` carrying every problem at once, keyed by dotted field path (``destinations.1.filter``), so an
API client or a form can show each error beside its field. DSL expressions are parsed here: an expression
that does not parse is refused with its position (error type ``DslParse``) and never reaches a running job.

Shape (defaults in brackets)::

    {
      "source": {"topics": ["in"], "starting_offsets": ["earliest"]|"latest", "consumer_group": [streamforge-<name>],
                 "max_record_bytes": [1048576], "format": ["json"]|"avro"|"protobuf"|"json_schema"},
      "destinations": [{"name": "pushes", "topic": "out", "filter": null, "transform": null, "key_transform": null,
                        "headers": {}, "header_transforms": {}, "timestamp": ["PRESERVE"],
                        "format": ["json"]|"avro"|"protobuf"|"json_schema", "subject": [<topic>-value]}, ...],
      "delivery": {"mode": ["at_least_once"]|"effectively_once"|"at_most_once",
                   "commit_strategy": {"kind": ["batch"], "max_records": [20000]}
                                    | {"kind": "time", "interval_ms": 1000, "max_records": ...}
                                    | {"kind": "low_latency", "interval_ms": 5000}},   (at_least_once only;
                                                                              see _realtime_rules)
      "retry": {"max_attempts": [5], "initial_delay_ms": [100], "max_delay_ms": [10000], "multiplier": [2.0],
                "jitter": [0.2]},
      "dlq": {"topic": [<first source topic>.dlq], "include_original_headers": [true],
              "include_stack_trace": [false], "max_dlq_retries": [5]},
      "error_handling": {"missing_field_behavior": ["error"]|"passthrough"|"null",
                         "null_value_behavior": ["passthrough"]|"error"}
    }

Record formats (DESIGN.md "Record formats"): ``source.format`` other than ``json`` reads Confluent-framed
records through the cluster's schema registry, each with its writer schema; a destination's ``format`` other
than ``json`` writes its transformed records with ``subject``'s latest schema (``subject`` is null for
``json``). A destination without a transform passes a registry-format source record's bytes on unchanged.
Both need a Python worker, so ``low_latency`` refuses them.

Delivery semantics follow the StreamForge delivery-guarantees spec (see ../shared/DESIGN.md): Kafka
auto-commit is refused because it acknowledges records before they are processed, so it guarantees nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, TypeVar, cast

from pipelines.dsl import (
    DestinationSpec,
    DslParseError,
    ErrorHandling,
    parse_filter,
    parse_header_transform,
    parse_key_transform,
    parse_timestamp,
    parse_transform,
)
from pipelines.dsl import ast as dsl_ast
from pipelines.dsl.python_forms import python_forms
from streamforge_core.kafka import topic_name_problem
from streamforge_core.record_formats import FORMATS, default_subject
from streamforge_core.text import UNENCODABLE, unencodable_path

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
HEADER_NAME_RE = re.compile(r"[\x21-\x7e]{1,255}")

DeliveryMode = Literal["at_least_once", "effectively_once", "at_most_once"]
DELIVERY_MODES: tuple[DeliveryMode, ...] = ("at_least_once", "effectively_once", "at_most_once")
COMMIT_KINDS = ("batch", "time", "low_latency")
#: Spark's shortest real-time batch (``spark.sql.streaming.realTimeMode.minBatchDuration``, 5,000 ms in Spark
#: 4.2), and the default of ``low_latency``. A real-time batch is how often the checkpoint advances, the
#: consumer group is committed and progress is published; records flow through whatever it is, except in the
#: pause between two batches (offset and commit logs written, the next batch planned, its tasks launched),
#: so a longer batch puts fewer records in that pause (a lower p99) at the price of rarer progress and more
#: records written again after a crash.
REALTIME_MIN_BATCH_MS = 5_000
REALTIME_DEFAULT_BATCH_MS = REALTIME_MIN_BATCH_MS
DEFAULT_MAX_RECORDS = 20_000


class SpecError(ValueError):
    """The spec is invalid. ``errors`` maps a dotted field path to the list of problems found there."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        summary = "; ".join(f"{path}: {' '.join(messages)}" for path, messages in sorted(errors.items()))
        super().__init__(f"invalid pipeline spec: {summary}")


@dataclass(frozen=True)
class SourceSpec:
    """The Kafka source: topics, where a new pipeline starts, its consumer group, the largest record size."""

    topics: tuple[str, ...]
    starting_offsets: Literal["earliest", "latest"]
    consumer_group: str
    max_record_bytes: int
    #: ``json`` or a registry format (``streamforge_core.record_formats.FORMATS``).
    format: str = "json"

    @property
    def uses_registry(self) -> bool:
        """Do the source's records come Confluent-framed, through the schema registry?"""
        return self.format != "json"


@dataclass(frozen=True)
class DestinationConfig:
    """One destination as written (expressions as text); ``compiled`` gives the parsed DSL form."""

    name: str
    topic: str
    filter: str | None = None
    transform: str | None = None
    key_transform: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    header_transforms: dict[str, str] = field(default_factory=dict)
    timestamp: str = "PRESERVE"
    #: ``json`` or a registry format; ``subject`` (registry formats only) the subject whose latest schema
    #: encodes the records, ``<topic>-value`` by default.
    format: str = "json"
    subject: str | None = None

    def compiled(self) -> DestinationSpec:
        """The DSL destination (parsed trees). Raises DslParseError, which ``parse_spec`` already ruled out."""
        return DestinationSpec(
            name=self.name,
            topic=self.topic,
            filter=parse_filter(self.filter) if self.filter else None,
            transform=parse_transform(self.transform) if self.transform else None,
            key_transform=parse_key_transform(self.key_transform) if self.key_transform else None,
            headers=tuple(self.headers.items()),
            header_transforms=tuple(
                (name, parse_header_transform(expr)) for name, expr in self.header_transforms.items()
            ),
            timestamp=parse_timestamp(self.timestamp),
        )


#: The keys of a destination object, in the order the spec, the editor and the stored JSON list them.
DESTINATION_KEYS: tuple[str, ...] = tuple(f.name for f in fields(DestinationConfig))


@dataclass(frozen=True)
class CommitStrategy:
    """How micro-batches are cut: ``batch`` (at most ``max_records`` per trigger, back to back), ``time``
    (a processing-time trigger every ``interval_ms``), ``low_latency`` (Spark's real-time mode: one
    long-running task per source partition writing through Spark's Kafka sink; ``max_records`` unused;
    ``interval_ms`` is the real-time batch duration, 0 for :data:`REALTIME_DEFAULT_BATCH_MS`)."""

    kind: Literal["batch", "time", "low_latency"]
    max_records: int
    interval_ms: int = 0

    def realtime_batch_ms(self) -> int:
        """The real-time batch duration of ``low_latency`` in milliseconds (``interval_ms``, or the default)."""
        return self.interval_ms or REALTIME_DEFAULT_BATCH_MS


@dataclass(frozen=True)
class DeliverySpec:
    """Delivery mode and commit strategy."""

    mode: DeliveryMode
    commit_strategy: CommitStrategy


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient produce failures: attempt n (1-based) waits
    ``min(max_delay_ms, initial_delay_ms * multiplier**(n-1))`` milliseconds, spread by +/- ``jitter`` (a
    fraction, 0.2 = 20%). After ``max_attempts`` the record is dead-lettered as ``RetryExhausted``."""

    max_attempts: int
    initial_delay_ms: int
    max_delay_ms: int
    multiplier: float
    jitter: float

    def delay_ms(self, attempt: int, unit_random: float) -> float:
        """Wait before retry ``attempt`` (1-based), given a uniform random number in [0, 1)."""
        base = min(float(self.max_delay_ms), self.initial_delay_ms * self.multiplier ** (attempt - 1))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * unit_random - 1.0)))


@dataclass(frozen=True)
class DlqSpec:
    """Where failures go and what they carry."""

    topic: str
    include_original_headers: bool
    include_stack_trace: bool
    max_dlq_retries: int


@dataclass(frozen=True)
class PipelineSpec:
    """A whole validated spec; ``to_json()`` is the canonical form stored on a revision."""

    source: SourceSpec
    destinations: tuple[DestinationConfig, ...]
    delivery: DeliverySpec
    retry: RetryPolicy
    dlq: DlqSpec
    error_handling: ErrorHandling

    def to_json(self) -> dict[str, Any]:
        """The spec with every default filled in, as plain JSON types (lists, dicts, str, numbers, bools)."""
        data = asdict(self)
        data["source"]["topics"] = list(self.source.topics)
        data["destinations"] = [asdict(d) for d in self.destinations]
        return data

    def output_topics(self) -> list[str]:
        """Every topic the pipeline writes: destinations in order, then the DLQ."""
        topics = list(dict.fromkeys(d.topic for d in self.destinations))
        return [*topics, self.dlq.topic]


T = TypeVar("T")


class _Reader:
    """Collects errors while reading nested JSON, so that all problems are reported at once."""

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def error(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

    def section(self, data: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(_join(path, key), "must be an object")
            return {}
        return value

    def unknown(self, data: Mapping[str, Any], allowed: set[str], path: str) -> None:
        for key in data:
            if key not in allowed:
                self.error(
                    _join(path, str(key)), f"unknown field; expected one of {', '.join(sorted(allowed))}"
                )

    def value(
        self,
        data: Mapping[str, Any],
        key: str,
        path: str,
        kind: type[T] | tuple[type, ...],
        default: T | None = None,
        *,
        check: Callable[[Any], str | None] | None = None,
        required: bool = False,
    ) -> T:
        where = _join(path, key)
        if key not in data or data[key] is None:
            if required:
                self.error(where, "this field is required")
            return cast(T, default)
        value = data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python; a JSON true where a number is expected is an error, not 1.
        if isinstance(value, bool) and bool not in kinds:
            self.error(where, f"must be {_kind_name(kinds)}, not a boolean")
            return cast(T, default)
        if not isinstance(value, kinds):
            self.error(where, f"must be {_kind_name(kinds)}")
            return cast(T, default)
        if check is not None and (problem := check(value)) is not None:
            self.error(where, problem)
            return cast(T, default)
        return cast(T, value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        list: "a list",
        dict: "an object",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _topic(value: str) -> str | None:
    return topic_name_problem(value)


def _between(low: float, high: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"must be between {low:g} and {high:g}"

    return check


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check


def _dsl(reader: _Reader, where: str, text: str | None, parse: Callable[[str], object]) -> None:
    if text is None:
        return
    try:
        parse(text)
    except DslParseError as exc:
        reader.error(where, f"DslParse at {exc.position}: {exc.message}")


def parse_spec(data: object, *, pipeline_name: str) -> PipelineSpec:
    """Validate untrusted spec JSON for the pipeline ``pipeline_name`` and fill in defaults.

    Raises SpecError with every problem found, keyed by dotted path. DSL expressions are parsed with the
    matching parser (filter, transform, key_transform, header_transforms values, timestamp).
    """
    reader = _Reader()
    if not isinstance(data, Mapping):
        raise SpecError({"spec": ["must be a JSON object"]})
    # Every string of a spec is encoded to UTF-8 (the database, the driver, Kafka headers): refuse text that
    # cannot be, at its field, before any other rule looks at it.
    if (bad := unencodable_path(data)) is not None:
        raise SpecError({bad if bad != "non_field_errors" else "spec": [UNENCODABLE]})
    reader.unknown(data, {"source", "destinations", "delivery", "retry", "dlq", "error_handling"}, "")

    src = reader.section(data, "source", "")
    reader.unknown(
        src, {"topics", "starting_offsets", "consumer_group", "max_record_bytes", "format"}, "source"
    )
    topics = reader.value(src, "topics", "source", list, [], required=True)
    for i, topic in enumerate(topics):
        if not isinstance(topic, str):
            reader.error(f"source.topics.{i}", "must be a string")
        elif problem := _topic(topic):
            reader.error(f"source.topics.{i}", problem)
    if "topics" in src and isinstance(src["topics"], list) and not topics:
        reader.error("source.topics", "name at least one topic")
    source = SourceSpec(
        topics=tuple(t for t in topics if isinstance(t, str)),
        starting_offsets=cast(
            Literal["earliest", "latest"],
            reader.value(
                src, "starting_offsets", "source", str, "earliest", check=_one_of("earliest", "latest")
            ),
        ),
        consumer_group=reader.value(
            src,
            "consumer_group",
            "source",
            str,
            f"streamforge-{pipeline_name}",
            check=lambda v: None if 0 < len(v) <= 249 else "must be 1 to 249 characters",
        ),
        max_record_bytes=reader.value(
            src, "max_record_bytes", "source", int, 1_048_576, check=_between(1024, 100 * 1024 * 1024)
        ),
        format=reader.value(src, "format", "source", str, "json", check=_one_of(*FORMATS)),
    )

    dlv = reader.section(data, "delivery", "")
    reader.unknown(dlv, {"mode", "commit_strategy"}, "delivery")
    mode = reader.value(dlv, "mode", "delivery", str, "at_least_once", check=_one_of(*DELIVERY_MODES))
    commit = _commit_strategy(reader, dlv)

    destinations: list[DestinationConfig] = []
    raw_destinations = reader.value(data, "destinations", "", list, [], required=True)
    if "destinations" in data and isinstance(data["destinations"], list) and not raw_destinations:
        reader.error("destinations", "define at least one destination")
    seen_names: set[str] = set()
    for i, raw in enumerate(raw_destinations):
        path = f"destinations.{i}"
        if not isinstance(raw, Mapping):
            reader.error(path, "must be an object")
            continue
        reader.unknown(raw, set(DESTINATION_KEYS), path)
        name = reader.value(
            raw,
            "name",
            path,
            str,
            f"dest-{i}",
            check=lambda v: (
                None if NAME_RE.fullmatch(v) else "use 1-63 lowercase letters, digits, '-' or '_'"
            ),
        )
        if name in seen_names:
            reader.error(f"{path}.name", f"duplicate destination name {name!r}")
        seen_names.add(name)
        topic = reader.value(raw, "topic", path, str, "", check=_topic, required=True)
        if topic and topic in source.topics:
            reader.error(f"{path}.topic", "a destination may not write to the pipeline's own source topic")
        expressions = {
            key: reader.value(raw, key, path, str, None) for key in ("filter", "transform", "key_transform")
        }
        _dsl(reader, f"{path}.filter", expressions["filter"], parse_filter)
        _dsl(reader, f"{path}.transform", expressions["transform"], parse_transform)
        _dsl(reader, f"{path}.key_transform", expressions["key_transform"], parse_key_transform)
        # Spark's Kafka sink (low_latency) cannot set a record's timestamp: the producer stamps it on sending.
        timestamp = reader.value(
            raw, "timestamp", path, str, "CURRENT" if commit.kind == "low_latency" else "PRESERVE"
        )
        _dsl(reader, f"{path}.timestamp", timestamp, parse_timestamp)
        headers = _string_map(reader, raw, "headers", path)
        header_transforms = _string_map(reader, raw, "header_transforms", path)
        for header, expr in header_transforms.items():
            _dsl(reader, f"{path}.header_transforms.{header}", expr, parse_header_transform)
        dest_format = reader.value(raw, "format", path, str, "json", check=_one_of(*FORMATS))
        subject = reader.value(raw, "subject", path, str, None, check=_subject)
        if dest_format == "json" and subject is not None:
            reader.error(
                f"{path}.subject", "only a destination with a registry format (not json) has a subject"
            )
        if dest_format != "json" and subject is None and topic:
            subject = default_subject(topic)
        destinations.append(
            DestinationConfig(
                name=name,
                topic=topic,
                filter=expressions["filter"],
                transform=expressions["transform"],
                key_transform=expressions["key_transform"],
                headers=headers,
                header_transforms=header_transforms,
                timestamp=timestamp,
                format=dest_format,
                subject=subject,
            )
        )

    rty = reader.section(data, "retry", "")
    reader.unknown(rty, {"max_attempts", "initial_delay_ms", "max_delay_ms", "multiplier", "jitter"}, "retry")
    retry = RetryPolicy(
        max_attempts=reader.value(rty, "max_attempts", "retry", int, 5, check=_between(1, 100)),
        initial_delay_ms=reader.value(rty, "initial_delay_ms", "retry", int, 100, check=_between(0, 600_000)),
        max_delay_ms=reader.value(rty, "max_delay_ms", "retry", int, 10_000, check=_between(0, 3_600_000)),
        multiplier=float(
            reader.value(rty, "multiplier", "retry", (int, float), 2.0, check=_between(1.0, 10.0))
        ),
        jitter=float(reader.value(rty, "jitter", "retry", (int, float), 0.2, check=_between(0.0, 1.0))),
    )
    if retry.max_delay_ms < retry.initial_delay_ms:
        reader.error("retry.max_delay_ms", "must not be smaller than initial_delay_ms")

    dq = reader.section(data, "dlq", "")
    reader.unknown(dq, {"topic", "include_original_headers", "include_stack_trace", "max_dlq_retries"}, "dlq")
    default_dlq = f"{source.topics[0]}.dlq" if source.topics else "streamforge.dlq"
    dlq = DlqSpec(
        topic=reader.value(dq, "topic", "dlq", str, default_dlq, check=_topic),
        include_original_headers=reader.value(dq, "include_original_headers", "dlq", bool, True),
        include_stack_trace=reader.value(dq, "include_stack_trace", "dlq", bool, False),
        max_dlq_retries=reader.value(dq, "max_dlq_retries", "dlq", int, 5, check=_between(0, 100)),
    )
    if dlq.topic in source.topics or dlq.topic in {d.topic for d in destinations}:
        reader.error("dlq.topic", "the DLQ topic must differ from the source and destination topics")

    eh = reader.section(data, "error_handling", "")
    reader.unknown(eh, {"missing_field_behavior", "null_value_behavior"}, "error_handling")
    missing: str = reader.value(
        eh,
        "missing_field_behavior",
        "error_handling",
        str,
        "error",
        check=_one_of("error", "passthrough", "null"),
    )
    null_value: str = reader.value(
        eh, "null_value_behavior", "error_handling", str, "passthrough", check=_one_of("passthrough", "error")
    )
    error_handling = ErrorHandling(
        missing_field_behavior=cast(Literal["error", "passthrough", "null"], missing),
        null_value_behavior=cast(Literal["passthrough", "error"], null_value),
    )

    if commit.kind == "low_latency":
        _realtime_rules(reader, mode, destinations, error_handling)
        _realtime_formats(reader, source, destinations)
    if reader.errors:
        raise SpecError(reader.errors)
    return PipelineSpec(
        source=source,
        destinations=tuple(destinations),
        delivery=DeliverySpec(mode=cast(DeliveryMode, mode), commit_strategy=commit),
        retry=retry,
        dlq=dlq,
        error_handling=error_handling,
    )


def _realtime_rules(
    reader: _Reader, mode: str, destinations: list[DestinationConfig], handling: ErrorHandling
) -> None:
    """What the ``low_latency`` commit strategy requires (DESIGN.md "Delivery modes": Spark's real-time mode,
    the whole routing compiled for Spark's Kafka sink, at_least_once only, no Python operators):

    * delivery mode ``at_least_once``: the Kafka sink writes without transactions (no effectively_once), and
      a long-running real-time batch cannot be skipped on failure (no at_most_once);
    * no DSL form that compiles to a Python UDF (:func:`pipelines.dsl.python_forms.python_forms`): real-time
      mode's plan allow-list has no Python operator; each is reported at its field with its position;
    * ``timestamp: CURRENT`` (the default then): the Kafka sink has no timestamp column, so the producer
      stamps records when it sends them and no other rule can be honoured.
    """
    if mode != "at_least_once":
        reader.error(
            "delivery.commit_strategy.kind",
            f"low_latency (Spark real-time mode) is allowed only with delivery mode at_least_once, not {mode}: "
            "Spark's Kafka sink writes without transactions, and a real-time batch cannot be skipped",
        )
    for i, dest in enumerate(destinations):
        path = f"destinations.{i}"
        if not _is_current(dest.timestamp):
            reader.error(
                f"{path}.timestamp",
                "low_latency writes through Spark's Kafka sink, which stamps each record when it sends it: "
                "only CURRENT is possible (leave timestamp out, or use a batch or time commit strategy)",
            )
        try:
            compiled = dest.compiled()
        except DslParseError:
            continue  # already reported at its field
        for use in python_forms(compiled, handling):
            text = getattr(dest, use.field) or ""
            position = text.find(use.form)
            where = f"at {position}: " if position >= 0 else ""
            reader.error(
                f"{path}.{use.field}",
                f"{where}{use.form} needs a Python UDF ({use.reason}), and low_latency (Spark real-time "
                "mode) runs no Python operator: use a batch or time commit strategy, or another form",
            )


def _realtime_formats(reader: _Reader, source: SourceSpec, destinations: list[DestinationConfig]) -> None:
    """Registry formats decode and encode in a Python worker, which real-time mode's plan cannot hold."""
    why = "registry formats are read and written by a Python worker, which low_latency (Spark real-time mode) runs none of: use a batch or time commit strategy"
    if source.format != "json":
        reader.error("source.format", why)
    for i, dest in enumerate(destinations):
        if dest.format != "json":
            reader.error(f"destinations.{i}.format", why)


def _subject(value: str) -> str | None:
    if not value.strip() or len(value) > 255:
        return "must be 1 to 255 characters, not only spaces"
    if any(ord(ch) < 0x20 for ch in value):
        return "must not contain control characters"
    return None


def _is_current(timestamp: str) -> bool:
    try:
        return isinstance(parse_timestamp(timestamp), dsl_ast.TimestampCurrent)
    except DslParseError:
        return True  # already reported at its field


def _string_map(reader: _Reader, raw: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    value = reader.value(raw, key, path, dict, {})
    result: dict[str, str] = {}
    for name, item in value.items():
        where = f"{path}.{key}.{name}"
        if not HEADER_NAME_RE.fullmatch(str(name)):
            reader.error(where, "header names are 1-255 printable ASCII characters without spaces")
        elif not isinstance(item, str):
            reader.error(where, "must be a string")
        else:
            result[str(name)] = item
    return result


def _commit_strategy(reader: _Reader, dlv: Mapping[str, Any]) -> CommitStrategy:
    raw = dlv.get("commit_strategy") or {}
    path = "delivery.commit_strategy"
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, Mapping):
        reader.error(path, "must be an object")
        return CommitStrategy("batch", DEFAULT_MAX_RECORDS)
    reader.unknown(raw, {"kind", "max_records", "interval_ms"}, path)
    kind = raw.get("kind", "batch")
    if kind in {"auto", "auto_commit", "kafka_auto_commit"}:
        reader.error(
            f"{path}.kind",
            "Kafka auto-commit is refused: it commits offsets on a timer whether or not the records were "
            "written, so a crash loses or repeats data with no guarantee. Use batch, time or low_latency.",
        )
        return CommitStrategy("batch", DEFAULT_MAX_RECORDS)
    if kind not in COMMIT_KINDS:
        reader.error(f"{path}.kind", f"must be one of {', '.join(COMMIT_KINDS)}")
        return CommitStrategy("batch", DEFAULT_MAX_RECORDS)
    default_records = 1_000 if kind == "low_latency" else DEFAULT_MAX_RECORDS
    max_records = reader.value(raw, "max_records", path, int, default_records, check=_between(1, 10_000_000))
    interval = reader.value(
        raw, "interval_ms", path, int, 1000 if kind == "time" else 0, check=_between(0, 3_600_000)
    )
    if kind == "time" and interval <= 0:
        reader.error(f"{path}.interval_ms", "a time-based strategy needs a positive interval")
    if kind == "low_latency" and 0 < interval < REALTIME_MIN_BATCH_MS:
        reader.error(
            f"{path}.interval_ms",
            f"low_latency's interval is Spark's real-time batch duration, at least {REALTIME_MIN_BATCH_MS:,} ms "
            f"(Spark's minimum); got {interval:,}",
        )
    return CommitStrategy(cast(Literal["batch", "time", "low_latency"], kind), max_records, interval)
