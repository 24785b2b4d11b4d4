"""The audit log page (admins). A dead letter's or a pipeline's own trail is shown on that object's page."""

from __future__ import annotations

from dataclasses import asdict
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from access import selectors
from access.audit import verify_chain
from access.paging import parse_cursor
from access.permissions import is_admin


@login_required
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    """``/audit/`` (admins): the audit log with filters and keyset pages, and whether its hash chain
    verifies against its anchors: ok, broken at #N, or unverified and why (recomputed on each visit:
    O(events), which is what makes the answer trustworthy)."""
    if not is_admin(request.user):
        raise PermissionDenied("the audit log is for admins; a message's page shows its own trail")
    query = selectors.AuditQuery.from_params(request.GET)
    params = request.GET.copy()
    for name in ("before", "after"):
        params.pop(name, None)
    return render(
        request,
        "access/audit.html",
        {
            "query": query,
            "page": selectors.audit_events(
                query,
                before=parse_cursor(request.GET.get("before")),
                after=parse_cursor(request.GET.get("after")),
            ),
            "actions": selectors.audit_actions(),
            "chain": verify_chain(),
            "base": params.urlencode(),
            # the filters an export of this view keeps (the same names as the API's)
            "export_query": urlencode({k: v for k, v in asdict(query).items() if v}),
        },
    )
