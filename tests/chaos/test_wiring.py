"""How ``python -m chaos`` is put together: the faults it knows, what it refuses before starting anything,
and the pipelines' specs (the low_latency one included), without a stack."""

from __future__ import annotations

import importlib

import pytest

from chaos import __main__ as cli
from chaos.stack import chaos_env
from chaos.workload import LOW_LATENCY, MODES, delivery_of, pipeline_keys, short_of, spec_for
from devstack.config import PROFILES
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


def test_copies_of_a_mode_are_interleaved_keep_its_delivery_and_get_topics_of_their_own():
    keys = pipeline_keys(MODES, 3)
    assert keys == [
        "at_least_once",
        "effectively_once",
        "at_least_once.2",
        "effectively_once.2",
        "at_least_once.3",
        "effectively_once.3",
    ]
    specs = {key: parse_spec(spec_for(key, "t1"), pipeline_name=f"chaos-{short_of(key)}-t1") for key in keys}
    assert specs["effectively_once.3"].delivery.mode == "effectively_once"
    assert delivery_of("effectively_once.3") == "effectively_once"
    outputs = [set(spec.output_topics()) for spec in specs.values()]
    assert all(not (a & b) for i, a in enumerate(outputs) for b in outputs[i + 1 :])
    with pytest.raises(ValueError, match="at least 1"):
        pipeline_keys(MODES, 0)


def test_the_cluster_profile_runs_the_multi_host_faults_on_its_own_spark_master(no_stack, capsys):
    assert set(cli.DEFAULT_FAULTS["cluster"]) <= set(cli.FAULTS)
    assert {"routed_stop", "control_plane", "drain"}.isdisjoint(cli.DEFAULT_FAULTS["chaos"])
    assert chaos_env(PROFILES["cluster"]) == {}  # the product's defaults, its own master
    assert chaos_env(PROFILES["chaos"])["SPARK_MASTER"] == "local[2]"
    with pytest.raises(SystemExit):
        cli.main(["run", "--profile", "cluster", "--copies", "0"])
    assert "--copies must be at least 1" in capsys.readouterr().err
