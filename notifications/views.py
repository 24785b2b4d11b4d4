"""Server-rendered notifications pages: a team's channels of every kind (create, change subscriptions,
delete with a typed confirmation, send a test) and its delivery attempts, paginated. Thin over ``notifications.channels``;
a webhook's signing secret is shown once, right after creation, from the session."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from access.models import Team
from access.permissions import visible_teams
from dlq.services.errors import InvalidRequest
from notifications import channels
from notifications.models import Channel, ChannelKind, DeliveryAttempt, EventType

_REVEALED = "notifications.revealed_once"


def _team(request: HttpRequest, name: str) -> Team:
    team = visible_teams(request.user).filter(name=name).first()
    if team is None:
        raise Http404("no such team among yours")
    return team


def _channel(request: HttpRequest, pk: int) -> Channel:
    channel = channels.visible_channels(request.user).filter(pk=pk).first()
    if channel is None:
        raise Http404("no such channel")
    return channel


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The page of the user's own team (the first, by name, they are a member of; an admin in no team gets
    the first team they may see), or the list, when they have none."""
    teams = list(visible_teams(request.user).order_by("name"))
    own = [t for t in teams if t.memberships.filter(user_id=request.user.pk or 0).exists()]
    if teams:
        return redirect("notifications-team", team=(own or teams)[0].name)
    return render(request, "notifications/team.html", {"section": "notifications", "teams": teams})


@login_required
def team_page(request: HttpRequest, team: str) -> HttpResponse:
    """A team's channels and delivery attempts."""
    return render(request, "notifications/team.html", _page(request, _team(request, team)))


def _page(request: HttpRequest, the_team: Team, draft: dict[str, Any] | None = None) -> dict[str, Any]:
    """The team page's context; ``draft`` is a refused new channel's form as typed (see ``create``)."""
    deliveries = DeliveryAttempt.objects.filter(channel__team=the_team).select_related(
        "channel", "notification"
    )
    page = Paginator(deliveries.order_by("-id"), 25).get_page(request.GET.get("page"))
    context: dict[str, Any] = {
        "section": "notifications",
        "team": the_team,
        "teams": visible_teams(request.user),
        "channels": Channel.objects.filter(team=the_team),
        "may_manage": channels.may_manage(request.user, the_team),
        "deliveries": page,
        "kinds": ChannelKind.choices,
        "event_types": [(value, EventType(value).label) for value in channels.SUBSCRIBABLE],
        "revealed": request.session.pop(_REVEALED, None),
        "draft": draft,
    }
    return context


@login_required
@require_POST
def create(request: HttpRequest, team: str) -> HttpResponse:
    """Add a channel from the page's form."""
    the_team = _team(request, team)
    post = request.POST
    try:
        created = channels.create_channel(
            actor=cast(User, request.user),
            team=the_team,
            name=post.get("name", "").strip(),
            kind=post.get("kind", ""),
            events=post.getlist("events"),
            url=post.get("url", "") if post.get("kind") != "pagerduty" else post.get("pagerduty_url", ""),
            slack_url=post.get("slack_url", ""),
            teams_url=post.get("teams_url", ""),
            discord_url=post.get("discord_url", ""),
            routing_key=post.get("routing_key", ""),
            console_url=post.get("console_url", ""),
            recipients=[a.strip() for a in post.get("recipients", "").split(",") if a.strip()],
        )
    except InvalidRequest as exc:
        # The page again, the form open and filled in as typed, the refused field marked (a 400, not a
        # redirect that would empty the form). Webhook URLs of Slack, Teams and Discord and PagerDuty's
        # routing key are secrets: never sent back, typed again.
        field = "pagerduty_url" if exc.field == "url" and post.get("kind") == "pagerduty" else exc.field
        draft = {
            "name": post.get("name", ""),
            "kind": post.get("kind", ""),
            "url": post.get("url", ""),
            "pagerduty_url": post.get("pagerduty_url", ""),
            "console_url": post.get("console_url", ""),
            "recipients": post.get("recipients", ""),
            "events": post.getlist("events"),
            "slack_typed": bool(post.get("slack_url", "")),
            "retyped": [
                name
                for name in ("slack_url", "teams_url", "discord_url", "routing_key")
                if post.get(name, "")
            ],
            "field": field,
            "error": exc.message,
        }
        return render(request, "notifications/team.html", _page(request, the_team, draft), status=400)
    if created.signing_secret:
        request.session[_REVEALED] = {"channel": created.channel.name, "secret": created.signing_secret}
    messages.success(request, f"Channel {created.channel.name} added.")
    return redirect("notifications-team", team=the_team.name)


@login_required
@require_POST
def edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a channel's subscriptions and on/off switch (and, when the form has it, its console link)."""
    channel = _channel(request, pk)
    try:
        channels.update_channel(
            actor=cast(User, request.user),
            channel=channel,
            events=request.POST.getlist("events"),
            enabled=request.POST.get("enabled") == "on",
            console_url=request.POST.get("console_url"),
        )
        messages.success(request, f"Channel {channel.name} saved.")
    except InvalidRequest as exc:
        messages.error(request, f"{exc.field}: {exc.message}")
    return redirect("notifications-team", team=channel.team.name)


@login_required
@require_POST
def delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Delete a channel once its name was typed to confirm."""
    channel = _channel(request, pk)
    if request.POST.get("confirm", "") != channel.name:
        messages.error(request, "Type the channel's name to delete it.")
    else:
        channels.delete_channel(actor=cast(User, request.user), channel=channel)
        messages.success(request, f"Channel {channel.name} deleted.")
    return redirect("notifications-team", team=channel.team.name)


@login_required
@require_POST
def send_test(request: HttpRequest, pk: int) -> HttpResponse:
    """Send a test message; the delivery row appears in the table."""
    channel = _channel(request, pk)
    row = channels.send_test(actor=cast(User, request.user), channel=channel)
    if row.ok:
        messages.success(request, f"Test sent to {channel.name}.")
    else:
        messages.error(request, f"Test to {channel.name} failed: {row.error}")
    return redirect("notifications-team", team=channel.team.name)
