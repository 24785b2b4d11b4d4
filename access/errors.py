"""Errors of the people operations (``access.people``, ``access.api_tokens``). A refused permission is
Django's ``PermissionDenied`` (HTTP 403), as ``access.permissions.require_role`` raises it."""

from __future__ import annotations


class InvalidRequest(ValueError):
    """Bad input for an operation (HTTP 400); ``field`` names the offending field, ``message`` says why."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
