"""The state folder and a SQLite database are readable by their owner only."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_state_folder_is_private(settings):
    assert _mode(Path(settings.STATE_DIR)) == 0o700


@pytest.mark.sqlite
@pytest.mark.django_db
def test_the_sqlite_test_database_is_private():
    from django.db import connection

    connection.ensure_connection()
    database = Path(connection.settings_dict["NAME"])
    assert _mode(database) == 0o600


def test_a_new_sqlite_database_and_state_folder_are_created_private_whatever_the_umask(tmp_path):
    # Given a fresh process with the usual umask, a new state folder and a database file not made yet
    state, database = tmp_path / "state", tmp_path / "db.sqlite3"
    script = (
        "import os; os.umask(0o022); import django; django.setup();"
        "from django.db import connection; connection.ensure_connection();"
        "connection.cursor().execute('CREATE TABLE t (x int)')"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "streamforge_web.settings",
        "DJANGO_SECRET_KEY": "x" * 50,
        "STREAMFORGE_AUDIT_KEY": "k" * 48,
        "DATABASE_URL": f"sqlite:///{database}",
        "STREAMFORGE_STATE_DIR": str(state),
    }
    # When it connects and writes
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=120)
    # Then the database, its side files and the state folder are the owner's only
    assert _mode(database) == 0o600
    for side in tmp_path.glob("db.sqlite3-*"):
        assert _mode(side) == 0o600, side
    assert _mode(state) == 0o700
