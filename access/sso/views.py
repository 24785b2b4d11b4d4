"""Pages of single sign-on: the one a person in no team lands on, and the one for a deactivated user."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from access.sso.adapters import configured
from access.sso.backends import SSO_SESSION_KEY


@login_required
@require_GET
def no_team(request: HttpRequest) -> HttpResponse:
    """``/sso/no-team/``: signed in, but none of the person's groups maps to a team here (and no default
    team is configured): says so, names the provider, and who to ask."""
    noted = request.session.get(SSO_SESSION_KEY) or {}
    provider = configured(str(noted.get("provider", "")))
    return render(request, "access/sso_no_team.html", {"provider": provider})


@require_GET
def inactive(request: HttpRequest) -> HttpResponse:
    """``/sso/inactive/``: the provider vouched for the person, but their user here is deactivated."""
    return render(request, "access/sso_inactive.html", status=403)


class SignInView(LoginView):
    """``/login/``: Django's log-in page, with a "Sign in with <provider>" button per configured identity
    provider (a POST with the CSRF token to allauth's sign-in, which redirects to the provider). In SSO-only
    mode the password form is folded away under "Break-glass sign-in"."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        """Django's context plus ``sso_providers`` [(label, sign-in URL)] and ``sso_only``."""
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context["sso_providers"] = [
            (p.name, reverse("openid_connect_login", kwargs={"provider_id": p.id}))
            for p in settings.SSO_PROVIDERS
        ]
        context["sso_only"] = settings.SSO_ONLY
        return context
