"""What every fault gets (the stack, the pipelines, the producer, the accountants) and what it returns.

After each fault the run waits until every pipeline has committed the source offsets that existed when
the fault ended, then checks the accounting identity: for the source records of the fault's window,
lost / wrong outcomes / reroutes; for everything so far, duplicates (the change since the last check is
the fault's) and lost (must stay 0). A pipeline that joins the run during a fault (``add_pipeline``: it
reads the source from earliest) has every source record so far in its first window.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.contrib.auth.models import User

from chaos import accounting
from chaos.stack import ChaosStack
from chaos.workload import (
    Accountant,
    Feeder,
    PipelineHandle,
    SourceLog,
    accountant_for,
    delivery_of,
    total,
    wait_until,
)


@dataclass
class ModeResult:
    """One fault's figures for one pipeline (delivery mode). ``produced``: source records of the window
    (counts of records); ``lost``: of the window's records, expected somewhere and found nowhere;
    ``lost_total``: the same over every record so far; ``duplicates``: extra copies that appeared during
    the window, summed over destinations; ``recovery_s``: seconds from the end of the fault until the
    pipeline had committed every source offset that existed then (None: not within the timeout)."""

    mode: str
    produced: int = 0
    lost: int = 0
    lost_total: int = 0
    duplicates: int = 0
    duplicates_total: int = 0
    rerouted: int = 0
    wrong: int = 0
    value_mismatch: int = 0
    recovery_s: float | None = None
    checks: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "produced": self.produced,
            "lost": self.lost,
            "lost_total": self.lost_total,
            "duplicates": self.duplicates,
            "duplicates_total": self.duplicates_total,
            "rerouted": self.rerouted,
            "wrong": self.wrong,
            "value_mismatch": self.value_mismatch,
            "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 1),
            "checks": self.checks,
            "passed": self.passed,
            "failures": self.failures,
            "examples": self.examples[:10],
        }


@dataclass
class FaultResult:
    """One fault: what was done (``actions``, in order, with seconds since the fault began) and the
    per-mode figures."""

    name: str
    title: str
    started: float = field(default_factory=time.time)
    duration_s: float = 0.0
    actions: list[str] = field(default_factory=list)
    modes: dict[str, ModeResult] = field(default_factory=dict)
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and all(m.passed for m in self.modes.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round(self.duration_s, 1),
            "actions": self.actions,
            "modes": {mode: r.as_dict() for mode, r in self.modes.items()},
            "error": self.error,
            "passed": self.passed,
        }


@dataclass
class Context:
    """The run: its tag (in its topic and pipeline names), the stack, the pipelines by mode, the producer,
    the accountants, the random source (seeded, so a run's fault points can be replayed), quick or full, and
    the admin acting for operators."""

    tag: str
    stack: ChaosStack
    bootstrap: str
    pipelines: dict[str, PipelineHandle]
    accountants: dict[str, Accountant]
    source: SourceLog
    feeder: Feeder
    actor: User
    rng: random.Random
    quick: bool
    #: How long ``host_kill_loop`` goes on crashing hosts (``--soak-minutes``).
    soak_minutes: float = 30.0
    catch_up_timeout: float = 300.0
    _dups_before: dict[str, int] = field(default_factory=dict)
    #: Modes added since the last check: their window is every source record so far, not the slice since.
    _joined: set[str] = field(default_factory=set)

    def say(self, text: str) -> None:
        print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def add_pipeline(self, mode: str, handle: PipelineHandle) -> None:
        """Check ``handle``'s pipeline from now on, as ``mode``: a pipeline started mid-run, reading the
        source from earliest. Its accountant expects every source record the earlier checks read (read again
        from the beginning) and, from the next check on, each window's too."""
        accountant = accountant_for(handle)
        accountant.add_source(self.source.read_so_far())
        self.pipelines[mode] = handle
        self.accountants[mode] = accountant
        self._joined.add(mode)

    def remove_pipeline(self, mode: str) -> None:
        """Stop checking ``mode``'s pipeline (its fault stopped it)."""
        del self.pipelines[mode]
        del self.accountants[mode]
        self._dups_before.pop(mode, None)
        self._joined.discard(mode)

    def wait_processing(self, timeout: float = 300.0) -> dict[str, float | None]:
        """Wait until every pipeline's active run has finished a batch; seconds per mode (None: timeout)."""
        return {mode: wait_until(handle.processing, timeout, 1.0) for mode, handle in self.pipelines.items()}

    def settle(self, result: FaultResult, fault_end: float, modes: list[str] | None = None) -> None:
        """Wait for every pipeline to commit the source offsets that exist now, then check the identity;
        fills ``result.modes``. ``fault_end`` is the monotonic time the fault ended (recovery starts)."""
        ends = self.source.ends()
        for mode in modes or list(self.pipelines):
            handle = self.pipelines[mode]
            waited = wait_until(partial(handle.caught_up, ends), self.catch_up_timeout, 1.0)
            r = result.modes.setdefault(mode, ModeResult(mode))
            r.recovery_s = None if waited is None else time.monotonic() - fault_end
            if waited is None:
                r.failures.append(
                    f"not caught up with the source within {self.catch_up_timeout:.0f}s "
                    f"(committed {handle.committed()}, source ends {ends})"
                )
        records = self.source.read_to(ends)
        window = [(r.topic, r.partition, r.offset) for r in records]
        memo: accounting.OutcomeMemo = {}  # every pipeline reads these records: evaluate each once
        for mode in modes or list(self.pipelines):
            accountant = self.accountants[mode]
            accountant.add_source(records, memo)
            accountant.read_outputs()
            # The run-long totals count fates; values are compared once, in the window they arrived in.
            everything = total(accountant.tallies(compare_values=False))
            # A pipeline added since the last check read every source record during this window.
            keys = list(accountant.expected) if mode in self._joined else window
            self._joined.discard(mode)
            in_window = total(
                accounting.tally({k: accountant.expected[k] for k in keys}, accountant.observed)
            )
            r = result.modes[mode]
            r.produced = len(keys)
            r.lost, r.lost_total = in_window.lost, everything.lost
            r.duplicates = everything.duplicates - self._dups_before.get(mode, 0)
            r.duplicates_total = everything.duplicates
            self._dups_before[mode] = everything.duplicates
            r.rerouted, r.wrong, r.value_mismatch = (
                in_window.rerouted,
                in_window.wrong,
                in_window.value_mismatch,
            )
            r.examples = in_window.examples + everything.examples
            if in_window.lost or everything.lost:
                r.failures.append(f"{in_window.lost} lost in this window, {everything.lost} lost so far")
            r.checks["replays_skipped_as_expected"] = in_window.expected_replay_skipped
            r.checks["replays_written_where_not_for"] = in_window.replay_written
            if in_window.replay_written:
                r.failures.append(
                    f"{in_window.replay_written} replays written to a destination they were not for "
                    "(a second copy of a record it had)"
                )
            if in_window.wrong or in_window.value_mismatch:
                r.failures.append(
                    f"{in_window.wrong} wrong outcomes, {in_window.value_mismatch} wrong values"
                )
            if delivery_of(mode) == "effectively_once" and r.duplicates:
                r.failures.append(f"{r.duplicates} duplicates seen by read_committed readers")
            self.say(
                f"  {mode}: window {r.produced} records, lost {r.lost} (total {r.lost_total}), duplicates "
                f"+{r.duplicates} (total {r.duplicates_total}), rerouted {r.rerouted}, wrong {r.wrong}, "
                f"recovery {r.recovery_s if r.recovery_s is None else round(r.recovery_s, 1)}s"
            )
