"""What the DLQ console's pages show, read from the models: the message list (filters from the query string,
keyset pages, counts per status), a message's payload views and audit trail, failure groups with their
trend sparkline and runbooks, bulk actions, approvals, and the per-pipeline backlog of the overview. Views
call these and render; every mutation goes through ``dlq.services``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db.models import Count, Model, Q
from django.utils import timezone
from django.utils.safestring import SafeString

from access.models import AuditEvent, Membership, Role
from access.paging import KeysetPage, keyset_page
from access.permissions import AnyUser, is_admin, visible_teams
from dlq import markdown, services
from dlq.filters import FilterError, MessageFilter
from dlq.models import (
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    DeadLetter,
    FailureGroup,
    GroupHourlyCount,
    Runbook,
    RunbookAction,
    Status,
)

LIST_PAGE_SIZE = 50
#: Time-range presets of the list and bulk forms (``range=24h``), newest failures within that long.
RANGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
#: Query-string fields of the message filter form, in form order.
FILTER_FIELDS = ("pipeline", "error_type", "group", "status", "range", "since", "until", "q")

M = TypeVar("M", bound=Model)


# ------------------------------------------------------------------------------------------ roles


@dataclass(frozen=True)
class Roles:
    """A user's roles, read once per page: admin everywhere, else a role per team id."""

    admin: bool
    by_team: dict[int, str]

    def at_least(self, team_id: int | None, needed: Role) -> bool:
        """Whether the user holds ``needed`` (or stronger) for objects of ``team_id``."""
        if self.admin:
            return True
        role = self.by_team.get(team_id) if team_id is not None else None
        return role is not None and Role.rank(role) >= Role.rank(needed)

    def anywhere(self, needed: Role) -> bool:
        """Whether the user holds ``needed`` in at least one team."""
        return self.admin or any(Role.rank(r) >= Role.rank(needed) for r in self.by_team.values())


def roles_of(user: AnyUser) -> Roles:
    """The user's roles (two queries, however many rows a page shows)."""
    if not user.is_authenticated:
        return Roles(False, {})
    return Roles(
        is_admin(user), dict(Membership.objects.filter(user_id=user.pk).values_list("team_id", "role"))
    )


# ------------------------------------------------------------------------------------------ list


@dataclass(frozen=True)
class ListQuery:
    """The message filter of a page, from its query string: ``selection`` to apply, ``form`` to fill the
    form back in, ``errors`` by field for values that were ignored because they are invalid."""

    selection: MessageFilter
    form: dict[str, str]
    errors: dict[str, str]

    def live_match(self) -> dict[str, Any]:
        """What the page's script needs to decide whether a ``dlq.arrived`` message belongs on it: new
        arrivals are parked and failed just now, so a status other than parked, an ``until`` bound, or a
        text search (the message does not carry the text) rule them out."""
        s = self.selection
        return {
            "pipeline": s.pipeline,
            "error_type": s.error_type,
            "group": s.group,
            "possible": s.status in ("", Status.PARKED) and not s.until and not s.q and not s.topic,
        }


def _utc_iso(text: str) -> str:
    """A ``datetime-local`` value (no zone; the form says UTC) or an ISO time, as ISO-8601 with a zone."""
    text = text.strip()
    if not text:
        return ""
    if text.endswith("Z") or "+" in text[10:] or "-" in text[10:]:
        return text
    return text + "Z"


def list_query(params: Mapping[str, str], *, now: datetime | None = None) -> ListQuery:
    """Read the filter form's fields (see ``FILTER_FIELDS``); invalid values are dropped with an error."""
    form = {name: str(params.get(name, "") or "").strip() for name in FILTER_FIELDS}
    now = now or timezone.now()
    values: dict[str, str] = {
        "pipeline": form["pipeline"],
        "error_type": form["error_type"],
        "group": form["group"],
        "status": form["status"],
        "since": _utc_iso(form["since"]),
        "until": _utc_iso(form["until"]),
        "q": form["q"],
    }
    errors: dict[str, str] = {}
    if form["range"]:
        if form["range"] in RANGES:
            values["since"] = (now - RANGES[form["range"]]).isoformat()
        else:
            errors["range"] = f"one of {', '.join(RANGES)}"
    while True:
        try:
            selection = MessageFilter.from_mapping(values)
            break
        except FilterError as exc:
            errors[exc.field] = str(exc).split(": ", 1)[-1]
            values[exc.field] = ""
    return ListQuery(selection, form, errors)


def message_rows(
    user: AnyUser, selection: MessageFilter, *, before: int | None, after: int | None
) -> KeysetPage:
    """The list's page of dead letters (no payloads loaded); the key column of teams whose keys the user
    may not see (``services.key_masked_teams``) is masked, and a search does not match those keys."""
    hidden = services.key_masked_teams(user)
    qs = selection.apply(services.visible_dead_letters(user), key_masked_teams=hidden)
    page = keyset_page(
        qs.defer("key", "value", "headers"), key="id", before=before, after=after, size=LIST_PAGE_SIZE
    )
    for row in page.rows:
        if row.team_id in hidden and row.key_text:
            row.key_text = services.MASK
    return page


def status_counts(user: AnyUser, selection: MessageFilter) -> dict[str, int]:
    """Dead letters per status under every filter but the status one (one grouped query)."""
    without_status = MessageFilter(**{**selection.__dict__, "status": ""})
    hidden = services.key_masked_teams(user)
    qs = without_status.apply(services.visible_dead_letters(user), key_masked_teams=hidden).order_by()
    counts = dict.fromkeys(Status.values, 0)
    for status, n in qs.values_list("status").annotate(n=Count("id")):
        counts[status] = n
    return counts


def filter_choices(user: AnyUser) -> dict[str, list[str]]:
    """Pipeline names and error types for the filter form's menus, from the (small) failure-group table."""
    groups = FailureGroup.objects.filter(team__in=visible_teams(user)).order_by()
    return {
        "pipelines": sorted(set(groups.exclude(pipeline_name="").values_list("pipeline_name", flat=True))),
        "error_types": sorted(set(groups.values_list("error_type", flat=True))),
    }


# ------------------------------------------------------------------------------------------ message


@dataclass(frozen=True)
class PayloadView:
    """A key or payload as the page's tabs show it: ``pretty`` (indented JSON; empty unless ``encoding`` is
    ``json``), ``raw`` (the bytes as UTF-8 text) and ``hex`` (``services.hex_dump``); ``encoding`` and
    ``size`` as ``services.render_bytes`` found them; ``masked`` when sensitive paths are hidden;
    ``withheld`` when the viewer may see none of it (then every tab shows the same ``withheld: ...`` line);
    ``default_tab`` is the tab shown first (``pretty``, ``raw`` or ``hex``)."""

    encoding: str
    size: int
    pretty: str
    raw: str
    hex: str
    masked: bool
    default_tab: str
    withheld: bool = False


def payload_views(
    data: bytes | None, *, masking: services.Masking = services.UNMASKED, key: bool = False
) -> PayloadView:
    """A payload (or, with ``key``, a record key) for the page's tabs (see ``PayloadView``), as
    ``masking`` lets its viewer see it. Where paths are masked, raw and hex are of the masked JSON too, and
    a payload that is not JSON is withheld on every tab, so no tab shows what the pretty view hides."""
    rendered = masking.key(data) if key else masking.value(data)
    if data is None:
        return PayloadView(rendered.encoding, rendered.size, "", "", "", masked=False, default_tab="raw")
    if rendered.encoding == "withheld":
        return PayloadView(
            rendered.encoding,
            rendered.size,
            "",
            rendered.text,
            rendered.text,
            masked=True,
            default_tab="raw",
            withheld=True,
        )
    shown = data
    masked = not key and bool(masking.paths) and rendered.encoding == "json"
    if masked:
        shown = json.dumps(json.loads(rendered.text), separators=(",", ":"), ensure_ascii=False).encode()
    return PayloadView(
        encoding=rendered.encoding,
        size=rendered.size,
        pretty=rendered.text,
        raw=shown.decode("utf-8", errors="replace"),
        hex=services.hex_dump(shown),
        masked=masked,
        default_tab={"json": "pretty", "hex": "hex"}.get(rendered.encoding, "raw"),
    )


def editor_text(dead_letter: DeadLetter) -> tuple[str, str]:
    """The fix editor's starting text and mode (``json`` or ``text``): the current payload (the latest fix,
    else the original), indented when it is JSON."""
    value, _ = services.current_payload(dead_letter)
    rendered = services.render_bytes(value)
    if rendered.encoding == "json":
        return rendered.text, "json"
    if rendered.encoding == "text":
        return rendered.text, "text"
    return "", "text"  # binary: an operator types the replacement from scratch


def audit_trail(dead_letter: DeadLetter, approval_ids: list[int], *, limit: int = 200) -> list[AuditEvent]:
    """The audit events of a dead letter and of the approval requests about it, newest first."""
    return list(
        AuditEvent.objects.filter(
            Q(target_type="dead_letter", target_id=str(dead_letter.pk))
            | Q(target_type="approval", target_id__in=[str(a) for a in approval_ids])
        ).order_by("-sequence")[:limit]
    )


# ------------------------------------------------------------------------------------------ groups


@dataclass(frozen=True)
class Sparkline:
    """Arrivals per hour over the last 24 hours, oldest first, and an SVG polyline of them."""

    counts: list[int]
    width: int = 120
    height: int = 26

    @property
    def points(self) -> str:
        """``x,y`` pairs for ``<polyline points=...>``, the highest hour touching the top."""
        top = max(self.counts) or 1
        step = self.width / max(1, len(self.counts) - 1)
        return " ".join(
            f"{i * step:.1f},{self.height - 2 - (n / top) * (self.height - 4):.1f}"
            for i, n in enumerate(self.counts)
        )

    @property
    def total(self) -> int:
        """Arrivals in the 24 hours."""
        return sum(self.counts)


@dataclass(frozen=True)
class RunbookView:
    """A runbook beside its group: the markdown as safe HTML, and its actions as (value, label)."""

    runbook: Runbook
    html: SafeString
    actions: list[tuple[str, str]]


@dataclass(frozen=True)
class GroupRow:
    """One failure group on the groups page (``group.parked`` is annotated)."""

    group: FailureGroup
    trend: Sparkline
    runbooks: list[RunbookView] = field(default_factory=list)


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def group_rows(
    user: AnyUser, *, pipeline: str = "", error_type: str = "", limit: int = 100, now: datetime | None = None
) -> list[GroupRow]:
    """Failure groups the user may see, most recently seen first, with the parked count, a 24-hour trend
    and their runbooks (attached to the group, or to its error type in its team). Four queries."""
    qs = FailureGroup.objects.filter(team__in=visible_teams(user)).annotate(
        parked=Count("dead_letters", filter=Q(dead_letters__status=Status.PARKED))
    )
    if pipeline:
        qs = qs.filter(pipeline_name=pipeline)
    if error_type:
        qs = qs.filter(error_type=error_type)
    groups = list(qs.select_related("team").order_by("-last_seen")[:limit])
    first_hour = _hour(now or timezone.now()) - timedelta(hours=23)
    hourly: dict[int, dict[datetime, int]] = {}
    for row in GroupHourlyCount.objects.filter(group__in=groups, hour__gte=first_hour):
        hourly.setdefault(row.group_id, {})[_hour(row.hour)] = row.count
    hours = [first_hour + timedelta(hours=i) for i in range(24)]
    teams = {g.team_id for g in groups}
    by_group: dict[int, list[Runbook]] = {}
    by_type: dict[tuple[int, str], list[Runbook]] = {}
    for rb in Runbook.objects.filter(team__in=teams).filter(
        Q(group__in=groups) | Q(group=None, error_type__in={g.error_type for g in groups})
    ):
        if rb.group_id is not None:
            by_group.setdefault(rb.group_id, []).append(rb)
        else:
            by_type.setdefault((rb.team_id, rb.error_type), []).append(rb)
    labels = dict(RunbookAction.choices)
    rows = []
    for g in groups:
        counts = [hourly.get(g.pk, {}).get(h, 0) for h in hours]
        books = by_group.get(g.pk, []) + by_type.get((g.team_id, g.error_type), [])
        rows.append(
            GroupRow(
                g,
                Sparkline(counts),
                [
                    RunbookView(rb, markdown.render(rb.body), [(a, labels.get(a, a)) for a in rb.actions])
                    for rb in books
                ],
            )
        )
    return rows


# ------------------------------------------------------------------------------------------ bulk, approvals


def bulk_actions(user: AnyUser, *, limit: int = 50) -> list[BulkAction]:
    """The newest bulk actions of the user's teams."""
    return list(
        BulkAction.objects.filter(team__in=visible_teams(user))
        .select_related("created_by", "team")
        .order_by("-created_at", "-id")[:limit]
    )


def approvals(user: AnyUser, *, pending: bool, limit: int = 100) -> list[ApprovalRequest]:
    """Approval requests of the user's teams: the pending ones (oldest first: first come, first served) or
    the most recently decided."""
    qs = ApprovalRequest.objects.filter(team__in=visible_teams(user)).select_related(
        "requested_by", "decided_by", "team", "dead_letter", "bulk"
    )
    if pending:
        return list(qs.filter(state=ApprovalState.PENDING).order_by("requested_at", "id")[:limit])
    return list(qs.exclude(state=ApprovalState.PENDING).order_by("-decided_at", "-id")[:limit])


def pending_approval_count(user: AnyUser) -> int:
    """Pending approval requests in the user's teams (the header's badge)."""
    if not user.is_authenticated:
        return 0
    return ApprovalRequest.objects.filter(team__in=visible_teams(user), state=ApprovalState.PENDING).count()


# ------------------------------------------------------------------------------------------ overview


def parked_backlog(pipeline_ids: list[int]) -> dict[int, int]:
    """Parked dead letters per pipeline id (one grouped query, served by the pipeline/status index)."""
    rows = (
        DeadLetter.objects.filter(pipeline_id__in=pipeline_ids, status=Status.PARKED)
        .order_by()
        .values_list("pipeline_id")
        .annotate(n=Count("id"))
    )
    return {pipeline_id: n for pipeline_id, n in rows if pipeline_id is not None}
