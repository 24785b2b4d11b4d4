"""The registry of backlog counters: apps that park a pipeline's dead letters for an operator (the DLQ
console) register a counter here in their ``AppConfig.ready()``, and the overview shows each pipeline's
backlog without the pipelines app importing them (the DLQ app builds on this one, not the other way round).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

#: Given pipeline ids, the number of records waiting for an operator per pipeline id (ids with none may be
#: left out).
BacklogCounter = Callable[[list[int]], Mapping[int, int]]

_counters: list[BacklogCounter] = []


def register_backlog_counter(counter: BacklogCounter) -> None:
    """Add ``counter`` to the overview's backlog (once: registering the same counter again does nothing)."""
    if counter not in _counters:
        _counters.append(counter)


def parked_backlog(pipeline_ids: Sequence[int]) -> dict[int, int]:
    """Records waiting for an operator per pipeline id, summed over every registered counter; pipelines
    with none are left out (and every pipeline when no counter is registered)."""
    totals: Counter[int] = Counter()
    for counter in _counters:
        totals.update(counter(list(pipeline_ids)))
    return dict(totals)
