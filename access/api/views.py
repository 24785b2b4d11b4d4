"""``/api/audit/``: the audit log, and ``/api/audit/verify/``: whether its hash chain is intact.

Admins read the whole log with filters, and export it (``/api/audit/export/?as=csv|json``). Everyone else reads the trail of one object they may see
(``?target_type=dead_letter&target_id=42``), which is what the message and pipeline pages show.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.db.models import QuerySet
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.api.serializers import AuditEventSerializer, ChainReportSerializer
from access.audit import target_visible, verify_chain
from access.exports import FORMATS, export_audit_log, streamed
from access.models import AuditEvent
from access.permissions import is_admin
from access.selectors import AuditQuery


class NewestEventsFirst(CursorPagination):
    """Keyset pagination on the sequence number, newest first."""

    ordering = "-sequence"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


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
            if not (target_type and target_id and target_visible(self.request.user, target_type, target_id)):
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
            and target_visible(request.user, params["target_type"], params["target_id"])
        ):
            return Response(
                {"detail": "only admins read the whole log; name a target_type and target_id you can see"},
                status=status.HTTP_403_FORBIDDEN,
            )
        return super().list(request, *args, **kwargs)

    @extend_schema(
        parameters=[
            OpenApiParameter("action", str),
            OpenApiParameter("actor", str),
            OpenApiParameter("target_type", str),
            OpenApiParameter("target_id", str),
            OpenApiParameter(
                "as", str, enum=sorted(FORMATS), default="csv", description="csv, or json: JSON Lines"
            ),
        ],
        responses={(200, "text/csv"): OpenApiTypes.STR, (200, "application/x-ndjson"): OpenApiTypes.STR},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def export(self, request: Request) -> HttpResponseBase:
        """The events the filters select, newest first, as a CSV or JSON Lines download (columns:
        ``access.exports.AUDIT_COLUMNS``); audited as ``audit.export``. 403 for a non-admin, 400 for a bad
        ``as``."""
        if not is_admin(request.user):
            return Response({"detail": "only admins export the audit log"}, status=status.HTTP_403_FORBIDDEN)
        fmt = request.query_params.get("as", "csv")
        if fmt not in FORMATS:
            return Response({"as": [f"one of {', '.join(FORMATS)}"]}, status=status.HTTP_400_BAD_REQUEST)
        export = export_audit_log(
            actor=request.user,  # type: ignore[arg-type]
            query=AuditQuery.from_params(request.query_params),
            fmt=fmt,
        )
        return streamed(request._request, export.chunks, fmt=export.fmt, name=export.name)


class AuditVerifyView(APIView):
    """``GET /api/audit/verify/`` (admins): recompute the whole chain (O(n)) and compare it with its anchors.
    ``status`` is ``ok``, ``broken`` (``broken_at`` names the first bad event) or ``unverified`` (an anchor
    could not be read or is behind). Admins only, like the log itself: each call re-hashes every event,
    which no one else should be able to make the server do at will."""

    @extend_schema(responses={200: ChainReportSerializer})
    def get(self, request: Request) -> Response:
        """Verify the chain now; 403 for a non-admin."""
        if not is_admin(request.user):
            return Response({"detail": "only admins verify the audit log"}, status=status.HTTP_403_FORBIDDEN)
        return Response(asdict(verify_chain()))
