"""``python -m chaos run [--quick] [--modes at_least_once,effectively_once] [--copies N] [--profile chaos|cluster]
[--seed N]``.

Starts the private ``chaos`` devstack profile (or ``--profile cluster``: two webs, two beats, three runners,
a Spark standalone cluster; the multi-host faults), ``--copies`` pipelines per delivery mode (default one) over
real GitHub events with a share of corrupted ones, a continuous producer, then runs the faults in order and
checks the accounting identity after each; writes ``artifacts/chaos/report.md`` and ``report.json``.
The ``kill_low_latency`` fault adds a third pipeline (low_latency, Spark's real-time mode) for its duration.
Stops the pipelines and exactly the services it started. Exit code 0 when every check passed, 1 when
anything was lost, an exactly-once expectation failed or a fault's own check failed, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType

from chaos.stack import CHAOS_PROFILES, ChaosStack, chaos_env
from devstack.config import PROFILES

#: Each fault is the module ``chaos.<name>`` (its ``TITLE`` and ``run(ctx)``), run in this order.
#: kill_low_latency comes after the single-host faults: its pipeline then reads the whole run's source,
#: replays included. The host faults (a whole runner host lost, partitioned) come last.
FAULTS = (
    "kill_driver",
    "broker",
    "redis_outage",
    "dlq_unwritable",
    "bulk_worker",
    "ingest_kill",
    "kill_low_latency",
    "host_crash",
    "host_partition",
    "routed_stop",
    "control_plane",
    "drain",
    "host_kill_loop",
)
#: What a run does unless ``--faults`` says: the private stack runs every single-host fault and the two host
#: faults; the cluster profile (no plain worker, executors on the standalone cluster) the multi-host ones.
DEFAULT_FAULTS = {
    "chaos": FAULTS[: FAULTS.index("host_partition") + 1],
    "cluster": ("routed_stop", "control_plane", "host_crash", "host_partition", "drain"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--quick", action="store_true", help="fewer kills, shorter outages (a few minutes)")
    parser.add_argument(
        "--modes", default="at_least_once,effectively_once", help="comma-separated delivery modes"
    )
    parser.add_argument(
        "--faults", default=None, help="comma-separated subset of the faults, run in the order given"
    )
    parser.add_argument("--profile", choices=CHAOS_PROFILES, default="chaos", help="the devstack profile")
    parser.add_argument("--copies", type=int, default=1, help="pipelines per delivery mode (at least 1)")
    parser.add_argument(
        "--soak-minutes", type=float, default=30.0, help="how long host_kill_loop crashes hosts"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed of the fault points")
    parser.add_argument("--rate", type=float, default=15.0, help="records/s into the source topic")
    parser.add_argument(
        "--trigger-ms",
        type=int,
        default=0,
        help="the pipelines' micro-batch trigger interval in ms (default 2000); longer batches cost less CPU a record",
    )
    parser.add_argument("--corrupt-every", type=int, default=10, help="every N-th record is corrupted")
    parser.add_argument("--out", type=Path, default=Path("artifacts/chaos"))
    parser.add_argument("--keep-stack", action="store_true", help="leave the chaos services running")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    chosen = args.faults if args.faults is not None else ",".join(DEFAULT_FAULTS[args.profile])
    faults = [f.strip() for f in chosen.split(",") if f.strip()]
    unknown = [m for m in modes if m not in ("at_least_once", "effectively_once")] + [
        f for f in faults if f not in FAULTS
    ]
    if unknown:
        parser.error(f"unknown mode(s) or fault(s): {', '.join(unknown)}")
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    began = time.monotonic()
    stack = ChaosStack(PROFILES[args.profile])
    try:
        for line in stack.up():
            print(f"[chaos] {line}", flush=True)
        os.environ.update(stack.env())
        import django

        django.setup()
        return _run(stack, args, modes, faults, seed, began)
    except Exception:
        traceback.print_exc()
        return 2
    finally:
        if not args.keep_stack:
            for line in stack.down():
                print(f"[chaos] {line}", flush=True)


def _run(
    stack: ChaosStack, args: argparse.Namespace, modes: list[str], faults: list[str], seed: int, began: float
) -> int:
    import importlib

    from confluent_kafka import KafkaException

    from chaos import report
    from chaos.context import Context, FaultResult
    from chaos.workload import (
        Feeder,
        SourceLog,
        accountant_for,
        create_topics,
        delete_run_topics,
        new_tag,
        pipeline_keys,
        setup_team,
        start_pipelines,
        stop_leftovers,
        stop_pipelines,
    )

    bootstrap = stack.profile.kafka_bootstrap
    modes = pipeline_keys(modes, args.copies)
    actor = setup_team()
    leftovers = stop_leftovers(actor, every_team=bool(stack.profile.spark_port))
    tag = new_tag()
    source_topic = create_topics(bootstrap, tag, modes)
    feeder = Feeder(bootstrap, source_topic, rate=args.rate, corrupt_every=args.corrupt_every)
    feeder.start()
    handles = start_pipelines(
        actor, tag, modes, bootstrap, stack.profile.redis_url, trigger_ms=args.trigger_ms
    )
    ctx = Context(
        tag=tag,
        stack=stack,
        bootstrap=bootstrap,
        pipelines=handles,
        accountants={},
        source=SourceLog(bootstrap, source_topic),
        feeder=feeder,
        actor=actor,
        rng=random.Random(seed),
        quick=args.quick,
        soak_minutes=args.soak_minutes,
    )
    ctx.say(
        f"run {tag}, seed {seed}, modes {modes}; stopped leftovers {leftovers or 'none'}; waiting for Spark"
    )
    results: list[FaultResult] = []
    interrupted = False
    try:
        started = ctx.wait_processing(timeout=600)
        ctx.say(f"pipelines processing after {started}")
        for mode, handle in handles.items():
            ctx.accountants[mode] = accountant_for(handle)
        baseline = FaultResult("baseline", "no fault: the identity before anything is injected")
        ctx.settle(baseline, time.monotonic())
        results.append(baseline)
        for name in faults:
            module: ModuleType = importlib.import_module(f"chaos.{name}")
            ctx.say(f"fault {name}: {module.TITLE}")
            try:
                result = module.run(ctx)
            except Exception as exc:
                traceback.print_exc()
                result = FaultResult(name, module.TITLE, error=f"{type(exc).__name__}: {exc}")
            results.append(result)
            ctx.say(f"fault {name}: {'pass' if result.passed else 'FAIL'} in {result.duration_s:.0f}s")
    except KeyboardInterrupt:
        interrupted = True  # Ctrl-C: skip the final check, still stop the pipelines and the stack
        results.append(FaultResult("interrupted", "the run was interrupted", error="KeyboardInterrupt"))
    finally:
        unacked = feeder.stop()
        ctx.say(
            f"producer stopped: {feeder.delivered} delivered, {feeder.failed} failed, {unacked} unacknowledged"
        )
        if ctx.accountants and not interrupted:
            final = FaultResult("final", "after the producer stopped: every record of the run")
            try:
                ctx.settle(final, time.monotonic())
            except Exception as exc:
                final.error = f"{type(exc).__name__}: {exc}"
            results.append(final)
        stop_pipelines(actor, handles.values(), reason="chaos run finished")
    passed = all(r.passed for r in results) and feeder.failed == 0
    if passed:  # a failed run's topics stay, for whoever reads its report
        try:
            ctx.say(f"deleted the run's {len(delete_run_topics(bootstrap, tag))} topics")
        except KafkaException as exc:
            ctx.say(f"could not delete the run's topics: {exc}")
    summary = {
        "tag": tag,
        "seed": seed,
        "quick": args.quick,
        "modes": modes,
        "source_topic": source_topic,
        "duration_s": time.monotonic() - began,
        "producer": {"delivered": feeder.delivered, "failed": feeder.failed, "kinds": dict(feeder.kinds)},
        "profile": stack.profile.name,
        "env": chaos_env(stack.profile),
        "passed": passed,
    }
    json_path, md_path = report.write(args.out, summary, results)
    ctx.say(f"{'PASS' if passed else 'FAIL'}: report in {md_path} and {json_path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
