"""Pages of the DLQ console: the message list, a message's page with the fix editor, failure groups with
runbooks, bulk actions and the approvals queue.

The pages are read-only views: their buttons call the REST API under ``/api/dlq/`` with ``fetch()`` and the
session's CSRF token (see static/js/dlq.js), so a click in the browser and a script's request go through
the same serializer and the same ``dlq.services`` function, with the same permission check and audit event.
A button a user may not use is not rendered; the API refuses it anyway.

Visibility before roles, as on the pipeline pages: another team's dead letter is a 404.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET

from access.models import Role, Team
from access.paging import parse_cursor
from access.permissions import has_role, visible_teams
from dlq import presenters, selectors, services
from dlq.models import (
    BulkKind,
    BulkState,
    DeadLetter,
    FailureGroup,
    RetentionPolicy,
    RetentionRun,
    RunbookAction,
    Status,
)
from dlq.services import kafka_io
from pipelines.diffs import diff_lines
from pipelines.models import DEFAULT_CLUSTER_NAME, Pipeline

#: Bulk actions in these states may still change, so the bulk page keeps polling them.
BULK_LIVE_STATES = (BulkState.AWAITING_APPROVAL, BulkState.QUEUED, BulkState.RUNNING)


@login_required
@require_GET
def message_list(request: HttpRequest) -> HttpResponse:
    """``/dlq/``: dead letters of the user's teams with filters, text search, keyset pages and counts per
    status; new arrivals are announced live over ``/ws/dlq/``."""
    query = presenters.list_query(request.GET)
    size = request.GET.get("size", "")
    page_size = (
        int(size) if size.isdigit() and int(size) in selectors.LIST_PAGE_SIZES else selectors.LIST_PAGE_SIZE
    )
    page = selectors.message_rows(
        request.user,
        query.selection,
        before=parse_cursor(request.GET.get("before")),
        after=parse_cursor(request.GET.get("after")),
        size=page_size,
    )
    roles = presenters.roles_of(request.user)
    claims = services.claims_for(page.rows)
    for row in page.rows:
        row.claim_shown = claims.get(row.pk)  # for the template
    group = None
    if query.selection.group is not None:
        group = FailureGroup.objects.filter(
            pk=query.selection.group, team__in=visible_teams(request.user)
        ).first()
    counts = selectors.status_counts(request.user, query.selection)
    status_params = request.GET.copy()
    for name in ("status", "before", "after"):
        status_params.pop(name, None)
    return render(
        request,
        "dlq/list.html",
        {
            "query": query,
            "page": page,
            "group": group,
            "status_tabs": [(value, label.lower(), counts[value]) for value, label in Status.choices],
            "total": sum(counts.values()),
            "choices": selectors.filter_choices(request.user, group=query.selection.group),
            "ranges": list(presenters.RANGES),
            "status_base": status_params.urlencode(),
            "live_match": query.live_match(),
            "page_size": page_size,
            # the filters and status a page-size change keeps (a new size starts at the newest page)
            "page_size_keep": [
                (k, v) for k, v in request.GET.items() if k not in ("size", "before", "after")
            ],
            "page_sizes": selectors.LIST_PAGE_SIZES,
            "can_operate": roles.anywhere(Role.OPERATOR),
            "export_query": presenters.export_query(query.selection),
        },
    )


def _would_fail(dead_letter: DeadLetter) -> list[services.DestinationOutcome]:
    """Where a replay now would fail again; none known while the pipeline's schema registry cannot answer
    (the replay itself then says so)."""
    try:
        return services.would_fail_again(dead_letter, services.current_payload(dead_letter)[0])
    except services.RegistryUnavailable:
        return []


@login_required
@require_GET
def message_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """``/dlq/messages/<id>/``: everything ``services.inspect_message`` returns, the payload as pretty JSON / raw /
    hex, the audit trail, and for operators the fix editor and replay / skip / delete-request buttons."""
    dead_letter = get_object_or_404(
        services.visible_dead_letters(request.user).select_related("team", "pipeline__current_revision"),
        pk=pk,
    )
    info = services.inspect_message(user=request.user, dead_letter=dead_letter)
    masking = services.masking_for(request.user, dead_letter.team)
    roles = presenters.roles_of(request.user)
    can_operate = roles.at_least(dead_letter.team_id, Role.OPERATOR)
    editor_text, editor_mode = presenters.editor_text(dead_letter) if can_operate else ("", "text")
    original = bytes(dead_letter.value) if dead_letter.value is not None else None
    # A registry-format payload is shown (and masked) as its decoded record; the original bytes stay below.
    decoded = services.decoded_payload(dead_letter, original)
    shown = decoded.text if decoded is not None and decoded.text is not None else original
    value_view = presenters.payload_views(shown, masking=masking)
    claim = info.claim
    mine = claim is not None and claim.by == request.user.get_username()
    own_claim = claim is not None and claim.on == "message"
    return render(
        request,
        "dlq/message.html",
        {
            "dl": dead_letter,
            "info": info,
            "claim": claim,
            "can_claim": can_operate and dead_letter.status == Status.PARKED and (not own_claim or mine),
            "can_release": own_claim and (mine or roles.at_least(dead_letter.team_id, Role.ADMIN)),
            "value": value_view,
            "decoded": decoded,
            "schema_cluster": dead_letter.pipeline.cluster.name
            if dead_letter.pipeline is not None and dead_letter.pipeline.cluster is not None
            else DEFAULT_CLUSTER_NAME,
            # The framed bytes as stored, unless the viewer sees the payload masked or not at all.
            "original_hex": services.hex_dump(original or b"")
            if decoded is not None and decoded.decoded and not value_view.masked and not value_view.withheld
            else "",
            "key": presenters.payload_views(
                bytes(dead_letter.key) if dead_letter.key is not None else None, masking=masking, key=True
            ),
            "revisions": [
                (rev, diff_lines(rev.diff)) for rev in reversed(info.payload_revisions)
            ],  # newest first
            "audit": selectors.audit_trail(dead_letter, [a.id for a in info.approvals]),
            "can_operate": can_operate,
            # The pipeline's source topics: their records link to the topic browser and their outcomes.
            "source_topics": list(dead_letter.pipeline.current_revision.spec["source"]["topics"])
            if dead_letter.pipeline is not None and dead_letter.pipeline.current_revision is not None
            else [],
            "parked": dead_letter.status == Status.PARKED,
            "status_shown": selectors.FAILED_AGAIN_BADGE
            if dead_letter.pk in selectors.failed_again([dead_letter.pk])
            else dead_letter.status,
            # Where a replay now would fail again (the button then asks first, naming them).
            "would_fail": _would_fail(dead_letter)
            if can_operate and dead_letter.status == Status.PARKED
            else [],
            # A delete waiting for an approver: Replay and Skip are shown disabled, saying so.
            "pending_delete": next(
                (a for a in info.approvals if a.kind == "delete" and a.state == "pending"), None
            ),
            "can_request_delete": can_operate
            and dead_letter.status not in (Status.DELETED, Status.REPLAYING)
            and not info.has_pending_delete(),
            # Kafka cannot erase one record: the delete dialog says how long the DLQ topic keeps it.
            "kafka_keeps": kafka_io.retention_text(
                kafka_io.topic_retention_ms(dead_letter.dlq_topic, dead_letter.cluster_id)
            )
            if can_operate and dead_letter.status != Status.DELETED
            else "",
            "parked_siblings": sum(1 for sibling in info.siblings if sibling.status == Status.PARKED),
            # What the replay confirmation names: where it goes, for which destinations, which it leaves.
            "replay_plan": services.replay_plan(dead_letter, info.siblings)
            if can_operate and dead_letter.status == Status.PARKED
            else None,
            "editor_text": editor_text,
            "editor_mode": editor_mode,
        },
    )


@login_required
@require_GET
def group_list(request: HttpRequest) -> HttpResponse:
    """``/dlq/groups/``: failure groups with counts, parked count, first/last seen, a 24-hour trend and
    their runbooks with the actions each offers; admins can write runbooks here."""
    pipeline = request.GET.get("pipeline", "").strip()
    error_type = request.GET.get("error_type", "").strip()
    roles = presenters.roles_of(request.user)
    return render(
        request,
        "dlq/groups.html",
        {
            "rows": selectors.group_rows(request.user, pipeline=pipeline, error_type=error_type),
            "pipeline": pipeline,
            "error_type": error_type,
            "choices": selectors.filter_choices(request.user),
            "can_edit_runbooks": roles.admin,
            "can_operate": roles.anywhere(Role.OPERATOR),
            "runbook_actions": RunbookAction.choices,
        },
    )


@login_required
@require_GET
def bulk(request: HttpRequest) -> HttpResponse:
    """``/dlq/bulk/``: the bulk form (filter, kind, rate, reason; a dry-run count before it can be created,
    pre-filled from the query string, e.g. by a runbook's "bulk replay" button) and the bulk actions with
    live progress and pause / resume / cancel."""
    query = presenters.list_query(request.GET)
    roles = presenters.roles_of(request.user)
    kind = request.GET.get("kind", BulkKind.REPLAY)
    rows = selectors.bulk_actions(request.user)
    delete_keeps = ""
    if kind == BulkKind.DELETE and query.selection.group is not None:
        group = FailureGroup.objects.filter(
            pk=query.selection.group, team__in=visible_teams(request.user)
        ).first()
        if group is not None:
            cluster_id = group.dead_letters.values_list("cluster_id", flat=True).first()
            delete_keeps = f"{group.dlq_topic}: " + kafka_io.retention_text(
                kafka_io.topic_retention_ms(group.dlq_topic, cluster_id)
            )
    return render(
        request,
        "dlq/bulk.html",
        {
            "query": query,
            "kind": kind if kind in BulkKind.values else BulkKind.REPLAY,
            "kinds": BulkKind.choices,
            "choices": selectors.filter_choices(request.user, group=query.selection.group),
            "ranges": list(presenters.RANGES),
            "can_operate": roles.anywhere(Role.OPERATOR),
            "rows": [(b, roles.at_least(b.team_id, Role.OPERATOR)) for b in rows],
            "live_ids": [b.pk for b in rows if b.state in BULK_LIVE_STATES],
            "delete_keeps": delete_keeps,
            # A selection ticked on the list page: each dead letter by id with its status now (live).
            "selected": list(
                services.visible_dead_letters(request.user)
                .filter(pk__in=query.selection.ids)
                .order_by("pk")
                .values_list("pk", "status", "error_type")
            )
            if query.selection.ids
            else [],
        },
    )


@login_required
@require_GET
def approval_list(request: HttpRequest) -> HttpResponse:
    """``/dlq/approvals/``: pending requests (approve / reject offered to approvers of the team who did not
    ask) and the recently decided ones."""
    roles = presenters.roles_of(request.user)
    pending = selectors.approvals(request.user, pending=True)
    return render(
        request,
        "dlq/approvals.html",
        {
            "pending": [
                (a, roles.at_least(a.team_id, Role.APPROVER) and a.requested_by_id != request.user.pk)
                for a in pending
            ],
            "decided": selectors.approvals(request.user, pending=False, limit=30),
        },
    )


class RetentionForm(forms.Form):
    """A team's (or one of its pipelines') retention policy."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="name", empty_label=None)
    pipeline = forms.CharField(required=False, help_text="empty: the whole team")
    closed_days = forms.IntegerField(
        min_value=0, max_value=3650, help_text="keep replayed and skipped for; 0: forever"
    )
    purge_deleted = forms.BooleanField(required=False, initial=True, label="purge approved deletes at once")


@login_required
def retention(request: HttpRequest) -> HttpResponse:
    """``/dlq/retention/``: the policies of the caller's teams, the default, the last runs with what they
    purged, and (team admins) a form to set a policy."""
    user = request.user
    teams = visible_teams(user)
    admin_teams = [t for t in teams if has_role(user, t, Role.ADMIN)]
    form = RetentionForm(request.POST or None)
    team_field = form.fields["team"]
    assert isinstance(team_field, forms.ModelChoiceField)
    team_field.queryset = Team.objects.filter(pk__in=[t.pk for t in admin_teams])
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            pipeline = None
            if data["pipeline"]:
                pipeline = Pipeline.objects.filter(name=data["pipeline"], team=data["team"]).first()
                if pipeline is None:
                    form.add_error("pipeline", "no such pipeline in this team")
            if not form.errors:
                try:
                    services.set_policy(
                        actor=user,  # type: ignore[arg-type]
                        team=data["team"],
                        pipeline=pipeline,
                        closed_days=data["closed_days"],
                        purge_deleted=data["purge_deleted"],
                    )
                except services.InvalidRequest as exc:
                    form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                else:
                    messages.success(request, "Retention policy saved; the next hourly run applies it.")
                    return redirect("dlq-retention")
        status = 400
    context = {
        "section": "dlq-retention",
        "policies": RetentionPolicy.objects.filter(team__in=teams).select_related("team", "pipeline"),
        "default_days": settings.DLQ_RETENTION_DAYS,
        "runs": RetentionRun.objects.all()[:20],
        "form": form if admin_teams else None,
    }
    return render(request, "dlq/retention.html", context, status=status)
