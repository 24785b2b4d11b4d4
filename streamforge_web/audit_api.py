"""``/api/audit/``: the audit log, and ``/api/audit/verify/``: whether its hash chain is intact.

Admins read the whole log with filters. Everyone else reads the trail of one object they may see
(``?target_type=dead_letter&target_id=42``), which is what the message and pipeline pages show.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from streamforge_web.audit import verify_chain
from streamforge_web.models import AuditEvent
from streamforge_web.permissions import is_admin, visible_teams


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    """One audit event as stored (digests, not contents, of what changed)."""

    class Meta:
        model = AuditEvent
        fields = [
            "sequence",
            "created_at",
            "actor_name",
            "action",
            "target_type",
            "target_id",
            "reason",
            "before_digest",
            "after_digest",
            "details",
            "request_id",
            "prev_hash",
            "hash",
        ]


class NewestEventsFirst(CursorPagination):
    """Keyset pagination on the sequence number, newest first."""

    ordering = "-sequence"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


def _target_visible(user: Any, target_type: str, target_id: str) -> bool:
    """Whether a non-admin may read the trail of this object (it belongs to one of their teams)."""
    from dlq.models import ApprovalRequest, BulkAction, DeadLetter, Runbook
    from pipelines.models import Pipeline

    teams = visible_teams(user)
    lookups: dict[str, Any] = {
        "dead_letter": (DeadLetter, "pk"),
        "pipeline": (Pipeline, "name"),
        "bulk": (BulkAction, "pk"),
        "approval": (ApprovalRequest, "pk"),
        "runbook": (Runbook, "pk"),
    }
    if target_type not in lookups:
        return False
    model, field = lookups[target_type]
    if field == "pk" and not target_id.isdigit():
        return False
    return bool(model.objects.filter(**{field: target_id, "team__in": teams}).exists())


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet[AuditEvent]):
    """Audit events, newest first. Filters: ``action``, ``actor``, ``target_type``, ``target_id``.
    Non-admins must name one target they can see; otherwise 403."""

    serializer_class = AuditEventSerializer
    pagination_class = NewestEventsFirst
    lookup_field = "sequence"
    lookup_value_regex = "[0-9]+"

    def get_queryset(self) -> QuerySet[AuditEvent]:
        params = self.request.query_params
        qs = AuditEvent.objects.all()
        if not is_admin(self.request.user):
            target_type, target_id = params.get("target_type", ""), params.get("target_id", "")
            if not (target_type and target_id and _target_visible(self.request.user, target_type, target_id)):
                return AuditEvent.objects.none()
        for param, field in (
            ("action", "action"),
            ("actor", "actor_name"),
            ("target_type", "target_type"),
            ("target_id", "target_id"),
        ):
            if params.get(param):
                qs = qs.filter(**{field: params[param]})
        return qs

    @extend_schema(
        parameters=[
            OpenApiParameter("action", str),
            OpenApiParameter("actor", str),
            OpenApiParameter("target_type", str),
            OpenApiParameter("target_id", str),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Events matching the filters; 403 for a non-admin without a visible target."""
        params = request.query_params
        if not is_admin(request.user) and not (
            params.get("target_type")
            and params.get("target_id")
            and _target_visible(request.user, params["target_type"], params["target_id"])
        ):
            return Response(
                {"detail": "only admins read the whole log; name a target_type and target_id you can see"},
                status=status.HTTP_403_FORBIDDEN,
            )
        return super().list(request, *args, **kwargs)


class ChainReportSerializer(serializers.Serializer[dict[str, Any]]):
    """The verification result."""

    ok = serializers.BooleanField()
    events = serializers.IntegerField()
    broken_at = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()
    anchor = serializers.CharField()


class AuditVerifyView(APIView):
    """``GET /api/audit/verify/``: recompute the whole chain (O(n)); ``ok: false`` names the first broken
    event. Any signed-in user may ask: the answer reveals no event contents."""

    @extend_schema(responses={200: ChainReportSerializer})
    def get(self, request: Request) -> Response:
        """Verify the chain now."""
        return Response(asdict(verify_chain()))
