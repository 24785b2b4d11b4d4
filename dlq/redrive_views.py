"""The redrive-policy pages of the DLQ console: the policies of the user's teams with a form to create one
(``/dlq/redrive/``), one policy with its settings, brake, pending approval, runs and audit trail and a form to
change it (``/dlq/redrive/<id>/``), and one run, or any bulk action, on its own page with its audit events
(``/dlq/bulk/<id>/``). Thin: the work is ``dlq.services.redrive``'s; pause, resume and delete post to the API
(``/api/dlq/redrive-policies/{id}/...``) from the page's buttons."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from access.models import AuditEvent, Role
from access.permissions import has_role, visible_teams
from dlq.models import BulkAction, RedrivePolicy
from dlq.services import redrive
from dlq.services.errors import Conflict, InvalidRequest
from pipelines.models import Pipeline


def _posted_settings(request: HttpRequest) -> dict[str, Any]:
    data: dict[str, Any] = {
        name: request.POST[name] for name in redrive.SETTING_NAMES if name in request.POST
    }
    if "error_types" in request.POST:
        data["error_types"] = [t for t in request.POST.getlist("error_types") if t]
    return data


def _operable_pipelines(user: Any) -> list[Pipeline]:
    teams = visible_teams(user)
    return [
        p
        for p in Pipeline.objects.filter(team__in=teams).select_related("team").order_by("name")
        if has_role(user, p.team, Role.OPERATOR)
    ]


@login_required
@require_GET
def redrive_list(request: HttpRequest) -> HttpResponse:
    """The policies of the user's teams (``?pipeline=`` one pipeline's) and, for operators, the form that
    creates one (it waits for an approver)."""
    policies = redrive.visible_policies(request.user).exclude(state="deleted")
    name = request.GET.get("pipeline", "").strip()
    if name:
        policies = policies.filter(pipeline__name=name)
    return _render_list(request, policies=list(policies), pipeline_name=name, draft={})


def _render_list(
    request: HttpRequest, *, policies: list[RedrivePolicy], pipeline_name: str, draft: dict[str, Any],
    status: int = 200,
) -> HttpResponse:  # fmt: skip
    defaults = redrive.PolicySettings().as_json()
    return render(
        request,
        "dlq/redrive_list.html",
        {
            "policies": [(p, redrive.describe(redrive.PolicySettings.of(p))) for p in policies],
            "pipeline_name": pipeline_name,
            "pipelines": _operable_pipelines(request.user),
            "error_types": redrive.REDRIVABLE_TYPES,
            "form": defaults | {k: v for k, v in draft.items() if k != "error_types"},
            "chosen_types": draft.get("error_types", defaults["error_types"]),
            "draft": draft,
        },
        status=status,
    )


@login_required
@require_POST
def redrive_create(request: HttpRequest) -> HttpResponse:
    """Create a policy from the posted form (operator in the pipeline's team); to its page, which says it
    waits for an approver. A bad field re-shows the form with the reason beside it (400)."""
    pipeline = get_object_or_404(
        Pipeline.objects.select_related("team"),
        name=request.POST.get("pipeline", "").strip(),
        team__in=visible_teams(request.user),
    )
    assert isinstance(request.user, User)
    given = _posted_settings(request)
    try:
        policy = redrive.create_policy(
            actor=request.user,
            pipeline=pipeline,
            name=request.POST.get("name", ""),
            settings=redrive.PolicySettings.from_mapping(given),
        )
    except InvalidRequest as exc:
        draft = given | {"name": request.POST.get("name", ""), "pipeline": pipeline.name, "field": exc.field,
                         "error": exc.message}  # fmt: skip
        policies = list(redrive.visible_policies(request.user).exclude(state="deleted"))
        return _render_list(request, policies=policies, pipeline_name="", draft=draft, status=400)
    messages.success(
        request, f"Policy {policy.name} created; it runs once an approver other than you approves it."
    )
    return redirect("dlq-redrive-policy", pk=policy.pk)


def _visible_policy(request: HttpRequest, pk: int) -> RedrivePolicy:
    return get_object_or_404(
        redrive.visible_policies(request.user).select_related("created_by", "group"), pk=pk
    )


@login_required
@require_GET
def redrive_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One policy: its settings in words, state (why it paused), the change waiting for an approver, what
    its brake sees now, its runs (each a bulk action with its own page), its audit trail and, for operators,
    the form that changes it."""
    policy = _visible_policy(request, pk)
    settings_now = redrive.PolicySettings.of(policy)
    runs = redrive.runs_of(policy, limit=50)
    trail = AuditEvent.objects.filter(
        Q(target_type="redrive_policy", target_id=str(policy.pk))
        | Q(
            target_type="approval",
            target_id__in=[str(a) for a in policy.approvals.values_list("pk", flat=True)],
        )
    ).order_by("-sequence")[:100]
    return render(
        request,
        "dlq/redrive_detail.html",
        {
            "policy": policy,
            "settings": settings_now.as_json(),
            "description": redrive.describe(settings_now),
            "pending": redrive.pending_change(policy),
            "brake": redrive.brake(policy, now=timezone.now()),
            "eligible": redrive.eligible(policy, now=timezone.now()).count(),
            "runs": runs,
            "trail": list(trail),
            "may_operate": has_role(request.user, policy.team, Role.OPERATOR),
            "error_types": redrive.REDRIVABLE_TYPES,
        },
    )


@login_required
@require_POST
def redrive_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Change the policy's settings from the posted form (operator): narrowing applies now, widening asks
    an approver; back to its page saying which."""
    policy = _visible_policy(request, pk)
    assert isinstance(request.user, User)
    try:
        approval = redrive.update_policy(
            actor=request.user,
            policy=policy,
            changes=_posted_settings(request),
            reason=request.POST.get("reason", ""),
        )
    except (InvalidRequest, Conflict) as exc:
        messages.error(
            request, f"{exc.field}: {exc.message}" if isinstance(exc, InvalidRequest) else str(exc)
        )
        return redirect("dlq-redrive-policy", pk=policy.pk)
    if approval is None:
        messages.success(request, "Saved: the change only narrows the policy, so it applies now.")
    else:
        messages.success(
            request, f"The change widens the policy: request #{approval.pk} waits for an approver."
        )
    return redirect("dlq-redrive-policy", pk=policy.pk)


@login_required
@require_GET
def bulk_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One bulk action (a person's, or a redrive policy's run) with its progress, selection and audit
    events; 404 for other teams'."""
    bulk = get_object_or_404(
        BulkAction.objects.select_related("created_by", "team", "redrive_policy"),
        pk=pk,
        team__in=visible_teams(request.user),
    )
    if bulk.team is None:  # a bulk action of no team is an admin's; visible_teams already decided
        raise PermissionDenied("not a member of this bulk action's team")
    events = AuditEvent.objects.filter(target_type="bulk", target_id=str(bulk.pk)).order_by("-sequence")[:100]
    return render(
        request,
        "dlq/bulk_detail.html",
        {
            "bulk": bulk,
            "events": list(events),
            "may_operate": has_role(request.user, bulk.team, Role.OPERATOR),
        },
    )
