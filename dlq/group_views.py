"""The consumer-groups page (``/consumer-groups/``): every consumer group with committed offsets on a topic of
the pipelines the user may see (``dlq.consumer_groups``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dlq import consumer_groups


@login_required
@require_GET
def consumer_group_list(request: HttpRequest) -> HttpResponse:
    """One page of the team's consumer groups (``?page=N``, from 1; not a number: the first)."""
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        page = 1
    result = consumer_groups.team_consumer_groups(request.user, page=page)
    return render(request, "dlq/consumer_groups.html", {"result": result, "timeout": consumer_groups.TIMEOUT})
