"""How the DLQ console's pages present what they show: the user's roles (which buttons to offer), the message
filter read from the query string, and a key or payload as the message page's pretty / raw / hex tabs, as
the viewer may see it. Read queries live in ``dlq.selectors``; every mutation goes through ``dlq.services``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.utils import timezone

from access.models import Membership, Role
from access.permissions import AnyUser, is_admin
from dlq import services
from dlq.filters import FilterError, MessageFilter
from dlq.models import (
    DeadLetter,
    Status,
)
from streamforge_core.json_depth import MAX_JSON_DEPTH

#: Time-range presets of the list and bulk forms (``range=24h``), newest failures within that long.
RANGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
#: Query-string fields of the message filter form, in form order.
FILTER_FIELDS = (
    "pipeline", "destination", "error_type", "group", "status", "range", "since", "until", "q", "cluster", "ids",
    "fix_forward",
)  # fmt: skip


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
        arrivals are parked and failed just now, so a status other than parked, an ``until`` bound, a text
        search, a destination (the message carries neither) or a selection of ids rule them out."""
        s = self.selection
        return {
            "pipeline": s.pipeline,
            "error_type": s.error_type,
            "group": s.group,
            "possible": s.status in ("", Status.PARKED)
            and not (s.until or s.q or s.topic or s.destination or s.ids),
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
        "cluster": form["cluster"],
        "destination": form["destination"],
        "ids": form["ids"],
        "fix_forward": form["fix_forward"],
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


def export_query(selection: MessageFilter) -> str:
    """The query string of the API's export (``/api/dlq/messages/export/``) of exactly ``selection``: the
    page's ``range`` is already resolved into ``since``, ignored invalid values are left out."""
    data = selection.to_json()
    if "ids" in data:
        data["ids"] = ",".join(str(pk) for pk in data["ids"])
    return urlencode(data)


# ------------------------------------------------------------------------------------------ message


@dataclass(frozen=True)
class PayloadView:
    """A key or payload as the page's tabs show it: ``pretty`` (indented JSON; empty unless ``encoding`` is
    ``json``), ``raw`` (the bytes as UTF-8 text) and ``hex`` (``services.hex_dump``); ``encoding`` and
    ``size`` as ``services.render_bytes`` found them; ``masked`` when sensitive paths are hidden;
    ``withheld`` when the viewer may see none of it (then every tab shows the same ``withheld: ...`` line,
    or, with ``encoding`` ``erased``, the topic browser's "erased by an approved delete" for everyone);
    ``default_tab`` is the tab shown first (``pretty``, ``raw`` or ``hex``)."""

    encoding: str
    size: int
    pretty: str
    raw: str
    hex: str
    masked: bool
    default_tab: str
    withheld: bool = False

    @property
    def depth_limit(self) -> int:
        """How deep JSON may nest to be shown pretty (a ``too_deep`` payload's note names it)."""
        return MAX_JSON_DEPTH


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
    else the original), indented when it is JSON; a registry-format payload as its decoded record."""
    value, _ = services.current_payload(dead_letter)
    decoded = services.decoded_payload(dead_letter, value)
    if decoded is not None and decoded.text is not None:  # a registry-format record: fixed as its JSON
        value = decoded.text
    rendered = services.render_bytes(value)
    if rendered.encoding == "json":
        return rendered.text, "json"
    if rendered.encoding in ("text", "too_deep"):
        return rendered.text, "text"
    return "", "text"  # binary: an operator types the replacement from scratch
