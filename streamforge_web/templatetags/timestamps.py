"""``{{ moment|utc_time:"Y-m-d H:i:s" }}``: a time as the console prints it, in UTC, inside
``<time datetime="...Z" data-format="...">`` so that ``static/js/localtime.js`` can show it in the browser's
own time zone instead when the person asked for that (the UTC text stays as what the server said)."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.template.defaultfilters import date as date_filter
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter(expects_localtime=False)
def utc_time(moment: datetime | None, fmt: str = "Y-m-d H:i:s") -> SafeString | str:
    """The ``date`` filter's text for ``moment`` in UTC, marked up for the local-time toggle; "" for None
    (so a ``|default:`` after it still applies)."""
    if not isinstance(moment, datetime):
        return ""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return format_html(
        '<time datetime="{}" data-format="{}">{}</time>',
        utc.isoformat().replace("+00:00", "Z"),
        fmt,
        date_filter(utc, fmt),
    )
