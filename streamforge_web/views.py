"""Pages of the project itself (the apps add their own)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from streamforge_web.health import readiness


@login_required
def system_status(request: HttpRequest) -> HttpResponse:
    """``/status/``: each dependency's readiness (database, Redis, Kafka) as the readiness probe sees it."""
    return render(request, "status.html", {"checks": readiness()["checks"]})
