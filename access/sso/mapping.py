"""Group mappings: an identity provider's group -> a role in a team (``access.models.SsoGroupMapping``), and
applying them to a person at each sign-in.

Admins manage mappings (``create_mapping``, ``change_mapping``, ``delete_mapping``; each in one transaction
with one audit event ``sso_mapping.create|change|delete``). ``apply_groups`` makes a person's SSO-granted
memberships (``Membership.sso``) exactly what their groups map to now: created, changed to the strongest
mapped role per team, or removed when no group of theirs maps to that team any more. Memberships an admin
granted by hand are left alone. A person in no mapped group gets ``settings.SSO_DEFAULT_TEAM`` (as
``SSO_DEFAULT_ROLE``) when it is set, else no team. Membership changes are audited by ``access.people_audit``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from access import audit
from access.errors import InvalidRequest
from access.models import Membership, Role, SsoGroupMapping, Team
from access.people import parse_role
from access.permissions import AnyUser, is_admin

#: The most groups of one person a sign-in's audit event lists (a provider may send hundreds).
AUDITED_GROUPS = 50


def provider_ids() -> list[str]:
    """The ids of the configured identity providers, in configuration order."""
    return [provider.id for provider in settings.SSO_PROVIDERS]


def mappings() -> QuerySet[SsoGroupMapping]:
    """Every mapping, by provider, group and team name, with its team."""
    return SsoGroupMapping.objects.select_related("team").order_by("provider", "group", "team__name")


def _require_admin(actor: AnyUser) -> None:
    if not is_admin(actor):
        raise PermissionDenied("only admins map identity provider groups to teams")


def _state(mapping: SsoGroupMapping) -> dict[str, str]:
    return {
        "provider": mapping.provider,
        "group": mapping.group,
        "team": mapping.team.name,
        "role": mapping.role,
    }


def _provider(value: str) -> str:
    if value not in provider_ids():
        known = ", ".join(provider_ids()) or "none is configured"
        raise InvalidRequest("provider", f"not a configured identity provider ({known})")
    return value


def _group(value: str) -> str:
    value = value.strip()
    if not value or len(value) > 255:
        raise InvalidRequest("group", "1 to 255 characters")
    return value


def create_mapping(
    *, actor: User, provider: str, group: str, team: Team, role: Role | str
) -> SsoGroupMapping:
    """Map ``provider``'s ``group`` to ``role`` in ``team`` (admins only). Raises PermissionDenied;
    InvalidRequest on ``provider`` (not configured), ``group`` (empty, too long, mapped to this team
    already) or ``role``."""
    _require_admin(actor)
    provider, group, role = _provider(provider), _group(group), parse_role(role)
    try:
        with transaction.atomic():
            mapping = SsoGroupMapping.objects.create(provider=provider, group=group, team=team, role=role)
            audit.record(
                actor=actor,
                action="sso_mapping.create",
                target_type="sso_mapping",
                target_id=mapping.pk,
                after=_state(mapping),
                details=_state(mapping),
            )
    except IntegrityError:
        raise InvalidRequest("group", f"{group!r} of {provider} is mapped to {team.name} already") from None
    return mapping


def change_mapping(*, actor: User, mapping: SsoGroupMapping, role: Role | str) -> SsoGroupMapping:
    """Give ``mapping`` another role (admins only); it applies at each member's next sign-in. Raises
    PermissionDenied, InvalidRequest on ``role``."""
    _require_admin(actor)
    new_role = parse_role(role)
    with transaction.atomic():
        locked = SsoGroupMapping.objects.select_for_update().select_related("team").get(pk=mapping.pk)
        before = _state(locked)
        if locked.role != new_role:
            locked.role = new_role
            locked.save(update_fields=["role"])
            audit.record(
                actor=actor,
                action="sso_mapping.change",
                target_type="sso_mapping",
                target_id=locked.pk,
                before=before,
                after=_state(locked),
                details={**_state(locked), "before": before["role"]},
            )
    return locked


def delete_mapping(*, actor: User, mapping: SsoGroupMapping) -> None:
    """Remove ``mapping`` (admins only); its members lose the role at their next sign-in. Raises
    PermissionDenied."""
    _require_admin(actor)
    with transaction.atomic():
        state = _state(mapping)
        SsoGroupMapping.objects.filter(pk=mapping.pk).delete()
        audit.record(
            actor=actor,
            action="sso_mapping.delete",
            target_type="sso_mapping",
            target_id=mapping.pk,
            before=state,
            details=state,
        )


@dataclass(frozen=True)
class Applied:
    """What a sign-in's groups gave: ``roles`` {team name: role} of the SSO-granted memberships now, and
    whether that is the configured default team (``defaulted``: in no mapped group)."""

    roles: dict[str, str]
    defaulted: bool


def desired_roles(*, provider: str, groups: Iterable[str]) -> tuple[dict[int, Role], bool]:
    """{team id: strongest mapped role} for a person in ``groups`` at ``provider``, and whether it is the
    default team's (no group mapped). Empty when nothing maps and no default team is configured."""
    wanted: dict[int, Role] = {}
    for mapping in SsoGroupMapping.objects.filter(provider=provider, group__in=list(groups)):
        role = Role(mapping.role)
        current = wanted.get(mapping.team_id)
        if current is None or Role.rank(role) > Role.rank(current):
            wanted[mapping.team_id] = role
    if wanted or not settings.SSO_DEFAULT_TEAM:
        return wanted, False
    team = Team.objects.filter(name=settings.SSO_DEFAULT_TEAM).first()
    if team is None:
        return {}, False
    return {team.pk: Role(settings.SSO_DEFAULT_ROLE)}, True


def apply_groups(*, user: User, provider: str, groups: Iterable[str]) -> Applied:
    """Make ``user``'s SSO-granted memberships what ``groups`` (their groups at ``provider`` now) map to, in
    one transaction (the user's memberships locked, so two sign-ins at once apply one after the other).
    A hand-granted membership of a team is never changed or removed."""
    wanted, defaulted = desired_roles(provider=provider, groups=groups)
    with transaction.atomic():
        existing = {
            m.team_id: m
            for m in Membership.objects.select_for_update().select_related("team", "user").filter(user=user)
        }
        for team_id, role in wanted.items():
            membership = existing.get(team_id)
            if membership is None:
                Membership.objects.create(user=user, team_id=team_id, role=role, sso=True)
            elif membership.sso and membership.role != role:
                membership.role = role
                membership.save(update_fields=["role"])
        for team_id, membership in existing.items():
            if membership.sso and team_id not in wanted:
                membership.delete()
        roles = dict(
            Membership.objects.filter(user=user, sso=True)
            .order_by("team__name")
            .values_list("team__name", "role")
        )
    return Applied(roles=roles, defaulted=defaulted)
