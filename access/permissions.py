"""Role checks shared by every app: what a user may do on a team's objects (../shared/DESIGN.md, "Roles")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from rest_framework.permissions import BasePermission

from access.models import Membership, Role, Team

if TYPE_CHECKING:  # DRF's views import the authentication classes, which import this module
    from rest_framework.request import Request
    from rest_framework.views import APIView

AnyUser = User | AbstractBaseUser | AnonymousUser


def is_admin(user: AnyUser) -> bool:
    """Superusers and users holding the admin role in any team are admins everywhere."""
    if not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return Membership.objects.filter(user_id=user.pk, role=Role.ADMIN).exists()


def role_in(user: AnyUser, team: Team) -> Role | None:
    """The user's role for ``team``'s objects: admin for admins, else their membership's role, else None."""
    if not user.is_authenticated:
        return None
    if is_admin(user):
        return Role.ADMIN
    role = Membership.objects.filter(user_id=user.pk, team=team).values_list("role", flat=True).first()
    return Role(role) if role else None


def has_role(user: AnyUser, team: Team, needed: Role) -> bool:
    """True when the user's role in ``team`` is ``needed`` or stronger."""
    role = role_in(user, team)
    return role is not None and Role.rank(role) >= Role.rank(needed)


def require_role(user: AnyUser, team: Team, needed: Role) -> Role:
    """The user's role, or PermissionDenied naming the role that was needed."""
    role = role_in(user, team)
    if role is None or Role.rank(role) < Role.rank(needed):
        raise PermissionDenied(f"this needs the {needed.label.lower()} role in team {team.name}")
    return role


def visible_teams(user: AnyUser) -> QuerySet[Team]:
    """Teams whose objects the user may see: all for admins, their own teams for others."""
    if is_admin(user):
        return Team.objects.all()
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user_id=user.pk).distinct()


def in_a_team(user: AnyUser) -> bool:
    """Whether the user is an admin or a member (any role) of at least one team."""
    if not user.is_authenticated:
        return False
    return is_admin(user) or Membership.objects.filter(user_id=user.pk).exists()


class InATeam(BasePermission):
    """DRF permission: signed in and a member of some team (``in_a_team``); 401 without credentials, 403
    for a signed-in user in no team. For endpoints that spend the server's work on a caller's input without
    touching any team's objects (the DSL playground, dry runs: security review #28, finding 1): a person
    who belongs to no team has nothing to evaluate there."""

    message = "you are not a member of any team"

    def has_permission(self, request: Request, view: APIView) -> bool:
        """True for a signed-in member of a team."""
        return bool(request.user and request.user.is_authenticated and in_a_team(request.user))
