"""REST endpoints of the DLQ console: messages (list, detail, fix, replay, skip, delete request),
approvals, failure groups, bulk actions, runbooks and extra DLQ topics.

Views validate request shapes and call ``dlq.services``; service errors map to HTTP as
InvalidRequest/FilterError -> 400 ``{field: [reason]}``, PermissionDenied -> 403, Conflict -> 409,
ReplayFailed and RegistryUnavailable -> 503. Objects of other teams are 404, as if they did not exist.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.exports import FORMATS, streamed
from access.models import Role, Team
from access.permissions import require_role, visible_teams
from dlq import services
from dlq.api.serializers import (
    ApprovalSerializer,
    BulkCreateSerializer,
    BulkFixCreateSerializer,
    BulkFixPreviewSerializer,
    BulkPreviewSerializer,
    BulkSerializer,
    CheckResultSerializer,
    CheckSerializer,
    ClaimRequestSerializer,
    ClaimSerializer,
    DeadLetterListSerializer,
    DlqTopicCreateSerializer,
    DlqTopicSerializer,
    FailureGroupSerializer,
    FixForwardCreateSerializer,
    FixForwardSerializer,
    FixResultSerializer,
    FixSerializer,
    MessageInspectionSerializer,
    OptionalReasonSerializer,
    ReasonSerializer,
    ReplayResultSerializer,
    ReplaySerializer,
    RetentionPolicySerializer,
    RetentionPolicyWriteSerializer,
    RetentionSerializer,
    RunbookSerializer,
    RunbookWriteSerializer,
    SiblingReplayRequestSerializer,
    SiblingReplaySerializer,
)
from dlq.filters import SEARCH_ORDER, FilterError, MessageFilter
from dlq.models import (
    ApprovalRequest,
    BulkAction,
    DeadLetter,
    DlqTopic,
    FailureGroup,
    FixForwardScan,
    GroupHourlyCount,
    RetentionPolicy,
    RetentionRun,
    Runbook,
    Status,
)
from dlq.selectors import with_parked_counts
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline


class ServiceErrorsMixin:
    """Turns ``dlq.services`` errors into HTTP answers (see the module docstring)."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, services.InvalidRequest | FilterError):
            return Response(
                {exc.field: [getattr(exc, "message", str(exc))]}, status=status.HTTP_400_BAD_REQUEST
            )
        if isinstance(exc, services.WouldFailAgain):
            return Response({"detail": str(exc), "would_fail": exc.failures}, status=status.HTTP_409_CONFLICT)
        if isinstance(exc, services.Conflict):
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        if isinstance(exc, services.ReplayFailed | services.RegistryUnavailable):
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return super().handle_exception(exc)  # type: ignore[misc, no-any-return]


def _team_and_pipeline(request: Request, team_name: str, pipeline_name: str) -> tuple[Team, Pipeline | None]:
    """The caller's team named ``team_name`` and its pipeline ``pipeline_name`` (None when empty). Raises
    InvalidRequest naming the field when either is not found (a 400)."""
    team = visible_teams(request.user).filter(name=team_name).first()
    if team is None:
        raise services.InvalidRequest("team", "no such team among yours")
    if not pipeline_name:
        return team, None
    pipeline = Pipeline.objects.filter(name=pipeline_name, team=team).first()
    if pipeline is None:
        raise services.InvalidRequest("pipeline", "no such pipeline in this team")
    return team, pipeline


class NewestFirst(CursorPagination):
    """Keyset pagination on id, newest first: stable while dead letters keep arriving, and fast at any
    depth (no OFFSET). ``page_size`` up to 200."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_ordering(self, request: Request, queryset: QuerySet[Any], view: Any) -> tuple[str, ...]:
        """``-id``, or for a key-prefix search on PostgreSQL the same order by ``dlq.filters.SEARCH_ORDER``."""
        if SEARCH_ORDER in queryset.query.annotations:
            return (f"-{SEARCH_ORDER}",)
        return ("-id",)


_FILTER_PARAMS = [
    OpenApiParameter("pipeline", str, description="pipeline name"),
    OpenApiParameter("error_type", str, description="e.g. JsonPathNotFound"),
    OpenApiParameter("group", int, description="failure group id"),
    OpenApiParameter("status", str, enum=Status.values),
    OpenApiParameter("topic", str, description="DLQ topic"),
    OpenApiParameter("cluster", str, description="Kafka cluster name (default: the installation's)"),
    OpenApiParameter("since", str, description="ISO-8601; last failure at or after"),
    OpenApiParameter("until", str, description="ISO-8601; last failure before"),
    OpenApiParameter("q", str, description="key prefix or error message substring"),
    OpenApiParameter(
        "destination",
        str,
        description="the destination that failed (records that failed every one match any)",
    ),
    OpenApiParameter(
        "ids", str, description="only these dead letters: ids separated by commas (at most 1,000)"
    ),
]


def _selection(request: Request, *, also: tuple[str, ...] = ()) -> MessageFilter:
    """The message filter of the query string; ``also`` names further parameters that are not filters."""
    skip = ("cursor", "page_size", "format", *also)
    params = {k: v for k, v in request.query_params.items() if k not in skip}
    return MessageFilter.from_mapping(params)


_EXPORT_PARAMS = [
    *_FILTER_PARAMS,
    OpenApiParameter(
        "as",
        str,
        enum=list(FORMATS),
        default="csv",
        description="csv, or json: JSON Lines, one object a line",
    ),
    OpenApiParameter("include_payload", bool, default=True, description="false: leave the value columns out"),
]


class DeadLetterViewSet(ServiceErrorsMixin, viewsets.ReadOnlyModelViewSet[DeadLetter]):
    """``/api/dlq/messages/``: parked messages of the caller's teams.

    Read: viewer (payload paths in STREAMFORGE_DLQ_MASKED_PATHS are masked for viewers).
    ``check/`` (a draft fix, stored nowhere), ``fix/``, ``replay/``, ``skip/``, ``delete/`` (a request an
    approver must approve): operator.
    """

    lookup_value_regex = "[0-9]+"

    serializer_class = DeadLetterListSerializer
    pagination_class = NewestFirst

    def get_queryset(self) -> QuerySet[DeadLetter]:
        return (
            services.visible_dead_letters(self.request.user)
            .select_related("cluster")
            .defer("key", "value", "headers")
        )

    def _dead_letter(self, pk: str) -> DeadLetter:
        return get_object_or_404(
            services.visible_dead_letters(self.request.user).select_related(
                "team", "pipeline__current_revision"
            ),
            pk=pk,
        )

    @extend_schema(parameters=_FILTER_PARAMS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Dead letters matching the filters, newest first, cursor-paginated."""
        hidden = services.key_masked_teams(request.user)
        queryset = _selection(request).apply(self.get_queryset(), key_masked_teams=hidden)
        page = self.paginate_queryset(queryset)
        context = {"key_masked_teams": hidden, "claims": services.claims_for(page or [])}
        return self.get_paginated_response(DeadLetterListSerializer(page, many=True, context=context).data)

    @extend_schema(
        parameters=_EXPORT_PARAMS,
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "application/x-ndjson"): OpenApiTypes.STR,
        },
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def export(self, request: Request) -> StreamingHttpResponse:
        """The dead letters the filters select, newest first, as a CSV or JSON Lines download (columns:
        ``dlq.services.exports.EXPORT_COLUMNS``), keys and payloads masked as on the message page; audited.
        400 names a bad filter, a bad ``as``, or ``filter`` when more than 100,000 match."""
        include = request.query_params.get("include_payload", "true").lower()
        if include not in ("true", "false", "1", "0"):
            raise services.InvalidRequest("include_payload", "true or false")
        export = services.export_dead_letters(
            actor=request.user,  # type: ignore[arg-type]
            selection=_selection(request, also=("as", "include_payload")),
            fmt=request.query_params.get("as", "csv"),
            include_payload=include in ("true", "1"),
        )
        return streamed(request._request, export.chunks, fmt=export.fmt, name=export.name)

    @extend_schema(responses={200: MessageInspectionSerializer})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Everything about one dead letter (``dlq.services.inspect_message``)."""
        info = services.inspect_message(user=request.user, dead_letter=self._dead_letter(kwargs["pk"]))
        return Response(MessageInspectionSerializer(info).data)

    @extend_schema(request=FixSerializer, responses={201: FixResultSerializer})
    @action(detail=True, methods=["post"])
    def fix(self, request: Request, pk: str) -> Response:
        """Store a fixed payload and say whether the pipeline would now pass it, and where to."""
        serializer = FixSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        revision = services.fix_payload(
            actor=request.user,  # type: ignore[arg-type]
            dead_letter=self._dead_letter(pk),
            value=serializer.validated_data["value"],
            reason=serializer.validated_data["reason"],
            schema_version=serializer.validated_data.get("schema_version"),
        )
        return Response(FixResultSerializer(revision).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=CheckSerializer, responses={200: CheckResultSerializer})
    @action(detail=True, methods=["post"])
    def check(self, request: Request, pk: str) -> Response:
        """Would this draft payload pass the pipeline now, and how does it differ from the original?
        Stores nothing (the fix editor asks before saving); operator role, like the fix."""
        serializer = CheckSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = services.check_draft(
            actor=request.user,
            dead_letter=self._dead_letter(pk),
            value=serializer.validated_data["value"],
            schema_version=serializer.validated_data.get("schema_version"),
        )
        return Response(CheckResultSerializer(result).data)

    @extend_schema(request=ReplaySerializer, responses={201: ReplayResultSerializer})
    @action(detail=True, methods=["post"])
    def replay(self, request: Request, pk: str) -> Response:
        """Replay the current payload; 201 once the broker acknowledged it."""
        serializer = ReplaySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        attempt = services.replay(
            actor=request.user,  # type: ignore[arg-type]
            dead_letter=self._dead_letter(pk),
            target_topic=data["target_topic"],
            idempotency_key=data["idempotency_key"] or request.headers.get("Idempotency-Key", ""),
            force=data["force"],
            reason=data["reason"],
        )
        return Response(ReplayResultSerializer(attempt).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=SiblingReplayRequestSerializer, responses={200: SiblingReplaySerializer(many=True)}
    )
    @action(detail=True, methods=["post"], url_path="replay-with-siblings", url_name="replay-with-siblings")
    def replay_with_siblings(self, request: Request, pk: str) -> Response:
        """Copy this message's payload onto its parked siblings (the same source record's dead letters at
        other destinations) and replay them all, each for its own destination; one result per message."""
        serializer = SiblingReplayRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        done = services.replay_with_siblings(
            actor=request.user,  # type: ignore[arg-type]
            dead_letter=self._dead_letter(pk),
            reason=serializer.validated_data["reason"],
            force=serializer.validated_data["force"],
        )
        return Response(SiblingReplaySerializer(done, many=True).data)

    @extend_schema(request=ReasonSerializer, responses={200: DeadLetterListSerializer})
    @action(detail=True, methods=["post"])
    def skip(self, request: Request, pk: str) -> Response:
        """Close the message without producing anything; the reason is required."""
        serializer = ReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = services.skip(
            actor=request.user,  # type: ignore[arg-type]
            dead_letter=self._dead_letter(pk),
            reason=serializer.validated_data["reason"],
        )
        return Response(DeadLetterListSerializer(row).data)

    @extend_schema(request=ReasonSerializer, responses={202: ApprovalSerializer})
    @action(detail=True, methods=["post"], url_path="delete", url_name="delete")
    def request_delete(self, request: Request, pk: str) -> Response:
        """Ask for the payload to be erased; a different approver must approve it."""
        serializer = ReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approval = services.request_delete(
            actor=request.user,  # type: ignore[arg-type]
            dead_letter=self._dead_letter(pk),
            reason=serializer.validated_data["reason"],
        )
        return Response(ApprovalSerializer(approval).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=ClaimRequestSerializer, responses={200: ClaimSerializer})
    @action(detail=True, methods=["post"])
    def claim(self, request: Request, pk: str) -> Response:
        """Claim the (parked) dead letter: "investigating: you", with an optional note (operator). 409 when
        someone else is on it, naming them."""
        serializer = ClaimRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        dead_letter = self._dead_letter(pk)
        services.claim(actor=request.user, dead_letter=dead_letter, note=serializer.validated_data["note"])  # type: ignore[arg-type]
        return Response(ClaimSerializer(services.claims_for([dead_letter])[dead_letter.pk]).data)

    @extend_schema(request=OptionalReasonSerializer, responses={204: None})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Release the dead letter's claim (its claimer, or an admin of the team)."""
        serializer = OptionalReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.release_claim(
            actor=request.user,  # type: ignore[arg-type]
            dead_letter=self._dead_letter(pk),
            reason=serializer.validated_data["reason"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApprovalViewSet(ServiceErrorsMixin, viewsets.ReadOnlyModelViewSet[ApprovalRequest]):
    """``/api/dlq/approvals/``: requests of the caller's teams (``?state=pending``). ``approve/`` and
    ``reject/``: the approver role, never on one's own request."""

    lookup_value_regex = "[0-9]+"

    serializer_class = ApprovalSerializer

    def get_queryset(self) -> QuerySet[ApprovalRequest]:
        qs = ApprovalRequest.objects.filter(team__in=visible_teams(self.request.user)).select_related(
            "requested_by", "decided_by", "team"
        )
        state = self.request.query_params.get("state")
        return qs.filter(state=state) if state else qs

    @extend_schema(parameters=[OpenApiParameter("state", str)])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Approval requests, newest first."""
        return super().list(request, *args, **kwargs)

    def _decide(self, request: Request, decision: Any) -> Response:
        serializer = OptionalReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approval = decision(
            actor=request.user, approval=self.get_object(), reason=serializer.validated_data["reason"]
        )
        return Response(ApprovalSerializer(approval).data)

    @extend_schema(request=OptionalReasonSerializer, responses={200: ApprovalSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve and carry out the request."""
        return self._decide(request, services.approve)

    @extend_schema(request=OptionalReasonSerializer, responses={200: ApprovalSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject the request."""
        return self._decide(request, services.reject)


class FailureGroupViewSet(ServiceErrorsMixin, viewsets.ReadOnlyModelViewSet[FailureGroup]):
    """``/api/dlq/groups/``: failure groups of the caller's teams, most recently seen first, with the
    parked count, the hourly trend of the last 24 hours and their runbooks. Filters: ``pipeline``,
    ``error_type``."""

    lookup_value_regex = "[0-9]+"

    serializer_class = FailureGroupSerializer

    def get_queryset(self) -> QuerySet[FailureGroup]:
        qs = with_parked_counts(FailureGroup.objects.filter(team__in=visible_teams(self.request.user)))
        params = self.request.query_params
        if params.get("pipeline"):
            qs = qs.filter(pipeline_name=params["pipeline"])
        if params.get("error_type"):
            qs = qs.filter(error_type=params["error_type"])
        return qs.order_by("-last_seen")

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        context["trends"] = self._trends()
        context["claims"] = services.group_claims(self.get_queryset().values_list("pk", flat=True))
        return context

    @extend_schema(request=ClaimRequestSerializer, responses={200: ClaimSerializer})
    @action(detail=True, methods=["post"])
    def claim(self, request: Request, pk: str) -> Response:
        """Claim the failure group (operator): its dead letters, new arrivals included, show "investigating:
        you". 409 when someone else is on it, naming them."""
        serializer = ClaimRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        group = self.get_object()
        services.claim(actor=request.user, group=group, note=serializer.validated_data["note"])  # type: ignore[arg-type]
        return Response(ClaimSerializer(services.group_claims([group.pk])[group.pk]).data)

    @extend_schema(request=OptionalReasonSerializer, responses={204: None})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Release the group's claim (its claimer, or an admin of the team)."""
        serializer = OptionalReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.release_claim(
            actor=request.user,  # type: ignore[arg-type]
            group=self.get_object(),
            reason=serializer.validated_data["reason"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _trends(self) -> dict[int, list[dict[str, Any]]]:
        since = timezone.now() - timedelta(hours=24)
        rows = GroupHourlyCount.objects.filter(
            hour__gte=since, group__team__in=visible_teams(self.request.user)
        ).order_by("hour")
        trends: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            trends.setdefault(row.group_id, []).append({"hour": row.hour.isoformat(), "count": row.count})
        return trends

    @extend_schema(
        parameters=[OpenApiParameter("pipeline", str), OpenApiParameter("error_type", str)],
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Failure groups, most recently seen first."""
        return super().list(request, *args, **kwargs)


class FixForwardViewSet(
    ServiceErrorsMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet[FixForwardScan]
):
    """``/api/dlq/fix-forward/``: fix-forward scans of the caller's teams' pipelines (``?pipeline=`` one),
    newest first. A scan starts by itself when a restart applies a new revision; ``POST`` (operator) starts
    one for a pipeline's current revision (202; a worker runs it). Replaying its candidates is ``POST
    /api/dlq/bulk/`` with its ``replay_filters``, under the bulk rules."""

    lookup_value_regex = "[0-9]+"
    serializer_class = FixForwardSerializer

    def get_queryset(self) -> QuerySet[FixForwardScan]:
        scans = FixForwardScan.objects.filter(team__in=visible_teams(self.request.user)).select_related(
            "pipeline", "team", "requested_by"
        )
        name = self.request.query_params.get("pipeline", "").strip()
        return scans.filter(pipeline__name=name) if name else scans

    @extend_schema(request=FixForwardCreateSerializer, responses={202: FixForwardSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Start a scan of a pipeline's parked dead letters against its current revision (operator)."""
        serializer = FixForwardCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        pipeline = (
            Pipeline.objects.filter(
                name=serializer.validated_data["pipeline"], team__in=visible_teams(request.user)
            )
            .select_related("team", "current_revision")
            .first()
        )
        if pipeline is None:
            return Response(
                {"pipeline": ["no such pipeline in your teams"]}, status=status.HTTP_400_BAD_REQUEST
            )
        scan = services.request_fix_forward_scan(pipeline=pipeline, actor=request.user)  # type: ignore[arg-type]
        return Response(FixForwardSerializer(scan).data, status=status.HTTP_202_ACCEPTED)


class BulkViewSet(ServiceErrorsMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet[BulkAction]):
    """``/api/dlq/bulk/``: bulk replays, skips, deletes and fixes (``fix/``). ``POST`` with ``dry_run:
    true`` counts what the filter selects; without it, creates the action (202; queued, or awaiting
    approval when large).
    ``pause/``, ``resume/``, ``cancel/``: operator; each is a move of the bulk life cycle
    (``dlq.services.bulk.BULK_TRANSITIONS``), 409 naming the state when the action is not in one it
    starts from."""

    lookup_value_regex = "[0-9]+"

    serializer_class = BulkSerializer

    def get_queryset(self) -> QuerySet[BulkAction]:
        return BulkAction.objects.filter(team__in=visible_teams(self.request.user)).select_related(
            "created_by", "team"
        )

    @extend_schema(request=BulkCreateSerializer, responses={202: BulkSerializer, 200: BulkPreviewSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Preview (``dry_run``) or create a bulk action."""
        serializer = BulkCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            selection = MessageFilter.from_mapping(data["filters"])
        except FilterError as exc:
            return Response({f"filters.{exc.field}": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        if data["dry_run"]:
            preview = services.preview_bulk(actor=request.user, selection=selection, kind=data["kind"])  # type: ignore[arg-type]
            return Response(BulkPreviewSerializer(preview).data)
        bulk = services.create_bulk(
            actor=request.user,  # type: ignore[arg-type]
            kind=data["kind"],
            selection=selection,
            reason=data["reason"],
            rate_limit=data["rate_limit"],
            target_topic=data["target_topic"],
        )
        return Response(BulkSerializer(bulk).data, status=status.HTTP_202_ACCEPTED)

    def _transition(self, request: Request, operation: Any) -> Response:
        serializer = OptionalReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        bulk = operation(
            actor=request.user, bulk=self.get_object(), reason=serializer.validated_data["reason"]
        )
        return Response(BulkSerializer(bulk).data)

    @extend_schema(
        request=BulkFixCreateSerializer, responses={202: BulkSerializer, 200: BulkFixPreviewSerializer}
    )
    @action(detail=False, methods=["post"], url_path="fix")
    def fix(self, request: Request) -> Response:
        """Bulk fix: a JSON Patch (RFC 6902) or DSL transform applied to each parked message the filter
        selects. ``dry_run``: the count, the approval and a sample with diffs and would-pass (200);
        otherwise the bulk action (202; queued, or awaiting approval when large). A bad patch or
        expression is a 400 naming ``fix.patch[i].<member>`` or ``fix.transform`` and the reason."""
        serializer = BulkFixCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            selection = MessageFilter.from_mapping(data["filters"])
        except FilterError as exc:
            return Response({f"filters.{exc.field}": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        fix = services.parse_fix(data["fix"])
        if data["dry_run"]:
            preview = services.preview_bulk_fix(
                actor=request.user,  # type: ignore[arg-type]
                selection=selection,
                fix=fix,
                sample=data["sample"],
            )
            return Response(BulkFixPreviewSerializer(preview).data)
        bulk = services.create_bulk_fix(
            actor=request.user,  # type: ignore[arg-type]
            selection=selection,
            fix=fix,
            reason=data["reason"],
            rate_limit=data["rate_limit"],
        )
        return Response(BulkSerializer(bulk).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=OptionalReasonSerializer, responses={200: BulkSerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        """Stop after the chunk in flight; resumable."""
        return self._transition(request, services.pause_bulk)

    @extend_schema(request=OptionalReasonSerializer, responses={200: BulkSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        """Continue a paused action after its cursor (only a paused one; 409 otherwise)."""
        return self._transition(request, services.resume_bulk)

    @extend_schema(request=OptionalReasonSerializer, responses={200: BulkSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """End the action for good (one awaiting approval is withdrawn); messages not reached stay parked."""
        return self._transition(request, services.cancel_bulk)


class RunbookViewSet(ServiceErrorsMixin, viewsets.ModelViewSet[Runbook]):
    """``/api/dlq/runbooks/``: read by every member of the team; written by admins."""

    lookup_value_regex = "[0-9]+"

    serializer_class = RunbookSerializer

    def get_queryset(self) -> QuerySet[Runbook]:
        return Runbook.objects.filter(team__in=visible_teams(self.request.user)).select_related("team")

    def _save(self, request: Request, runbook: Runbook | None) -> Runbook:
        serializer = RunbookWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        group: FailureGroup | None = data.get("group")
        team: Team | None
        if group is not None:
            team = group.team
        elif runbook is not None:
            team = runbook.team
        else:
            team = visible_teams(request.user).filter(name=data.get("team", "")).first()
            if team is None:
                raise services.InvalidRequest(
                    "team", "name one of your teams (or attach the runbook to a group)"
                )
        return services.save_runbook(
            actor=request.user,  # type: ignore[arg-type]
            team=team,
            title=data["title"],
            body=data["body"],
            actions=data["actions"],
            group=group,
            error_type=data["error_type"],
            runbook=runbook,
        )

    @extend_schema(request=RunbookWriteSerializer, responses={201: RunbookSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Create a runbook (admin)."""
        return Response(RunbookSerializer(self._save(request, None)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RunbookWriteSerializer, responses={200: RunbookSerializer})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Replace a runbook (admin)."""
        return Response(RunbookSerializer(self._save(request, self.get_object())).data)

    @extend_schema(request=RunbookWriteSerializer, responses={200: RunbookSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Same as PUT: every field is sent."""
        return self.update(request, *args, **kwargs)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Remove a runbook (admin)."""
        services.delete_runbook(actor=request.user, runbook=self.get_object())  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class DlqTopicViewSet(ServiceErrorsMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet[DlqTopic]):
    """``/api/dlq/topics/``: extra DLQ topics (Kafka Connect, Spring Kafka...) the ingester reads. Register:
    admin."""

    lookup_value_regex = "[0-9]+"

    serializer_class = DlqTopicSerializer

    def get_queryset(self) -> QuerySet[DlqTopic]:
        return DlqTopic.objects.filter(team__in=visible_teams(self.request.user)).select_related(
            "team", "pipeline", "cluster"
        )

    @extend_schema(request=DlqTopicCreateSerializer, responses={201: DlqTopicSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Register a topic."""
        serializer = DlqTopicCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team, pipeline = _team_and_pipeline(request, data["team"], data["pipeline"])
        require_role(request.user, team, Role.ADMIN)
        cluster = None
        if data["cluster"] != DEFAULT_CLUSTER_NAME:
            cluster = KafkaCluster.objects.filter(name=data["cluster"]).first()
            if cluster is None:
                return Response({"cluster": ["no such Kafka cluster"]}, status=status.HTTP_400_BAD_REQUEST)
        row = services.register_topic(
            actor=request.user,  # type: ignore[arg-type]
            topic=data["topic"],
            team=team,
            pipeline=pipeline,
            description=data["description"],
            cluster=cluster,
        )
        return Response(DlqTopicSerializer(row).data, status=status.HTTP_201_CREATED)


class RetentionView(ServiceErrorsMixin, APIView):
    """``/api/dlq/retention/``: how long closed dead letters are kept. GET: any signed-in user (their teams'
    policies); POST: set a policy (admin of the team), audited."""

    @extend_schema(responses={200: RetentionSerializer})
    def get(self, request: Request) -> Response:
        """The default, the policies of the caller's teams and the last 20 runs."""
        teams = visible_teams(request.user)
        body = {
            "default_days": settings.DLQ_RETENTION_DAYS,
            "policies": RetentionPolicy.objects.filter(team__in=teams).select_related("team", "pipeline"),
            "runs": RetentionRun.objects.all()[:20],
        }
        return Response(RetentionSerializer(body).data)

    @extend_schema(request=RetentionPolicyWriteSerializer, responses={200: RetentionPolicySerializer})
    def post(self, request: Request) -> Response:
        """Create or change a policy; 400 names the field (unknown team or pipeline, days out of range)."""
        serializer = RetentionPolicyWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team, pipeline = _team_and_pipeline(request, data["team"], data["pipeline"])
        policy = services.set_policy(
            actor=request.user,  # type: ignore[arg-type]
            team=team,
            pipeline=pipeline,
            closed_days=data["closed_days"],
            purge_deleted=data["purge_deleted"],
        )
        return Response(RetentionPolicySerializer(policy).data)
