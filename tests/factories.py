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
