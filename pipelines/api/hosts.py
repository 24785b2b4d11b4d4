"""``/api/hosts/``: the runner hosts (any signed-in user reads; admins drain and undrain), over
``pipelines.runner_hosts`` (what is shown) and ``pipelines.supervision.drain`` (the drain itself).

A host lists the pipelines on it only when the caller may see them (their team's, or every one for an admin);
its capacity counts all of them.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import is_admin
from pipelines.api.serializers import ActionSerializer
from pipelines.models import RunnerHost, RunnerHostState
from pipelines.runner_hosts import Capacity, HostedPipeline, HostView, describe_hosts
from pipelines.supervision.drain import drain_host, undrain_host


class CapacitySerializer(serializers.Serializer[Capacity]):
    """A capacity: ``total`` the host offers, ``used`` by its open runs, ``free`` what is left."""

    total = serializers.IntegerField()
    used = serializers.IntegerField()
    free = serializers.IntegerField()


class HostedPipelineSerializer(serializers.Serializer[HostedPipeline]):
    """A pipeline whose open run is on the host (only pipelines the caller may see)."""

    name = serializers.CharField()
    state = serializers.CharField(help_text="the run's state: starting, running or stopping")
    epoch = serializers.IntegerField(allow_null=True, help_text="the lease epoch the run holds")
    run_id = serializers.CharField()


class HostSerializer(serializers.Serializer[HostView]):
    """A runner host: its state on the database's clock, capacity and the pipelines on it."""

    name = serializers.CharField()
    state = serializers.ChoiceField(RunnerHostState.choices, help_text="up, draining or lost")
    heartbeat_age_s = serializers.FloatField(help_text="seconds since its agent's last heartbeat")
    slots = CapacitySerializer(help_text="driver slots")
    memory_mb = CapacitySerializer(help_text="memory in MB, each driver charged STREAMFORGE_DRIVER_MEMORY_MB")
    labels = serializers.ListField(child=serializers.CharField())
    draining = serializers.BooleanField(help_text="an admin asked for its pipelines to move off")
    queue = serializers.CharField(help_text="the Celery queue only this runner reads")
    started_at = serializers.DateTimeField(help_text="when its agent started")
    drain_requested_at = serializers.DateTimeField(allow_null=True)
    pipelines = HostedPipelineSerializer(many=True)


class HostViewSet(viewsets.ViewSet):
    """``/api/hosts/``: runner hosts by name. Reading needs only a sign-in; ``drain/`` and ``undrain/`` need
    the admin role and are audited (``host.drain``, ``host.undrain``)."""

    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9-]{0,62}"

    def _one(self, request: Request, name: str) -> HostView:
        found = describe_hosts(request.user, name=name)
        if not found:
            raise NotFound(f"no runner host named {name!r}")
        return found[0]

    @extend_schema(responses={200: HostSerializer(many=True)})
    def list(self, request: Request) -> Response:
        """Every runner host, by name (an installation has a handful: not paginated)."""
        hosts = describe_hosts(request.user)
        return Response(HostSerializer(hosts, many=True).data)  # type: ignore[arg-type]  # many=True

    @extend_schema(responses={200: HostSerializer})
    def retrieve(self, request: Request, name: str) -> Response:
        """One runner host."""
        return Response(HostSerializer(self._one(request, name)).data)

    def _drain(self, request: Request, name: str, *, draining: bool) -> Response:
        if not is_admin(request.user):
            raise PermissionDenied("draining runner hosts is for admins")
        host = RunnerHost.objects.filter(name=name).first()
        if host is None:
            raise NotFound(f"no runner host named {name!r}")
        serializer = ActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        change: Any = drain_host if draining else undrain_host
        actor: User = request.user  # type: ignore[assignment]  # an admin is a signed-in User
        change(actor=actor, host=host, reason=serializer.validated_data["reason"])
        return Response(HostSerializer(self._one(request, name)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=ActionSerializer, responses={202: HostSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str) -> Response:
        """Move the host's pipelines off, one at a time, each with a clean stop and a start elsewhere; no new
        pipeline is placed on it (admin; ``reason`` optional, audited). 202: the reconcile carries it out."""
        return self._drain(request, name, draining=True)

    @extend_schema(request=ActionSerializer, responses={202: HostSerializer})
    @action(detail=True, methods=["post"])
    def undrain(self, request: Request, name: str) -> Response:
        """Let the host take pipelines again; those already moved stay where they are (admin, audited)."""
        return self._drain(request, name, draining=False)
