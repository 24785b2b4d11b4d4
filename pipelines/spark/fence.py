"""The driver's lease, as a file its runner keeps, and the fence that stops a driver that no longer holds it.

A pipeline's lease lives in PostgreSQL (``Pipeline.lease_host/lease_epoch/lease_expires_at``). The driver
cannot read it: it has no Django and no database credentials (``launcher.driver_environment`` withholds
them), and a copy in Redis would make a Redis outage stop every pipeline. So its runner writes the lease to a
local file, atomically, before launching the driver and after every renewal; the driver re-reads the file at
each check. The file (JSON, mode 0600)::

    {"pipeline": "orders", "run_id": "…", "epoch": 7, "host": "runner-b",
     "expires_at_ms": 1764160000000, "state": "held"}

``expires_at_ms`` is the database's ``lease_expires_at`` in Unix milliseconds; ``state`` is ``"held"`` or
``"lost"`` (the runner found the lease expired or superseded). A check compares the current clock with the
stored expiry every time, so a driver thawed after SIGSTOP fails its very next check, whichever thread runs
first, even before its runner has written anything. Django-free (``tests/test_layering.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from streamforge_core.contract import Fenced

HELD = "held"
LOST = "lost"


@dataclass(frozen=True)
class Lease:
    """One lease as its runner last saw it in the database (see the module docstring for the file form)."""

    pipeline: str
    run_id: str
    epoch: int
    host: str
    expires_at_ms: int
    state: str = HELD


def write_lease(path: str | os.PathLike[str], lease: Lease) -> None:
    """Replaces the lease file at ``path`` with ``lease``, atomically (a temporary file in the same folder,
    then a rename): a reader sees the old lease or the new one, never half of one. Mode 0600.

    Raises OSError when the folder cannot be written."""
    target = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=".lease-", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(asdict(lease), out)
            out.flush()
            os.fsync(out.fileno())
        Path(temporary).replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(temporary).unlink()
        raise


def read_lease(path: str | os.PathLike[str]) -> Lease | None:
    """The lease in the file at ``path``; None when it is missing, unreadable or not a lease."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return Lease(
            pipeline=str(data["pipeline"]),
            run_id=str(data["run_id"]),
            epoch=int(data["epoch"]),
            host=str(data["host"]),
            expires_at_ms=int(data["expires_at_ms"]),
            state=str(data["state"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Fence:
    """Whether this driver still holds its pipeline's lease.

    ``path`` is the lease file (None: fencing off, for the benchmark and drivers started by hand),
    ``run_id``/``epoch`` identify this run, ``margin_s`` (seconds) makes the driver give up that long
    before the expiry, covering clock skew between runner and database and the time a commit takes after
    its check. ``clock`` returns Unix seconds (``time.time``; a test may pass its own)."""

    def __init__(
        self,
        path: str | None,
        run_id: str,
        epoch: int | None,
        margin_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.run_id = run_id
        self.epoch = epoch
        self.margin_ms = int(margin_s * 1000)
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def valid(self) -> tuple[bool, str]:
        """(True, "") while the lease file names this run and epoch, says held, and expires more than the
        margin from now; else (False, why). Re-reads the file every call: nothing is cached."""
        if self.path is None:
            return True, ""
        lease = read_lease(self.path)
        if lease is None:
            return False, f"no readable lease at {self.path}"
        if lease.run_id != self.run_id or lease.epoch != self.epoch:
            return False, f"the lease is epoch {lease.epoch} of run {lease.run_id}, not epoch {self.epoch}"
        if lease.state != HELD:
            return False, f"the runner {lease.host} reports the lease {lease.state}"
        now_ms = int(self._clock() * 1000)
        if now_ms >= lease.expires_at_ms - self.margin_ms:
            late = (now_ms - lease.expires_at_ms) / 1000
            return (
                False,
                f"the lease expired {late:.1f} s ago" if late >= 0 else "the lease expires within the margin",
            )
        return True, ""

    def check(self, where: str) -> None:
        """Raises ``Fenced`` (naming ``where`` and why) unless ``valid()``."""
        ok, why = self.valid()
        if not ok:
            raise Fenced(f"{where}: {why}")
