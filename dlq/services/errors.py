"""Errors of the DLQ console operations; the API maps them to HTTP (``dlq.api.views.ServiceErrorsMixin``),
the management command to a CommandError."""

from __future__ import annotations


class InvalidRequest(ValueError):
    """Bad input for an operation (HTTP 400); ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class Conflict(Exception):
    """The dead letter, approval or bulk action is not in a state that allows this (HTTP 409)."""


class RegistryUnavailable(Exception):
    """The pipeline's schema registry is not configured, not approved or cannot answer now (HTTP 503): a
    registry-format payload cannot be read or framed; nothing about the dead letter changed."""


class ReplayFailed(Exception):
    """The broker did not acknowledge the replayed record (HTTP 503); the dead letter is PARKED again."""


class WouldFailAgain(Conflict):
    """A replay whose payload the pipeline's current revision would dead-letter again at a destination the
    replay is for (HTTP 409, with ``failures``: ``{destination, error_type, error_message}`` each). Replayed
    anyway with ``force`` and a reason."""

    def __init__(self, message: str, failures: list[dict[str, str | None]]) -> None:
        self.failures = failures
        super().__init__(message)
