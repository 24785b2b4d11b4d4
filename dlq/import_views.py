"""The import page (``/dlq/import/``): a JSON Lines export of dead letters, a pipeline to import it into,
a dry run first and then the import. Read-only like the other console pages: its buttons post the chosen
file to ``POST /api/dlq/import/`` with ``fetch()`` (static/js/dlq_import.js), so the page and a script go
through the same checks, permission and audit event."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from access.models import Role
from access.permissions import has_role, visible_teams
from dlq.services import imports
from pipelines.models import Pipeline


@login_required
@require_GET
def import_page(request: HttpRequest) -> HttpResponse:
    """The form: the pipelines the user may import into (operator in their team; none: the page says so)."""
    teams = visible_teams(request.user)
    importable = [
        p
        for p in Pipeline.objects.filter(team__in=teams).select_related("team").order_by("name")
        if has_role(request.user, p.team, Role.OPERATOR)
    ]
    return render(
        request,
        "dlq/import.html",
        {
            "importable": importable,
            "max_bytes": imports.IMPORT_MAX_BYTES,
            "max_rows": imports.IMPORT_MAX_ROWS,
        },
    )
