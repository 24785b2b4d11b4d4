"""Pages of the project itself (the apps add their own)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from access.permissions import is_admin
from streamforge_web.health import cached_readiness


@login_required
def system_status(request: HttpRequest) -> HttpResponse:
    """``/status/``: each dependency's readiness (database, Redis, Kafka) as the readiness probe last saw it
    (``cached_readiness``: no client per request); the failures' reasons to admins only."""
    result, age = cached_readiness()
    context = {"checks": result["checks"], "age": age, "details": is_admin(request.user)}
    return render(request, "status.html", context)
