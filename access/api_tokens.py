"""API tokens (DRF's ``authtoken``: one token per user, sent as ``Authorization: Token <key>``).

Every signed-in user may create their token, rotate it (a new key; the old one stops working at once) and
revoke it; admins may revoke anyone's. The key is handed back once, by ``issue_token``, for the caller to
show once; afterwards only its first ``PREFIX_LENGTH`` characters and its creation time are ever shown
(``token_info``). Creations and deletions are audited by ``access.people_audit`` without the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from rest_framework.authtoken.models import Token

from access.permissions import is_admin

#: How much of a key is shown after its creation: enough to tell two tokens apart, useless to a thief.
PREFIX_LENGTH = 6


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown of an existing token: the key's first characters and when it was created."""

    prefix: str
    created: datetime


def token_info(user: User) -> TokenInfo | None:
    """``user``'s token as it may be shown, or None when they have none."""
    token = Token.objects.filter(user_id=user.pk).only("key", "created").first()
    if token is None:
        return None
    return TokenInfo(prefix=token.key[:PREFIX_LENGTH], created=token.created)


def issue_token(*, actor: User) -> str:
    """Create ``actor``'s token, replacing (rotating) any they had, and return its key: the only time it is
    available to show. Raises PermissionDenied for an inactive actor."""
    if not actor.is_active:
        raise PermissionDenied("inactive users have no API token")
    with transaction.atomic():
        # The user row is locked so two rotations at once (a double click) run one after the other instead of
        # both deleting the old token and one failing on the one-token-per-user constraint.
        User.objects.select_for_update().only("pk").get(pk=actor.pk)
        Token.objects.filter(user_id=actor.pk).delete()
        return str(Token.objects.create(user=actor).key)


def revoke_token(*, actor: User, user: User) -> bool:
    """Delete ``user``'s token: actors revoke their own, admins anyone's. True when there was one. Raises
    PermissionDenied for someone else's token and a non-admin actor."""
    if user.pk != actor.pk and not is_admin(actor):
        raise PermissionDenied("only admins revoke another user's API token")
    with transaction.atomic():
        deleted, _ = Token.objects.filter(user_id=user.pk).delete()
    return deleted > 0
