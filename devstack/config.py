"""Where devstack keeps things and which ports each profile uses.

Four profiles exist so that the test suite never disturbs a running demo: ``dev`` (the ports the README and
the demo use), ``test`` (the same services on other ports, with their own state folder and database),
``chaos`` (a private stack the fault-injection run may stop and kill at will) and ``cluster`` (no single
control process: two webs, two beats, three runner hosts and a Spark standalone master with two workers, on
PostgreSQL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MAVEN_DIR = Path(__file__).resolve().parent / "maven"
CONF_DIR = Path(__file__).resolve().parent / "conf"


def cache_dir() -> Path:
    """The download cache shared by every clone on this machine (jars are large and change rarely).

    ``STREAMFORGE_CACHE`` overrides the default ``~/.cache/streamforge``.
    """
    return Path(os.environ.get("STREAMFORGE_CACHE", Path.home() / ".cache" / "streamforge")).resolve()


@dataclass(frozen=True)
class Profile:
    """One set of ports and one state folder (``.stack/<name>/``: pid files, logs, Kafka and Redis data)."""

    name: str
    kafka_port: int
    controller_port: int
    redis_port: int
    web_port: int
    postgres_port: int
    debug: bool
    durable: bool = True
    secured_kafka: bool = False
    """Whether the stack has the secured Kafka broker (``kafka-secure``: TLS, SASL, mTLS, ACLs) beside the
    plaintext one; the test profile has it, for the tests of secured connections."""
    """False for the test stack: its PostgreSQL runs without fsync (the suite creates and drops its database
    and never needs to survive a power cut)."""
    webs: int = 1
    """How many web processes (daphne) the stack runs, on ``web_port``, ``web_port + 1``, ..."""
    beats: int = 1
    """How many Celery beats (each with its own schedule file)."""
    runners: tuple[str, ...] = ()
    """Runner hosts (``STREAMFORGE_RUNNER_NAME``): each a Celery worker with its own state folder and queue.
    Empty: the stack has the one plain ``worker`` of a single-host install."""
    spark_port: int = 0
    """The Spark standalone master's port (0: no cluster; drivers use ``SPARK_MASTER`` or ``local[*]``)."""
    spark_ui_port: int = 0
    """The master's web UI; worker ``i`` (1-based) has ``spark_ui_port + i``."""
    spark_workers: int = 0
    plain_worker: bool = True
    """Whether the stack has the plain Celery ``worker`` (no runner name) of a single-host install."""
    postgres_only: bool = False
    """PostgreSQL whatever ``STREAMFORGE_DB`` says (several processes claim leases with conditional UPDATEs)."""
    schema_registry: bool = True
    """Whether the stack runs a schema registry (Apicurio, ``registry_port``) and gives its processes
    ``SCHEMA_REGISTRY_URL``. The fault-injection stacks (chaos, cluster) do not: nothing there reads a schema
    yet, and a third JVM starting beside their drivers would only slow a fault's recovery on two cores."""
    keycloak: bool = False
    """Whether the stack has Keycloak (``keycloak_port``), the OpenID Connect identity provider of the SSO
    tests (issue #33), with the realm ``devstack/conf/keycloak-realm.json`` imported at each start."""
    sinks: bool = False
    """Whether the stack runs the demo's notification receivers (``devstack.sinks``: a webhook receiver on
    ``webhook_sink_port``, an SMTP sink on ``smtp_sink_port``) and sends the processes' mail to the sink."""

    @property
    def webhook_sink_port(self) -> int:
        """The webhook receiver's port (and its page's): ``web_port + 25``."""
        return self.web_port + 25

    @property
    def smtp_sink_port(self) -> int:
        """The SMTP sink's port: ``web_port + 26``."""
        return self.web_port + 26

    @property
    def registry_port(self) -> int:
        """The schema registry's (Apicurio Registry) HTTP port: ``web_port + 27``; its management interface
        (health, metrics) is on ``web_port + 28``."""
        return self.web_port + 27

    @property
    def keycloak_port(self) -> int:
        """Keycloak's HTTP port: ``web_port + 29``; its management interface (``/health/ready``) is on
        ``web_port + 30``."""
        return self.web_port + 29

    @property
    def keycloak_url(self) -> str:
        """Keycloak's base URL; the test realm's issuer is ``<this>/realms/streamforge``."""
        return f"http://127.0.0.1:{self.keycloak_port}"

    @property
    def schema_registry_url(self) -> str:
        """The registry's Confluent-compatible API (``SCHEMA_REGISTRY_URL``)."""
        return f"http://127.0.0.1:{self.registry_port}/apis/ccompat/v7"

    @property
    def state_dir(self) -> Path:
        return REPO_ROOT / ".stack" / self.name

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def postgres_dir(self) -> Path:
        """The stack's own PostgreSQL: ``.stack/postgres/<name>/``, beside the state folder rather than in
        it: the state folder is private to its owner (0700), and the cluster belongs to the unprivileged user
        that runs PostgreSQL, who must be able to reach it (its own folder is 0700 too)."""
        return REPO_ROOT / ".stack" / "postgres" / self.name

    @property
    def uses_postgres(self) -> bool:
        """Whether this stack runs its own PostgreSQL (``STREAMFORGE_DB=postgres``; SQLite otherwise).
        Raises ValueError for any other value, so a typo never silently falls back to SQLite."""
        choice = os.environ.get("STREAMFORGE_DB", "sqlite").strip().lower()
        if choice not in {"sqlite", "postgres"}:
            raise ValueError(f"STREAMFORGE_DB must be sqlite or postgres, not {choice!r}")
        return choice == "postgres" or self.postgres_only

    @property
    def database_url(self) -> str:
        """``DATABASE_URL`` from the environment when set; else the stack's own PostgreSQL (``STREAMFORGE_DB=
        postgres``, its password kept in ``postgres_dir``), else a SQLite file in the state folder."""
        if os.environ.get("DATABASE_URL"):
            return os.environ["DATABASE_URL"]
        if self.uses_postgres:
            password_file = self.postgres_dir / "password"
            password = password_file.read_text().strip() if password_file.exists() else ""
            return f"postgres://streamforge:{password}@127.0.0.1:{self.postgres_port}/streamforge"
        return f"sqlite:///{self.state_dir / 'db.sqlite3'}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def web_ports(self) -> tuple[int, ...]:
        """One port per web process, from ``web_port`` up."""
        return tuple(self.web_port + i for i in range(self.webs))

    @property
    def spark_master_url(self) -> str | None:
        """``spark://127.0.0.1:<spark_port>`` when the stack runs a standalone cluster, else None."""
        return f"spark://127.0.0.1:{self.spark_port}" if self.spark_port else None

    @property
    def checkpoint_root(self) -> Path:
        """Where a multi-runner stack keeps every pipeline's checkpoints: one folder all its runners reach
        (a stand-in for HDFS or S3A). A single-host stack leaves it to the default (``<state>/checkpoints``)."""
        return self.state_dir / "shared" / "checkpoints"

    def runner_state_dir(self, runner: str) -> Path:
        """A runner's own state folder (its runs' logs, spec files and lease files): ``runners/<name>``."""
        return self.state_dir / "runners" / runner

    @property
    def secure_kafka(self) -> SecureKafkaPorts:
        """The secured broker's ports, just above the plaintext broker's and its controller's."""
        base = self.kafka_port
        return SecureKafkaPorts(
            sasl=base + 2, mtls=base + 3, wrong_host=base + 4, internal=base + 5, controller=base + 6
        )


@dataclass(frozen=True)
class SecureKafkaPorts:
    """The listeners of the test stack's secured broker (see ``conf/kafka-secure-server.properties``)."""

    sasl: int
    mtls: int
    wrong_host: int
    internal: int
    controller: int


PROFILES: dict[str, Profile] = {
    "dev": Profile(
        "dev",
        kafka_port=9092,
        controller_port=9093,
        redis_port=6379,
        web_port=8000,
        postgres_port=5433,
        debug=True,
        sinks=True,
    ),
    "test": Profile(
        "test",
        kafka_port=19092,
        controller_port=19093,
        redis_port=16379,
        web_port=18000,
        postgres_port=15433,
        debug=True,
        durable=False,
        secured_kafka=True,
        keycloak=True,
    ),
    # The fault-injection run (``make chaos``) stops and kills its own broker, Redis and workers, so it has a
    # whole private stack: nothing shared with a demo or another engineer's test run is ever touched.
    # Its plain worker stays (DLQ tasks; chaos.bulk_worker kills it alone); two runner hosts carry the
    # pipelines, so chaos.host_crash and chaos.host_partition have a host to lose and one to move to; their
    # leases are claimed with conditional UPDATEs across processes, so PostgreSQL whatever STREAMFORGE_DB says.
    "chaos": Profile(
        "chaos",
        kafka_port=29092,
        controller_port=29093,
        redis_port=26379,
        web_port=28000,
        postgres_port=25433,
        debug=True,
        runners=("runner-a", "runner-b"),
        postgres_only=True,
        schema_registry=False,
    ),
    # Issue #29's local proof: no single control process, runner hosts with leases, executors on a Spark
    # standalone cluster. Webs on 38000 and 38001, the master on 37077 with its UI on 38080, workers' UIs
    # on 38081 and 38082.
    "cluster": Profile(
        "cluster",
        kafka_port=39092,
        controller_port=39093,
        redis_port=36379,
        web_port=38000,
        postgres_port=35433,
        debug=True,
        webs=2,
        beats=2,
        runners=("runner-a", "runner-b", "runner-c"),
        spark_port=37077,
        spark_ui_port=38080,
        spark_workers=2,
        plain_worker=False,
        postgres_only=True,
        schema_registry=False,
    ),
}


PORT_OFFSET_VARIABLE = "STREAMFORGE_STACK_PORT_OFFSET"


def profile(name: str) -> Profile:
    """The profile ``name`` (a key of ``PROFILES``), shifted by ``STREAMFORGE_STACK_PORT_OFFSET`` when set.

    The offset (an integer 1-9999) is added to every port and names the state folders
    (``.stack/<name>-<offset>/``), so two checkouts on one machine (a CI run and a developer's worktree) each
    run a private test stack. Raises KeyError for an unknown name and ValueError for an offset that is not an
    integer in range.
    """
    base = PROFILES[name]
    raw = os.environ.get(PORT_OFFSET_VARIABLE, "").strip()
    if not raw:
        return base
    try:
        offset = int(raw)
    except ValueError:
        raise ValueError(f"{PORT_OFFSET_VARIABLE} must be an integer, not {raw!r}") from None
    if not 0 <= offset <= 9999:
        raise ValueError(f"{PORT_OFFSET_VARIABLE} must be between 0 and 9999, not {offset}")
    if offset == 0:
        return base
    return replace(
        base,
        name=f"{name}-{offset}",
        kafka_port=base.kafka_port + offset,
        controller_port=base.controller_port + offset,
        redis_port=base.redis_port + offset,
        web_port=base.web_port + offset,
        postgres_port=base.postgres_port + offset,
        spark_port=base.spark_port + offset if base.spark_port else 0,
        spark_ui_port=base.spark_ui_port + offset if base.spark_ui_port else 0,
    )
