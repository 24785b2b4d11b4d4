"""Text that must become UTF-8: every string the product takes in (a payload, a header name, a reason, a
topic) is encoded to UTF-8 sooner or later, for Kafka, the database or a hash. A Python ``str`` may hold
what UTF-8 cannot encode: a lone UTF-16 surrogate, which JSON can express (``"\\ud800"``) and
``json.loads`` accepts. ``unencodable_path`` finds one anywhere in decoded JSON, so the input is refused at
the door, naming the field, instead of failing deep inside an operation.
"""

from __future__ import annotations

from typing import Any

#: What callers say about such text (the offending character itself cannot be shown).
UNENCODABLE = "is not valid Unicode text (it holds a lone UTF-16 surrogate, which UTF-8 cannot encode)"


def is_encodable(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unencodable_path(data: Any, prefix: str = "") -> str | None:
    """The dotted path (``messages.0.headers``, below ``prefix``) of the first string in decoded JSON that
    UTF-8 cannot encode, or None when there is none. A bad object key is reported at the object holding it
    (the key itself cannot be printed). Iterative, so deep nesting cannot exhaust the stack."""
    pending: list[tuple[str, Any]] = [(prefix, data)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, str):
            if not is_encodable(item):
                return path or "non_field_errors"
        elif isinstance(item, dict):
            children = []
            for key, value in item.items():
                if isinstance(key, str) and not is_encodable(key):
                    return path or "non_field_errors"
                children.append((f"{path}.{key}" if path else str(key), value))
            pending.extend(reversed(children))
        elif isinstance(item, list | tuple):
            pending.extend(reversed([(f"{path}.{i}" if path else str(i), v) for i, v in enumerate(item)]))
    return None
