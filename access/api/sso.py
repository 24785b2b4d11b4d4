"""``/api/sso/group-mappings/`` (and its ``providers/``): identity provider groups mapped to team roles
(admins), over ``access.sso.mapping`` (which holds the rules and audits each change).

- ``sso/group-mappings/providers/``: the configured identity providers (id, name, issuer, groups claim; never a secret).
- ``sso/group-mappings/``: list, create (``POST {provider, group, team, role}``), change the role
  (``PATCH {id}/``) and delete (``DELETE {id}/``). A change applies at each member's next sign-in.

Errors: bad input -> 400 ``{field: [reason]}``; not an admin -> 403; an unknown mapping or team -> 404/400.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from access.api.people import PeopleErrorsMixin, _actor
from access.errors import InvalidRequest
from access.models import Role, SsoGroupMapping, Team
from access.permissions import is_admin
from access.sso import mapping


class GroupMappingSerializer(serializers.ModelSerializer[SsoGroupMapping]):
    """A provider's group and the role in a team it gives."""

    team = serializers.CharField(source="team.name")

    class Meta:
        model = SsoGroupMapping
        fields = ["id", "provider", "group", "team", "role", "created_at"]


class GroupMappingCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """A new mapping: ``group`` as the provider's groups claim names it."""

    provider = serializers.CharField(max_length=31)
    group = serializers.CharField(max_length=255)
    team = serializers.CharField(max_length=63)
    role = serializers.ChoiceField(choices=Role.choices)


class GroupMappingUpdateSerializer(serializers.Serializer[dict[str, Any]]):
    """A mapping's new role."""

    role = serializers.ChoiceField(choices=Role.choices)


class ProviderSerializer(serializers.Serializer[dict[str, Any]]):
    """A configured identity provider, as anyone may see it (no secret, no reference to one)."""

    id = serializers.CharField()
    name = serializers.CharField()
    issuer = serializers.CharField()
    groups_claim = serializers.CharField()


class GroupMappingViewSet(PeopleErrorsMixin, viewsets.GenericViewSet[SsoGroupMapping]):
    """Group mappings by id (admins)."""

    lookup_value_regex = "[0-9]+"
    serializer_class = GroupMappingSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[SsoGroupMapping]:
        return mapping.mappings() if is_admin(self.request.user) else SsoGroupMapping.objects.none()

    def _require_admin(self) -> None:
        if not is_admin(self.request.user):
            self.permission_denied(self.request, message="only admins map identity provider groups")

    def list(self, request: Request) -> Response:
        """Every mapping, by provider, group and team (admins)."""
        self._require_admin()
        return Response(GroupMappingSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=GroupMappingCreateSerializer, responses={201: GroupMappingSerializer})
    def create(self, request: Request) -> Response:
        """Map a provider's group to a role in a team (admins; audited)."""
        self._require_admin()
        body = GroupMappingCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        team = Team.objects.filter(name=data["team"]).first()
        if team is None:
            raise InvalidRequest("team", "no team with this name")
        created = mapping.create_mapping(
            actor=_actor(request),
            provider=data["provider"],
            group=data["group"],
            team=team,
            role=data["role"],
        )
        return Response(GroupMappingSerializer(created).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=GroupMappingUpdateSerializer, responses={200: GroupMappingSerializer})
    def partial_update(self, request: Request, pk: str) -> Response:
        """Give a mapping another role (admins; audited)."""
        self._require_admin()
        body = GroupMappingUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changed = mapping.change_mapping(
            actor=_actor(request), mapping=self.get_object(), role=body.validated_data["role"]
        )
        return Response(GroupMappingSerializer(changed).data)

    def destroy(self, request: Request, pk: str) -> Response:
        """Delete a mapping (admins; audited): its members lose the role at their next sign-in."""
        self._require_admin()
        mapping.delete_mapping(actor=_actor(request), mapping=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: ProviderSerializer(many=True)})
    @action(detail=False, methods=["get"], url_path="providers")
    def providers(self, request: Request) -> Response:
        """The configured identity providers."""
        rows = [
            {"id": p.id, "name": p.name, "issuer": p.issuer, "groups_claim": p.groups_claim}
            for p in settings.SSO_PROVIDERS
        ]
        return Response(rows)
