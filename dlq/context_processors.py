"""Template context of the DLQ console shared by every page: the header's pending-approvals badge."""

from __future__ import annotations

from django.http import HttpRequest

from dlq.selectors import pending_approval_count


def dlq_nav(request: HttpRequest) -> dict[str, object]:
    """``pending_approvals``: pending approval requests in the user's teams (0 for anonymous visitors)."""
    return {"pending_approvals": pending_approval_count(request.user)}
