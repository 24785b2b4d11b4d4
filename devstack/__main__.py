"""``python -m devstack [--profile dev|test] up|down|status|env|fetch|system [service ...]``.

The local stack manager behind ``make up``, ``make down``, ``make status`` and the test setup. Exit code 0
when everything asked for is in the asked-for state, 1 with a message on stderr otherwise.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from devstack import jars
from devstack.config import PROFILES, Profile
from devstack.services import (
    Service,
    StackError,
    django_env,
    ensure_system_packages,
    log_file,
    port_open,
    running_process,
    services,
    start,
    stop,
)


def _select(profile: Profile, names: list[str]) -> list[Service]:
    available = services(profile)
    if not names:
        return available
    known = {service.name for service in available}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise StackError(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [service for service in available if service.name in names]


def _status(profile: Profile) -> int:
    print(f"profile {profile.name} (state in {profile.state_dir})")
    for service in services(profile):
        proc = running_process(profile, service.name)
        ports = ",".join(str(port) for port in service.ports) or "-"
        if proc is None:
            taken = [port for port in service.ports if port_open(port)]
            state = f"stopped (port {taken[0]} in use by another process)" if taken else "stopped"
        else:
            state = f"running pid {proc.pid}" + ("" if service.ready() else " (not ready)")
        print(f"  {service.name:<8} {ports:<12} {state:<40} {log_file(profile, service.name)}")
    print(f"  web UI: {profile.web_url}/   Kafka: {profile.kafka_bootstrap}   Redis: {profile.redis_url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="dev")
    parser.add_argument("command", choices=["up", "down", "status", "env", "fetch", "system"])
    parser.add_argument("services", nargs="*", help="limit up/down to these services")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    try:
        if args.command == "system":
            installed = ensure_system_packages()
            print(
                f"devstack: installed {', '.join(installed)}"
                if installed
                else "devstack: system packages present"
            )
            print(jars.kafka_jars())
        elif args.command == "fetch":
            print(jars.kafka_jars())
            print(",".join(str(p) for p in jars.spark_connector_jars()))
        elif args.command == "env":
            for key, value in django_env(profile).items():
                print(f"export {key}={shlex.quote(value)}")
        elif args.command == "status":
            return _status(profile)
        elif args.command == "up":
            for service in _select(profile, args.services):
                print(start(profile, service), flush=True)
        else:
            for service in reversed(_select(profile, args.services)):
                print(stop(profile, service), flush=True)
    except (StackError, jars.JarFetchError) as exc:
        print(f"devstack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
