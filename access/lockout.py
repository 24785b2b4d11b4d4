"""Log-in lockouts (django-axes): each one recorded in the audit log, and the page a locked-out person sees.

Axes counts failed log-ins per user name and client address (settings ``AXES_*``). When a pair reaches the
limit it sends ``user_locked_out``; ``AccessConfig.ready()`` connects ``record_lockout`` to it. Every
further try during the lockout fails too and starts the cool-off again, so the page can say exactly how
long to wait.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from access import audit


def cooloff_minutes() -> int:
    """How long a lockout lasts, in whole minutes (``STREAMFORGE_LOGIN_COOLOFF_MINUTES``)."""
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)


def record_lockout(
    sender: Any, *, request: HttpRequest, username: str | None, ip_address: str, **kwargs: Any
) -> None:
    """Receiver of axes' ``user_locked_out``: one audit event when a user name + address pair becomes
    locked out. Axes also sends the signal for each refused try during the lockout; those are counted in
    its own table (admin: Axes), not appended to the audit log, so a guesser cannot flood the log."""
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is not None and failures != settings.AXES_FAILURE_LIMIT:
        return
    audit.record(
        actor=None,
        action="auth.locked_out",
        target_type="user",
        target_id=username or "",
        reason=f"{settings.AXES_FAILURE_LIMIT} failed log-ins",
        details={"ip_address": ip_address, "cooloff_minutes": cooloff_minutes()},
    )


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: the log-in page again, answering 429, saying how long to wait."""
    return render(
        request,
        "registration/login.html",
        {
            "form": AuthenticationForm(request),
            "lockout_minutes": cooloff_minutes(),
            "next": request.POST.get("next", ""),
        },
        status=429,
    )
