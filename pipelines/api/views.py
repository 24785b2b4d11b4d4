"""REST endpoints of the pipelines app: the DSL playground and dry runs.

Views validate the request shape with a serializer and call ``pipelines.services`` or the DSL; no domain
logic lives here.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from pipelines import dsl
from pipelines.api.serializers import (
    DryRunRequestSerializer,
    ErrorHandlingSerializer,
    EvaluateRequestSerializer,
    EvaluateResponseSerializer,
)
from pipelines.models import Pipeline
from pipelines.services import SampleError, dry_run, sample_message
from pipelines.spec import PipelineSpec, SpecError, parse_spec
from streamforge_web.models import Role
from streamforge_web.permissions import has_role

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
    """

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
            return Response({"kind": kind, "ok": False, "error_type": exc.error_type, "message": str(exc)})
        return Response({"kind": kind, "ok": True, "result": result})


class DryRunView(APIView):
    """``POST /api/pipelines/{name}/dry-run/``: run sample messages through the current revision (or a draft
    ``spec``) and return, per message and destination, produced (with the output), filtered or
    dead-lettered (with the error type). Writes nothing. Needs at least the viewer role in the pipeline's team.
    """

    @extend_schema(request=DryRunRequestSerializer, responses={200: dict})
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
                spec = parse_spec(pipeline.current_revision.spec, pipeline_name=pipeline.name)
                revision_number = pipeline.current_revision.number
            else:
                return Response({"spec": ["the pipeline has no revision yet; send a draft spec"]}, status=400)
        except SpecError as exc:
            return Response({f"spec.{path}": messages for path, messages in exc.errors.items()}, status=400)
        try:
            messages = [sample_message(raw, index=i) for i, raw in enumerate(data["messages"])]
        except SampleError as exc:
            return Response({f"messages.{exc.index}.{exc.field}": [str(exc)]}, status=400)
        results = dry_run(spec=spec, messages=messages, now_ms=data.get("now"))
        summary: Counter[str] = Counter(r.outcome for per_message in results for r in per_message)
        return Response(
            {
                "revision": revision_number,
                "results": [
                    {"index": i, "destinations": [asdict(r) for r in per_message]}
                    for i, per_message in enumerate(results)
                ],
                "summary": {k: summary.get(k, 0) for k in ("produced", "filtered", "dead_lettered")},
            }
        )
