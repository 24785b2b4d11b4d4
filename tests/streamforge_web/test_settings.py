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
        if not k.startswith(("DJANGO_", "DATABASE_URL", "STREAMFORGE_HTTPS", "STREAMFORGE_AUDIT_KEY"))
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
        STREAMFORGE_AUDIT_KEY="a" * 40 + "Qq7-",
    )
    assert result.returncode == 0, result.stderr


def test_without_debug_a_missing_secret_key_stops_start_up():
    result = _run_manage("check", DJANGO_DEBUG="false", STREAMFORGE_AUDIT_KEY="a" * 40)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_without_debug_a_missing_audit_key_stops_start_up():
    result = _run_manage("check", DJANGO_DEBUG="false", DJANGO_SECRET_KEY="x" * 60 + "Yz9!")
    assert result.returncode != 0
    assert "STREAMFORGE_AUDIT_KEY must be set" in result.stderr


def test_check_deploy_warns_about_a_short_audit_key_or_one_equal_to_the_secret_key():
    secret = "x" * 60 + "Yz9!"
    short = _run_manage(
        "check", "--deploy", DJANGO_DEBUG="false", DJANGO_SECRET_KEY=secret, STREAMFORGE_AUDIT_KEY="short"
    )
    assert "access.W001" in short.stderr
    same = _run_manage(
        "check", "--deploy", DJANGO_DEBUG="false", DJANGO_SECRET_KEY=secret, STREAMFORGE_AUDIT_KEY=secret
    )
    assert "access.W002" in same.stderr


def test_in_debug_the_audit_key_is_generated_once_in_the_state_folder(tmp_path):
    code = "from django.conf import settings; print(settings.AUDIT_KEY)"
    env = {**os.environ, "DJANGO_DEBUG": "true", "STREAMFORGE_STATE_DIR": str(tmp_path)}
    env.pop("STREAMFORGE_AUDIT_KEY", None)
    runs = [
        subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {code}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    ]
    assert runs[0] == runs[1] == (tmp_path / "audit_key").read_text().strip()
    assert len(runs[0]) >= 32
    assert (tmp_path / "audit_key").stat().st_mode & 0o077 == 0


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
