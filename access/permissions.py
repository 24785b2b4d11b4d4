"""Role checks shared by every app: what a user may do on a team's objects (../shared/DESIGN.md, "Roles")."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from access.models import Membership, Role, Team

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
