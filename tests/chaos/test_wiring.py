"""How ``python -m chaos`` is put together: the faults it knows, what it refuses before starting anything,
and the pipelines' specs (the low_latency one included), without a stack."""

from __future__ import annotations

import importlib

import pytest

from chaos import __main__ as cli
from chaos.workload import LOW_LATENCY, MODES, spec_for
from pipelines.spec import parse_spec


@pytest.fixture
def no_stack(monkeypatch):
    """Fails the test if the run gets as far as starting the chaos stack."""

    def refuse() -> None:
        raise AssertionError("the stack was started")

    monkeypatch.setattr(cli, "ChaosStack", refuse)


def test_every_fault_is_a_module_with_a_title_and_a_run():
    for name in cli.FAULTS:
        module = importlib.import_module(f"chaos.{name}")
        assert module.TITLE
        assert callable(module.run)
    assert "kill_low_latency" in cli.FAULTS


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--faults", "kill_driver,no_such_fault"],
        ["run", "--modes", "at_least_once,exactly_twice"],
        # low_latency is not a mode of the whole run: its pipeline lives only during kill_low_latency.
        ["run", "--modes", LOW_LATENCY],
    ],
)
def test_an_unknown_mode_or_fault_is_refused_before_anything_starts(no_stack, capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert "unknown mode(s) or fault(s)" in capsys.readouterr().err


def test_the_low_latency_pipeline_runs_at_least_once_in_real_time_mode_on_topics_of_its_own():
    spec = parse_spec(spec_for(LOW_LATENCY, "t1"), pipeline_name="chaos-ll-t1")
    assert (spec.delivery.mode, spec.delivery.commit_strategy.kind) == ("at_least_once", "low_latency")
    assert (spec.source.topics, spec.source.starting_offsets) == (("chaos.t1.events",), "earliest")
    theirs = [parse_spec(spec_for(mode, "t1"), pipeline_name=mode) for mode in MODES]
    assert all(t.startswith("chaos.t1.ll.") for t in spec.output_topics())
    assert not {t for other in theirs for t in other.output_topics()} & set(spec.output_topics())
