"""Pages of the topic browser (under /pipelines/<name>/): the pipeline's topics, one topic's partitions,
configs, group lag and records (masked for viewers as the DLQ message page masks), a source record's
outcome per destination (the page refreshes itself until every destination has one), and the test message
form for operators. The topic page's script asks ``search/`` and ``tail/`` for compact rows (one bounded
search step, or the records written since a position) rendered by the same template as the page's own. Another team's pipeline, and a topic the pipeline does not own, are 404.

Thin: they read the query string and call ``dlq.topic_browser`` / ``dlq.test_messages``. The test message
form posts to its page, which calls the same service function as the API (same role check, same audit).
"""

from __future__ import annotations

from datetime import UTC, datetime

from confluent_kafka import KafkaException
from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.html import format_html
from django.views.decorators.http import require_GET, require_http_methods

from access.models import Role
from access.permissions import has_role
from dlq import test_messages, topic_browser
from dlq.services import InvalidRequest, RegistryUnavailable, ReplayFailed
from dlq.topic_browser import BadPosition, TopicNotFound
from pipelines.clusters import ClusterNotVerified, CredentialUnavailable
from pipelines.models import Pipeline


def _pipeline(request: HttpRequest, name: str) -> Pipeline:
    try:
        return topic_browser.pipeline_for(request.user, name)
    except TopicNotFound:
        raise Http404("no such pipeline") from None


@login_required
@require_GET
def topic_index(request: HttpRequest, name: str) -> HttpResponse:
    """``/pipelines/<name>/topics/``: the topics the pipeline's current spec names, with their roles."""
    pipeline = _pipeline(request, name)
    topics = topic_browser.owned_topics(topic_browser.spec_of(pipeline))
    return render(
        request,
        "pipelines/topics.html",
        {
            "pipeline": pipeline,
            "topics": list(topics.items()),
            "can_operate": has_role(request.user, pipeline.team, Role.OPERATOR),
        },
    )


def _int_param(request: HttpRequest, field: str, errors: dict[str, str]) -> int | None:
    text = request.GET.get(field, "").strip()
    if not text:
        return None
    if not text.isdigit() or len(text) > 18:
        errors[field] = "a whole number, 0 or more"
        return None
    return int(text)


def _time_param(request: HttpRequest, errors: dict[str, str]) -> int | None:
    text = request.GET.get("from_time", "").strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        errors["from_time"] = "an ISO-8601 time, e.g. 2025-01-31T12:00:00Z"
        return None
    if moment.tzinfo is None:  # the form's datetime-local field says UTC
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _coordinates(text: str) -> tuple[int, int] | None:
    partition, _, offset = text.partition("/")
    return (int(partition), int(offset)) if partition.isdigit() and offset.isdigit() else None


@login_required
@require_GET
def topic_page(request: HttpRequest, name: str, topic: str) -> HttpResponse:
    """``/pipelines/<name>/topics/<topic>/``: partitions with watermarks, configs, the pipeline's group lag,
    and a page of records (query: ``partition``, ``from_offset`` or ``from_time``, ``order``, ``cursor``;
    ``highlight=<partition>/<offset>`` marks one record, e.g. where a replay landed)."""
    pipeline = _pipeline(request, name)
    try:
        overview = topic_browser.topic_overview(pipeline, topic)
    except TopicNotFound:
        raise Http404("not a topic of this pipeline") from None
    errors: dict[str, str] = {}
    partition = _int_param(request, "partition", errors)
    from_offset = _int_param(request, "from_offset", errors)
    from_time_ms = _time_param(request, errors)
    order: topic_browser.Order = "oldest" if request.GET.get("order") == "oldest" else "newest"
    page = None
    read_error = ""
    if not overview.error:
        try:
            page = topic_browser.browse(
                pipeline,
                topic,
                user=request.user,
                partition=partition,
                from_offset=from_offset,
                from_time_ms=None if from_offset is not None else from_time_ms,
                order=order,
                cursor=request.GET.get("cursor", ""),
            )
        except BadPosition as exc:
            errors[exc.field] = exc.message
        except TopicNotFound:
            read_error = "the topic does not exist on the cluster (yet)"
        except KafkaException as exc:
            read_error = f"the cluster did not answer: {exc}"
    keep = request.GET.copy()
    keep.pop("cursor", None)
    spec = topic_browser.spec_of(pipeline)
    groups: list[topic_browser.TopicGroup] = []
    groups_error = ""
    if not overview.error:
        try:
            groups = topic_browser.topic_groups(pipeline, topic)
        except KafkaException as exc:
            groups_error = f"the cluster did not answer: {exc}"
    return render(
        request,
        "pipelines/topic.html",
        {
            "pipeline": pipeline,
            "overview": overview,
            "page": page,
            "read_error": read_error,
            "errors": errors,
            "form": {k: request.GET.get(k, "") for k in ("partition", "from_offset", "from_time")},
            "order": order,
            "keep": keep.urlencode(),
            "highlight": _coordinates(request.GET.get("highlight", "")),
            "is_source": topic in spec.source.topics,
            "groups": groups,
            "groups_error": groups_error,
            "scan_default": topic_browser.SCAN_PER_PARTITION,
            "scan_max": topic_browser.MAX_SCAN_PER_PARTITION,
            "tail_kept": topic_browser.TAIL_KEPT,
        },
    )


def _rows(
    request: HttpRequest,
    pipeline: Pipeline,
    topic: str,
    records: list[topic_browser.BrowsedRecord],
    **data: object,
) -> HttpResponse:
    spec = topic_browser.spec_of(pipeline)
    return render(
        request,
        "pipelines/_topic_rows.html",
        {
            "pipeline": pipeline,
            "topic": topic,
            "records": records,
            "is_source": topic in spec.source.topics,
            **data,
        },
    )


def _refusal(message: str, field: str, status: int) -> HttpResponse:
    """A refused fragment: the field and the reason, for the page's script to show beside the field."""
    body = format_html('<div class="error" data-error-field="{}" role="alert">{}</div>', field, message)
    return HttpResponse(body, status=status)


@login_required
@require_GET
def topic_search_rows(request: HttpRequest, name: str, topic: str) -> HttpResponse:
    """``/pipelines/<name>/topics/<topic>/search/``: one step of a search (``dlq.topic_browser.search``) as
    compact rows for the topic page's script, its progress in ``data-*`` attributes of the wrapper (scanned,
    matched, next cursor, ranges). Bad input is 400 naming the field (a DSL expression with its position)."""
    pipeline = _pipeline(request, name)
    errors: dict[str, str] = {}
    partition = _int_param(request, "partition", errors)
    from_offset = _int_param(request, "from_offset", errors)
    from_time_ms = _time_param(request, errors)
    max_scan = _int_param(request, "max_scan", errors)
    mode = request.GET.get("mode", "text")
    if len(request.GET.get("q", "")) > 10_000:
        errors["q"] = "at most 10,000 characters"
    if mode not in ("text", "dsl"):
        errors["mode"] = "text or dsl"
    if errors:
        field, message = next(iter(errors.items()))
        return _refusal(message, field, 400)
    try:
        step = topic_browser.search(
            pipeline,
            topic,
            user=request.user,
            query=request.GET.get("q", ""),
            mode="dsl" if mode == "dsl" else "text",
            partition=partition,
            from_offset=from_offset,
            from_time_ms=None if from_offset is not None else from_time_ms,
            max_scan=topic_browser.SCAN_PER_PARTITION if max_scan is None else max_scan,
            cursor=request.GET.get("cursor", ""),
        )
    except TopicNotFound:
        raise Http404("not a topic of this pipeline") from None
    except BadPosition as exc:
        return _refusal(exc.message, exc.field, 400)
    except KafkaException as exc:
        return _refusal(f"the cluster did not answer: {exc}", "", 503)
    return _rows(request, pipeline, topic, step.records, step=step)


@login_required
@require_GET
def topic_tail_rows(request: HttpRequest, name: str, topic: str) -> HttpResponse:
    """``/pipelines/<name>/topics/<topic>/tail/``: the records written since ``after`` (``dlq.topic_browser
    .tail``) as compact rows, the next position in the wrapper's ``data-position``."""
    pipeline = _pipeline(request, name)
    errors: dict[str, str] = {}
    partition = _int_param(request, "partition", errors)
    if errors:
        return _refusal(errors["partition"], "partition", 400)
    try:
        step = topic_browser.tail(
            pipeline, topic, user=request.user, after=request.GET.get("after", ""), partition=partition
        )
    except TopicNotFound:
        raise Http404("not a topic of this pipeline") from None
    except BadPosition as exc:
        return _refusal(exc.message, exc.field, 400)
    except KafkaException as exc:
        return _refusal(f"the cluster did not answer: {exc}", "", 503)
    return _rows(request, pipeline, topic, step.records, position=step.position)


@login_required
@require_GET
def record_outcomes_page(
    request: HttpRequest, name: str, topic: str, partition: int, offset: int
) -> HttpResponse:
    """``/pipelines/<name>/topics/<topic>/records/<partition>/<offset>/``: what became of a source record at
    each destination (produced where, dead-lettered with which error, filtered, or still pending: the page
    reloads itself every second while any is pending, for at most ``?wait`` seconds, default 60)."""
    pipeline = _pipeline(request, name)
    try:
        result = test_messages.record_outcomes(pipeline, topic=topic, partition=partition, offset=offset)
    except TopicNotFound:
        raise Http404("not a source topic of this pipeline") from None
    started = request.GET.get("started", "")
    now = int(datetime.now(UTC).timestamp())
    first = int(started) if started.isdigit() else now
    wait = request.GET.get("wait", "")
    timeout = int(wait) if wait.isdigit() and int(wait) <= 600 else 60
    return render(
        request,
        "pipelines/record_outcomes.html",
        {
            "pipeline": pipeline,
            "result": result,
            "refresh": not result.done and now - first < timeout,
            "started": first,
            "timed_out": not result.done and now - first >= timeout,
        },
    )


class TestMessageForm(forms.Form):
    """The test message form: a source topic, the value (text), an optional key, a required reason; for a
    registry-format source also the subject and version whose schema encodes the JSON value (both
    optional: ``<topic>-value``, its latest version)."""

    topic = forms.ChoiceField()
    value = forms.CharField(widget=forms.Textarea(attrs={"rows": 8}), required=False, strip=False)
    key = forms.CharField(required=False, strip=False)
    reason = forms.CharField(max_length=2000)
    subject = forms.CharField(
        required=False, max_length=255, widget=forms.TextInput(attrs={"placeholder": "<topic>-value"})
    )
    schema_version = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=2**31 - 1,
        widget=forms.NumberInput(attrs={"placeholder": "latest"}),
    )


@login_required
@require_http_methods(["GET", "POST"])
def test_message_page(request: HttpRequest, name: str) -> HttpResponse:
    """``/pipelines/<name>/test-message/``: operators produce a test message to a source topic and are
    taken to its outcome page. Viewers get 403."""
    pipeline = _pipeline(request, name)
    if not has_role(request.user, pipeline.team, Role.OPERATOR):
        raise PermissionDenied("producing a test message needs the operator role")
    spec = topic_browser.spec_of(pipeline)
    form = TestMessageForm(request.POST or None)
    topic_field = form.fields["topic"]
    assert isinstance(topic_field, forms.ChoiceField)
    topic_field.choices = [(t, t) for t in spec.source.topics]
    if not spec.source.uses_registry:  # a JSON source has no schema to choose
        del form.fields["subject"], form.fields["schema_version"]
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            produced = test_messages.produce_test_message(
                actor=request.user,  # type: ignore[arg-type]
                pipeline=pipeline,
                topic=data["topic"],
                value=data["value"].encode(),
                key=data["key"].encode() if data["key"] else None,
                reason=data["reason"],
                subject=data.get("subject") or "",
                schema_version=data.get("schema_version"),
            )
        except InvalidRequest as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        except ReplayFailed as exc:
            form.add_error(None, str(exc))
        except RegistryUnavailable as exc:
            form.add_error(None, f"the schema registry cannot be used: {exc}")
        except (ClusterNotVerified, CredentialUnavailable) as exc:
            form.add_error(None, f"the Kafka cluster cannot be used: {exc}")
        else:
            return redirect(
                "pipeline-record-outcomes", pipeline.name, produced.topic, produced.partition, produced.offset
            )
    return render(request, "pipelines/test_message.html", {"pipeline": pipeline, "form": form})
