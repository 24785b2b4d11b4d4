"""API tokens (DRF's ``authtoken``: one token per user, sent as ``Authorization: Token <key>``).

Every signed-in user may create their token, rotate it (a new key; the old one stops working at once) and
revoke it; admins may revoke anyone's. The key is handed back once, by ``issue_token``, for the caller to
show once; afterwards only its first ``PREFIX_LENGTH`` characters and its creation time are ever shown
(``token_info``; DRF's token admin, which listed every key, is unregistered in ``access.admin``). Creations
and deletions are audited by ``access.people_audit`` without the key.

A token ends when its user's access ends (security review #28, finding 6). Each token is bound, when it is
created, to a fingerprint of its user's password hash (``ApiTokenBinding``); authentication
(``access.throttling.ThrottledTokenAuthentication``) refuses a token whose user's password changed since,
whatever path changed it. Saving a user whose password changed, or who is inactive, also deletes their
tokens (``connect``: the people API, the admin site, ``set_password`` + ``save``, ``manage.py
changepassword``), so a user deactivated outside the people API and reactivated later does not get the
old token back.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models.signals import post_save
from django.utils.crypto import constant_time_compare
from rest_framework.authtoken.models import Token

from access.models import ApiTokenBinding
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


def credentials_fingerprint(password_hash: str) -> str:
    """What a token is bound to: the SHA-256 (64 hex digits) of a user's stored password hash (Django's
    ``algorithm$iterations$salt$hash``, new with every ``set_password``, even to the same password, as the
    salt changes; ``!...`` for an unusable password). Nothing here says more than the hash beside it."""
    return hashlib.sha256(password_hash.encode()).hexdigest()


def token_is_current(token: Token, user: AbstractBaseUser) -> bool:
    """Whether ``token`` (its ``binding`` loaded or not) was issued under ``user``'s present password and
    the user is active. A token without a binding is not current."""
    try:
        bound = token.binding.credentials
    except ApiTokenBinding.DoesNotExist:
        return False
    return bool(user.is_active) and constant_time_compare(bound, credentials_fingerprint(user.password))


def _bind_new_token(sender: type[Token], instance: Token, created: bool, raw: bool = False, **_: Any) -> None:
    """Bind a new token, however it was created, to its user's password as the database holds it."""
    if not created or raw:
        return
    password = User.objects.filter(pk=instance.user_id).values_list("password", flat=True).first() or ""
    ApiTokenBinding.objects.update_or_create(
        token_id=instance.pk, defaults={"credentials": credentials_fingerprint(password)}
    )


def _end_stale_tokens(
    sender: type[User], instance: User, created: bool, raw: bool = False, update_fields: Any = None, **_: Any
) -> None:
    """After a user is saved: delete their tokens if they are inactive, or those bound to another password.
    A save naming only other fields (``last_login`` at each log-in) changes neither and is skipped."""
    if created or raw or (update_fields is not None and not {"password", "is_active"} & set(update_fields)):
        return
    tokens = Token.objects.filter(user_id=instance.pk)
    if instance.is_active:
        tokens = tokens.exclude(binding__credentials=credentials_fingerprint(instance.password))
    with transaction.atomic():
        tokens.delete()  # one post_delete per token: each deletion is audited (access.people_audit)


def connect() -> None:
    """Connect the binding's signal handlers (idempotent, by ``dispatch_uid``)."""
    post_save.connect(_bind_new_token, sender=Token, dispatch_uid="access.api_tokens.bind_new_token")
    post_save.connect(_end_stale_tokens, sender=User, dispatch_uid="access.api_tokens.end_stale_tokens")
