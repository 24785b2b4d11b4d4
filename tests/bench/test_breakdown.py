"""bench.breakdown's arithmetic: the per-record and per-batch split of two driver runs, and the table."""

from __future__ import annotations

import pytest

from bench.breakdown import RUNGS, fixed_cost, table


def _run(records: int, batches: int, cpu: dict[str, float]) -> dict[str, object]:
    return {"records": records, "batches": [{}] * batches, "cpu_s": cpu, "wall_s": 10.0}


def test_two_runs_give_the_cost_per_record_and_per_batch_of_each_group() -> None:
    # a = 20 µs per record and b = 300 ms per batch in the JVM; the broker 5 µs and 40 ms
    large = _run(
        200_000, 4, {"spark-jvm": 200_000 * 20e-6 + 4 * 0.3, "kafka-broker": 200_000 * 5e-6 + 4 * 0.04}
    )
    small = _run(
        40_000, 40, {"spark-jvm": 40_000 * 20e-6 + 40 * 0.3, "kafka-broker": 40_000 * 5e-6 + 40 * 0.04}
    )
    fixed = fixed_cost(large, small)
    assert fixed["per_record_us"] == {"kafka-broker": pytest.approx(5.0), "spark-jvm": pytest.approx(20.0)}
    assert fixed["per_batch_ms"] == {"kafka-broker": pytest.approx(40.0), "spark-jvm": pytest.approx(300.0)}
    assert fixed["wall_per_batch_ms_small"] == 250.0


def test_the_jit_threads_are_not_split_into_records_and_batches() -> None:
    large = _run(100_000, 2, {"spark-jvm": 2.0, "jvm-jit": 9.0})
    small = _run(10_000, 10, {"spark-jvm": 3.0, "jvm-jit": 1.0})
    assert set(fixed_cost(large, small)["per_record_us"]) == {"spark-jvm"}


def test_runs_with_the_same_batch_size_cannot_be_split() -> None:
    with pytest.raises(ValueError, match="different micro-batch sizes"):
        fixed_cost(_run(100_000, 2, {"spark-jvm": 1.0}), _run(50_000, 1, {"spark-jvm": 0.5}))


def test_the_table_is_largest_first_and_the_jvm_remainder_excludes_the_plan() -> None:
    ladder = {"pieces_us": dict(zip(RUNGS, (1.0, 4.0, 3.0, 2.0, 1.5, 7.0), strict=True))}
    writer = {"us_per_record": {"decode": 6.0, "produce": 4.0, "rest": 3.0, "background_cpu": 0.5}}
    fixed = {"per_record_us": {"spark-jvm": 30.0, "kafka-broker": 5.0}, "per_batch_ms": {"spark-jvm": 500.0}}
    rows = dict(table(ladder, writer, fixed, 50_000, jit_us=8.0))
    assert rows["Kafka source and the rest of the JVM (driver run minus the plan's rungs)"] == 30.0 - 11.5
    assert rows["per-micro-batch fixed cost (500 ms CPU) over 50,000 records"] == 10.0
    assert rows["JIT compilation (HotSpot C1/C2 threads) during the large-batch run"] == 8.0
    values = [v for _, v in table(ladder, writer, fixed, 50_000, jit_us=8.0)]
    assert values == sorted(values, reverse=True)
