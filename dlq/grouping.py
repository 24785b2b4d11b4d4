"""Failure groups: dead letters that failed the same way, so an on-call engineer works one group instead of
a thousand messages. A group is pipeline + error type + a normalized error message (``signature``), where
the parts that vary between records (numbers, offsets, ids, quoted values, hex) are replaced by
placeholders. Double-quoted text is a value (Java and JSON quote values that way); single-quoted text is
usually a name (a field or header) and stays.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

_MAX_SIGNATURE: Final = 300
# Order matters: the longest, most specific forms first, so a UUID is not eaten digit by digit.
_RULES: Final = (
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ][0-9:.]+(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{16,}\b"), "<hex>"),
    (re.compile(r'"[^"]*"'), '"<v>"'),
    # Not inside names: the 8 of "UTF-8", the 256 of "sha256" stay.
    (re.compile(r"(?<![A-Za-z_-])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalize_message(message: str) -> str:
    """The error message with its varying parts replaced, at most 300 characters.

    >>> normalize_message("JSON path '/payload/size' not found at offset 1234")
    "JSON path '<v>' not found at offset <n>"
    """
    text = message.strip()
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return text[:_MAX_SIGNATURE]


def group_key(
    *,
    team_id: int,
    pipeline: str,
    dlq_topic: str,
    error_type: str,
    signature: str,
    cluster_id: int | None = None,
) -> str:
    """SHA-256 hex identifying a group: the owning team and pipeline (or, for foreign DLQs, the DLQ
    topic and, off the default cluster, its cluster id: topic names are a cluster's own), the error type
    and the signature. The owner is the DLQ topic's registered owner, never what a
    record's headers claim, so a forged header cannot put one team's records into another team's group.
    Stable across processes, so concurrent ingesters agree on the group."""
    where = dlq_topic if cluster_id is None else f"{cluster_id}/{dlq_topic}"
    owner = f"pipeline:{pipeline}" if pipeline else f"topic:{where}"
    return hashlib.sha256(f"team:{team_id}\x00{owner}\x00{error_type}\x00{signature}".encode()).hexdigest()
