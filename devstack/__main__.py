"""``python -m devstack [--profile dev|test|chaos|cluster] up|down|status|env|fetch|system|demo [service ...]``
and, for a profile with runner hosts, ``crash-host|freeze-host|thaw-host NAME``.

The local stack manager behind ``make up``, ``make down``, ``make status`` and the test setup. Exit code 0
when everything asked for is in the asked-for state, 1 with a message on stderr otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from devstack import hosts, jars
from devstack.config import PROFILES, REPO_ROOT, Profile
from devstack.config import profile as profile_named
from devstack.services import (
    Service,
    StackError,
    django_env,
    ensure_system_packages,
    launches_drivers,
    log_file,
    port_open,
    running_process,
    services,
    start,
    stop,
    stop_pipeline_drivers,
)


def _select(profile: Profile, names: list[str], *, every: bool = False) -> list[Service]:
    available = services(profile, every=every)
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
        print(f"  {service.name:<14} {ports:<12} {state:<40} {log_file(profile, service.name)}")
    webs = "  ".join(f"http://127.0.0.1:{port}/" for port in profile.web_ports)
    print(f"  web UI: {webs}   Kafka: {profile.kafka_bootstrap}   Redis: {profile.redis_url}")
    if profile.spark_master_url:
        print(f"  Spark master: {profile.spark_master_url} (UI http://127.0.0.1:{profile.spark_ui_port}/)")
    for name in profile.runners:
        frozen = hosts.frozen_groups(profile, name)
        if frozen:
            print(f"  {name}: FROZEN ({len(frozen)} process groups; thaw-host {name})")
    return 0


#: Commands that act on one runner host (``devstack.hosts``), each taking the runner's name.
HOST_COMMANDS: dict[str, Callable[[Profile, str], list[str]]] = {
    "crash-host": hosts.crash_host,
    "freeze-host": hosts.freeze_host,
    "thaw-host": hosts.thaw_host,
}


def _interrupted(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _demo(profile: Profile, args: argparse.Namespace) -> int:
    """``make demo``: start every service, run ``python -m demo`` in the foreground, and on Ctrl-C or SIGTERM
    (or when it ends) stop the pipeline and then exactly the services this call started."""
    # Started in the background of a non-interactive shell, SIGINT arrives ignored: ask for it, and treat
    # SIGTERM (a supervisor, `timeout`, `kill`) the same way, so the stack never outlives the demo.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupted)
    began = time.monotonic()
    already = {s.name for s in services(profile) if running_process(profile, s.name) is not None}
    started: list[Service] = []
    child: subprocess.Popen[bytes] | None = None
    try:
        for service in services(profile):
            print(start(profile, service), flush=True)
            if service.name not in already:
                started.append(service)
        print(f"devstack: stack ready in {time.monotonic() - began:.0f}s", flush=True)
        command = [
            sys.executable, "-m", "demo", "--web-url", profile.web_url,
            "--rate", str(args.rate), "--corrupt-every", str(args.corrupt_every), "--duration", str(args.duration),
        ]  # fmt: skip
        if profile.sinks:
            command += ["--sinks-url", f"http://127.0.0.1:{profile.webhook_sink_port}"]
        child = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **django_env(profile)})
        return child.wait()
    except KeyboardInterrupt:
        # The terminal sent SIGINT to the whole foreground group, the demo command too; a SIGTERM reached
        # only this process: tell the demo command (it stops on either, once), and let it stop the pipeline
        # cleanly before the stack goes away under it.
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            try:
                return child.wait(timeout=150)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGKILL)
        return 130
    finally:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=150)
            except subprocess.TimeoutExpired:
                child.kill()
        for service in reversed(started):
            print(stop(profile, service), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="dev")
    parser.add_argument(
        "command", choices=["up", "down", "status", "env", "fetch", "system", "demo", *HOST_COMMANDS]
    )
    parser.add_argument(
        "services", nargs="*", help="limit up/down to these services; a host command's runner"
    )
    parser.add_argument("--rate", type=float, default=200.0, help="demo: records/s fed into the source topic")
    parser.add_argument("--corrupt-every", type=int, default=50, help="demo: every N-th record is corrupted")
    parser.add_argument("--duration", type=float, default=0.0, help="demo: stop after this many seconds")
    args = parser.parse_args(argv)
    try:
        profile = profile_named(args.profile)
        if args.command == "system":
            installed = ensure_system_packages()
            print(
                f"devstack: installed {', '.join(installed)}"
                if installed
                else "devstack: system packages present"
            )
            print(jars.kafka_jars())
            print(",".join(str(p) for p in jars.spark_jars()))
            print(jars.driver_class_archive() or "devstack: no driver class archive")
            print(jars.apicurio_registry(), jars.java21())
            print(jars.keycloak())
        elif args.command == "fetch":
            print(jars.kafka_jars())
            print(",".join(str(p) for p in jars.spark_jars()))
            print(jars.apicurio_registry())
            print(jars.keycloak())
        elif args.command == "env":
            for key, value in django_env(profile).items():
                print(f"export {key}={shlex.quote(value)}")
        elif args.command == "status":
            return _status(profile)
        elif args.command == "demo":
            return _demo(profile, args)
        elif args.command in HOST_COMMANDS:
            if len(args.services) != 1:
                raise StackError(f"{args.command} takes one runner name, e.g. {args.command} runner-a")
            for line in HOST_COMMANDS[args.command](profile, args.services[0]):
                print(line, flush=True)
        elif args.command == "up":
            for service in _select(profile, args.services):
                print(start(profile, service), flush=True)
        else:
            chosen = list(reversed(_select(profile, args.services, every=True)))
            if not args.services:
                # The whole stack: first what launches drivers (the beat restarts a pipeline whose driver
                # exits while it is wanted running), then the drivers, or they outlive the stack.
                # A frozen host is resumed first: a stopped process ignores SIGTERM until it runs again.
                for name in profile.runners:
                    if hosts.frozen_groups(profile, name):
                        for line in hosts.thaw_host(profile, name):
                            print(line, flush=True)
                for service in [s for s in chosen if launches_drivers(profile, s.name)]:
                    print(stop(profile, service), flush=True)
                for line in stop_pipeline_drivers(profile):
                    print(line, flush=True)
                chosen = [s for s in chosen if not launches_drivers(profile, s.name)]
            for service in chosen:
                print(stop(profile, service), flush=True)
    except (StackError, jars.JarFetchError, ValueError) as exc:
        print(f"devstack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
