"""A runner host sizes its drivers (issue #29, footprint): the sizing, cores and Spark conf variables of
``pipelines.spark.session`` (pure functions: no JVM here; the density benchmark runs real drivers with them),
and the launcher lets exactly those through to the driver, with at most 2 malloc arenas by default."""

from __future__ import annotations

import os
import uuid

import psutil
import pytest
from django.utils import timezone

from pipelines import supervision
from pipelines.models import PipelineRun, PipelineState
from pipelines.spark.session import (
    CONF_ENV,
    CORES_ENV,
    DEFAULT_CONF,
    SIZING_ENV,
    SIZINGS,
    override_conf,
    sized_master,
    sizing_conf,
)
from pipelines.supervision.launcher import driver_environment
from streamforge_core.kafka import KafkaConnection
from streamforge_core.process_priority import autogroup_niceness
from tests.pipelines.test_supervision import _tick_until, supervised  # noqa: F401  (supervised: a fixture)


def test_spark_ui_is_off_and_a_compact_driver_keeps_one_idle_python_worker():
    assert DEFAULT_CONF["spark.ui.enabled"] == "false"
    assert "spark.python.factory.idleWorkerMaxPoolSize" not in DEFAULT_CONF
    assert (
        sizing_conf({"STREAMFORGE_DRIVER_SIZING": "compact"})["spark.python.factory.idleWorkerMaxPoolSize"]
        == "1"
    )
    # one worker environment for the warm-up and the micro-batches: one daemon
    assert DEFAULT_CONF["spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"] == "false"


@pytest.mark.parametrize(
    ("master", "cores", "expected"),
    [
        ("local[*]", "1", "local[1]"),
        ("local", "2", "local[2]"),
        ("local[4]", "1", "local[1]"),
        ("local[4,3]", "1", "local[1,3]"),  # failures allowed per task kept
        ("spark://127.0.0.1:7077", "1", "spark://127.0.0.1:7077"),  # a cluster's cores are spark.cores.max
        ("local[*]", "", "local[*]"),  # unset: the master's own
    ],
)
def test_cores_apply_to_a_local_master_only(master, cores, expected):
    assert sized_master(master, {CORES_ENV: cores}) == expected


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_cores_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match=CORES_ENV):
        sized_master("local[*]", {CORES_ENV: bad})


def test_sizing_standard_by_default_compact_on_request():
    assert sizing_conf({}) == dict(SIZINGS["standard"])
    compact = sizing_conf({SIZING_ENV: "compact"})
    assert compact["spark.driver.memory"] == "512m"
    options = compact["spark.driver.extraJavaOptions"].split()
    assert "-Dlog4j2.level=WARN" in options  # every sizing keeps Spark's logging at WARN
    assert {"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"} <= set(options)
    assert not any(
        o.startswith("-Xmx") for o in options
    )  # Spark refuses -Xmx there: spark.driver.memory is it
    # ... and the executors a standalone cluster starts for it: C1 and SerialGC, their heap left to
    # spark.executor.memory (Spark refuses -Xmx there too)
    executor = compact["spark.executor.extraJavaOptions"].split()
    assert {"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"} <= set(executor)
    assert not any(o.startswith(("-Xmx", "-Xms")) for o in executor)
    assert "spark.executor.extraJavaOptions" not in sizing_conf({})
    with pytest.raises(ValueError, match=f"{SIZING_ENV} must be one of compact, standard, not 'huge'"):
        sizing_conf({SIZING_ENV: "huge"})


def test_conf_from_the_environment_is_a_json_object_of_strings():
    assert override_conf({}) == {}
    assert override_conf({CONF_ENV: '{"spark.ui.enabled": "true"}'}) == {"spark.ui.enabled": "true"}
    for bad, why in (
        ("spark.ui.enabled=true", "not JSON"),
        ('["a"]', "object of strings"),
        ('{"a": 1}', "object"),
    ):
        with pytest.raises(ValueError, match=why):
            override_conf({CONF_ENV: bad})


def test_the_launcher_passes_the_hosts_sizing_and_caps_malloc_arenas(settings, tmp_path):
    settings.STATE_DIR = str(tmp_path)
    conn = KafkaConnection("127.0.0.1:9092")
    env = driver_environment({"PATH": "/usr/bin", "DJANGO_SECRET_KEY": "x"}, conn)
    assert env["MALLOC_ARENA_MAX"] == "2"
    assert "DJANGO_SECRET_KEY" not in env
    sized = driver_environment(
        {
            SIZING_ENV: "compact",
            CORES_ENV: "1",
            CONF_ENV: '{"spark.ui.enabled": "true"}',
            "MALLOC_ARENA_MAX": "4",  # the host's own choice wins over the default
        },
        conn,
    )
    assert (sized[SIZING_ENV], sized[CORES_ENV], sized["MALLOC_ARENA_MAX"]) == ("compact", "1", "4")
    assert sized[CONF_ENV] == '{"spark.ui.enabled": "true"}'


def test_the_launcher_passes_the_hosts_class_archives():
    # Without them a driver and its cluster executors start without their archives: slower, silently.
    worker = {
        "STREAMFORGE_DRIVER_CLASS_ARCHIVE": "/cache/driver.jsa",
        "STREAMFORGE_EXECUTOR_CLASS_ARCHIVE": "/var/lib/spark/executor.jsa",
    }
    env = driver_environment(worker, KafkaConnection("127.0.0.1:9092"))
    assert {k: env[k] for k in worker} == worker


@pytest.mark.redis
@pytest.mark.django_db
@pytest.mark.parametrize("niceness", [0, 7])
def test_a_launched_driver_runs_at_the_hosts_niceness_and_is_told_it(
    supervised,  # noqa: F811
    settings,
    niceness,
):
    """STREAMFORGE_DRIVER_NICENESS reaches the driver the launcher starts (the stand-in driver, through the
    real launch path): lowered at launch, process group and session, and told as ``--niceness``."""
    settings.DRIVER_NICENESS = niceness
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "silent"
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: PipelineRun.objects.filter(pipeline=pipeline).exclude(pid=None).exists())
    run = PipelineRun.objects.get(pipeline=pipeline)
    driver = psutil.Process(run.pid)
    command = driver.cmdline()
    told = command[command.index("--niceness") + 1] if "--niceness" in command else "0"
    assert int(told) == niceness, command
    assert driver.nice() == max(niceness, os.nice(0))
    # ... and its session's autogroup, which ranks it against the console's session (processes in other
    # sessions): the nice value alone would leave every driver an equal share with the web.
    assert autogroup_niceness(run.pid) in (None, niceness)


@pytest.mark.redis
@pytest.mark.django_db
def test_a_takeovers_driver_starts_at_the_runners_priority(supervised, settings):  # noqa: F811
    """A takeover (the previous run ended HostLost) is not lowered at launch: its clock runs from the host's
    loss to its first batch, and it lowers itself after that batch (``--niceness``;
    tests/pipelines/spark/test_driver_priority.py)."""
    settings.DRIVER_NICENESS = 7
    pipeline, operator, behaviour = supervised
    behaviour["name"] = "silent"
    PipelineRun.objects.create(
        pipeline=pipeline, revision=pipeline.current_revision, run_id=uuid.uuid4(), attempt=1,
        state=PipelineState.RESTARTING, host="runner-b", epoch=1, ended_at=timezone.now(), error_type="HostLost",
    )  # fmt: skip
    supervision.request_start(actor=operator, pipeline=pipeline)
    _tick_until(lambda: PipelineRun.objects.filter(pipeline=pipeline).exclude(pid=None).exists())
    run = PipelineRun.objects.filter(pipeline=pipeline).exclude(pid=None).get()
    driver = psutil.Process(run.pid)
    assert "--niceness" in driver.cmdline()
    assert driver.nice() == os.nice(0)
    assert autogroup_niceness(run.pid) in (None, 0)
