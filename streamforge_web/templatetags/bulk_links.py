"""``{% load bulk_links %}``: links from a bulk action to the next one (a finished bulk fix offers the
bulk replay of the same selection)."""

from __future__ import annotations

from typing import Any

from django import template

from dlq.filters import FilterError, MessageFilter
from dlq.presenters import export_query

register = template.Library()


@register.filter
def selection_query(filters: dict[str, Any]) -> str:
    """The bulk page's query string (``group=3&pipeline=...``, ids comma-joined) selecting what a bulk
    action's stored ``filters`` select; "" when they no longer parse."""
    try:
        return export_query(MessageFilter.from_mapping(filters))
    except FilterError:
        return ""
