"""Request and response shapes of the pipeline, run, metrics and DSL endpoints."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from access.models import Team
from pipelines.dsl import ErrorHandling
from pipelines.lifecycle import revision_numbers
from pipelines.models import (
    ACTIVE_STATES,
    DEFAULT_CLUSTER_NAME,
    KafkaCluster,
    Pipeline,
    PipelineRun,
)
from pipelines.progress import (
    BatchFigures,
    ConsumerGroupLag,
    FiringAlert,
    MetricRates,
    MetricTotals,
    PartitionLag,
    PipelineMetrics,
    SeriesPoint,
)
from pipelines.services import DestinationResult, DryRunReport, MessageResults, OutcomeCounts
from pipelines.spec import PipelineSpec


class ErrorHandlingSerializer(serializers.Serializer[ErrorHandling]):
    """``error_handling`` of a spec (DSL.md, "Errors")."""

    missing_field_behavior = serializers.ChoiceField(["error", "passthrough", "null"], default="error")
    null_value_behavior = serializers.ChoiceField(["passthrough", "error"], default="passthrough")

    def to_error_handling(self) -> ErrorHandling:
        return ErrorHandling(**self.validated_data)


class SampleMessageSerializer(serializers.Serializer[dict[str, Any]]):
    """A sample record. ``value``: JSON (serialized compactly) or a string taken as the raw value text;
    ``value_base64`` for raw bytes; ``key`` text; ``headers`` name -> text; ``timestamp`` epoch ms."""

    value = serializers.JSONField(required=False, allow_null=True)
    value_base64 = serializers.CharField(required=False)
    key = serializers.CharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    headers = serializers.DictField(
        child=serializers.CharField(allow_null=True, allow_blank=True, trim_whitespace=False), required=False
    )
    timestamp = serializers.IntegerField(required=False, allow_null=True, min_value=0)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "value" in attrs and "value_base64" in attrs:
            raise serializers.ValidationError({"value_base64": "give either value or value_base64, not both"})
        return attrs


class EvaluateRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dsl/evaluate/``."""

    kind = serializers.ChoiceField(["filter", "transform", "key_transform", "header_transform", "timestamp"])
    expr = serializers.CharField(max_length=10_000, trim_whitespace=False)
    message = SampleMessageSerializer()
    error_handling = ErrorHandlingSerializer(required=False)
    now = serializers.IntegerField(
        required=False, min_value=0, help_text="epoch ms for TIMESTAMP_AGE (default: now)"
    )


class ValidateRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/dsl/validate/``: one expression and the parser to read it with."""

    kind = serializers.ChoiceField(["filter", "transform", "key_transform", "header_transform", "timestamp"])
    expr = serializers.CharField(max_length=10_000, trim_whitespace=False, allow_blank=True)


class ValidateResponseSerializer(serializers.Serializer[dict[str, Any]]):
    """Whether the expression parses: the normalized form, or the error with its 0-based position."""

    kind = serializers.CharField()
    ok = serializers.BooleanField()
    normalized = serializers.CharField(required=False)
    error_type = serializers.CharField(required=False)
    position = serializers.IntegerField(required=False)
    message = serializers.CharField(required=False)


class EvaluateResponseSerializer(serializers.Serializer[dict[str, Any]]):
    """The result, or the error type and message of an evaluation that failed."""

    kind = serializers.CharField()
    ok = serializers.BooleanField()
    result = serializers.JSONField(
        required=False, help_text="filter: bool; transform: JSON; key: text or null"
    )
    error_type = serializers.CharField(required=False)
    message = serializers.CharField(required=False)


class DryRunRequestSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/pipelines/{name}/dry-run/``: sample messages, and optionally a draft spec to try instead
    of the current revision (what the editor sends before saving)."""

    messages = serializers.ListField(child=SampleMessageSerializer(), allow_empty=False, max_length=1000)
    spec = serializers.JSONField(required=False)
    now = serializers.IntegerField(required=False, min_value=0)


class DraftDryRunRequestSerializer(DryRunRequestSerializer):
    """``POST /api/dsl/dry-run/``: sample messages and a draft spec of a pipeline not saved yet (what the
    pipeline editor sends)."""

    spec = serializers.JSONField()


# --------------------------------------------------------------------------------------------- pipelines


class RunSerializer(serializers.ModelSerializer[PipelineRun]):
    """One driver attempt (``runs/`` and a pipeline's ``current_run``)."""

    revision = serializers.IntegerField(source="revision.number", read_only=True)

    class Meta:
        model = PipelineRun
        fields = [
            "run_id", "attempt", "state", "revision", "host", "epoch", "pid", "spark_app_id", "started_at", "ended_at",
            "stop_requested_at", "exit_code", "error_type", "error_message", "last_heartbeat_at",
            "last_progress_at", "last_batch_id", "log_tail",
        ]  # fmt: skip
        read_only_fields = fields


def _json_schema(annotation: Any) -> dict[str, Any]:
    """The OpenAPI schema of a spec field's type (the spec dataclasses use only these types)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        return {
            "type": "object",
            "properties": {f.name: _json_schema(hints[f.name]) for f in dataclasses.fields(annotation)},
        }
    if origin in (types.UnionType, typing.Union):
        [inner] = [a for a in args if a is not type(None)]
        return {**_json_schema(inner), "nullable": True}
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin is tuple:
        return {"type": "array", "items": _json_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _json_schema(args[1])}
    return {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
    }[annotation]


@extend_schema_field(
    {**_json_schema(PipelineSpec), "description": "the current revision's spec, every default filled in"}
)
class StoredSpecField(serializers.JSONField):
    """A revision's stored spec (``PipelineSpec.to_json()``), passed through as stored."""


class PipelineSerializer(serializers.ModelSerializer[Pipeline]):
    """A pipeline as read: desired and actual state, the current revision's number and spec, and the run
    that is active (or the last one)."""

    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SerializerMethodField(help_text="the Kafka cluster it runs on (default: KAFKA_*)")
    revision = serializers.IntegerField(source="current_revision.number", read_only=True, allow_null=True)
    running_revision = serializers.SerializerMethodField(
        help_text="the revision the active driver runs (null: none runs); differs from revision after a save "
        "until a restart applies it"
    )
    spec = StoredSpecField(source="current_revision.spec", read_only=True, allow_null=True)
    current_run = serializers.SerializerMethodField()
    host = serializers.SerializerMethodField(
        help_text="the runner host of the active run (else the lease's holder, else the last run's); null: none"
    )
    epoch = serializers.SerializerMethodField(
        help_text="the lease epoch that run (or lease) is under; null: none, or a run from before leases"
    )

    class Meta:
        model = Pipeline
        fields = [
            "name", "description", "team", "cluster", "desired_state", "state", "state_reason", "consecutive_failures",
            "next_restart_at", "revision", "running_revision", "spec", "current_run", "host", "epoch",
            "placement_labels", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_cluster(self, pipeline: Pipeline) -> str:
        return pipeline.cluster.name if pipeline.cluster is not None else DEFAULT_CLUSTER_NAME

    # A pipeline from ``selectors.with_latest_runs`` (the list) carries ``running_revision_number`` and
    # ``latest_runs`` and its lease holder: serialising it runs no query. Any other is read here as before.

    def get_running_revision(self, pipeline: Pipeline) -> int | None:
        if hasattr(pipeline, "running_revision_number"):
            return typing.cast("int | None", pipeline.running_revision_number)
        return revision_numbers(pipeline)[1]

    def _last_run(self, pipeline: Pipeline) -> PipelineRun | None:
        """The pipeline's newest run, read once per serialised pipeline."""
        if hasattr(pipeline, "latest_runs"):
            latest = typing.cast("list[PipelineRun]", pipeline.latest_runs)
            return latest[0] if latest else None
        cache = typing.cast("dict[int, PipelineRun | None]", self.__dict__.setdefault("_last_runs", {}))
        if pipeline.pk not in cache:
            cache[pipeline.pk] = (
                pipeline.runs.select_related("revision").order_by("-started_at", "-id").first()
            )
        return cache[pipeline.pk]

    def _placement(self, pipeline: Pipeline) -> tuple[str | None, int | None]:
        run = self._last_run(pipeline)
        if run is not None and run.state in ACTIVE_STATES:
            return run.host, run.epoch
        if pipeline.lease_host is not None:
            return pipeline.lease_host.name, pipeline.lease_epoch
        return (run.host, run.epoch) if run is not None else (None, None)

    @extend_schema_field(RunSerializer(allow_null=True))
    def get_current_run(self, pipeline: Pipeline) -> dict[str, Any] | None:
        run = self._last_run(pipeline)
        if run is None:
            return None
        # One RunSerializer for every row: building its fields costs ~2 ms, a page of 20 paid it 20 times.
        runs = self.__dict__.get("_run_serializer")
        if runs is None:
            runs = self.__dict__["_run_serializer"] = RunSerializer()
        return dict(runs.to_representation(run))

    def get_host(self, pipeline: Pipeline) -> str | None:
        return self._placement(pipeline)[0]

    def get_epoch(self, pipeline: Pipeline) -> int | None:
        return self._placement(pipeline)[1]


class PipelineCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST /api/pipelines/``: a new pipeline (revision 1) in a team where the caller is admin."""

    name = serializers.SlugField(max_length=63)
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="name", queryset=Team.objects.all()
    )
    description = serializers.CharField(required=False, allow_blank=True, default="")
    cluster = serializers.CharField(
        required=False,
        default=DEFAULT_CLUSTER_NAME,
        help_text="the Kafka cluster's name (default: the installation's); fixed for the pipeline's life",
    )
    spec = serializers.JSONField()

    def validate_cluster(self, value: str) -> KafkaCluster | None:
        if value == DEFAULT_CLUSTER_NAME:
            return None
        cluster = KafkaCluster.objects.filter(name=value).first()
        if cluster is None:
            raise serializers.ValidationError(f"no Kafka cluster named {value!r}")
        return cluster

    def validate_name(self, value: str) -> str:
        if Pipeline.objects.filter(name=value).exists():
            raise serializers.ValidationError("a pipeline with this name exists")
        return value


class PipelineUpdateSerializer(serializers.Serializer[dict[str, Any]]):
    """``PUT/PATCH /api/pipelines/{name}/``: a new spec makes a new revision (what the next start runs);
    ``comment`` says why; ``description`` and ``placement_labels`` change in place."""

    spec = serializers.JSONField(required=False)
    comment = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    description = serializers.CharField(required=False, allow_blank=True)
    placement_labels = serializers.ListField(
        child=serializers.RegexField(
            r"^[A-Za-z0-9_.-]{1,63}(=[A-Za-z0-9_.-]{1,63})?$",
            error_messages={"invalid": "a label is a word or key=value of letters, digits, '_', '.', '-'"},
        ),
        required=False,
        max_length=16,
        help_text="labels a runner host must all carry to run the pipeline (next placement); [] for any host",
    )


class ActionSerializer(serializers.Serializer[dict[str, Any]]):
    """``start/``, ``stop/``, ``restart/``: an optional reason, kept in the audit log."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=1000, default="")


class PartitionLagSerializer(serializers.Serializer[PartitionLag]):
    """One source partition: processed end offset, latest offset and their difference."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    end_offset = serializers.IntegerField(allow_null=True)
    latest_offset = serializers.IntegerField()
    lag = serializers.IntegerField()


class ConsumerGroupLagSerializer(serializers.Serializer[ConsumerGroupLag]):
    """The pipeline's Kafka consumer group as Kafka sees it (``end_offset``: the committed offset, null
    without a commit); ``error`` instead when Kafka did not answer; empty without a revision."""

    group = serializers.CharField(required=False)
    lag = serializers.IntegerField(required=False)
    partitions = PartitionLagSerializer(many=True, required=False)
    error = serializers.CharField(required=False)


class MetricRatesSerializer(serializers.Serializer[MetricRates]):
    """Records per second over the last ``rate_window_seconds``."""

    consumed_per_second = serializers.FloatField()
    produced_per_second = serializers.FloatField()
    dead_lettered_per_second = serializers.FloatField()


class MetricTotalsSerializer(serializers.Serializer[MetricTotals]):
    """Counts since the pipeline was created."""

    batches = serializers.IntegerField()
    consumed = serializers.IntegerField()
    produced = serializers.IntegerField()
    filtered = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()
    dlq_records = serializers.IntegerField()
    retries = serializers.IntegerField()
    lost = serializers.IntegerField()
    commits_succeeded = serializers.IntegerField()
    commits_failed = serializers.IntegerField()


_COUNTS = {"type": "integer"}


@extend_schema_field(
    {
        "type": "object",
        "description": "destination name -> records produced, filtered, dead-lettered, and replay-skipped "
        "(replays for other destinations of the pipeline); the four add up to the records consumed",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "produced": _COUNTS,
                "filtered": _COUNTS,
                "dead_lettered": _COUNTS,
                "replay_skipped": _COUNTS,
            },
        },
    }
)
class DestinationCountsField(serializers.JSONField):
    """A batch's counts per destination, as the driver reported them (passed through unchanged)."""


@extend_schema_field(
    {"type": "object", "description": "error type -> records", "additionalProperties": _COUNTS}
)
class CountsByErrorTypeField(serializers.JSONField):
    """A batch's dead-lettered records per error type, as the driver reported them."""


@extend_schema_field(
    {
        "type": "object",
        "description": "topic -> partition -> offsets the batch read from (start) up to (end, exclusive) and "
        "the partition's latest offset",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "start": {"type": "integer", "nullable": True},
                    "end": {"type": "integer", "nullable": True},
                    "latest": {"type": "integer", "nullable": True},
                },
            },
        },
    }
)
class BatchOffsetsField(serializers.JSONField):
    """The offsets a batch read, per topic and partition, as the driver reported them."""


class BatchFiguresSerializer(serializers.Serializer[BatchFigures]):
    """The last micro-batch: counts are records, ``time_ms`` epoch ms, ``duration_ms`` its duration."""

    run_id = serializers.CharField()
    batch_id = serializers.IntegerField()
    time_ms = serializers.IntegerField()
    duration_ms = serializers.FloatField()
    consumed = serializers.IntegerField()
    produced = serializers.IntegerField()
    filtered = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()
    dlq_records = serializers.IntegerField()
    retries = serializers.IntegerField()
    lost = serializers.IntegerField()
    lag = serializers.IntegerField(allow_null=True)
    destinations = DestinationCountsField()
    dead_lettered_by_type = CountsByErrorTypeField()
    offsets = BatchOffsetsField()


class FiringAlertSerializer(serializers.Serializer[FiringAlert]):
    """An alert firing now; ``since`` is ISO 8601."""

    rule = serializers.CharField()
    severity = serializers.CharField()
    summary = serializers.CharField()
    since = serializers.CharField()


class SeriesPointSerializer(serializers.Serializer[SeriesPoint]):
    """One time bucket: ``time_ms`` its start (epoch ms), counts summed, ``lag`` the largest seen,
    ``duration_ms`` the mean batch time."""

    time_ms = serializers.IntegerField()
    batches = serializers.IntegerField()
    consumed = serializers.IntegerField()
    produced = serializers.IntegerField()
    filtered = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()
    retries = serializers.IntegerField()
    lag = serializers.IntegerField(allow_null=True)
    duration_ms = serializers.FloatField(allow_null=True)


class MetricsSerializer(serializers.Serializer[PipelineMetrics]):
    """``GET /api/pipelines/{name}/metrics/``: lag per partition (from the last batches and from the Kafka
    consumer group), rates over the last ``rate_window_seconds``, totals, the last batch, firing alerts and,
    with ``?range=<seconds>``, a downsampled series."""

    pipeline = serializers.CharField()
    state = serializers.CharField()
    desired_state = serializers.CharField()
    actions = serializers.ListField(
        child=serializers.ChoiceField(["start", "stop", "restart"]),
        help_text="the lifecycle requests that change something in this state",
    )
    revision = serializers.IntegerField(allow_null=True, help_text="the current revision's number")
    running_revision = serializers.IntegerField(
        allow_null=True,
        help_text="the revision the active driver runs (null: none runs); differs from revision after a save "
        "until a restart applies it",
    )
    lag = serializers.IntegerField(allow_null=True)
    lag_source = serializers.ChoiceField(
        ["batches", "consumer_group"],
        help_text="batches: after the last batch of the running driver; consumer_group: read from Kafka "
        "now, because no driver runs (the last batch's figure would stand still)",
    )
    partitions = PartitionLagSerializer(many=True)
    consumer_group = ConsumerGroupLagSerializer()
    rate_window_seconds = serializers.IntegerField()
    rates = MetricRatesSerializer()
    totals = MetricTotalsSerializer()
    last_batch = BatchFiguresSerializer(allow_null=True)
    alerts = FiringAlertSerializer(many=True)
    dlq_backlog = serializers.IntegerField(
        help_text="dead letters parked now, waiting for a person (not cumulative, unlike totals.dlq_records)"
    )
    bucket_seconds = serializers.IntegerField(
        required=False, help_text="width of each series point (with range)"
    )
    series = SeriesPointSerializer(many=True, required=False)


# --------------------------------------------------------------------------------------------- dry runs


class DestinationResultSerializer(serializers.Serializer[DestinationResult]):
    """One destination's outcome for one message: the record produced (value, key and headers as text,
    timestamp in epoch ms), or nothing (filtered), or the error type and message (dead-lettered)."""

    destination = serializers.CharField()
    topic = serializers.CharField()
    outcome = serializers.ChoiceField(["produced", "filtered", "dead_lettered"])
    value = serializers.CharField(allow_null=True)
    key = serializers.CharField(allow_null=True)
    headers = serializers.DictField(child=serializers.CharField(allow_null=True))
    timestamp = serializers.IntegerField(allow_null=True)
    error_type = serializers.CharField(allow_null=True)
    error_message = serializers.CharField(allow_null=True)


class MessageResultsSerializer(serializers.Serializer[MessageResults]):
    """Every destination's outcome, in spec order, for the message at ``index`` (0-based)."""

    index = serializers.IntegerField()
    destinations = DestinationResultSerializer(many=True)


class OutcomeCountsSerializer(serializers.Serializer[OutcomeCounts]):
    """How many (message, destination) pairs ended in each outcome."""

    produced = serializers.IntegerField()
    filtered = serializers.IntegerField()
    dead_lettered = serializers.IntegerField()


class DryRunReportSerializer(serializers.Serializer[DryRunReport]):
    """A dry run: the revision run (null for a draft spec), the outcomes per message and their counts."""

    revision = serializers.IntegerField(allow_null=True)
    results = MessageResultsSerializer(many=True)
    summary = OutcomeCountsSerializer()


class ErrorDetailSerializer(serializers.Serializer[dict[str, str]]):
    """Why the request was refused (409: the pipeline's state does not allow it)."""

    detail = serializers.CharField()
