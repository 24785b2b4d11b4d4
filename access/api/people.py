"""``/api/users/``, ``/api/teams/`` and ``/api/teams/{name}/members/``: people, teams and memberships, over
``access.people`` (which holds the rules and whose changes are audited).

- ``users/``: admins list, create (``POST``), read and change (``PATCH``, ``is_active: false`` deactivates:
  never a delete) users, and end one's sessions and API token at once (``POST {username}/end-sessions/``);
  anyone else gets 403, except ``GET users/me/`` (the caller's own record).
- ``teams/``: the teams the caller may see (all for admins); admins create and change (``PATCH``) them.
- ``teams/{name}/members/``: members of a team the caller may see; admins and the team's team admins add
  (``POST``), change (``PATCH {username}/``) and remove (``DELETE {username}/``) members.

Errors: bad input -> 400 ``{field: [reason]}``; not allowed -> 403; a team the caller cannot see, or a user or
member that does not exist -> 404.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from access import people, session_end
from access.errors import InvalidRequest
from access.models import Membership, Role, Team
from access.permissions import is_admin, visible_teams


class PeopleErrorsMixin:
    """Turns ``access.errors.InvalidRequest`` into 400 ``{field: [reason]}``; PermissionDenied and Http404
    are DRF's own 403 and 404."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, InvalidRequest):
            return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
        return super().handle_exception(exc)  # type: ignore[misc, no-any-return]


def _actor(request: Request) -> User:
    user = request.user
    assert isinstance(user, User)  # IsAuthenticated (the default permission) let only users in
    return user


# ----------------------------------------------------------------------------------------------- shapes


class MembershipBriefSerializer(serializers.ModelSerializer[Membership]):
    """One of a user's memberships: the team, the role in it, whether they manage it."""

    team = serializers.CharField(source="team.name")

    class Meta:
        model = Membership
        fields = ["team", "role", "manages_team"]


class UserSerializer(serializers.ModelSerializer[User]):
    """A user as admins see them (never a password or a token)."""

    is_admin = serializers.SerializerMethodField(help_text="admin in every team (admin role in any team)")
    memberships = MembershipBriefSerializer(many=True, read_only=True)

    class Meta:
        model = User
        fields = [
            "username",
            "email",
            "first_name",
            "last_name",
            "is_active",
            "is_admin",
            "date_joined",
            "last_login",
            "memberships",
        ]

    def get_is_admin(self, user: User) -> bool:
        """Whether the user is an admin everywhere."""
        return is_admin(user)


class UserCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """A new user. Without a password they cannot log in until one is set; a password is checked by the
    site's password validators and never shown again."""

    username = serializers.CharField(max_length=150)
    password = serializers.CharField(
        max_length=4096, required=False, allow_blank=True, write_only=True, trim_whitespace=False
    )
    email = serializers.CharField(max_length=254, required=False, allow_blank=True)
    first_name = serializers.CharField(max_length=150, required=False, allow_blank=True)
    last_name = serializers.CharField(max_length=150, required=False, allow_blank=True)


class UserUpdateSerializer(serializers.Serializer[dict[str, Any]]):
    """The fields of a user an admin may change; ``is_active: false`` deactivates (and deletes their token)."""

    email = serializers.CharField(max_length=254, required=False, allow_blank=True)
    first_name = serializers.CharField(max_length=150, required=False, allow_blank=True)
    last_name = serializers.CharField(max_length=150, required=False, allow_blank=True)
    is_active = serializers.BooleanField(required=False)


class EndedSerializer(serializers.Serializer[dict[str, Any]]):
    """What ending a user's access ended: the number of sessions, and whether there was an API token."""

    sessions = serializers.IntegerField()
    token = serializers.BooleanField()


class TeamSerializer(serializers.ModelSerializer[Team]):
    """A team, and whether the caller may manage its members."""

    manages = serializers.SerializerMethodField(help_text="the caller may manage this team's members")

    class Meta:
        model = Team
        fields = ["name", "description", "created_at", "manages"]

    def get_manages(self, team: Team) -> bool:
        """Whether the requesting user manages this team."""
        return people.manages(self.context["request"].user, team)


class TeamWriteSerializer(serializers.Serializer[dict[str, Any]]):
    """Create (``name`` required) or change a team."""

    name = serializers.CharField(max_length=63, required=False)
    description = serializers.CharField(max_length=10_000, required=False, allow_blank=True)


class MemberSerializer(serializers.ModelSerializer[Membership]):
    """A member of a team: who, their role in it and whether they manage it."""

    username = serializers.CharField(source="user.username")
    is_active = serializers.BooleanField(source="user.is_active")

    class Meta:
        model = Membership
        fields = ["username", "is_active", "role", "manages_team"]


class MemberAddSerializer(serializers.Serializer[dict[str, Any]]):
    """An existing active user to add, with a role (team admins: up to approver)."""

    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.VIEWER)
    manages_team = serializers.BooleanField(default=False)


class MemberChangeSerializer(serializers.Serializer[dict[str, Any]]):
    """A new role and/or team-admin flag for a member."""

    role = serializers.ChoiceField(choices=Role.choices, required=False)
    manages_team = serializers.BooleanField(required=False)


# ----------------------------------------------------------------------------------------------- views


class UsersByName(CursorPagination):
    """Keyset pages of users by name."""

    ordering = "username"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 500


class UserViewSet(PeopleErrorsMixin, viewsets.GenericViewSet[User]):
    """Users by ``username`` (admins), and ``me/`` for everyone."""

    serializer_class = UserSerializer
    pagination_class = UsersByName
    lookup_field = "username"
    lookup_value_regex = r"[\w.@+-]+"

    def get_queryset(self) -> QuerySet[User]:
        return people.users() if is_admin(self.request.user) else User.objects.none()

    def _require_admin(self) -> None:
        if not is_admin(self.request.user):
            self.permission_denied(self.request, message="only admins manage users; GET users/me/ is yours")

    def list(self, request: Request) -> Response:
        """Every user, by name (admins)."""
        self._require_admin()
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(UserSerializer(page, many=True).data)

    @extend_schema(request=UserCreateSerializer, responses={201: UserSerializer})
    def create(self, request: Request) -> Response:
        """Create a user (admins)."""
        self._require_admin()
        body = UserCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = people.create_user(actor=_actor(request), **body.validated_data)
        return Response(UserSerializer(user).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, username: str) -> Response:
        """One user (admins)."""
        self._require_admin()
        return Response(UserSerializer(self.get_object()).data)

    @extend_schema(request=UserUpdateSerializer, responses={200: UserSerializer})
    def partial_update(self, request: Request, username: str) -> Response:
        """Change a user (admins); ``is_active: false`` deactivates them and deletes their API token."""
        self._require_admin()
        user = self.get_object()
        body = UserUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = people.update_user(actor=_actor(request), user=user, **body.validated_data)
        return Response(UserSerializer(people.users().get(pk=user.pk)).data)

    @action(detail=False, methods=["get"])
    def me(self, request: Request) -> Response:
        """The caller's own record."""
        return Response(UserSerializer(people.users().get(pk=_actor(request).pk)).data)

    @extend_schema(request=None, responses={200: EndedSerializer})
    @action(detail=True, methods=["post"], url_path="end-sessions")
    def end_sessions(self, request: Request, username: str) -> Response:
        """End every browser session of the user and delete their API token, at once (admins; audited)."""
        self._require_admin()
        ended = session_end.end_access(actor=_actor(request), user=self.get_object())
        return Response({"sessions": ended.sessions, "token": ended.token})


class TeamsByName(CursorPagination):
    """Keyset pages of teams by name."""

    ordering = "name"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 500


class TeamViewSet(PeopleErrorsMixin, viewsets.GenericViewSet[Team]):
    """Teams by ``name``: those the caller may see; admins create and change them."""

    serializer_class = TeamSerializer
    pagination_class = TeamsByName
    lookup_field = "name"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def get_queryset(self) -> QuerySet[Team]:
        return visible_teams(self.request.user)

    def list(self, request: Request) -> Response:
        """The teams the caller may see, by name."""
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(request=TeamWriteSerializer, responses={201: TeamSerializer})
    def create(self, request: Request) -> Response:
        """Create a team (admins)."""
        body = TeamWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if "name" not in body.validated_data:
            raise InvalidRequest("name", "required")
        team = people.create_team(actor=_actor(request), **body.validated_data)
        return Response(self.get_serializer(team).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, name: str) -> Response:
        """One team the caller may see."""
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=TeamWriteSerializer, responses={200: TeamSerializer})
    def partial_update(self, request: Request, name: str) -> Response:
        """Rename or describe a team (admins)."""
        team = self.get_object()
        body = TeamWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = people.update_team(actor=_actor(request), team=team, **body.validated_data)
        return Response(self.get_serializer(team).data)


class MemberViewSet(PeopleErrorsMixin, viewsets.GenericViewSet[Membership]):
    """``teams/{team}/members/``: a visible team's members; admins and its team admins change them."""

    serializer_class = MemberSerializer
    pagination_class = None  # a team's members are few: one answer
    lookup_field = "username"
    queryset = Membership.objects.none()  # typed for the schema; get_queryset answers

    def _team(self) -> Team:
        team = visible_teams(self.request.user).filter(name=self.kwargs["team"]).first()
        if team is None:
            raise Http404("no such team among yours")
        return team

    def get_queryset(self) -> QuerySet[Membership]:
        return people.members(self._team())

    def _member(self, team: Team, username: str) -> Membership:
        found = people.membership(team, username)
        if found is None:
            raise Http404(f"{username} is not a member of {team.name}")
        return found

    def list(self, request: Request, team: str) -> Response:
        """The team's members, by name."""
        return Response(MemberSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=MemberAddSerializer, responses={201: MemberSerializer})
    def create(self, request: Request, team: str) -> Response:
        """Add an existing active user to the team (admins; team admins up to approver)."""
        found = self._team()
        body = MemberAddSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        added = people.add_member(actor=_actor(request), team=found, **body.validated_data)
        return Response(MemberSerializer(added).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=MemberChangeSerializer, responses={200: MemberSerializer})
    def partial_update(self, request: Request, team: str, username: str) -> Response:
        """Change a member's role or team-admin flag (admins; team admins for other non-admin members)."""
        member = self._member(self._team(), username)
        body = MemberChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changed = people.change_member(actor=_actor(request), membership=member, **body.validated_data)
        return Response(MemberSerializer(changed).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, team: str, username: str) -> Response:
        """Remove a member from the team (admins; team admins for other non-admin members)."""
        member = self._member(self._team(), username)
        people.remove_member(actor=_actor(request), membership=member)
        return Response(status=status.HTTP_204_NO_CONTENT)
