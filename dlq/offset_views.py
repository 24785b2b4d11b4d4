"""The offsets page of a pipeline (``/pipelines/<name>/offsets/``, linked from the pipeline page as "Skip past
an offset…"): each source partition with its watermarks and the checkpoint's position, and for operators a
"Skip past an offset…" form per partition and a "Move to a time…" form (one partition or all). The forms ask
for the dry run first (a GET: the per-partition counts, nothing created); the dry run's answer carries the
"Request skip" form (a POST with CSRF and a reason) that calls ``offset_skips.request_skip``, the service the
API calls (same role check, same audit). Below: the pipeline's requests with their ranges and states, a link
to the approvals page while one waits, and to the DLQ list of its ``Skipped`` dead letters.

Another team's pipeline is 404; a viewer sees the positions and the requests, not the forms (403 on POST).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from confluent_kafka import KafkaException
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from access.models import Role
from access.permissions import has_role
from dlq import topic_browser
from dlq.services import offset_skips
from dlq.services.errors import Conflict, InvalidRequest
from dlq.topic_browser import TopicNotFound
from pipelines.clusters import ClusterNotVerified, CredentialUnavailable
from pipelines.models import Pipeline
from streamforge_core import contract as c


@dataclass
class SkipForm:
    """What the forms sent, as text (shown again), and the parsed values; ``errors`` per field."""

    topic: str = ""
    partition: str = ""
    offset: str = ""
    to_time: str = ""
    reason: str = ""

    def parsed(self) -> dict[str, Any]:
        """``plan_skip``'s keyword arguments; InvalidRequest naming the field when a value is not one."""
        values: dict[str, Any] = {
            "topic": self.topic,
            "partition": None,
            "past_offset": None,
            "to_time": None,
        }
        for field, key, limit in (("partition", "partition", 2**31), ("offset", "past_offset", 2**63)):
            text = getattr(self, field).strip()
            if text:
                if not text.isdigit() or len(text) > 19 or int(text) >= limit:
                    raise InvalidRequest(field, "a whole number, 0 or more")
                values[key] = int(text)
        if self.to_time.strip():
            try:
                moment = datetime.fromisoformat(self.to_time.strip().replace("Z", "+00:00"))
            except ValueError:
                raise InvalidRequest("to_time", "an ISO-8601 time, e.g. 2026-11-27T12:00:00Z") from None
            values["to_time"] = moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # the form says UTC
        return values


def _pipeline(request: HttpRequest, name: str) -> Pipeline:
    try:
        return topic_browser.pipeline_for(request.user, name)
    except TopicNotFound:
        raise Http404("no such pipeline") from None


@login_required
@require_http_methods(["GET", "POST"])
def offsets_page(request: HttpRequest, name: str) -> HttpResponse:
    """``/pipelines/<name>/offsets/``: GET shows the positions (and the dry run when the query asks one:
    ``?partition=&offset=`` or ``?to_time=[&partition=]``); POST requests the skip and redirects back."""
    pipeline = _pipeline(request, name)
    can_operate = has_role(request.user, pipeline.team, Role.OPERATOR)
    source = request.POST if request.method == "POST" else request.GET
    form = SkipForm(
        **{f: source.get(f, "")[:300] for f in ("topic", "partition", "offset", "to_time", "reason")}
    )
    errors: dict[str, str] = {}
    plan: list[offset_skips.PartitionMove] = []
    if request.method == "POST":
        if not can_operate:
            raise PermissionDenied("requesting an offset skip needs the operator role")
        try:
            skip = offset_skips.request_skip(
                actor=request.user,  # type: ignore[arg-type]
                pipeline=pipeline,
                reason=form.reason,
                **form.parsed(),
            )
        except InvalidRequest as exc:
            errors[exc.field] = exc.message
        except Conflict as exc:
            errors["request"] = str(exc)
        except (KafkaException, ClusterNotVerified, CredentialUnavailable) as exc:
            errors["request"] = f"the cluster did not answer: {exc}"
        else:
            messages.success(
                request, f"Offset skip #{skip.pk} requested: an approver of {pipeline.team.name} decides."
            )
            return redirect(reverse("pipeline-offsets", args=[pipeline.name]))
    elif can_operate and (form.offset or form.to_time):
        try:
            plan = offset_skips.plan_skip(pipeline=pipeline, **form.parsed())
        except InvalidRequest as exc:
            errors[exc.field] = exc.message
        except (KafkaException, ClusterNotVerified, CredentialUnavailable) as exc:
            errors["request"] = f"the cluster did not answer: {exc}"
    try:
        rows, checkpoint_problem = offset_skips.positions(pipeline)
    except (KafkaException, ClusterNotVerified, CredentialUnavailable) as exc:
        rows, checkpoint_problem = [], f"the cluster did not answer: {exc}"
    skips = offset_skips.skips_for(pipeline)
    return render(
        request,
        "dlq/offsets.html",
        {
            "pipeline": pipeline,
            "rows": rows,
            "checkpoint_problem": checkpoint_problem,
            "can_operate": can_operate,
            "form": form,
            "errors": errors,
            "plan": plan,
            "plan_records": sum(m.records for m in plan),
            "plan_rereads": sum(m.rereads for m in plan),
            "plan_moves": any(m.direction != "none" for m in plan),
            "skips": skips,
            "open_skip": next((s for s in skips if s.state in ("requested", "approved", "applying")), None),
            "skipped_url": reverse("dlq-list")
            + "?"
            + urlencode({"pipeline": pipeline.name, "error_type": c.SKIPPED}),
        },
        status=400 if errors and request.method == "POST" else 200,
    )
