"""Pages of the project itself (the apps add their own)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from streamforge_web.health import readiness


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The landing page: for now, each dependency's readiness (the overview arrives with the pipelines UI)."""
    return render(request, "home.html", {"checks": readiness()["checks"]})
