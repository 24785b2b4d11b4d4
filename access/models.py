"""Teams and roles (who may see and do what, see ../shared/DESIGN.md "Roles") and the audit log."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    """Roles in rising order of power; each includes the ones before it.

    viewer: read. operator: fix, replay, skip, bulk, start/stop. approver: also approve deletes and large bulk
    actions (never their own request). admin: also pipelines, users and runbooks, across every team.
    """

    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"

    @classmethod
    def rank(cls, role: str) -> int:
        """0 for viewer up to 3 for admin; ValueError for an unknown role."""
        return [cls.VIEWER, cls.OPERATOR, cls.APPROVER, cls.ADMIN].index(cls(role))


class Team(models.Model):
    """A group of people owning pipelines; non-admins act only on their teams' pipelines."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in one team. A user with the admin role in any team is an admin everywhere.

    ``manages_team`` makes the member a team admin: they may manage this team's memberships (add existing
    users, set roles up to approver, remove members) but never grant admin nor touch an admin's membership
    (the rules are ``access.people``'s).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    manages_team = models.BooleanField(
        default=False, help_text="may manage this team's memberships (a team admin)"
    )
    sso = models.BooleanField(
        default=False,
        help_text="granted by an identity provider's group (access.sso.mapping): recomputed at each sign-in",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} in {self.team}"


class SsoGroupMapping(models.Model):
    """An identity provider's group (as its groups claim names it) giving a role in a team to whoever is in
    it, applied at each sign-in through that provider (``access.sso.mapping.apply_groups``): a person in
    several mapped groups gets, per team, the strongest of their roles there."""

    provider = models.CharField(max_length=31, help_text="the provider's id (STREAMFORGE_OIDC_PROVIDERS)")
    group = models.CharField(max_length=255, help_text="the group as the provider's groups claim names it")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="sso_group_mappings")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider", "group", "team__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "group", "team"], name="one_mapping_per_group_and_team"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.group} -> {self.role} in {self.team}"


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    """Refuses bulk changes: audit events are only ever appended (``access.audit.record``)."""

    def update(self, **kwargs: Any) -> int:
        raise AuditLogIsAppendOnly("audit events cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditLogIsAppendOnly("audit events cannot be deleted")


class AuditLogIsAppendOnly(Exception):
    """Raised on any attempt, through the application, to change or remove an audit event."""


class HashScheme(models.TextChoices):
    """How an event's ``hash`` was computed. ``sha256``: plain SHA-256, what events written before the audit
    key existed carry (anyone can recompute it, so only keyed events after them protect them). ``hmac-sha256``:
    HMAC-SHA256 under ``settings.AUDIT_KEY``, which never enters the database."""

    LEGACY = "sha256", "SHA-256 (legacy, unkeyed)"
    HMAC = "hmac-sha256", "HMAC-SHA256"


class AuditEvent(models.Model):
    """One mutation, who did it and why, chained to the event before it by HMAC-SHA256.

    ``hash`` covers every field below plus ``prev_hash``; editing or removing any event breaks the chain at
    that point, which ``access.audit.verify_chain`` reports. ``prev_hash`` is unique, so two writers
    racing to append after the same event cannot both succeed (the loser retries on the new tail).
    ``scheme`` and ``key_id`` (a fingerprint of the key, never the key) say how ``hash`` was made.
    """

    sequence = models.PositiveBigIntegerField(unique=True)
    created_at = models.DateTimeField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, help_text="kept as text: the record outlives renames")
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=128)
    reason = models.TextField(blank=True)
    before_digest = models.CharField(max_length=64, blank=True)
    after_digest = models.CharField(max_length=64, blank=True)
    details = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, unique=True)
    hash = models.CharField(max_length=64, unique=True)
    scheme = models.CharField(max_length=16, choices=HashScheme.choices)
    key_id = models.CharField(
        max_length=16, blank=True, help_text="fingerprint of the HMAC key; empty for sha256"
    )

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-sequence"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.actor_name} {self.action} {self.target_type}:{self.target_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise AuditLogIsAppendOnly("audit events cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AuditLogIsAppendOnly("audit events cannot be deleted")


class ApiTokenBinding(models.Model):
    """Which credentials an API token was issued under (security review #28, finding 6): ``credentials`` is
    ``access.api_tokens.credentials_fingerprint`` of its user when the token was created, the SHA-256 of the
    user's password hash. A token whose user's password changed since, by any path (the people API, the
    admin site, ``set_password``, ``manage.py changepassword``, even a queryset update), is refused at
    authentication, and deleted by the next save of that user."""

    token = models.OneToOneField(
        "authtoken.Token", on_delete=models.CASCADE, primary_key=True, related_name="binding"
    )
    credentials = models.CharField(max_length=64, help_text="SHA-256 (hex) of the password hash at issue")

    def __str__(self) -> str:
        return f"binding of token {str(self.token_id)[:6]}"
