"""What the audit log page shows, read from the models: its filters, a keyset page of events, and the
action names for the filter menu. The page's view calls these and renders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.db.models import QuerySet

from access.models import AuditEvent
from access.paging import KeysetPage, keyset_page

AUDIT_PAGE_SIZE = 50


@dataclass(frozen=True)
class AuditQuery:
    """The audit log's filters (exact matches), as typed into its form."""

    action: str = ""
    actor: str = ""
    target_type: str = ""
    target_id: str = ""

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> AuditQuery:
        """Read the filters from a query string."""
        return cls(
            **{name: str(params.get(name, "") or "").strip()[:150] for name in cls.__dataclass_fields__}
        )

    def apply(self, qs: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        """``qs`` narrowed by each filter that is set."""
        if self.action:
            qs = qs.filter(action=self.action)
        if self.actor:
            qs = qs.filter(actor_name=self.actor)
        if self.target_type:
            qs = qs.filter(target_type=self.target_type)
        if self.target_id:
            qs = qs.filter(target_id=self.target_id)
        return qs


def audit_events(query: AuditQuery, *, before: int | None, after: int | None) -> KeysetPage:
    """A page of the audit log, newest first, keyed by sequence number."""
    return keyset_page(
        query.apply(AuditEvent.objects.all()),
        key="sequence",
        before=before,
        after=after,
        size=AUDIT_PAGE_SIZE,
    )


def audit_actions() -> list[str]:
    """Every action name in the log, for the filter menu (an indexed column)."""
    return sorted(set(AuditEvent.objects.order_by().values_list("action", flat=True).distinct()))
