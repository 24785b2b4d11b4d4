"""Ending a person's access at once: every browser session and their API token (issue #33).

For someone who left, or whose identity provider account was disabled: the provider refuses their next
sign-in, but a session made before lasts ``STREAMFORGE_SESSION_HOURS`` and a token until revoked. An admin's
``end_access`` deletes both now; their open websockets close within ``access.socket_sessions``'
recheck interval (they re-read a session that is gone). One audit event ``user.end_sessions`` with the
counts; each token's deletion is audited too (``access.people_audit``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from access import audit
from access.permissions import is_admin


@dataclass(frozen=True)
class Ended:
    """What ``end_access`` ended: how many sessions, and whether there was an API token."""

    sessions: int
    token: bool


def user_sessions(user: User) -> list[str]:
    """The keys of the unexpired database sessions signed in as ``user`` (O(sessions): each is decoded;
    ``SESSION_ENGINE`` is the database one)."""
    keys = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if str(session.get_decoded().get(SESSION_KEY, "")) == str(user.pk):
            keys.append(session.session_key)
    return keys


def end_access(*, actor: User, user: User, reason: str = "") -> Ended:
    """Delete every session of ``user`` and their API token (admins only; an admin may end their own
    others' too, which ends this one as well). Raises PermissionDenied."""
    if not is_admin(actor):
        raise PermissionDenied("only admins end someone's sessions and tokens")
    with transaction.atomic():
        keys = user_sessions(user)
        Session.objects.filter(session_key__in=keys).delete()
        tokens, _ = Token.objects.filter(user_id=user.pk).delete()
        audit.record(
            actor=actor,
            action="user.end_sessions",
            target_type="user",
            target_id=user.pk,
            reason=reason,
            details={"username": user.get_username(), "sessions": len(keys), "token": tokens > 0},
        )
    return Ended(sessions=len(keys), token=tokens > 0)
