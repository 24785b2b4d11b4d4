"""Placement under leases (issue #29, design note §3.3/§3.5): the claim that takes a pipeline's lease, where
placement puts a pipeline and why it waits PENDING, lease expiry and grace, and the blameless end of a run
whose host was lost. Real PostgreSQL (``STREAMFORGE_DB=postgres``): the claim rests on its row locks."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.utils import timezone

from access.models import AuditEvent, Role
from pipelines import supervision
from pipelines.models import DesiredState, Pipeline, PipelineRun, PipelineState, RunnerHost
from pipelines.services import create_pipeline
from pipelines.supervision import judge_exit, placement
from pipelines.supervision.exits import _end_run
from tests.factories import member
from tests.pipelines.conftest import github_spec


@pytest.fixture
def on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the claim's row locks are PostgreSQL's (STREAMFORGE_DB=postgres)")


def _host(name: str, *, slots: int = 1, labels: list[str] | None = None, age_s: float = 0, draining=False):
    now = timezone.now()
    return RunnerHost.objects.create(
        name=name,
        queue=f"q.runner.{name}",
        slots=slots,
        memory_mb=4096,
        labels=labels or [],
        advertise_host="127.0.0.1",
        started_at=now,
        last_heartbeat_at=now - timedelta(seconds=age_s),
        draining=draining,
    )


def _wanted(team, name: str, labels: list[str] | None = None) -> Pipeline:
    admin = member(team, Role.ADMIN, username=f"admin-{name}")
    spec = github_spec(dlq=f"{name}.dlq")
    pipeline = create_pipeline(actor=admin, name=name, team=team, spec=spec)
    Pipeline.objects.filter(pk=pipeline.pk).update(
        desired_state=DesiredState.RUNNING, placement_labels=labels or []
    )
    return Pipeline.objects.get(pk=pipeline.pk)


def _expire(pipeline: Pipeline, seconds_ago: float) -> None:
    """Move the lease's expiry to ``seconds_ago`` before the database's now()."""
    Pipeline.objects.filter(pk=pipeline.pk).update(lease_expires_at=Now() - timedelta(seconds=seconds_ago))


@pytest.mark.django_db(transaction=True)
def test_twenty_placers_racing_for_one_pipeline_make_exactly_one_run_under_epoch_plus_one(team, on_postgres):
    _host("runner-a", slots=4)
    _host("runner-b", slots=4)
    pipeline = _wanted(team, "racy")
    barrier = threading.Barrier(20)
    results: list[object] = []
    errors: list[BaseException] = []

    def placer():
        try:
            barrier.wait()
            results.append(placement.place_and_claim(pipeline.pk))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=placer) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    won = [run for run in results if run is not None]
    assert len(results) == 20
    assert len(won) == 1
    assert PipelineRun.objects.filter(pipeline=pipeline).count() == 1
    pipeline.refresh_from_db()
    run = PipelineRun.objects.get(pipeline=pipeline)
    assert (pipeline.lease_epoch, run.epoch, pipeline.state) == (1, 1, PipelineState.STARTING)
    assert pipeline.lease_host is not None
    assert run.host == pipeline.lease_host.name
    start = AuditEvent.objects.get(action="pipeline.run.start", target_id="racy")
    assert (start.details["host"], start.details["epoch"]) == (run.host, 1)


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_six_starts_placed_at_once_spreads_two_per_host_over_three_hosts(team, on_postgres):
    """What a lost host's pipelines meet when they are placed at the same moment: each placer must count the
    leases the others took, not the loads all of them read before any claim (``lock_hosts``)."""
    for name in ("runner-a", "runner-b", "runner-c"):
        _host(name, slots=4)
    pipelines = [_wanted(team, f"burst-{i}") for i in range(6)]
    barrier = threading.Barrier(len(pipelines))
    errors: list[BaseException] = []

    def placer(pipeline: Pipeline) -> None:
        try:
            barrier.wait()
            placement.place_and_claim(pipeline.pk)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=placer, args=(p,)) for p in pipelines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    hosts = sorted(PipelineRun.objects.filter(pipeline__in=pipelines).values_list("host", flat=True))
    assert hosts == ["runner-a", "runner-a", "runner-b", "runner-b", "runner-c", "runner-c"]


@pytest.mark.django_db(transaction=True)
def test_two_one_slot_hosts_take_two_of_three_pipelines_and_the_third_waits_pending_naming_both(
    team, on_postgres
):
    _host("runner-a")
    _host("runner-b")
    first, second, third = (_wanted(team, name) for name in ("first", "second", "third"))
    runs = [placement.place_and_claim(p.pk) for p in (first, second)]
    assert sorted(run.host for run in runs if run is not None) == ["runner-a", "runner-b"]
    assert placement.place_and_claim(third.pk) is None
    third.refresh_from_db()
    assert third.state == PipelineState.PENDING
    assert "runner-a 1/1 slots" in third.state_reason
    assert "runner-b 1/1 slots" in third.state_reason
    assert not PipelineRun.objects.filter(pipeline=third).exists()
    # A PENDING pipeline is placed as soon as a slot frees up (here: the first run ends).
    _end_run(PipelineRun.objects.get(pipeline=first), exit_code=0, error_type="Stopped", message="")
    Pipeline.objects.filter(pk=first.pk).update(desired_state=DesiredState.STOPPED)
    run = placement.place_and_claim(third.pk)
    assert run is not None
    assert run.host == runs[0].host
    assert Pipeline.objects.get(pk=third.pk).state_reason == ""


@pytest.mark.django_db(transaction=True)
def test_placement_honours_labels_drain_and_lost_hosts(team, on_postgres, settings):
    settings.HOST_LOST_SECONDS = 20
    _host("plain", slots=4)
    _host("fast", slots=4, labels=["ssd", "zone=a"])
    _host("gone", slots=4, labels=["ssd", "zone=a", "gpu"], age_s=60)
    _host("leaving", slots=4, labels=["ssd", "zone=a", "gpu"], draining=True)
    ssd = _wanted(team, "ssd", labels=["ssd"])
    run = placement.place_and_claim(ssd.pk)
    assert run is not None
    assert run.host == "fast"
    gpu = _wanted(team, "gpu", labels=["gpu"])
    assert placement.place_and_claim(gpu.pk) is None
    reason = Pipeline.objects.get(pk=gpu.pk).state_reason
    assert "labels [gpu]" in reason
    assert "plain lacks label gpu" in reason
    assert "fast lacks label gpu" in reason
    assert "gone lost" in reason
    assert "leaving draining" in reason


@pytest.mark.django_db(transaction=True)
def test_a_host_silent_for_longer_than_a_lease_lasts_gets_no_pipeline_before_it_is_shown_lost(
    team, on_postgres, settings
):
    """A lease is claimable TTL + grace after its last renewal; the host that stopped renewing it has been
    silent that long. With the lost threshold above that, the takeover must still pass it over (session 23:
    the pipeline went back to the crashed host and waited a second lease)."""
    settings.HOST_LOST_SECONDS = 20
    settings.LEASE_TTL_SECONDS, settings.LEASE_GRACE_SECONDS, settings.HOST_TICK_SECONDS = 15, 3, 3
    assert placement.placeable_silence_seconds() == 15
    holder = _host("runner-a", slots=4, age_s=17)  # not lost yet (20 s), silent past a lease
    _host("runner-b", slots=1)
    pipeline = _wanted(team, "moved")
    Pipeline.objects.filter(pk=pipeline.pk).update(lease_host=holder, lease_epoch=3)
    _expire(pipeline, 4)
    run = placement.place_and_claim(pipeline.pk)
    assert run is not None
    assert run.host == "runner-b", "placed on the host whose lease just expired"
    other = _wanted(team, "waits")
    assert placement.place_and_claim(other.pk) is None
    assert "runner-a silent for over 15s" in Pipeline.objects.get(pk=other.pk).state_reason


@pytest.mark.django_db(transaction=True)
def test_an_expired_lease_is_claimable_only_after_the_grace_and_the_claim_bumps_the_epoch(
    team, on_postgres, settings
):
    settings.LEASE_GRACE_SECONDS = 5
    holder = _host("runner-a", slots=4)
    _host("runner-b", slots=4)
    pipeline = _wanted(team, "leased")
    # A lease left by a runner that stopped renewing (its run already ended: the pipeline is startable).
    Pipeline.objects.filter(pk=pipeline.pk).update(lease_host=holder, lease_epoch=7)
    _expire(pipeline, 2)
    assert placement.place_and_claim(pipeline.pk) is None, "claimed inside the grace"
    assert Pipeline.objects.get(pk=pipeline.pk).lease_epoch == 7
    _expire(pipeline, 6)
    run = placement.place_and_claim(pipeline.pk)
    assert run is not None
    assert run.epoch == 8
    pipeline.refresh_from_db()
    assert pipeline.lease_epoch == 8
    assert pipeline.lease_expires_at > timezone.now()


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_lease_expired_ends_host_lost_blamelessly_and_starts_on_another_host(
    team, on_postgres, settings, monkeypatch
):
    """The global reconcile (any beat, no runner name) marks the silent host lost once, ends its run
    ``HostLost`` (not a failure: the count stays, no backoff), releases the lease and places the pipeline
    on a live host under a higher epoch."""
    settings.RUNNER_NAME = None
    settings.HOST_LOST_SECONDS = 20
    settings.LEASE_GRACE_SECONDS = 5
    settings.RESTART_BACKOFF_SECONDS = 60
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "pipelines.supervision.launcher.current_app.signature",
        lambda name, args: type("Sig", (), {"apply_async": lambda self, queue: sent.append((name, queue))})(),
    )
    doomed = _host("runner-b", slots=1)
    pipeline = _wanted(team, "moved")
    first = placement.place_and_claim(pipeline.pk)
    assert first is not None
    assert first.host == "runner-b"
    assert first.epoch == 1
    killed: list[str] = []
    monkeypatch.setattr("pipelines.supervision.reconciler.kill_application", killed.append)
    PipelineRun.objects.filter(pk=first.pk).update(
        state=PipelineState.RUNNING, spark_app_id="app-20261128000000-0007"
    )
    Pipeline.objects.filter(pk=pipeline.pk).update(state=PipelineState.RUNNING, consecutive_failures=2)
    _host("runner-c", slots=1)
    # runner-b dies: no heartbeat, no renewal.
    RunnerHost.objects.filter(pk=doomed.pk).update(last_heartbeat_at=Now() - timedelta(seconds=60))
    _expire(pipeline, 6)

    report = supervision.reconcile()
    supervision.reconcile()  # a second beat's tick changes nothing

    first.refresh_from_db()
    assert (first.state, first.error_type) == (PipelineState.RESTARTING, "HostLost")
    assert report.lost_hosts == ["runner-b"]
    assert AuditEvent.objects.filter(action="host.lost", target_id="runner-b").count() == 1
    second = PipelineRun.objects.filter(pipeline=pipeline).exclude(pk=first.pk).get()
    pipeline.refresh_from_db()
    assert (second.host, second.epoch, second.attempt) == ("runner-c", 2, first.attempt + 1)
    assert pipeline.consecutive_failures == 2, "a lost host is not the pipeline's failure"
    assert (pipeline.lease_host.name, pipeline.lease_epoch) == ("runner-c", 2)
    assert ("pipelines.launch_run", supervision.processes.host_queue("runner-c")) in sent
    # Its application is killed on the master once (its executors free their cores for the takeover;
    # the real master: test_scale_out's frozen-driver test).
    assert killed == ["app-20261128000000-0007"]


def _judge(**overrides):
    args = {
        "exit_code": 1,
        "stop_requested": False,
        "consecutive_failures": 2,
        "failures_in_window": 2,
        "crash_loop_failures": 3,
        "backoff_base": 2,
        "backoff_cap": 300,
    } | overrides
    return judge_exit(**args)


def test_host_lost_fenced_and_drained_ends_restart_at_once_without_counting_a_failure():
    for verdict in (
        _judge(exit_code=None, blameless=True),
        _judge(exit_code=4),
        _judge(exit_code=0, blameless=True),
    ):
        assert (verdict.run_state, verdict.restart_in_seconds, verdict.consecutive_failures) == (
            "restarting",
            0.0,
            2,
        )
    assert _judge(exit_code=4, stop_requested=True).pipeline_state == "stopped"
    assert _judge(exit_code=1).pipeline_state == "failed", "an ordinary crash still counts"


@pytest.mark.django_db(transaction=True)
def test_a_drain_stop_that_exits_cleanly_restarts_now_and_releases_the_lease(team, on_postgres, settings):
    settings.RUNNER_NAME = None
    settings.RESTART_BACKOFF_SECONDS = 60
    host = _host("runner-b", slots=2)
    pipeline = _wanted(team, "drained")
    run = placement.place_and_claim(pipeline.pk)
    assert run is not None
    PipelineRun.objects.filter(pk=run.pk).update(state=PipelineState.STOPPING, stop_cause="drain")
    run.refresh_from_db()
    _end_run(run, exit_code=0, error_type="Stopped", message="stopped on request")
    pipeline.refresh_from_db()
    assert (pipeline.state, pipeline.next_restart_at, pipeline.consecutive_failures) == (
        "restarting",
        None,
        0,
    )
    assert pipeline.lease_host is None
    assert pipeline.lease_epoch == 1
    assert not Pipeline.objects.filter(lease_host=host).exists()


@pytest.mark.django_db(transaction=True)
def test_the_pipeline_api_shows_the_host_and_epoch_of_the_current_run(team, on_postgres, settings):
    from tests.pipelines.test_pipeline_api import client_for

    settings.RUNNER_NAME = None
    _host("runner-c", slots=1)
    pipeline = _wanted(team, "shown")
    viewer = member(team, Role.VIEWER, username="vic")
    body = client_for(viewer).get("/api/pipelines/shown/").json()
    assert (body["host"], body["epoch"]) == (None, None)
    run = placement.place_and_claim(pipeline.pk)
    assert run is not None
    body = client_for(viewer).get("/api/pipelines/shown/").json()
    assert (body["host"], body["epoch"]) == ("runner-c", 1)
    assert (body["current_run"]["host"], body["current_run"]["epoch"]) == ("runner-c", 1)
    listed = client_for(viewer).get("/api/pipelines/").json()["results"]
    assert [(p["name"], p["host"], p["epoch"]) for p in listed] == [("shown", "runner-c", 1)]


# ------------------------------------------------------------------------------------------ the launch


def test_checkpoints_live_under_the_checkpoint_root_as_a_path_or_any_hadoop_uri(settings):
    from pathlib import Path

    from pipelines.supervision.launcher import checkpoint_dir, local_checkpoint_path

    settings.CHECKPOINT_ROOT = "hdfs://nn:8020/streamforge/checkpoints/"
    assert checkpoint_dir("orders") == "hdfs://nn:8020/streamforge/checkpoints/orders"
    assert local_checkpoint_path(checkpoint_dir("orders")) is None
    settings.CHECKPOINT_ROOT = "file:///shared/checkpoints"
    assert local_checkpoint_path(checkpoint_dir("orders")) == Path("/shared/checkpoints/orders")
    settings.CHECKPOINT_ROOT = "/var/lib/streamforge/checkpoints"
    assert local_checkpoint_path(checkpoint_dir("orders")) == Path("/var/lib/streamforge/checkpoints/orders")
    assert local_checkpoint_path("s3a://bucket/cp/orders") is None


@pytest.mark.django_db(transaction=True)
def test_the_owner_writes_the_lease_file_before_the_driver_exists_and_passes_its_epoch(
    team, on_postgres, settings, tmp_path, monkeypatch
):
    from pathlib import Path

    from pipelines.spark.fence import read_lease
    from pipelines.supervision import launcher, processes
    from streamforge_core.kafka import KafkaConnection

    settings.RUNNER_NAME = "runner-a"
    settings.STATE_DIR = tmp_path
    settings.CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    _host("runner-a", slots=2)
    pipeline = _wanted(team, "owned")
    seen = {}

    def launch(
        run, workdir, conn, registry=None
    ):  # stands in for the Popen: what exists when the process would start
        seen["lease"] = read_lease(processes.lease_path(run.pipeline.name, run.run_id))
        seen["command"] = launcher.driver_command(
            run, Path(workdir) / "spec.json", KafkaConnection("127.0.0.1:1")
        )

    monkeypatch.setattr(launcher, "_launch", launch)
    run = supervision.start_pipeline(pipeline_id=pipeline.pk)
    assert run is not None
    assert run.host == "runner-a"
    lease = seen["lease"]
    assert lease is not None
    pipeline.refresh_from_db()
    assert (lease.run_id, lease.epoch, lease.host, lease.state) == (str(run.run_id), 1, "runner-a", "held")
    assert lease.expires_at_ms == int(pipeline.lease_expires_at.timestamp() * 1000)
    command = seen["command"]
    assert command[command.index("--epoch") + 1] == "1"
    assert command[command.index("--lease-file") + 1] == str(processes.lease_path("owned", run.run_id))
    assert command[command.index("--checkpoint-dir") + 1] == f"{tmp_path}/checkpoints/owned"
    assert "--no-warm-up" not in command, "a first start warms up"


@pytest.mark.django_db(transaction=True)
def test_a_launch_is_refused_off_its_owner_and_once_its_epoch_was_superseded(
    team, on_postgres, settings, tmp_path, monkeypatch
):
    from pipelines.supervision import launcher

    settings.RUNNER_NAME = None
    settings.STATE_DIR = tmp_path
    _host("runner-a", slots=2)
    launched = []
    monkeypatch.setattr(
        launcher, "_launch", lambda run, workdir, conn, registry=None: launched.append(run.run_id)
    )
    pipeline = _wanted(team, "guarded")
    run = placement.place_and_claim(pipeline.pk)
    assert run is not None
    settings.RUNNER_NAME = "runner-b"
    assert launcher.launch_claimed_run(run.run_id) is None, "not runner-b's run"
    settings.RUNNER_NAME = "runner-a"
    Pipeline.objects.filter(pk=pipeline.pk).update(lease_epoch=5)  # taken over meanwhile
    assert launcher.launch_claimed_run(run.run_id) is None
    assert launched == []
    run.refresh_from_db()
    assert (run.state, run.error_type) == (PipelineState.RESTARTING, "Fenced")


@pytest.mark.django_db(transaction=True)
def test_two_beats_reconciling_at_once_end_an_expired_run_once_and_place_it_once(
    team, on_postgres, settings, monkeypatch
):
    settings.RUNNER_NAME = None
    settings.LEASE_GRACE_SECONDS = 5
    monkeypatch.setattr(
        "pipelines.supervision.launcher.current_app.signature",
        lambda name, args: type("Sig", (), {"apply_async": lambda self, queue: None})(),
    )
    _host("runner-a", slots=4)
    _host("runner-b", slots=4)
    pipeline = _wanted(team, "twice")
    first = placement.place_and_claim(pipeline.pk)
    assert first is not None
    PipelineRun.objects.filter(pk=first.pk).update(state=PipelineState.RUNNING)
    Pipeline.objects.filter(pk=pipeline.pk).update(state=PipelineState.RUNNING)
    _expire(pipeline, 6)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def beat():
        try:
            barrier.wait()
            supervision.reconcile()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert AuditEvent.objects.filter(action="pipeline.run.end", target_id="twice").count() == 1
    runs = PipelineRun.objects.filter(pipeline=pipeline)
    assert runs.count() == 2
    assert Pipeline.objects.get(pk=pipeline.pk).lease_epoch == 2


@pytest.mark.django_db
def test_only_a_takeover_after_a_lost_host_skips_the_warm_up(team):
    from pipelines.supervision.launcher import is_takeover

    _host("runner-a", slots=2)
    pipeline = _wanted(team, "moved")
    run = placement.place_and_claim(pipeline.pk)
    assert run is not None
    assert not is_takeover(run), "no earlier run"
    earlier = PipelineRun.objects.create(
        pipeline=pipeline, revision=run.revision, run_id=uuid.uuid4(), attempt=1, state=PipelineState.RESTARTING,
        host="runner-b", epoch=0, ended_at=timezone.now(), error_type="Killed",
    )  # fmt: skip
    assert not is_takeover(run), "a crash recovery warms up as a start does"
    PipelineRun.objects.filter(pk=earlier.pk).update(error_type="HostLost")
    assert is_takeover(run)
