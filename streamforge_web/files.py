"""Files and folders only this user may read: the state folder holds the debug secret key, the test
database, checkpoints and driver logs; a SQLite database holds everything."""

from __future__ import annotations

from pathlib import Path


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as 0700, and tighten it when it exists with wider access."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def private_file(path: Path) -> bool:
    """chmod ``path`` to 0600 when group or others may access it; False when it does not exist."""
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except FileNotFoundError:
        return False
    return True
