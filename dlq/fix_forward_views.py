"""The fix-forward pages of the DLQ console: the scans of the user's pipelines (``/dlq/fix-forward/``), one
scan with its counts beside the revision diff and the way to replay what now passes
(``/dlq/fix-forward/<id>/``), and starting a scan (``POST /dlq/fix-forward/start/``, operator). Thin: the
work is ``dlq.services.fix_forward``'s."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from access.models import Role
from access.permissions import has_role, visible_teams
from dlq import services
from dlq.models import FixForwardScan, FixForwardState
from pipelines.diffs import diff_lines
from pipelines.models import Pipeline

#: Scans listed per page.
LIST_LIMIT = 50


@login_required
@require_GET
def fix_forward_list(request: HttpRequest) -> HttpResponse:
    """The newest scans of the user's teams' pipelines (``?pipeline=`` one), and, for operators, a scan of a
    pipeline's parked dead letters against its current revision."""
    teams = visible_teams(request.user)
    scans = FixForwardScan.objects.filter(team__in=teams).select_related("pipeline", "requested_by")
    name = request.GET.get("pipeline", "").strip()
    if name:
        scans = scans.filter(pipeline__name=name)
    startable = [
        p
        for p in Pipeline.objects.filter(team__in=teams).select_related("team").order_by("name")
        if has_role(request.user, p.team, Role.OPERATOR)
    ]
    return render(
        request,
        "dlq/fix_forward_list.html",
        {"scans": list(scans[:LIST_LIMIT]), "pipeline_name": name, "startable": startable},
    )


@login_required
@require_POST
def fix_forward_start(request: HttpRequest) -> HttpResponse:
    """Start a scan of the posted ``pipeline`` (operator in its team; 403 otherwise, 404 for a pipeline
    the user does not see); to the scan's page."""
    pipeline = get_object_or_404(
        Pipeline.objects.select_related("team", "current_revision"),
        name=request.POST.get("pipeline", "").strip(),
        team__in=visible_teams(request.user),
    )
    assert isinstance(request.user, User)
    try:
        scan = services.request_fix_forward_scan(pipeline=pipeline, actor=request.user)
    except services.InvalidRequest as exc:
        messages.error(request, str(exc))
        return redirect("dlq-fix-forward")
    return redirect("dlq-fix-forward-scan", pk=scan.pk)


@login_required
@require_GET
def fix_forward_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One scan: progress (kept live while it runs), its counts per destination, failure group and error
    type, the revision diff beside them, and for operators the bulk replay of exactly its candidates."""
    scan = get_object_or_404(
        FixForwardScan.objects.select_related("pipeline", "team", "requested_by"),
        pk=pk,
        team__in=visible_teams(request.user),
    )
    replay_url = reverse("dlq-bulk") + "?" + urlencode({"kind": "replay", **services.replay_filters(scan)})
    return render(
        request,
        "dlq/fix_forward_detail.html",
        {
            "scan": scan,
            "live": scan.state in (FixForwardState.QUEUED, FixForwardState.RUNNING),
            "diff": diff_lines(services.revision_diff(scan)),
            "replay_url": replay_url,
            "can_operate": has_role(request.user, scan.team, Role.OPERATOR),
        },
    )
