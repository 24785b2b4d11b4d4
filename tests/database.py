"""The test database as a ``DATABASE_URL`` for the processes tests start (the DLQ ingester, the browser
tests' web server): they must open the database pytest-django created, on SQLite or PostgreSQL alike."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def child_database_url() -> str:
    """``DATABASE_URL`` of the database this test run uses (call it once pytest-django has set it up)."""
    database = connection.settings_dict
    name = str(database["NAME"])
    if connection.vendor == "sqlite":
        in_memory = not name or ":memory:" in name or "mode=memory" in name
        assert not in_memory, "another process cannot open an in-memory SQLite database"
        return f"sqlite:///{name}"
    assert connection.vendor == "postgresql", f"no URL for the {connection.vendor} backend"
    user, password = quote(database["USER"] or "", safe=""), quote(database["PASSWORD"] or "", safe="")
    credentials = f"{user}:{password}@" if user else ""
    return (
        f"postgres://{credentials}{database['HOST'] or '127.0.0.1'}:{database['PORT'] or 5432}/{quote(name)}"
    )
