"""Django app config for the project shell: keeps the state folder and a SQLite database private."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from streamforge_web.files import private_dir, private_file

#: SQLite's files beside the database: the WAL, its shared-memory index, the rollback journal.
_SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def make_sqlite_private(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """Receiver of ``connection_created``: chmod a SQLite database file and its side files to 0600.

    SQLite creates the file with the process umask (usually world-readable) and copies the database's mode
    to the WAL and shm files it makes later, so tightening the database right after it is opened keeps every
    one of them private, including a database made before this check existed. A database in the state
    folder (the tests') is private from the start, since that folder is 0700."""
    if connection.vendor != "sqlite":
        return
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    for suffix in _SQLITE_SIDE_FILES:
        private_file(Path(name + suffix))


class StreamForgeWebConfig(AppConfig):
    """The project shell: settings, URLs, ASGI, Celery, probes."""

    name = "streamforge_web"
    verbose_name = "StreamForge Web"

    def ready(self) -> None:
        """Create the state folder 0700 (checkpoints, driver logs, the debug key) and watch SQLite files."""
        private_dir(Path(settings.STATE_DIR))
        connection_created.connect(make_sqlite_private, dispatch_uid="streamforge_web.make_sqlite_private")
