"""Template context shared by every page."""

from __future__ import annotations

from django.http import HttpRequest

from access.models import Membership
from access.permissions import is_admin


def identity(request: HttpRequest) -> dict[str, object]:
    """``identity``: for a signed-in user, whether they are an admin (everywhere), whether they manage a
    team's members (``manages_team``: a team admin) and their role in each of their teams (``[(team name,
    role label)]``), shown in the header; empty for anonymous visitors."""
    user = request.user
    if not user.is_authenticated:
        return {"identity": None}
    memberships = Membership.objects.filter(user_id=user.pk).select_related("team").order_by("team__name")
    return {
        "identity": {
            "is_admin": is_admin(user),
            "manages_team": any(m.manages_team for m in memberships),
            "memberships": [(m.team.name, m.get_role_display()) for m in memberships],
        }
    }
