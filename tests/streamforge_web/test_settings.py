"""Settings come from the environment: checked in a fresh interpreter, as settings are read at import."""

import os
import subprocess
import sys

from django.conf import settings

ROOT = settings.BASE_DIR


def _run_manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "STREAMFORGE_HTTPS"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_deploy_passes_with_debug_off_and_a_secret_key():
    result = _run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="x" * 60 + "Yz9!",
    )
    assert result.returncode == 0, result.stderr


def test_without_debug_a_missing_secret_key_stops_start_up():
    result = _run_manage("check", DJANGO_DEBUG="false")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_a_postgresql_database_url_selects_the_postgresql_backend():
    code = "from django.conf import settings; d = settings.DATABASES['default']; print(d['ENGINE'], d['NAME'], d['HOST'])"
    result = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": "postgres://sf:pw@db.internal:5432/streamforge"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.split() == ["django.db.backends.postgresql", "streamforge", "db.internal"], (
        result.stderr
    )
