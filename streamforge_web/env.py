"""Strict readers for settings that come from the environment.

Each helper returns the default only when the variable is unset or empty, and raises ImproperlyConfigured
(naming the variable and what it expected) on anything it cannot parse: a typo in ``DJANGO_DEBUG=ture``
fails at start-up instead of silently meaning "off".
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def env_str(name: str, default: str | None = None) -> str:
    """The variable's text, or ``default``; ImproperlyConfigured when unset and no default is given."""
    value = os.environ.get(name, "")
    if value:
        return value
    if default is None:
        raise ImproperlyConfigured(f"{name} must be set")
    return default


def env_bool(name: str, default: bool) -> bool:
    """``true/1/yes/on`` or ``false/0/no/off`` (any case); anything else raises ImproperlyConfigured."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """A base-10 integer, at least ``minimum`` when given; ImproperlyConfigured otherwise."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list with blanks dropped (``a, b,,c`` -> ``["a", "b", "c"]``)."""
    value = os.environ.get(name, "")
    if not value.strip():
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]
