"""``/api/dlq/redrive-policies/``: redrive policies of the caller's teams (``dlq.services.redrive``).

``GET`` lists them (``?pipeline=`` one pipeline's), ``POST`` creates one for a pipeline (operator; it waits
for an approver: 202), ``GET {id}/`` shows one with its latest runs, ``PATCH {id}/`` changes its settings (a
change that only narrows applies at once, 200; one that widens waits for an approver, 202 with the approval
request), ``DELETE {id}/`` retires it, ``POST {id}/pause/`` and ``{id}/resume/``. Approving or rejecting goes
through ``/api/dlq/approvals/{id}/approve|reject/`` like every four-eyes request. Errors: 400 naming the
field, 403 without the role, 404 for other teams' policies, 409 for a move its state does not allow.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import visible_teams
from dlq.api.serializers import BulkSerializer, OptionalReasonSerializer
from dlq.api.views import ServiceErrorsMixin
from dlq.models import RedrivePolicy
from dlq.services import redrive
from dlq.services.errors import InvalidRequest
from pipelines.models import Pipeline


class RedrivePolicySerializer(serializers.ModelSerializer[RedrivePolicy]):
    """A redrive policy: its settings, state, schedule, the change waiting for an approver (if any) and, on
    its own page (``retrieve``), its latest runs (bulk actions)."""

    pipeline = serializers.CharField(source="pipeline.name")
    team = serializers.CharField(source="team.name")
    created_by = serializers.CharField(source="created_by.username")
    settings = serializers.SerializerMethodField()
    description = serializers.SerializerMethodField()
    pending_approval = serializers.SerializerMethodField()
    runs = serializers.SerializerMethodField()

    class Meta:
        model = RedrivePolicy
        fields = [
            "id", "name", "pipeline", "team", "state", "paused_reason", "settings", "description",
            "active_since", "next_run_at", "last_run_at", "created_by", "created_at", "updated_at",
            "pending_approval", "runs",
        ]  # fmt: skip

    def get_settings(self, obj: RedrivePolicy) -> dict[str, Any]:
        """The settings it runs with (``PolicySettings.as_json``)."""
        return redrive.PolicySettings.of(obj).as_json()

    def get_description(self, obj: RedrivePolicy) -> str:
        """The settings in one line."""
        return redrive.describe(redrive.PolicySettings.of(obj))

    def get_pending_approval(self, obj: RedrivePolicy) -> dict[str, Any] | None:
        """The approval request waiting for a decision: its id, who asked, the settings asked for."""
        pending = redrive.pending_change(obj)
        if pending is None:
            return None
        return {
            "id": pending.pk,
            "requested_by": pending.requested_by.get_username(),
            "change": pending.change,
        }

    def get_runs(self, obj: RedrivePolicy) -> list[dict[str, Any]] | None:
        """Its latest 20 runs on its own page; null in lists."""
        if not self.context.get("with_runs"):
            return None
        return [dict(BulkSerializer(run).data) for run in redrive.runs_of(obj, limit=20)]


class RedrivePolicyCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """``POST``: the pipeline (name) and the policy's name; the settings are read by
    ``PolicySettings.from_mapping`` from the same body (defaults for those left out)."""

    pipeline = serializers.SlugField(max_length=63)
    name = serializers.CharField(max_length=100)


def _refuse_unknown(data: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidRequest("non_field_errors", "a JSON object")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise InvalidRequest(unknown[0], f"unknown field; use {', '.join(allowed)}")
    return {name: data[name] for name in data if name in redrive.SETTING_NAMES}


class RedrivePolicyViewSet(ServiceErrorsMixin, viewsets.ReadOnlyModelViewSet[RedrivePolicy]):
    """See the module's docstring."""

    lookup_value_regex = "[0-9]+"
    serializer_class = RedrivePolicySerializer

    def get_queryset(self) -> QuerySet[RedrivePolicy]:
        policies = redrive.visible_policies(self.request.user).select_related("created_by")
        name = self.request.query_params.get("pipeline", "").strip()
        return policies.filter(pipeline__name=name) if name else policies

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """One policy with its latest runs."""
        return Response(RedrivePolicySerializer(self.get_object(), context={"with_runs": True}).data)

    @extend_schema(request=RedrivePolicyCreateSerializer, responses={202: RedrivePolicySerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A new policy (operator); it runs once an approver other than the caller approves it."""
        settings_given = _refuse_unknown(request.data, ("pipeline", "name", *redrive.SETTING_NAMES))
        serializer = RedrivePolicyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        pipeline = (
            Pipeline.objects.filter(
                name=serializer.validated_data["pipeline"], team__in=visible_teams(request.user)
            )
            .select_related("team")
            .first()
        )
        if pipeline is None:
            raise InvalidRequest("pipeline", "no such pipeline in your teams")
        policy = redrive.create_policy(
            actor=request.user,  # type: ignore[arg-type]
            pipeline=pipeline,
            name=serializer.validated_data["name"],
            settings=redrive.PolicySettings.from_mapping(settings_given),
        )
        return Response(RedrivePolicySerializer(policy).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: RedrivePolicySerializer, 202: RedrivePolicySerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Change settings (operator): narrowing applies now (200), widening waits for an approver (202)."""
        changes = _refuse_unknown(request.data, (*redrive.SETTING_NAMES, "reason"))
        reason = request.data.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 2000:
            raise InvalidRequest("reason", "text of at most 2000 characters")
        policy = self.get_object()
        approval = redrive.update_policy(
            actor=request.user,  # type: ignore[arg-type]
            policy=policy,
            changes=changes,
            reason=reason,
        )
        policy.refresh_from_db()
        answer = status.HTTP_202_ACCEPTED if approval is not None else status.HTTP_200_OK
        return Response(RedrivePolicySerializer(policy).data, status=answer)

    @extend_schema(request=OptionalReasonSerializer, responses={200: RedrivePolicySerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Retire the policy (operator); kept as deleted for the audit trail and its runs."""
        return self._move(request, redrive.delete_policy)

    def _move(self, request: Request, operation: Any) -> Response:
        serializer = OptionalReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        policy = operation(
            actor=request.user, policy=self.get_object(), reason=serializer.validated_data["reason"]
        )
        return Response(RedrivePolicySerializer(policy).data)

    @extend_schema(request=OptionalReasonSerializer, responses={200: RedrivePolicySerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        """Stop starting runs (operator; 409 unless active)."""
        return self._move(request, redrive.pause_policy)

    @extend_schema(request=OptionalReasonSerializer, responses={200: RedrivePolicySerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        """Run again, the next run due now (operator; 409 unless paused)."""
        return self._move(request, redrive.resume_policy)
