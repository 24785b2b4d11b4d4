"""Signals the access app sends for others to react to (``notifications`` connects to them), after the
transaction that made the change commits.

- ``break_glass_sign_in(username: str, ip_address: str, at: str)``: the break-glass admin signed in with a
  local password while SSO-only mode is on (``at``: ISO-8601 UTC).
"""

from __future__ import annotations

from django.dispatch import Signal

break_glass_sign_in = Signal()
