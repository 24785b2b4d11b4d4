"""The people pages: ``/people/`` (admins and team admins) shows teams, their members, roles and team admins,
with the controls the viewer may use; ``/account/`` (everyone) shows the signed-in user's API token.

Both are read-only renderings: every change is a fetch() from ``static/js/people.js`` to the REST API
(``access.api.people``, ``access.api.tokens``), so the page and a script meet the same rules in
``access.people`` and ``access.api_tokens``, and the same audit events.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from access import api_tokens, people
from access.models import Membership, Role, Team
from access.permissions import is_admin
from access.sso import mapping


@dataclass(frozen=True)
class MemberRow:
    """A member as the people page shows them; ``editable`` when the viewer may change or remove them (a
    team admin may not touch an admin's membership nor their own: ``access.people``'s rules)."""

    membership: Membership
    editable: bool


@dataclass(frozen=True)
class TeamPanel:
    """One team as the people page shows it: its members, whether the viewer manages it, and which roles
    they may give there (admins: all; team admins: up to approver)."""

    team: Team
    members: list[MemberRow]
    manages: bool
    roles: list[tuple[str, str]]


def _rows(
    team: Team, *, viewer_pk: int | None, admin: bool, manages: bool, admins: set[int]
) -> list[MemberRow]:
    rows = []
    for membership in sorted(team.memberships.all(), key=lambda m: m.user.get_username()):
        touchable = admin or (membership.user_id != viewer_pk and membership.user_id not in admins)
        rows.append(MemberRow(membership, editable=manages and touchable))
    return rows


@login_required
@require_GET
def people_page(request: HttpRequest) -> HttpResponse:
    """``/people/``: the teams the viewer may see with their members (403 unless admin or team admin); for
    admins also every user, the forms to create users and teams, and the identity provider groups mapped
    to team roles."""
    user = request.user
    admin = is_admin(user)
    managed = set(people.managed_teams(user).values_list("pk", flat=True))
    if not admin and not managed:
        raise PermissionDenied("the people page is for admins and team admins")
    grantable = Role.choices if admin else [(r.value, r.label) for r in people.TEAM_ADMIN_GRANTS]
    admins = people.admin_ids()
    panels = [
        TeamPanel(
            team=team,
            members=_rows(team, viewer_pk=user.pk, admin=admin, manages=team.pk in managed, admins=admins),
            manages=team.pk in managed,
            roles=grantable,
        )
        for team in people.teams_with_members(user)
    ]
    return render(
        request,
        "access/people.html",
        {
            "panels": panels,
            "is_admin": admin,
            "users": list(people.users().select_related("auth_token")) if admin else [],
            # Suggestions for the add-member box: admins only. A team admin types the exact name, so one
            # team's admin does not get the list of everyone in every other team.
            "active_usernames": list(people.users().filter(is_active=True).values_list("username", flat=True))
            if admin
            else [],
            # Identity provider groups mapped to team roles (admins; access.sso.mapping), and what to map.
            "sso_providers": list(settings.SSO_PROVIDERS) if admin else [],
            "sso_mappings": list(mapping.mappings()) if admin else [],
            "all_teams": list(Team.objects.order_by("name")) if admin else [],
            "roles": Role.choices,
            "default_team": settings.SSO_DEFAULT_TEAM,
            "section": "people",
        },
    )


@login_required
@require_GET
def account_page(request: HttpRequest) -> HttpResponse:
    """``/account/``: the signed-in user's memberships and API token (its first characters and creation time
    only: the key is shown once, by the page's script, when it is created)."""
    user = request.user
    assert isinstance(user, User)  # login_required let only users in
    memberships = Membership.objects.filter(user_id=user.pk).select_related("team")
    return render(
        request,
        "access/account.html",
        {
            "token": api_tokens.token_info(user),
            "memberships": memberships.order_by("team__name"),
            "section": "account",
        },
    )
