"""The private stack the fault-injection run owns: devstack's ``chaos`` profile (Kafka 29092/29093, Redis
26379, web 28000, runner hosts ``runner-a`` and ``runner-b`` beside a plain worker, state in ``.stack/chaos/``),
never the shared dev or test services.

``ChaosStack.up`` starts what is not running and remembers what it started; ``down`` stops exactly that.
Faults go through ``stop``/``start`` (graceful, devstack's own), ``kill9`` (SIGKILL to the service's
whole process group, as a crash would) and, for a whole runner host, ``crash_host``, ``freeze_host`` and
``thaw_host`` (``devstack.hosts``).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

from devstack import hosts
from devstack.config import PROFILES, Profile
from devstack.services import Service, django_env, running_process, services, start, stop

#: Knobs the chaos stack runs with (every service and the run itself), and why:
CHAOS_ENV: dict[str, str] = {
    # Two Spark drivers share two busy cores: two local threads each.
    "SPARK_MASTER": "local[2]",
    # Supervision reacts within seconds, so a kill's recovery time measures the pipeline, not the tick.
    "STREAMFORGE_RECONCILE_SECONDS": "2",
    "STREAMFORGE_RESTART_BACKOFF": "1",
    "STREAMFORGE_RESTART_BACKOFF_MAX": "4",
    # Ten kills in a few minutes are, by design, a crash loop that would make the pipeline FAILED after five;
    # the run measures recovery, so the crash-loop limit is lifted (and said so in the report).
    "STREAMFORGE_CRASH_LOOP_FAILURES": "1000",
    # A crashed bulk worker is taken over after 20 s; the produce timeout stays well below that (+10 s).
    "STREAMFORGE_DLQ_BULK_STALE": "20",
    "STREAMFORGE_DLQ_PRODUCE_TIMEOUT": "5",
    # The run is one operator replaying whole pipelines' parked messages: approvals are tested elsewhere.
    "STREAMFORGE_DLQ_BULK_APPROVAL_THRESHOLD": "1000000",
}


#: The devstack profiles a chaos run may own: its private ``chaos`` stack (the default), or issue #29's
#: ``cluster`` (two webs, two beats, three runners, executors on a Spark standalone cluster) for the
#: multi-host faults.
CHAOS_PROFILES = ("chaos", "cluster")


def chaos_env(profile: Profile) -> dict[str, str]:
    """The knobs a run on ``profile`` sets: ``CHAOS_ENV`` on the private stack; none on a profile with its own
    Spark master (``cluster``): its faults are the acceptance of the product as shipped, so its services run
    with the defaults (a 5 s reconcile, the crash-loop limit) and executors on the standalone cluster."""
    if profile.spark_port:
        return {}
    return dict(CHAOS_ENV)


@dataclass
class ChaosStack:
    """A devstack profile the run owns (``chaos`` unless told) plus what this run started (stopped again by
    ``down``)."""

    profile: Profile = field(default_factory=lambda: PROFILES["chaos"])
    started: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.profile.spark_port:
            os.environ.pop("SPARK_MASTER", None)
        os.environ.update(chaos_env(self.profile))  # services inherit the run's environment (devstack.start)

    def env(self) -> dict[str, str]:
        """The Django environment of the stack (what its webs, workers, runners, beats and ingest get)."""
        return {**django_env(self.profile), **chaos_env(self.profile)}

    def services(self) -> list[Service]:
        """Every service of the profile, in start order."""
        return services(self.profile)

    def service(self, name: str) -> Service:
        return next(s for s in services(self.profile) if s.name == name)

    def up(self) -> list[str]:
        """Start every service not yet running; returns devstack's status lines."""
        lines = []
        for svc in services(self.profile):
            was_running = running_process(self.profile, svc.name) is not None
            lines.append(start(self.profile, svc))
            if not was_running and svc.name not in self.started:
                self.started.append(svc.name)
        return lines

    def start(self, name: str) -> float:
        """Start one service and wait until it is ready; returns the seconds it took."""
        began = time.monotonic()
        start(self.profile, self.service(name))
        return time.monotonic() - began

    def stop(self, name: str) -> None:
        """Stop one service gracefully (SIGTERM to its group, SIGKILL after its stop timeout)."""
        stop(self.profile, self.service(name))

    def pid(self, name: str) -> int | None:
        proc = running_process(self.profile, name)
        return proc.pid if proc is not None else None

    def kill9(self, name: str) -> int:
        """SIGKILL the service's whole process group (every prefork child too); returns the pid killed.
        Raises RuntimeError when the service is not running."""
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and running_process(self.profile, name) is not None:
            time.sleep(0.1)
        return pid

    def crash_host(self, name: str) -> list[str]:
        """SIGKILL runner host ``name``: the runner's process group and every driver group it launched
        (``devstack.hosts.crash_host``); returns what died, a line per group."""
        return hosts.crash_host(self.profile, name)

    def freeze_host(self, name: str) -> list[str]:
        """SIGSTOP runner host ``name``'s groups (``devstack.hosts.freeze_host``); a line per group."""
        return hosts.freeze_host(self.profile, name)

    def thaw_host(self, name: str) -> list[str]:
        """SIGCONT what ``freeze_host`` stopped, drivers first, runner last; a line per group."""
        return hosts.thaw_host(self.profile, name)

    def down(self) -> list[str]:
        """Stop, in reverse start order, exactly the services this run started."""
        order = [s.name for s in services(self.profile)]
        lines = []
        for name in sorted(self.started, key=order.index, reverse=True):
            lines.append(stop(self.profile, self.service(name)))
        self.started.clear()
        return lines
