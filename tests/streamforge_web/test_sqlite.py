"""SQLite is the embedded default (no ``DATABASE_URL``: ``make demo``, a laptop): its migrations, and the
settings that let several processes write one file. ``make test`` runs these in its second, SQLite run."""

import os
import subprocess
import sys
import threading

import pytest
from django.conf import settings
from django.db import connection, transaction

from access.models import Team

ROOT = settings.BASE_DIR

pytestmark = pytest.mark.sqlite


def _manage(*args: str, database: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{database}", "DJANGO_DEBUG": "true"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_migrations_build_an_empty_sqlite_database_that_matches_the_models(tmp_path):
    database = tmp_path / "fresh.sqlite3"
    migrated = _manage("migrate", "--no-input", database=str(database))
    assert migrated.returncode == 0, migrated.stderr
    pending = _manage("makemigrations", "--check", "--dry-run", database=str(database))
    assert pending.returncode == 0, f"models changed without a migration:\n{pending.stdout}{pending.stderr}"
    shown = _manage("showmigrations", "--plan", database=str(database))
    assert "[ ]" not in shown.stdout, shown.stdout


@pytest.mark.django_db
def test_the_sqlite_database_runs_in_wal_mode_with_immediate_transactions():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
    assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


@pytest.mark.django_db(transaction=True)
def test_two_writers_at_once_wait_for_each_other_instead_of_failing_with_database_is_locked():
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(prefix: str) -> None:
        barrier.wait()
        try:
            for i in range(25):
                with transaction.atomic():
                    # A read then a write in one transaction: with deferred transactions the second writer's
                    # lock upgrade would fail at once; IMMEDIATE takes the lock up front and waits for it.
                    Team.objects.filter(name__startswith=prefix).count()
                    Team.objects.create(name=f"{prefix}-{i}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Team.objects.count() == 50
