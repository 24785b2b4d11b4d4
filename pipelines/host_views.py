"""The Hosts page: ``/hosts/`` shows every runner host (state, heartbeat age, capacity used and free, the
pipelines on it the viewer may see); admins drain and undrain a host from it (``/hosts/<name>/drain/``,
``/hosts/<name>/undrain/``, POST with a confirmation). Thin over ``pipelines.runner_hosts`` and
``pipelines.supervision.drain``, which checks the role and audits."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from access.permissions import is_admin
from pipelines.models import RunnerHost
from pipelines.runner_hosts import describe_hosts
from pipelines.supervision.drain import drain_host, undrain_host

#: Longest drain reason kept (as the API's ``reason``).
REASON_MAX = 1000
#: How often (seconds) the open Hosts page re-reads its rows: a heartbeat ages by one tick meanwhile.
REFRESH_SECONDS = 5


@login_required
@require_GET
def host_list(request: HttpRequest) -> HttpResponse:
    """``/hosts/``: every runner host, by name; ``/hosts/?rows=1``: the table's rows alone (the page's live
    refresh, ``static/js/hosts.js``, every ``REFRESH_SECONDS``)."""
    context = {
        "hosts": describe_hosts(request.user),
        "can_drain": is_admin(request.user),
        "section": "host-list",
        "refresh_s": REFRESH_SECONDS,
    }
    if request.GET.get("rows") == "1":
        return render(request, "pipelines/_host_rows.html", context)
    return render(request, "pipelines/hosts.html", context)


@login_required
@require_POST
def host_drain(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Drain or undrain ``name`` (``action``), admins only (403), after the box confirming it was ticked;
    the reason (optional, at most ``REASON_MAX`` characters) goes to the audit log."""
    user = request.user
    if not isinstance(user, User) or not is_admin(user):
        raise PermissionDenied("draining runner hosts is for admins")
    host = RunnerHost.objects.filter(name=name).first()
    if host is None:
        raise Http404(f"no runner host named {name}")
    reason = request.POST.get("reason", "").strip()
    if request.POST.get("confirm") != "yes":
        messages.error(request, f"Tick the box to confirm; {name} was not changed.")
    elif len(reason) > REASON_MAX:
        messages.error(request, f"The reason is longer than {REASON_MAX} characters; {name} was not changed.")
    elif action == "drain":
        drain_host(actor=user, host=host, reason=reason)
        messages.success(request, f"{name} is draining: its pipelines move to other hosts one at a time.")
    else:
        undrain_host(actor=user, host=host, reason=reason)
        messages.success(request, f"{name} takes pipelines again.")
    return redirect("host-list")
