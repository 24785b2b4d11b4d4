"""factory-boy factories for the models most tests need."""

from __future__ import annotations

import functools
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from access.models import Membership, Role, Team

PASSWORD = "correct-horse-battery-9"


@functools.cache
def _password_hash() -> str:
    return make_password(PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.invalid")
    # Hashed once per run and shared: PBKDF2 at Django's real cost takes ~0.3 s per user, which added up to
    # seconds per test; every process (a live server too) still verifies it the normal way.
    password = factory.LazyFunction(lambda: _password_hash())


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Role.VIEWER


def member(team: Team, role: Role, **user_fields: Any) -> Any:
    """A new user (``user_fields`` go to UserFactory) holding ``role`` in ``team``."""
    return MembershipFactory(team=team, role=role, user=UserFactory(**user_fields)).user


def runner_host(name: str, *, heartbeat_age_s: float = 1.0, **fields: Any) -> Any:
    """A registered ``RunnerHost`` ``name`` whose last heartbeat was ``heartbeat_age_s`` seconds ago (4 slots,
    4 GB, queue ``celery.runner.<name>``, up for five minutes); ``fields`` override any column."""
    from datetime import timedelta

    from django.utils import timezone

    from pipelines.models import RunnerHost

    now = timezone.now()
    values: dict[str, Any] = {
        "queue": f"celery.runner.{name}",
        "slots": 4,
        "memory_mb": 4096,
        "labels": [],
        "advertise_host": "127.0.0.1",
        "started_at": now - timedelta(minutes=5),
        "last_heartbeat_at": now - timedelta(seconds=heartbeat_age_s),
    }
    return RunnerHost.objects.create(name=name, **{**values, **fields})
