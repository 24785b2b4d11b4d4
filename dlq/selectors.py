"""What the DLQ console's pages read from the models: the message list (keyset pages, counts per status,
the filter menus), a message's audit trail, failure groups with their trend sparkline and runbooks, bulk
actions, approvals, and the per-pipeline backlog of the overview. Presentation (roles, the filter form,
payload tabs) lives in ``dlq.presenters``; every mutation goes through ``dlq.services``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from django.db.models import Count, Min, Model, Q, QuerySet
from django.utils import timezone
from django.utils.safestring import SafeString

from access.models import AuditEvent, Role
from access.paging import KeysetPage, keyset_page
from access.permissions import AnyUser, is_admin, role_in, visible_teams
from dlq import counts, markdown, services
from dlq.filters import SEARCH_ORDER, MessageFilter
from dlq.models import (
    ApprovalRequest,
    ApprovalState,
    BulkAction,
    DeadLetter,
    FailureGroup,
    GroupHourlyCount,
    Replay,
    ReplayState,
    Runbook,
    RunbookAction,
    Status,
)
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster, Pipeline, PipelineRevision

LIST_PAGE_SIZE = 50
#: The page sizes the list offers (``?size=``).
LIST_PAGE_SIZES = (25, 50, 100, 200)

M = TypeVar("M", bound=Model)


# ------------------------------------------------------------------------------------------ list


def message_rows(
    user: AnyUser,
    selection: MessageFilter,
    *,
    before: int | None,
    after: int | None,
    size: int = LIST_PAGE_SIZE,
) -> KeysetPage:
    """The list's page of ``size`` dead letters (no payloads loaded); the key column of teams whose keys the
    user may not see (``services.key_masked_teams``) is masked, and a search does not match those keys."""
    hidden = services.key_masked_teams(user)
    qs = selection.apply(services.visible_dead_letters(user), key_masked_teams=hidden)
    order = SEARCH_ORDER if SEARCH_ORDER in qs.query.annotations else "id"
    page = keyset_page(qs.defer("key", "value", "headers"), key=order, before=before, after=after, size=size)
    again = failed_again([row.pk for row in page.rows if row.status == Status.REPLAYED])
    for row in page.rows:
        if row.team_id in hidden and row.key_text:
            row.key_text = services.MASK
        # The badge: a replayed message whose replay came back to a DLQ says so, not "replayed".
        row.status_shown = FAILED_AGAIN_BADGE if row.pk in again else row.status
    return page


#: The status badge of a replayed dead letter whose latest replay failed again (see ``failed_again``).
FAILED_AGAIN_BADGE = "failed_again"


def failed_again(ids: Collection[int]) -> set[int]:
    """Those of ``ids`` whose latest replay is FAILED_AGAIN: the replayed record came back to a DLQ (its
    new dead letter links here), so "replayed" would tell the operator the wrong thing. One query."""
    if not ids:
        return set()
    latest: dict[int, str] = {}
    for dead_letter_id, state in (
        Replay.objects.filter(dead_letter_id__in=list(ids))
        .order_by("dead_letter_id", "requested_at", "id")
        .values_list("dead_letter_id", "state")
    ):
        latest[dead_letter_id] = state
    return {pk for pk, state in latest.items() if state == ReplayState.FAILED_AGAIN}


def status_counts(user: AnyUser, selection: MessageFilter) -> dict[str, int]:
    """Dead letters per status under every filter but the status one. Filters a failure group determines
    (pipeline, error type, group, DLQ topic) and the cluster are answered from the trigger-kept deltas
    (``dlq.counts``, a millisecond at any size); a time range, a search, a destination or a selection of
    ids counts the matching rows (one grouped query along the filter's index)."""
    if selection.group_determined:
        groups = FailureGroup.objects.all()
        if not is_admin(user):
            groups = groups.filter(team__in=visible_teams(user))
        groups = selection.apply_to_groups(groups)
        clusters: list[int | None] | None = None
        if selection.cluster == DEFAULT_CLUSTER_NAME:
            clusters = [None]
        elif selection.cluster:
            clusters = list(KafkaCluster.objects.filter(name=selection.cluster).values_list("pk", flat=True))
        return counts.per_status(groups, cluster_ids=clusters)
    without_status = MessageFilter(**{**selection.__dict__, "status": ""})
    hidden = services.key_masked_teams(user)
    qs = without_status.apply(services.visible_dead_letters(user), key_masked_teams=hidden).order_by()
    found = dict.fromkeys(Status.values, 0)
    for status, n in qs.values_list("status").annotate(n=Count("id")):
        found[status] = n
    return found


@dataclass(frozen=True)
class FilterChoices:
    """The filter form's menus: pipeline names, destination names (of the visible pipelines' current
    revisions), error types, failure groups as (id, label) with the most recently seen first (at most
    ``GROUP_CHOICES``), and the Kafka clusters' names when there is more than the default one."""

    pipelines: list[str]
    destinations: list[str]
    error_types: list[str]
    groups: list[tuple[int, str]]
    clusters: list[str]


#: At most this many failure groups in the filter form's menu (the most recently seen).
GROUP_CHOICES = 300


def filter_choices(user: AnyUser, *, group: int | None = None) -> FilterChoices:
    """The filter form's menus for ``user``, from the (small) failure-group and pipeline tables; ``group``,
    when given and visible, is in the group menu even if older than the ones listed."""
    groups = FailureGroup.objects.filter(team__in=visible_teams(user)).order_by()
    named = list(KafkaCluster.objects.order_by("name").values_list("name", flat=True))
    destinations: set[str] = set()
    # Names read from the stored specs as they are (every one was validated when saved): parsing them
    # again would compile each pipeline's DSL on every list page.
    for spec in PipelineRevision.objects.filter(
        pk__in=Pipeline.objects.filter(team__in=visible_teams(user)).values("current_revision")
    ).values_list("spec", flat=True):
        destinations.update(str(d["name"]) for d in spec.get("destinations", []) if "name" in d)
    recent = list(
        groups.order_by("-last_seen").values_list(
            "pk", "error_type", "pipeline_name", "dlq_topic", "signature"
        )[:GROUP_CHOICES]
    )
    if group is not None and all(row[0] != group for row in recent):
        recent += list(
            groups.filter(pk=group).values_list("pk", "error_type", "pipeline_name", "dlq_topic", "signature")
        )
    return FilterChoices(
        pipelines=sorted(set(groups.exclude(pipeline_name="").values_list("pipeline_name", flat=True))),
        destinations=sorted(destinations),
        error_types=sorted(set(groups.values_list("error_type", flat=True))),
        groups=[
            (pk, f"#{pk} {error_type} · {pipeline or topic} · {_clip(signature, 60)}")
            for pk, error_type, pipeline, topic, signature in recent
        ],
        clusters=[DEFAULT_CLUSTER_NAME, *named] if named else [],
    )


def _clip(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def audit_trail(dead_letter: DeadLetter, approval_ids: list[int], *, limit: int = 200) -> list[AuditEvent]:
    """The audit events of a dead letter, of the approval requests about it, and of the bulk actions that
    replayed or skipped it (a bulk action is audited once for all its messages), newest first."""
    bulks = {dead_letter.closed_by_bulk_id, *dead_letter.replays.values_list("bulk_id", flat=True)} - {None}
    return list(
        AuditEvent.objects.filter(
            Q(target_type="dead_letter", target_id=str(dead_letter.pk))
            | Q(target_type="approval", target_id__in=[str(a) for a in approval_ids])
            | Q(target_type="bulk", target_id__in=[str(b) for b in bulks])
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
    #: The group's oldest parked dead letter (None: none is parked): where a runbook's fix / replay / skip /
    #: request-delete action opens.
    first_parked: int | None = None
    #: Who is on the group (None: nobody), and whether the user may claim it (or edit their note) / release it.
    claim: services.ClaimView | None = None
    can_claim: bool = False
    can_release: bool = False


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def with_parked_counts(groups: QuerySet[FailureGroup]) -> QuerySet[FailureGroup]:
    """``groups`` annotated with ``parked``, each group's parked dead letters (``dlq.counts.with_parked``)."""
    return counts.with_parked(groups)


def group_rows(
    user: AnyUser, *, pipeline: str = "", error_type: str = "", limit: int = 100, now: datetime | None = None
) -> list[GroupRow]:
    """Failure groups the user may see, most recently seen first, with the parked count, a 24-hour trend
    and their runbooks (attached to the group, or to its error type in its team), and its oldest parked dead
    letter, who is on it and what the user may do about that. Six queries."""
    qs = with_parked_counts(FailureGroup.objects.filter(team__in=visible_teams(user)))
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
    first_parked = dict(
        DeadLetter.objects.filter(group__in=groups, status=Status.PARKED)
        .values("group")
        .annotate(first=Min("pk"))
        .values_list("group", "first")
    )
    claims = services.group_claims([g.pk for g in groups])
    roles = {g.team_id: role_in(user, g.team) for g in groups}
    me = user.get_username() if user.is_authenticated else ""
    rows = []
    for g in groups:
        counts = [hourly.get(g.pk, {}).get(h, 0) for h in hours]
        claim = claims.get(g.pk)
        role = roles[g.team_id]
        operates = role is not None and Role.rank(role) >= Role.rank(Role.OPERATOR)
        administers = role is not None and Role.rank(role) >= Role.rank(Role.ADMIN)
        books = by_group.get(g.pk, []) + by_type.get((g.team_id, g.error_type), [])
        rows.append(
            GroupRow(
                g,
                Sparkline(counts),
                [
                    RunbookView(rb, markdown.render(rb.body), [(a, labels.get(a, a)) for a in rb.actions])
                    for rb in books
                ],
                first_parked.get(g.pk),
                claim,
                can_claim=operates and bool(getattr(g, "parked", 0)) and (claim is None or claim.by == me),
                can_release=claim is not None and (claim.by == me or administers),
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
        "requested_by", "decided_by", "team", "dead_letter", "bulk", "redrive_policy__pipeline"
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
    """Parked dead letters per pipeline id (``dlq.counts.parked_per_pipeline``)."""
    return counts.parked_per_pipeline(pipeline_ids)
