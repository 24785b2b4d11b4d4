"""Audit events for changes to people: users, passwords, team memberships, teams and API tokens, however they are
made (the admin site, management commands, the shell, any view). Connected in ``AccessConfig.ready()`` as model
signals; each event is recorded in the transaction of the change it describes.

The actor is the signed-in user of the current request (``access.middleware``), else "system". Events never
contain a password, a password hash or a token: a password change is recorded as such, with no value.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Model
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from rest_framework.authtoken.models import Token

from access import audit
from access.middleware import current_actor
from access.models import Membership, Team

#: The user fields an event reports; the password is only ever reported as "changed".
USER_FIELDS = ("username", "first_name", "last_name", "email", "is_active", "is_staff", "is_superuser")
_BEFORE = "_audit_before"


def _actor() -> User | None:
    return current_actor()


def _deleting_actor(user_pk: int) -> tuple[User | None, dict[str, str]]:
    """The actor of a deletion that may take ``user_pk`` with it: an event cannot point at a user deleted in
    the same transaction, so then the actor is recorded by name only (``by``)."""
    actor = current_actor()
    if actor is not None and actor.pk == user_pk:
        return None, {"by": actor.get_username()}
    return actor, {}


def _user_state(user: User) -> dict[str, Any]:
    return {name: getattr(user, name) for name in USER_FIELDS}


def _remember_user(sender: type[Model], instance: User, update_fields: Any = None, **_: Any) -> None:
    if instance.pk is None or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    old = User.objects.filter(pk=instance.pk).first()
    if old is not None:
        setattr(instance, _BEFORE, {**_user_state(old), "password": old.password})


def _user_saved(sender: type[Model], instance: User, created: bool, **_: Any) -> None:
    state = _user_state(instance)
    if created:
        audit.record(
            actor=_actor(),
            action="user.create",
            target_type="user",
            target_id=instance.pk,
            after=state,
            details=state,
        )
        return
    before = instance.__dict__.pop(_BEFORE, None)
    if before is None:
        return
    if before.pop("password") != instance.password:
        audit.record(
            actor=_actor(),
            action="user.password_change",
            target_type="user",
            target_id=instance.pk,
            details={"username": instance.get_username()},
        )
    changed = sorted(name for name in USER_FIELDS if before[name] != state[name])
    if changed:
        audit.record(
            actor=_actor(),
            action="user.change",
            target_type="user",
            target_id=instance.pk,
            before=before,
            after=state,
            details={
                "username": instance.get_username(),
                "changed": {n: [before[n], state[n]] for n in changed},
            },
        )


def _user_deleted(sender: type[Model], instance: User, **_: Any) -> None:
    actor, by = _deleting_actor(instance.pk)
    audit.record(
        actor=actor,
        action="user.delete",
        target_type="user",
        target_id=instance.pk,
        before=_user_state(instance),
        details={"username": instance.get_username(), **by},
    )


def _user_permissions_changed(
    sender: type[Model], instance: Model, action: str, pk_set: Any, **_: Any
) -> None:
    if action not in {"post_add", "post_remove", "post_clear"} or not isinstance(instance, User):
        return
    field = "groups" if sender is User.groups.through else "user_permissions"
    audit.record(
        actor=_actor(),
        action="user.change",
        target_type="user",
        target_id=instance.pk,
        details={"username": instance.get_username(), field: {action[5:]: sorted(pk_set or [])}},
    )


def _membership_state(membership: Membership) -> dict[str, Any]:
    return {
        "user": membership.user.get_username(),
        "team": membership.team.name,
        "role": membership.role,
        "manages_team": membership.manages_team,
    }


def _remember_membership(sender: type[Model], instance: Membership, **_: Any) -> None:
    if instance.pk is not None:
        old = Membership.objects.select_related("user", "team").filter(pk=instance.pk).first()
        if old is not None:
            setattr(instance, _BEFORE, _membership_state(old))


def _membership_saved(sender: type[Model], instance: Membership, created: bool, **_: Any) -> None:
    state = _membership_state(instance)
    before = instance.__dict__.pop(_BEFORE, None)
    if not created and before == state:
        return
    audit.record(
        actor=_actor(),
        action="membership.create" if created else "membership.change",
        target_type="membership",
        target_id=instance.pk,
        before=before,
        after=state,
        details=state if created else {**state, "before": before},
    )


def _membership_deleted(sender: type[Model], instance: Membership, **_: Any) -> None:
    actor, by = _deleting_actor(instance.user_id)
    audit.record(
        actor=actor,
        action="membership.delete",
        target_type="membership",
        target_id=instance.pk,
        before=_membership_state(instance),
        details={**_membership_state(instance), **by},
    )


def _team_saved(sender: type[Model], instance: Team, created: bool, **_: Any) -> None:
    state = {"name": instance.name, "description": instance.description}
    audit.record(
        actor=_actor(),
        action="team.create" if created else "team.change",
        target_type="team",
        target_id=instance.pk,
        after=state,
        details={"name": instance.name},
    )


def _team_deleted(sender: type[Model], instance: Team, **_: Any) -> None:
    audit.record(
        actor=_actor(),
        action="team.delete",
        target_type="team",
        target_id=instance.pk,
        details={"name": instance.name},
    )


def _token_saved(sender: type[Model], instance: Token, created: bool, **_: Any) -> None:
    if created:  # the key is the token itself: never recorded, not even as a digest
        audit.record(
            actor=_actor(),
            action="api_token.create",
            target_type="user",
            target_id=instance.user_id,
            details={"username": instance.user.get_username()},
        )


def _token_deleted(sender: type[Model], instance: Token, **_: Any) -> None:
    actor, by = _deleting_actor(instance.user_id)
    audit.record(
        actor=actor,
        action="api_token.delete",
        target_type="user",
        target_id=instance.user_id,
        details={"username": instance.user.get_username(), **by},
    )


def connect() -> None:
    """Connect the handlers (idempotent: ``dispatch_uid`` keeps ``ready()`` running twice from doubling them)."""
    pairs: list[tuple[Any, Any, type[Model] | Any]] = [
        (pre_save, _remember_user, User),
        (post_save, _user_saved, User),
        (post_delete, _user_deleted, User),
        (m2m_changed, _user_permissions_changed, User.groups.through),
        (m2m_changed, _user_permissions_changed, User.user_permissions.through),
        (pre_save, _remember_membership, Membership),
        (post_save, _membership_saved, Membership),
        (post_delete, _membership_deleted, Membership),
        (post_save, _team_saved, Team),
        (post_delete, _team_deleted, Team),
        (post_save, _token_saved, Token),
        (post_delete, _token_deleted, Token),
    ]
    for signal, handler, sender in pairs:
        signal.connect(
            handler, sender=sender, dispatch_uid=f"access.people_audit.{handler.__name__}.{sender.__name__}"
        )
