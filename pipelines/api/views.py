"""REST endpoints of the pipelines app: pipelines (CRUD, start/stop/restart, runs, metrics), the DSL
playground and dry runs.

Views validate the request shape with a serializer and call ``pipelines.services`` or the DSL; no domain
logic lives here.
"""

from __future__ import annotations

import time
from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.models import Role
from access.permissions import InATeam, has_role, visible_teams
from access.shared_reads import shared_read
from access.throttling import DSL_SCOPE, DSL_THROTTLES
from pipelines import dsl, supervision
from pipelines.api.serializers import (
    ActionSerializer,
    DraftDryRunRequestSerializer,
    DryRunReportSerializer,
    DryRunRequestSerializer,
    ErrorDetailSerializer,
    ErrorHandlingSerializer,
    EvaluateRequestSerializer,
    EvaluateResponseSerializer,
    MetricsSerializer,
    PipelineCreateSerializer,
    PipelineSerializer,
    PipelineUpdateSerializer,
    RunSerializer,
    ValidateRequestSerializer,
    ValidateResponseSerializer,
)
from pipelines.formats import RegistryUnreachable, formats_for
from pipelines.models import KafkaCluster, Pipeline
from pipelines.progress import pipeline_metrics
from pipelines.selectors import with_latest_runs
from pipelines.services import (
    PipelineBusy,
    SampleError,
    create_pipeline,
    delete_pipeline,
    dry_run_report,
    revise_pipeline,
    sample_message,
    set_placement_labels,
)
from pipelines.spec import PipelineSpec, SpecError, parse_spec

_PARSERS = {
    "filter": dsl.parse_filter,
    "transform": dsl.parse_transform,
    "key_transform": dsl.parse_key_transform,
    "header_transform": dsl.parse_header_transform,
    "timestamp": dsl.parse_timestamp,
}


def _parse_error(field: str, exc: dsl.DslParseError) -> Response:
    return Response(
        {
            field: [f"DslParse at {exc.position}: {exc.message}"],
            "error_type": "DslParse",
            "position": exc.position,
        },
        status=status.HTTP_400_BAD_REQUEST,
    )


def _evaluate(kind: str, node: Any, message: dsl.Message, handling: dsl.ErrorHandling, now_ms: int) -> Any:
    value = dsl.decode_value(message.value)
    if kind == "filter":
        return dsl.evaluate_filter(node, message, value, now_ms=now_ms)
    if kind == "transform":
        return dsl.apply_transform(node, value, error_handling=handling)
    if kind == "key_transform":
        key = dsl.evaluate_key(node, message, value, error_handling=handling)
        return None if key is None else key.decode("utf-8", "backslashreplace")
    if kind == "header_transform":
        headers: dict[str, bytes | None] = dict(message.headers)
        dsl.evaluate_header_transform("x-result", node, message, value, headers)
        result = headers.get("x-result")
        return None if result is None else result.decode("utf-8", "backslashreplace")
    return dsl.evaluate_timestamp(node, message, value, now_ms=now_ms)


class EvaluateView(APIView):
    """``POST /api/dsl/evaluate/``: evaluate one expression against one message (the DSL playground).

    400 with the field and position when the expression does not parse; 200 with ``ok: false`` and the
    error type when evaluation fails (e.g. ``JsonPathNotFound``), as the pipeline would dead-letter it.
    Members of a team only (403 otherwise), at most the ``dsl`` rate per user (429 with ``Retry-After``).
    """

    permission_classes = [InATeam]
    throttle_classes = DSL_THROTTLES
    throttle_scope = DSL_SCOPE

    @extend_schema(request=EvaluateRequestSerializer, responses={200: EvaluateResponseSerializer})
    def post(self, request: Request) -> Response:
        serializer = EvaluateRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        kind = data["kind"]
        try:
            node = _PARSERS[kind](data["expr"])
        except dsl.DslParseError as exc:
            return _parse_error("expr", exc)
        try:
            message = sample_message(data["message"])
        except SampleError as exc:
            return Response({f"message.{exc.field}": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        handling_serializer = ErrorHandlingSerializer(data=data.get("error_handling") or {})
        handling_serializer.is_valid(raise_exception=True)
        now_ms = data.get("now") or int(time.time() * 1000)
        try:
            result = _evaluate(kind, node, message, handling_serializer.to_error_handling(), now_ms)
        except dsl.EvaluationError as exc:
            failed = {"kind": kind, "ok": False, "error_type": exc.error_type, "message": str(exc)}
            return Response(EvaluateResponseSerializer(failed).data)
        return Response(EvaluateResponseSerializer({"kind": kind, "ok": True, "result": result}).data)


class ValidateView(APIView):
    """``POST /api/dsl/validate/``: does ``expr`` parse as a ``kind`` expression? Always 200 for a
    well-formed request: ``{"ok": true, "normalized": ...}`` (the expression as the parser reads it back),
    or ``{"ok": false, "error_type": "DslParse", "position": n, "message": ...}`` with the 0-based character
    offset of the problem (``len(expr)`` when something is missing at the end). The editor calls it as the
    operator types, so it has only the site's rates; members of a team only (403 otherwise)."""

    permission_classes = [InATeam]

    @extend_schema(request=ValidateRequestSerializer, responses={200: ValidateResponseSerializer})
    def post(self, request: Request) -> Response:
        serializer = ValidateRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        kind, expr = serializer.validated_data["kind"], serializer.validated_data["expr"]
        try:
            node = _PARSERS[kind](expr)
        except dsl.DslParseError as exc:
            refused = {
                "kind": kind,
                "ok": False,
                "error_type": exc.error_type,
                "position": exc.position,
                "message": exc.message,
            }
            return Response(ValidateResponseSerializer(refused).data)
        return Response(
            ValidateResponseSerializer({"kind": kind, "ok": True, "normalized": node.render()}).data
        )


def _dry_run(
    spec: PipelineSpec, revision: int | None, data: dict[str, Any], cluster: KafkaCluster | None = None
) -> Response:
    """A dry run's answer; registry formats through ``cluster``'s registry (None: the default cluster's),
    503 when it is needed and cannot serve."""
    try:
        messages = [sample_message(raw, index=i) for i, raw in enumerate(data["messages"])]
    except SampleError as exc:
        return Response({f"messages.{exc.index}.{exc.field}": [str(exc)]}, status=400)
    try:
        report = dry_run_report(
            spec=spec,
            messages=messages,
            revision=revision,
            now_ms=data.get("now"),
            formats=formats_for(spec, cluster),
        )
    except RegistryUnreachable as exc:
        return Response({"detail": f"schema registry: {exc}"}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
    return Response(DryRunReportSerializer(report).data)


class DryRunView(APIView):
    """``POST /api/pipelines/{name}/dry-run/``: run sample messages through the current revision (or a draft
    ``spec``) and return, per message and destination, produced (with the output), filtered or
    dead-lettered (with the error type). Writes nothing. Needs at least the viewer role in the pipeline's team
    (403 for a user in no team, 404 for another team's pipeline); at most the ``dsl`` rate per user (429).
    """

    permission_classes = [InATeam]
    throttle_classes = DSL_THROTTLES
    throttle_scope = DSL_SCOPE

    @extend_schema(
        request=DryRunRequestSerializer,
        responses={200: DryRunReportSerializer, 503: ErrorDetailSerializer},
    )
    def post(self, request: Request, name: str) -> Response:
        pipeline = get_object_or_404(Pipeline.objects.select_related("team", "current_revision"), name=name)
        if not has_role(request.user, pipeline.team, Role.VIEWER):
            return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
        serializer = DryRunRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        revision_number: int | None
        spec: PipelineSpec
        try:
            if "spec" in data:
                spec, revision_number = parse_spec(data["spec"], pipeline_name=pipeline.name), None
            elif pipeline.current_revision is not None:
                spec = pipeline.current_revision.parsed
                revision_number = pipeline.current_revision.number
            else:
                return Response({"spec": ["the pipeline has no revision yet; send a draft spec"]}, status=400)
        except SpecError as exc:
            return _spec_errors(exc)
        return _dry_run(spec, revision_number, data, pipeline.cluster)


class DraftDryRunView(APIView):
    """``POST /api/dsl/dry-run/``: as a pipeline's dry run, for the draft ``spec`` of a pipeline that is
    not saved yet (the pipeline editor's dry run). Writes nothing; members of a team only (403 otherwise),
    at most the ``dsl`` rate per user (429). 400 with ``spec.<field>`` errors for an invalid spec,
    ``messages.<i>.<field>`` for an invalid message."""

    permission_classes = [InATeam]
    throttle_classes = DSL_THROTTLES
    throttle_scope = DSL_SCOPE

    @extend_schema(
        request=DraftDryRunRequestSerializer,
        responses={200: DryRunReportSerializer, 503: ErrorDetailSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = DraftDryRunRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            spec = parse_spec(data["spec"], pipeline_name="draft")
        except SpecError as exc:
            return _spec_errors(exc)
        return _dry_run(spec, None, data)


def _spec_errors(exc: SpecError) -> Response:
    return Response(
        {f"spec.{path}": messages for path, messages in exc.errors.items()},
        status=status.HTTP_400_BAD_REQUEST,
    )


class PipelineViewSet(viewsets.GenericViewSet[Pipeline]):
    """``/api/pipelines/``: pipelines of the caller's teams, by name (another team's pipeline is a 404).

    Read: viewer. ``start/``, ``stop/``, ``restart/``: operator (202: a worker carries it out).
    Create, update (a new revision, run by the next start) and delete (only when stopped): admin.
    """

    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9_-]{0,62}"
    serializer_class = PipelineSerializer

    def get_queryset(self) -> QuerySet[Pipeline]:
        return (
            Pipeline.objects.filter(team__in=visible_teams(self.request.user))
            .select_related("team", "current_revision", "cluster")
            .order_by("name")
        )

    def list(self, request: Request) -> Response:
        """Every visible pipeline with its state (paginated); a constant number of queries per page
        (``selectors.with_latest_runs``). A page is computed once for everyone who sees the same teams and
        shared for ``SHARED_READ_SECONDS`` (``access.shared_reads``: at most that old, fresh for a caller
        who has just written)."""

        def page() -> Any:
            pipelines = self.paginate_queryset(with_latest_runs(self.get_queryset()))
            return self.get_paginated_response(PipelineSerializer(pipelines, many=True).data).data

        url = request.build_absolute_uri()
        return Response(shared_read(request.user, "api-pipelines", page, variant=url).value)

    def retrieve(self, request: Request, name: str) -> Response:
        """One pipeline: states, current revision and spec, the latest run."""
        return Response(PipelineSerializer(self.get_object()).data)

    @extend_schema(request=PipelineCreateSerializer, responses={201: PipelineSerializer})
    def create(self, request: Request) -> Response:
        """Create a pipeline with revision 1 (admin of the team). 400 with field errors for a bad spec."""
        serializer = PipelineCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            pipeline = create_pipeline(
                actor=request.user,  # type: ignore[arg-type]  # IsAuthenticated: a User
                name=data["name"],
                team=data["team"],
                spec=data["spec"],
                description=data["description"],
                cluster=data["cluster"],
            )
        except SpecError as exc:
            return _spec_errors(exc)
        return Response(PipelineSerializer(pipeline).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=PipelineUpdateSerializer, responses={200: PipelineSerializer})
    def update(self, request: Request, name: str) -> Response:
        """Store a new spec as the next revision (admin); the running driver keeps its revision until a
        restart. An unchanged spec makes no revision."""
        pipeline = self.get_object()
        serializer = PipelineUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        current = pipeline.current_revision
        spec = data.get("spec", current.spec if current is not None else None)
        try:
            revise_pipeline(
                actor=request.user,  # type: ignore[arg-type]
                pipeline=pipeline,
                spec=spec,
                comment=data["comment"],
                description=data.get("description"),
            )
        except SpecError as exc:
            return _spec_errors(exc)
        if "placement_labels" in data:  # after the spec: a refused spec changes nothing
            set_placement_labels(
                actor=request.user,  # type: ignore[arg-type]
                pipeline=pipeline,
                labels=data["placement_labels"],
                reason=data["comment"],
            )
        return Response(PipelineSerializer(self.get_object()).data)

    @extend_schema(request=PipelineUpdateSerializer, responses={200: PipelineSerializer})
    def partial_update(self, request: Request, name: str) -> Response:
        """As ``update``; every field is optional."""
        return self.update(request, name)

    @extend_schema(responses={204: None, 409: ErrorDetailSerializer})
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a stopped pipeline with its history (admin); 409 while it runs or is meant to."""
        try:
            delete_pipeline(actor=request.user, pipeline=self.get_object())  # type: ignore[arg-type]
        except PipelineBusy as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _act(self, request: Request, name: str, action: str) -> Response:
        serializer = ActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        pipeline = self.get_object()
        request_action = {
            "start": supervision.request_start,
            "stop": supervision.request_stop,
            "restart": supervision.request_restart,
        }[action]
        try:
            updated = request_action(
                actor=request.user,  # type: ignore[arg-type]
                pipeline=pipeline,
                reason=serializer.validated_data["reason"],
            )
        except supervision.NotStartable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        updated.refresh_from_db()
        return Response(PipelineSerializer(updated).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=ActionSerializer, responses={202: PipelineSerializer, 409: ErrorDetailSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, name: str) -> Response:
        """Run the current revision (operator). A FAILED or HALTED pipeline starts a fresh series."""
        return self._act(request, name, "start")

    @extend_schema(request=ActionSerializer, responses={202: PipelineSerializer, 409: ErrorDetailSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, name: str) -> Response:
        """Stop after the running micro-batch (operator); forced after the stop timeout."""
        return self._act(request, name, "stop")

    @extend_schema(request=ActionSerializer, responses={202: PipelineSerializer, 409: ErrorDetailSerializer})
    @action(detail=True, methods=["post"])
    def restart(self, request: Request, name: str) -> Response:
        """Stop gracefully and start the current revision again (operator)."""
        return self._act(request, name, "restart")

    @extend_schema(responses={200: RunSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def runs(self, request: Request, name: str) -> Response:
        """The pipeline's driver attempts, newest first (paginated)."""
        pipeline = self.get_object()
        runs = pipeline.runs.select_related("revision").order_by("-started_at", "-id")
        assert self.paginator is not None  # DEFAULT_PAGINATION_CLASS is set
        page = self.paginator.paginate_queryset(runs, request, view=self)
        return self.paginator.get_paginated_response(RunSerializer(page, many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("range", int, description="seconds of history to return as a downsampled series")
        ],
        responses={200: MetricsSerializer},
    )
    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, name: str) -> Response:
        """Current lag per partition (from the last batches, and as the Kafka consumer group stands), rates,
        totals, the last batch and firing alerts."""
        pipeline = self.get_object()
        range_text = request.query_params.get("range")
        range_seconds: int | None = None
        if range_text:
            try:
                range_seconds = max(1, min(int(range_text), 90 * 24 * 3600))
            except ValueError:
                return Response({"range": ["an integer number of seconds"]}, status=400)
        return Response(
            MetricsSerializer(pipeline_metrics(pipeline=pipeline, range_seconds=range_seconds)).data
        )
