"""REST endpoint of offset skips (mounted under /api/pipelines/<name>/; ``dlq.services.offset_skips``):

- ``GET offsets/skip/``: the pipeline's offset skip requests, newest first (members of its team);
- ``POST offsets/skip/``: ``{partition, offset}`` (skip past ``offset``: the pipeline resumes at
  ``offset + 1``) or ``{to_time[, partition]}`` (ISO-8601; every partition without ``partition``), with an
  optional ``topic`` (needed when the pipeline reads several) and ``reason``. ``dry_run: true`` answers 200
  with the per-partition plan and creates nothing; otherwise 201 with the request, which waits for an
  approver (``POST /api/dlq/approvals/{id}/approve/``; the approval is in ``approval``).

Operator role in the pipeline's team for both POST forms (403 otherwise); another team's pipeline is 404, as
for every endpoint under a pipeline. 400 naming the field for bad input (``partition`` out of range,
``offset`` at or past the high watermark, ``to_time`` not a time, ``pipeline`` without a checkpoint, no
``reason``), 409 while another request of the pipeline is open, 503 when the cluster does not answer.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.models import Role
from access.permissions import require_role
from dlq import topic_browser
from dlq.api.topics import TopicErrorsMixin
from dlq.models import OffsetSkip
from dlq.services import offset_skips
from streamforge_core import contract as c

#: The largest partition number Kafka has (a 32-bit signed int) and the largest offset (64-bit signed).
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1


class OffsetSkipRequestSerializer(serializers.Serializer[Any]):
    """A skip past ``offset`` on ``partition``, or a move to ``to_time``; ``dry_run`` only plans it."""

    topic = serializers.CharField(required=False, allow_blank=True, default="", max_length=249)
    partition = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=MAX_PARTITION
    )
    offset = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=MAX_OFFSET
    )
    to_time = serializers.DateTimeField(required=False, allow_null=True, default=None)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    dry_run = serializers.BooleanField(required=False, default=False)


class PartitionMoveSerializer(serializers.Serializer[Any]):
    """One partition's move: next offsets before (``current``) and after (``target``), its watermarks,
    ``records`` skipped (copied to the DLQ first), ``rereads`` (a move backwards), ``direction``; in a
    finished request's ``result`` also ``copied`` ([from, to) offsets) and ``copied_records``."""

    topic = serializers.CharField()
    partition = serializers.IntegerField()
    current = serializers.IntegerField()
    target = serializers.IntegerField()
    low = serializers.IntegerField()
    high = serializers.IntegerField()
    records = serializers.IntegerField()
    rereads = serializers.IntegerField()
    direction = serializers.CharField()
    copied = serializers.ListField(child=serializers.IntegerField(), required=False)
    copied_records = serializers.IntegerField(required=False)


class OffsetSkipPlanSerializer(serializers.Serializer[Any]):
    """A dry run's answer: per partition, and the totals."""

    dry_run = serializers.BooleanField()
    partitions = PartitionMoveSerializer(many=True)
    records = serializers.IntegerField()
    rereads = serializers.IntegerField()


class OffsetSkipSerializer(serializers.ModelSerializer[OffsetSkip]):
    """An offset skip request: what it asked, its plan and result, state, who asked and decided, the
    pending approval's id, and the DLQ list of its dead letters."""

    pipeline = serializers.CharField(source="pipeline.name")
    requested_by = serializers.CharField(source="requested_by.username")
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True, default=None)
    plan = PartitionMoveSerializer(many=True)
    result = PartitionMoveSerializer(many=True)
    approval = serializers.SerializerMethodField()
    dead_letters = serializers.SerializerMethodField()

    class Meta:
        model = OffsetSkip
        fields = [
            "id", "pipeline", "topic", "partition", "past_offset", "to_time", "reason", "state", "plan",
            "result", "copied", "was_running", "error", "requested_by", "decided_by", "created_at",
            "decided_at", "started_at", "moved_at", "finished_at", "approval", "dead_letters",
        ]  # fmt: skip

    def get_approval(self, skip: OffsetSkip) -> int | None:
        """The id of its approval request."""
        return skip.approvals.order_by("-id").values_list("pk", flat=True).first()

    def get_dead_letters(self, skip: OffsetSkip) -> str:
        """The DLQ list of the pipeline's Skipped dead letters."""
        return (
            reverse("dlq-list") + "?" + urlencode({"pipeline": skip.pipeline.name, "error_type": c.SKIPPED})
        )


class OffsetSkipsView(TopicErrorsMixin, APIView):
    """``GET|POST /api/pipelines/{name}/offsets/skip/`` (see the module docstring)."""

    @extend_schema(responses={200: OffsetSkipSerializer(many=True)})
    def get(self, request: Request, name: str) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        return Response(OffsetSkipSerializer(offset_skips.skips_for(pipeline), many=True).data)

    @extend_schema(
        request=OffsetSkipRequestSerializer,
        responses={200: OffsetSkipPlanSerializer, 201: OffsetSkipSerializer},
    )
    def post(self, request: Request, name: str) -> Response:
        pipeline = topic_browser.pipeline_for(request.user, name)
        body = OffsetSkipRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        where = {
            "topic": data["topic"],
            "partition": data["partition"],
            "past_offset": data["offset"],
            "to_time": data["to_time"],
        }
        if data["dry_run"]:
            require_role(request.user, pipeline.team, Role.OPERATOR)
            moves = offset_skips.plan_skip(pipeline=pipeline, **where)
            plan = {
                "dry_run": True,
                "partitions": [m.as_dict() for m in moves],
                "records": sum(m.records for m in moves),
                "rereads": sum(m.rereads for m in moves),
            }
            return Response(OffsetSkipPlanSerializer(plan).data)
        skip = offset_skips.request_skip(
            actor=request.user,  # type: ignore[arg-type]
            pipeline=pipeline,
            reason=data["reason"],
            **where,
        )
        return Response(OffsetSkipSerializer(skip).data, status=status.HTTP_201_CREATED)
