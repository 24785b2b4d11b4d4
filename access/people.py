"""Managing people: users, teams and memberships, and who may do it (#18 item 5).

Admins (``access.permissions.is_admin``) may do everything: create users, change and deactivate them (never
delete: a deactivated user keeps their history and loses their API token), create and describe teams, and
manage any membership, the admin role included. A team admin (a member whose membership ``manages_team``)
may manage their own team's memberships: add an existing active user, set a role up to approver, remove a
member and mark other members as team admins; never grant the admin role, never touch the membership of an
admin, never change their own.

Every function checks its actor, raises ``PermissionDenied`` (HTTP 403) when the actor may not act and
``access.errors.InvalidRequest`` (HTTP 400, naming the field) on bad input, and changes rows in one
transaction. The audit events are written by ``access.people_audit``'s model signals in that transaction, with
the signed-in user as actor; no event holds a password or a token.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_email, validate_slug
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from rest_framework.authtoken.models import Token

from access.errors import InvalidRequest
from access.models import Membership, Role, Team
from access.permissions import AnyUser, is_admin, visible_teams

#: The roles a team admin may give; the admin role is given by admins only.
TEAM_ADMIN_GRANTS = (Role.VIEWER, Role.OPERATOR, Role.APPROVER)
#: Names a new user cannot take: ``/api/users/me/`` is the caller's own record.
RESERVED_USERNAMES = frozenset({"me"})


# ----------------------------------------------------------------------------------------------- who may


def manages(user: AnyUser, team: Team) -> bool:
    """Whether ``user`` may manage ``team``'s memberships: admins, and members of it marked ``manages_team``."""
    if not user.is_authenticated:
        return False
    return is_admin(user) or Membership.objects.filter(user_id=user.pk, team=team, manages_team=True).exists()


def managed_teams(user: AnyUser) -> QuerySet[Team]:
    """The teams whose memberships ``user`` may manage: all for admins, else those they are team admin of."""
    if is_admin(user):
        return Team.objects.all()
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user_id=user.pk, memberships__manages_team=True).distinct()


def admin_ids() -> set[int]:
    """The ids of every admin: superusers and holders of the admin role in any team."""
    holders = Membership.objects.filter(role=Role.ADMIN).values_list("user_id", flat=True)
    return set(holders) | set(User.objects.filter(is_superuser=True).values_list("pk", flat=True))


def _require_admin(actor: AnyUser, what: str) -> None:
    if not is_admin(actor):
        raise PermissionDenied(f"only admins {what}")


def _require_manager(actor: AnyUser, team: Team) -> None:
    if not manages(actor, team):
        raise PermissionDenied(f"only admins and team admins of {team.name} manage its members")


def _check_team_admin_may_touch(actor: AnyUser, user: User) -> None:
    """For a team admin (not an admin): refuse to touch their own membership or an admin's."""
    if is_admin(actor):
        return
    if user.pk == actor.pk:
        raise PermissionDenied("team admins cannot change their own membership; ask an admin")
    if is_admin(user):
        raise PermissionDenied(
            f"{user.get_username()} is an admin: only admins change an admin's memberships"
        )


def _check_grant(actor: AnyUser, role: Role) -> None:
    if role == Role.ADMIN and not is_admin(actor):
        raise PermissionDenied("only admins grant the admin role")


# ----------------------------------------------------------------------------------------------- parsing


def parse_role(value: object) -> Role:
    """``value`` as a Role; InvalidRequest on ``role`` for anything else."""
    if not isinstance(value, str) or value not in Role.values:
        raise InvalidRequest("role", f"one of {', '.join(Role.values)}")
    return Role(value)


def _validated(field: str, value: str, validator: Any) -> str:
    try:
        validator(value)
    except ValidationError as exc:
        raise InvalidRequest(field, " ".join(exc.messages)) from None
    return value


def _username(value: str) -> str:
    value = value.strip()
    if not value:
        raise InvalidRequest("username", "required")
    if len(value) > 150:
        raise InvalidRequest("username", "at most 150 characters")
    _validated("username", value, User.username_validator)
    if value.lower() in RESERVED_USERNAMES:
        raise InvalidRequest("username", f"{value!r} is reserved")
    return value


def _team_name(value: str) -> str:
    value = value.strip()
    if not value:
        raise InvalidRequest("name", "required")
    if len(value) > 63:
        raise InvalidRequest("name", "at most 63 characters")
    return _validated("name", value, validate_slug)


def active_user(username: str) -> User:
    """The active user named ``username``; InvalidRequest on ``username`` when there is none."""
    user = User.objects.filter(username=username, is_active=True).first()
    if user is None:
        raise InvalidRequest("username", "no active user with this name")
    return user


# ----------------------------------------------------------------------------------------------- users


def create_user(
    *,
    actor: User,
    username: str,
    password: str = "",
    email: str = "",
    first_name: str = "",
    last_name: str = "",
) -> User:
    """A new active user (admins only). Without ``password`` the user cannot log in until one is set (the
    admin site); a password is checked by the site's password validators. Raises PermissionDenied,
    InvalidRequest on ``username`` (taken, malformed), ``password`` or ``email``."""
    _require_admin(actor, "create users")
    username = _username(username)
    if email:
        _validated("email", email, validate_email)
    user = User(username=username, email=email, first_name=first_name, last_name=last_name)
    if password:
        _validated("password", password, lambda value: validate_password(value, user))
        user.set_password(password)
    else:
        user.set_unusable_password()
    try:
        with transaction.atomic():
            if User.objects.filter(username__iexact=username).exists():
                raise InvalidRequest("username", "a user with this name exists")
            user.save()
    except IntegrityError:  # created meanwhile by another request
        raise InvalidRequest("username", "a user with this name exists") from None
    return user


def update_user(
    *,
    actor: User,
    user: User,
    email: str | None = None,
    first_name: str | None = None,
    last_name: str | None = None,
    is_active: bool | None = None,
) -> User:
    """Change the given fields of ``user`` (admins only); ``is_active=False`` deactivates them
    (``deactivate_user``), ``True`` lets them log in again. Raises PermissionDenied, InvalidRequest on
    ``email`` or ``is_active`` (an admin cannot deactivate themselves)."""
    _require_admin(actor, "change users")
    if email:
        _validated("email", email, validate_email)
    if is_active is False and user.pk == actor.pk:
        raise InvalidRequest("is_active", "you cannot deactivate yourself")
    with transaction.atomic():
        locked = User.objects.select_for_update().get(pk=user.pk)
        changed = []
        wanted = {"email": email, "first_name": first_name, "last_name": last_name, "is_active": is_active}
        for name, value in wanted.items():
            if value is not None and getattr(locked, name) != value:
                setattr(locked, name, value)
                changed.append(name)
        if changed:
            locked.save(update_fields=changed)
        if is_active is False:
            # A deactivated user's sessions are refused already (ModelBackend rejects inactive users); the
            # token goes too, so nothing they held works if they are let back in.
            Token.objects.filter(user_id=locked.pk).delete()
    return locked


def deactivate_user(*, actor: User, user: User) -> User:
    """Deactivate ``user`` (admins only): they can no longer log in and their API token is deleted; the row,
    memberships and history stay. Raises PermissionDenied, InvalidRequest on ``is_active`` for oneself."""
    return update_user(actor=actor, user=user, is_active=False)


def users() -> QuerySet[User]:
    """Every user, by name, with their memberships prefetched (what admins list)."""
    return User.objects.order_by("username").prefetch_related("memberships__team")


# ----------------------------------------------------------------------------------------------- teams


def create_team(*, actor: User, name: str, description: str = "") -> Team:
    """A new team (admins only). Raises PermissionDenied, InvalidRequest on ``name`` (malformed or taken)."""
    _require_admin(actor, "create teams")
    name = _team_name(name)
    try:
        with transaction.atomic():
            if Team.objects.filter(name=name).exists():
                raise InvalidRequest("name", "a team with this name exists")
            return Team.objects.create(name=name, description=description)
    except IntegrityError:
        raise InvalidRequest("name", "a team with this name exists") from None


def update_team(*, actor: User, team: Team, name: str | None = None, description: str | None = None) -> Team:
    """Rename or describe ``team`` (admins only). Raises PermissionDenied, InvalidRequest on ``name``."""
    _require_admin(actor, "rename or describe teams")
    fields = []
    if name is not None and name != team.name:
        name = _team_name(name)
        if Team.objects.filter(name=name).exclude(pk=team.pk).exists():
            raise InvalidRequest("name", "a team with this name exists")
        team.name = name
        fields.append("name")
    if description is not None and description != team.description:
        team.description = description
        fields.append("description")
    if fields:
        try:
            with transaction.atomic():
                team.save(update_fields=fields)
        except IntegrityError:
            raise InvalidRequest("name", "a team with this name exists") from None
    return team


def teams_with_members(user: AnyUser) -> QuerySet[Team]:
    """The teams ``user`` may see, by name, with their memberships and users prefetched."""
    return visible_teams(user).order_by("name").prefetch_related("memberships__user")


# ----------------------------------------------------------------------------------------------- members


def members(team: Team) -> QuerySet[Membership]:
    """``team``'s memberships, by user name."""
    return Membership.objects.filter(team=team).select_related("user", "team").order_by("user__username")


def membership(team: Team, username: str) -> Membership | None:
    """``username``'s membership of ``team``, or None."""
    return members(team).filter(user__username=username).first()


def add_member(
    *, actor: User, team: Team, username: str, role: Role | str = Role.VIEWER, manages_team: bool = False
) -> Membership:
    """Make the active user ``username`` a member of ``team`` with ``role`` (admins, and team admins up to
    approver). Raises PermissionDenied; InvalidRequest on ``username`` (no such active user, already a
    member) or ``role``."""
    _require_manager(actor, team)
    role = parse_role(role)
    _check_grant(actor, role)
    user = active_user(username)
    _check_team_admin_may_touch(actor, user)
    try:
        with transaction.atomic():
            if Membership.objects.filter(user=user, team=team).exists():
                raise InvalidRequest("username", f"already a member of {team.name}")
            return Membership.objects.create(user=user, team=team, role=role, manages_team=manages_team)
    except IntegrityError:  # added meanwhile by another request
        raise InvalidRequest("username", f"already a member of {team.name}") from None


def change_member(
    *,
    actor: User,
    membership: Membership,
    role: Role | str | None = None,
    manages_team: bool | None = None,
) -> Membership:
    """Change a member's role and/or team-admin flag (admins; team admins for others' non-admin memberships,
    roles up to approver). Raises PermissionDenied, InvalidRequest on ``role``."""
    _require_manager(actor, membership.team)
    new_role = parse_role(role) if role is not None else None
    if new_role is not None:
        _check_grant(actor, new_role)
    _check_team_admin_may_touch(actor, membership.user)
    with transaction.atomic():
        # Locked so two managers changing the same member at once apply one after the other, each seeing
        # the other's result (the audit event's "before" is then what really came before).
        locked = Membership.objects.select_for_update().select_related("user", "team").get(pk=membership.pk)
        fields = []
        if new_role is not None and locked.role != new_role:
            locked.role = new_role
            fields.append("role")
        if manages_team is not None and locked.manages_team != manages_team:
            locked.manages_team = manages_team
            fields.append("manages_team")
        if fields:
            locked.save(update_fields=fields)
    return locked


def remove_member(*, actor: User, membership: Membership) -> None:
    """Remove a member from their team (admins; team admins for others' non-admin memberships). Raises
    PermissionDenied."""
    _require_manager(actor, membership.team)
    _check_team_admin_may_touch(actor, membership.user)
    with transaction.atomic():
        Membership.objects.filter(pk=membership.pk).delete()


def addable_users(team: Team) -> QuerySet[User]:
    """Active users who are not members of ``team`` (what the "add member" choice offers), by name."""
    return User.objects.filter(is_active=True).exclude(memberships__team=team).order_by("username")
