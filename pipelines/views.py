"""Pages of the pipelines app: the overview, a pipeline's page with start/stop/restart, the editor and the
editor's draft endpoints (the draft as a dry-run request for the REST API, sampling). Views check visibility and roles, then call ``selectors``,
``presenters``, ``services``, ``supervision`` and ``editor``; mutations go through the same service functions as the API,
so they are audited and refused there too.

Visibility before roles: another team's pipeline is a 404 (its name is not confirmed), a visible pipeline
the user lacks the role for is a 403.
"""

from __future__ import annotations

import time
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST

from access.models import Role, Team
from access.permissions import has_role, is_admin
from access.shared_reads import shared_fragment
from pipelines import editor, presenters, selectors, supervision
from pipelines.backlog import parked_backlog
from pipelines.clusters import connection_for
from pipelines.diffs import diff_lines
from pipelines.lifecycle import available_actions, revision_numbers
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline
from pipelines.progress import RATE_WINDOW_SECONDS
from pipelines.services import (
    SampleUnavailable,
    create_pipeline,
    revise_pipeline,
    sample_source_messages,
    spec_text,
)
from pipelines.spec import SpecError, parse_spec
from streamforge_core.text import UNENCODABLE, unencodable_path

#: The pipeline page's chart windows (``?range=``): label -> seconds of history the charts start with (the
#: websocket extends them live). 15 minutes unless asked otherwise.
CHART_RANGES = {"5m": 300, "15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 24 * 3600}
DEFAULT_CHART_RANGE = "15m"
#: At most this many sample messages per dry run from the editor.
MAX_DRY_RUN_MESSAGES = 200


def _visible_pipeline(request: HttpRequest, name: str) -> Pipeline:
    pipeline = get_object_or_404(Pipeline.objects.select_related("team", "current_revision"), name=name)
    if not has_role(request.user, pipeline.team, Role.VIEWER):
        raise Http404("no such pipeline")
    return pipeline


def _actor(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # login_required ran first
    return request.user


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """``/``: every pipeline the user may see with state, rates, lag, dead-lettered records and alerts;
    kept live by ``/ws/pipelines/``."""
    rows = selectors.shared_overview_rows(request.user)
    rows_html = shared_fragment(
        rows, "overview-rows", lambda: render_to_string("pipelines/_overview_rows.html", {"rows": rows.value})
    )
    return render(
        request,
        "pipelines/overview.html",
        {
            "rows": rows.value,
            "rows_html": mark_safe(rows_html),  # noqa: S308  # rendered from our template, autoescaped
            "can_create": is_admin(request.user),
            "rate_window": RATE_WINDOW_SECONDS,
        },
    )


@login_required
@require_GET
def overview_json(request: HttpRequest) -> JsonResponse:
    """The overview's rows as JSON: what the page reloads after its websocket reconnects."""
    rows = selectors.shared_overview_rows(request.user).value
    return JsonResponse({"pipelines": [row.as_json() for row in rows]})


@login_required
@require_GET
def pipeline_detail(request: HttpRequest, name: str) -> HttpResponse:
    """``/pipelines/<name>/``: the current revision, revision history with diffs, runs, live charts and,
    for operators, start/stop/restart."""
    pipeline = _visible_pipeline(request, name)
    revision = pipeline.current_revision
    spec = revision.parsed if revision is not None else None
    _current, running_revision = revision_numbers(pipeline)
    range_key = request.GET.get("range", DEFAULT_CHART_RANGE)
    if range_key not in CHART_RANGES:
        range_key = DEFAULT_CHART_RANGE
    chart_range = CHART_RANGES[range_key]
    if request.GET.get("runs") == "1":  # the Runs table's rows alone: pipeline.js's live refresh
        return render(request, "pipelines/_run_rows.html", {"runs": selectors.recent_runs(pipeline)})
    return render(
        request,
        "pipelines/detail.html",
        {
            "pipeline": pipeline,
            "revision": revision,
            "running_revision": running_revision,
            "actions": available_actions(pipeline.state, pipeline.desired_state),
            "spec": spec,
            "spec_json": spec_text(revision.spec) if revision is not None else "",
            "destinations": presenters.destination_views(spec) if spec else [],
            "revisions": [(r, diff_lines(r.diff)) for r in selectors.revisions(pipeline)],
            "runs": selectors.recent_runs(pipeline),
            "dlq_backlog": parked_backlog([pipeline.pk]).get(pipeline.pk, 0),
            "can_operate": has_role(request.user, pipeline.team, Role.OPERATOR),
            "can_edit": has_role(request.user, pipeline.team, Role.ADMIN),
            "chart_range": chart_range,
            "chart_range_key": range_key,
            "chart_ranges": list(CHART_RANGES),
            "dlq_by_type": selectors.dead_lettered_by_type(
                pipeline, since_ms=int(time.time() * 1000) - chart_range * 1000
            ),
        },
    )


_ACTIONS = {
    "start": supervision.request_start,
    "stop": supervision.request_stop,
    "restart": supervision.request_restart,
}


@login_required
@require_POST
def pipeline_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """``POST /pipelines/<name>/start|stop|restart/`` (operator; 403 otherwise), with an optional
    ``reason`` for the audit log; the same service call as the API's. Back to the pipeline's page."""
    pipeline = _visible_pipeline(request, name)
    request_action = _ACTIONS.get(action)
    if request_action is None:
        raise Http404("no such action")
    reason = request.POST.get("reason", "").strip()[:2000]
    try:
        request_action(actor=_actor(request), pipeline=pipeline, reason=reason)
    except supervision.NotStartable as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{action} requested for {pipeline.name}; a worker carries it out.")
    return redirect("pipeline-detail", name=pipeline.name)


# ------------------------------------------------------------------------------------------ editor


class PipelineMetaForm(forms.Form):
    """The editor's inputs that are not part of the spec: name, team and Kafka cluster (new pipelines only),
    the description, and the comment stored with the new revision."""

    name = forms.SlugField(max_length=63, help_text="lowercase letters, digits, '-' and '_'")
    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="name", empty_label=None)
    cluster = forms.ModelChoiceField(
        queryset=KafkaCluster.objects.all(),
        to_field_name="name",
        required=False,
        empty_label=f"{DEFAULT_CLUSTER_NAME} (the installation's KAFKA_* cluster)",
        help_text="where its topics are; fixed once created",
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    comment = forms.CharField(required=False, max_length=500, help_text="why this revision (kept with it)")

    def __init__(self, *args: Any, user: User, editing: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing:
            del self.fields["name"]
            del self.fields["team"]
            del self.fields["cluster"]
        else:
            team_field = self.fields["team"]
            assert isinstance(team_field, forms.ModelChoiceField)
            # The admin role is held in some team but counts in every team (permissions.is_admin).
            team_field.queryset = Team.objects.all() if is_admin(user) else Team.objects.none()

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if Pipeline.objects.filter(name=name).exists():
            raise forms.ValidationError("a pipeline with this name exists")
        return name


def _editor_context(
    *,
    meta: PipelineMetaForm,
    draft: dict[str, Any],
    errors: dict[str, list[str]],
    pipeline: Pipeline | None,
    mode: str,
    user: User,
) -> dict[str, Any]:
    return {
        "meta": meta,
        "layout": editor.editor_layout(draft, errors),
        "pipeline": pipeline,
        "mode": mode,
        "can_sample": is_admin(user),
    }


@login_required
def pipeline_editor(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """``/pipelines/new/`` and ``/pipelines/<name>/edit/`` (admin): every spec field in a form (or as
    JSON); saving creates the pipeline or its next revision through ``services``. A refused spec comes back
    with each error beside its field (status 400)."""
    user = _actor(request)
    pipeline = _visible_pipeline(request, name) if name is not None else None
    if pipeline is not None and not has_role(user, pipeline.team, Role.ADMIN):
        raise PermissionDenied("editing a pipeline needs the admin role")
    if pipeline is None and not is_admin(user):
        raise PermissionDenied("creating a pipeline needs the admin role in a team")
    editing = pipeline is not None

    if request.method != "POST":
        draft = (
            pipeline.current_revision.spec
            if pipeline is not None and pipeline.current_revision is not None
            else editor.default_draft()
        )
        initial = {"description": pipeline.description} if pipeline is not None else {}
        meta = PipelineMetaForm(initial=initial, user=user, editing=editing)
        return render(
            request,
            "pipelines/editor.html",
            _editor_context(meta=meta, draft=draft, errors={}, pipeline=pipeline, mode="form", user=user),
        )

    meta = PipelineMetaForm(request.POST, user=user, editing=editing)
    draft, form_errors = editor.spec_from_form(request.POST)
    errors: dict[str, list[str]] = dict(form_errors)
    switch_to = request.POST.get("switch_to")
    if switch_to in ("form", "json"):
        # Switching between the form and the JSON textarea is a round trip through spec_from_form, so the
        # form-to-spec rules live in one place; nothing is saved.
        if form_errors:
            switch_to = request.POST.get(editor.MODE_FIELD) or "form"
        typed = {
            key: request.POST.get(key, "") for key in ("name", "team", "cluster", "description", "comment")
        }
        meta = PipelineMetaForm(initial=typed, user=user, editing=editing)  # unbound: no "required" noise
        return render(
            request,
            "pipelines/editor.html",
            _editor_context(
                meta=meta, draft=draft, errors=errors, pipeline=pipeline, mode=switch_to, user=user
            ),
        )
    if meta.is_valid() and not errors:
        data = meta.cleaned_data
        try:
            if pipeline is None:
                pipeline = create_pipeline(
                    actor=user,
                    name=data["name"],
                    team=data["team"],
                    spec=draft,
                    description=data["description"],
                    cluster=data["cluster"],
                )
                messages.success(request, f"Pipeline {pipeline.name} created (revision 1).")
            else:
                revision = revise_pipeline(
                    actor=user,
                    pipeline=pipeline,
                    spec=draft,
                    comment=data["comment"],
                    description=data["description"],
                )
                messages.success(request, f"Saved as revision {revision.number}; a restart runs it.")
            return redirect("pipeline-detail", name=pipeline.name)
        except SpecError as exc:
            errors.update(exc.errors)
    elif not errors:
        # The spec is checked even when the name or team is wrong, so every problem shows at once.
        try:
            parse_spec(draft, pipeline_name=request.POST.get("name") or "draft")
        except SpecError as exc:
            errors.update(exc.errors)
    mode = "json" if request.POST.get(editor.MODE_FIELD) == "json" else "form"
    return render(
        request,
        "pipelines/editor.html",
        _editor_context(meta=meta, draft=draft, errors=errors, pipeline=pipeline, mode=mode, user=user),
        status=400,
    )


def _draft_name(request: HttpRequest) -> str:
    return (request.POST.get("name") or request.POST.get("pipeline") or "draft").strip() or "draft"


@login_required
@require_POST
def draft_dry_run_request(request: HttpRequest) -> JsonResponse:
    """The editor's DRAFT (the form as it stands, not the saved revision) and its pasted sample messages
    (``messages``: see ``editor.messages_from_text``) as the body of a REST dry run
    (``POST /api/dsl/dry-run/``, which the editor's script sends it to): 200 with ``spec`` and
    ``messages``; 400 with ``errors`` by field when the draft or the messages are invalid, as the editor
    shows them on save. Runs nothing and writes nothing, so any signed-in user may."""
    draft, form_errors = editor.spec_from_form(request.POST)
    if form_errors:
        return JsonResponse({"errors": dict(form_errors)}, status=400)
    try:
        parse_spec(draft, pipeline_name=_draft_name(request))
    except SpecError as exc:
        return JsonResponse({"errors": exc.errors}, status=400)
    raw_messages = editor.messages_from_text(request.POST.get("messages", ""))
    if not raw_messages:
        return JsonResponse({"errors": {"messages": ["paste at least one message"]}}, status=400)
    if len(raw_messages) > MAX_DRY_RUN_MESSAGES:
        return JsonResponse(
            {"errors": {"messages": [f"at most {MAX_DRY_RUN_MESSAGES} messages"]}}, status=400
        )
    if (bad := unencodable_path(raw_messages, "messages")) is not None:
        return JsonResponse({"errors": {bad: [UNENCODABLE]}}, status=400)
    return JsonResponse({"spec": draft, "messages": raw_messages})


@login_required
@require_POST
def draft_sample(request: HttpRequest) -> JsonResponse:
    """The newest records of the draft's source topics, on the draft's Kafka cluster, as sample messages
    (admin: it reads any topic named). 400 without topics or for an unknown cluster, 503 when Kafka cannot
    be read."""
    if not is_admin(request.user):
        raise PermissionDenied("sampling source topics needs the admin role")
    draft, _ = editor.spec_from_form(request.POST)
    topics = (draft.get("source") or {}).get("topics") or []
    if not isinstance(topics, list) or not topics:
        return JsonResponse({"errors": {"source.topics": ["name a source topic to sample"]}}, status=400)
    cluster = None
    if chosen := request.POST.get("cluster", ""):
        cluster = KafkaCluster.objects.filter(name=chosen).first()
        if cluster is None:
            return JsonResponse({"errors": {"cluster": [f"no Kafka cluster named {chosen!r}"]}}, status=400)
    try:
        sampled = sample_source_messages(
            topics=[str(t) for t in topics], limit=10, timeout=5.0, kafka=connection_for(cluster)
        )
    except (SampleUnavailable, ValueError) as exc:  # ValueError: the cluster's password cannot be read
        return JsonResponse({"errors": {"source.topics": [str(exc)]}}, status=503)
    return JsonResponse({"messages": sampled})
