"""Django settings for StreamForge Web: every knob comes from the environment (see ``env.py``).

Defaults suit a laptop (SQLite file, Redis and Kafka on loopback, ``local[*]`` Spark). With ``DJANGO_DEBUG``
off, a secret key must be given and HTTPS hardening is on, so ``manage.py check --deploy`` is clean.

| variable | default | meaning |
|---|---|---|
| DJANGO_DEBUG | false | Django debug mode |
| DJANGO_SECRET_KEY | (required unless debug) | signing key; in debug a random key kept in the state folder |
| DJANGO_ALLOWED_HOSTS | 127.0.0.1,localhost | host names served |
| DJANGO_CSRF_TRUSTED_ORIGINS | (none) | extra origins for CSRF, e.g. https://sf.example.com |
| DATABASE_URL | sqlite:///<repo>/db.sqlite3 | any dj-database-url URL (postgres://... for PostgreSQL) |
| STREAMFORGE_DB_POOL | 8 in a web process (ASGI), else 0 | PostgreSQL connections one process keeps in a pool (at most); 0: one persistent connection per thread, as workers and beats use |
| REDIS_URL | redis://127.0.0.1:6379/0 | Celery broker and results, Channels layer, driver progress |
| KAFKA_BOOTSTRAP_SERVERS | 127.0.0.1:9092 | the default Kafka cluster (others are named clusters, added by admins); KAFKA_SECURITY_PROTOCOL and the rest: README "Connecting to a secured Kafka cluster" |
| STREAMFORGE_KAFKA_CREDENTIAL_DIRS | /run/secrets,/etc/streamforge/kafka | directories a named cluster's password, CA, certificate and key files must be in |
| SPARK_MASTER | local[*] | where pipeline drivers run (local[*], spark://host:7077, k8s://...) |
| STREAMFORGE_SPARK_MASTER_UI_URL | (none) | a `spark://` standalone master's web UI (http://host:8080): a run ended `HostLost` has its application killed there, so a frozen or cut-off driver's executors free their cores for the takeover |
| STREAMFORGE_SPARK_CORES_MAX | 1 | cores one pipeline may take on a `spark://` standalone cluster (`spark.cores.max`) |
| STREAMFORGE_SPARK_JARS | (none) | comma-separated connector jars or folders of jars (devstack fills it in) |
| STREAMFORGE_STATE_DIR | <repo>/.stack/dev | checkpoints, driver logs, the debug secret and audit keys |
| STREAMFORGE_AUDIT_KEY | (required unless debug) | HMAC key of the audit hash chain (32+ characters, not the secret key); in debug a random key kept in the state folder |
| STREAMFORGE_NOTIFY_KEY | derived from DJANGO_SECRET_KEY | key (32+ characters) that encrypts notification channels' secrets at rest (webhook signing secrets, Slack webhook URLs); set it so the secret key can be rotated alone |
| STREAMFORGE_REPLAY_KEY | derived from DJANGO_SECRET_KEY | signs the replay headers the console sends; pipeline drivers honour a replay's destinations only under a valid signature (the same on every host) |
| STREAMFORGE_NOTIFY_DIGEST_SECONDS | 60 | after a notification, further events of its type for the same channel within this window are sent as one digest |
| STREAMFORGE_NOTIFY_MAX_ATTEMPTS | 6 | delivery attempts of one notification (exponential backoff between them) before it is marked failed |
| STREAMFORGE_NOTIFY_BACKOFF_SECONDS | 5 | wait before a failed delivery's first retry; it doubles per attempt (with up to 10 % jitter), at most an hour |
| STREAMFORGE_NOTIFY_TIMEOUT | 10 | seconds a webhook or mail server may take to answer one delivery |
| STREAMFORGE_NOTIFY_ALLOW_PRIVATE | false | let webhook and Slack URLs point at loopback, private and link-local addresses (refused by default: a team admin could otherwise make the server reach the internal network) |
| EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, DEFAULT_FROM_EMAIL | localhost, 25, -, -, false, streamforge@localhost | the mail server e-mail notifications go through |
| STREAMFORGE_AUDIT_TOPIC | streamforge.audit-anchor | Kafka topic each audit event's sequence and hash are appended to (the anchor `verify` compares with) |
| STREAMFORGE_AUDIT_ANCHOR_TIMEOUT | 5 | seconds the audit anchor waits for Kafka (creating its topic, reading it back) before giving up |
| STREAMFORGE_HTTPS | not debug | secure cookies, HSTS and the HTTPS redirect |
| STREAMFORGE_RECONCILE_SECONDS | 5 | how often the beat compares desired and actual pipeline state |
| STREAMFORGE_SHARED_READ_SECONDS | 1 | the overview's rows and the pipeline list's pages are computed once per set of visible teams and shared for this many seconds (whoever has just changed something reads afresh); 0: computed for every request |
| STREAMFORGE_START_TIMEOUT | 300 | seconds a new driver may take to send its first heartbeat |
| STREAMFORGE_HEARTBEAT_STALE | 45 | seconds without a heartbeat after which a running driver is restarted |
| STREAMFORGE_STOP_TIMEOUT | 90 | seconds a stopping driver may take before its process group is killed |
| STREAMFORGE_RESTART_BACKOFF | 2 | first restart delay in seconds; doubles per consecutive failure |
| STREAMFORGE_RESTART_BACKOFF_MAX | 300 | the longest restart delay in seconds |
| STREAMFORGE_CRASH_LOOP_FAILURES | 5 | this many failures ... |
| STREAMFORGE_CRASH_LOOP_MINUTES | 10 | ... within this many minutes make a pipeline FAILED |
| STREAMFORGE_METRICS_RETENTION_DAYS | 14 | metric samples older than this are deleted |
| STREAMFORGE_PROGRESS_GROUP | streamforge-web | Redis consumer group reading the drivers' progress stream |
| STREAMFORGE_DLQ_MASKED_PATHS | (none) | comma-separated JSON paths (`/actor/email`) masked in payloads for viewers; while any is set, a payload that is not JSON is withheld from viewers (length and SHA-256 only) |
| STREAMFORGE_DLQ_MASKED_HEADERS | (none) | comma-separated header names (case-insensitive) whose values are masked for viewers |
| STREAMFORGE_DLQ_MASK_KEYS | false | true: record keys are withheld from viewers (length only), in the list and search too |
| STREAMFORGE_DLQ_PRODUCE_TIMEOUT | 20 | seconds a replayed record may take to be acknowledged (Kafka delivery.timeout.ms) |
| STREAMFORGE_DLQ_RETENTION_DAYS | 30 | days replayed and skipped dead letters are kept where no team or pipeline policy says otherwise (0: forever) |
| STREAMFORGE_DLQ_BULK_APPROVAL_THRESHOLD | 1000 | bulk actions selecting more messages than this need an approver |
| STREAMFORGE_DLQ_BULK_APPROVAL_WINDOW | 3600 | seconds over which one person's bulk selections add up against that threshold |
| STREAMFORGE_CELERY_QUEUE | celery | the Celery queue the web process sends tasks to and workers read (tests on a shared Redis use their own) |
| STREAMFORGE_DLQ_BULK_STALE | 60 | seconds without a bulk worker heartbeat before another takes over (keep above the produce timeout + 25) |
| STREAMFORGE_BEHIND_PROXY | false | trust the proxy's X-Forwarded-Proto (HTTPS) and X-Forwarded-For (client address) |
| STREAMFORGE_PROXY_COUNT | 1 behind a proxy, else 0 | reverse proxies in front of the app that append to X-Forwarded-For |
| STREAMFORGE_LOGIN_FAILURE_LIMIT | 5 | failed log-ins for one user name from one address before it is locked out |
| STREAMFORGE_LOGIN_COOLOFF_MINUTES | 15 | how long a lockout lasts (each further try during it starts it again) |
| STREAMFORGE_API_RATE_ANON | 60/minute | API requests an anonymous client (one address) may make |
| STREAMFORGE_API_RATE_USER | 1200/minute | API requests one signed-in user or token may make |
| STREAMFORGE_API_RATE_FAILED_TOKEN | 10/minute | wrong API tokens one address may send before its token requests answer 429 |
| STREAMFORGE_API_RATE_DSL | 60/minute | DSL evaluations (playground, dry runs) one user may request |
| STREAMFORGE_SESSION_HOURS | 12 | how long a browser session lasts after log-in |
| STREAMFORGE_OIDC_PROVIDERS | (none) | comma-separated ids of OpenID Connect identity providers, each described by `STREAMFORGE_OIDC_<ID>_*` (issuer, client id, the client secret as a file or a variable's name: `access/sso/config.py`, README "Single sign-on") |
| STREAMFORGE_SSO_ONLY | false | true: local passwords are refused, except the break-glass admin's |
| STREAMFORGE_SSO_BREAK_GLASS_USER | (none) | the one user who may still sign in with a password in SSO-only mode (each such sign-in is audited and logged) |
| STREAMFORGE_SSO_SESSION_HOURS | STREAMFORGE_SESSION_HOURS | how long a session made by an SSO sign-in lasts: at most this long may someone disabled at the provider go on |
| STREAMFORGE_SSO_DEFAULT_TEAM, STREAMFORGE_SSO_DEFAULT_ROLE | (none), viewer | the team (and role) of a person signing in through a provider in none of its mapped groups; unset: no team |
| STREAMFORGE_RUNNER_NAME | (none) | set on runner hosts only: this worker's stable host name (`[a-z0-9-]`, 1-63); it also reads the queue `<STREAMFORGE_CELERY_QUEUE>.runner.<name>` |
| STREAMFORGE_RUNNER_SLOTS | 4 | pipeline drivers a runner hosts at most |
| STREAMFORGE_RUNNER_MEMORY_MB | 4096 | memory a runner offers its drivers (each charged STREAMFORGE_DRIVER_MEMORY_MB) |
| STREAMFORGE_RUNNER_LABELS | (none) | comma-separated labels (`ssd`, `zone=a`) a pipeline's placement labels must all be among |
| STREAMFORGE_RUNNER_ADVERTISE_HOST | 127.0.0.1 | address Spark executors reach this runner's drivers at (`spark.driver.host`) |
| STREAMFORGE_HOST_TICK_SECONDS | 3 | how often a runner beats and renews its leases |
| STREAMFORGE_HOST_LOST_SECONDS | 20 | heartbeat age after which a runner is shown lost |
| STREAMFORGE_LEASE_TTL_SECONDS | 15 | how long a pipeline's lease lasts after each renewal |
| STREAMFORGE_LEASE_GRACE_SECONDS | 3 | how long past a lease's expiry another runner waits before taking the pipeline over |
| STREAMFORGE_DRIVER_FENCE_MARGIN_SECONDS | 3 | a driver stops committing this long before its lease expires |
| STREAMFORGE_DRIVER_MEMORY_MB | 700 | memory placement charges a runner per pipeline driver |
| STREAMFORGE_DRIVER_NICENESS | 0 | nice(1) value of the drivers a worker launches, with their JVMs and Python workers (1-19: the console and supervision keep the CPU when pipelines saturate the host; a takeover starts at the worker's priority and takes it after its first batch; 10 on dense hosts, 19 where the host also serves the console; bench/FINDINGS.md "Density" and §20) |
| STREAMFORGE_DRIVER_SIZING, STREAMFORGE_DRIVER_CORES, STREAMFORGE_DRIVER_CONF | standard, (the master's), (none) | read by each driver a worker launches: JVM sizing `standard` or `compact` (~500 MB per pipeline), Spark threads of a local master, extra Spark conf as JSON (`pipelines/spark/session.py`) |
| STREAMFORGE_CHECKPOINT_ROOT | <state dir>/checkpoints | where pipelines' checkpoints live: a path or any Hadoop URI every runner reaches (`hdfs://`, `s3a://`) |
| STREAMFORGE_METRICS_TOKEN | (none) | bearer token Prometheus sends to /metrics; unset: only signed-in admins read it |
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from access.sso.config import providers_from_env
from streamforge_web.env import env_bool, env_int, env_list, env_str
from streamforge_web.files import private_dir

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", default=False)
STATE_DIR = Path(env_str("STREAMFORGE_STATE_DIR", str(BASE_DIR / ".stack" / "dev")))


def _debug_key(name: str) -> str:
    # A key kept beside the stack state, so sessions (and the audit chain) survive restarts; never committed,
    # never used in production.
    path = private_dir(STATE_DIR) / name
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(50)
    path.write_text(key)
    path.chmod(0o600)
    return key


SECRET_KEY = env_str("DJANGO_SECRET_KEY", None if not DEBUG else "") or _debug_key("secret_key")
# The audit chain's HMAC key (access.audit): never stored in the database, so someone who can write the database
# cannot re-hash an edited event. Its own key, not SECRET_KEY, so either can be rotated without the other.
AUDIT_KEY = env_str("STREAMFORGE_AUDIT_KEY", None if not DEBUG else "") or _debug_key("audit_key")
# Encrypts notification channel secrets (notifications.sealing). Its own variable so DJANGO_SECRET_KEY can be
# rotated without losing them; unset, a key is derived from the secret key (rotating that then needs the
# channels' secrets entered again).
NOTIFY_KEY = env_str("STREAMFORGE_NOTIFY_KEY", "") or f"derived-from-secret-key:{SECRET_KEY}"
# Signs the replay headers the console sends (streamforge_core.replay_signing); every web process, worker and
# driver of one installation needs the same key. Unset, it is derived from the secret key.
REPLAY_KEY = (
    env_str("STREAMFORGE_REPLAY_KEY", "")
    or hmac.new(SECRET_KEY.encode(), b"streamforge replay-header signing key", hashlib.sha256).hexdigest()
)
NOTIFY_DIGEST_SECONDS = env_int("STREAMFORGE_NOTIFY_DIGEST_SECONDS", 60, minimum=1)
NOTIFY_MAX_ATTEMPTS = env_int("STREAMFORGE_NOTIFY_MAX_ATTEMPTS", 6, minimum=1)
NOTIFY_BACKOFF_SECONDS = env_int("STREAMFORGE_NOTIFY_BACKOFF_SECONDS", 5, minimum=1)
NOTIFY_TIMEOUT_SECONDS = env_int("STREAMFORGE_NOTIFY_TIMEOUT", 10, minimum=1)
NOTIFY_ALLOW_PRIVATE_TARGETS = env_bool("STREAMFORGE_NOTIFY_ALLOW_PRIVATE", False)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = NOTIFY_TIMEOUT_SECONDS
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "streamforge@localhost")
AUDIT_ANCHOR_TOPIC = env_str("STREAMFORGE_AUDIT_TOPIC", "streamforge.audit-anchor")
AUDIT_ANCHOR_TIMEOUT = env_int("STREAMFORGE_AUDIT_ANCHOR_TIMEOUT", 5, minimum=1)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    # Swagger UI served from our own static files (no CDN: the docs work offline and under our CSP).
    "drf_spectacular_sidecar",
    "csp",
    "channels",
    "axes",
    # Single sign-on (access.sso): allauth's OpenID Connect provider; its account app is required by it, but
    # none of its own pages (sign-up, password reset) is mounted.
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "streamforge_web",
    "access",
    "pipelines",
    "dlq",
    "notifications",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "access.middleware.audit_actor",
    "access.shared_reads.remember_writes",
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so it turns a lockout noticed during the view into the lockout page (access.lockout).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "streamforge_web.urls"
ASGI_APPLICATION = "streamforge_web.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "access.context_processors.identity",
                "dlq.context_processors.dlq_nav",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=60,
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, beat, ingest) write: WAL lets readers run beside one writer, and
    # IMMEDIATE transactions take the write lock up front instead of failing half-way with "database is locked".
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests that start other processes against the test database (the DLQ ingester, a live web server for
    # the browser) need it in a file those processes can open; an in-memory one is private to pytest.
    DATABASES["default"]["TEST"] = {"NAME": str(STATE_DIR / "test-db.sqlite3")}

# Under ASGI Django serves each request in a thread of its own, and a persistent connection belongs to its
# thread: every request opened a PostgreSQL connection (a backend forked, SCRAM authentication), 5-20 ms of CPU
# on a loaded host. Django's deployment notes say to turn persistent connections off under ASGI and use the
# backend's pool; streamforge_web.asgi sets STREAMFORGE_DB_POOL, so every web process has one. Workers and
# beats keep their long-lived persistent connection.
DB_POOL = env_int("STREAMFORGE_DB_POOL", 0, minimum=0)
if DB_POOL and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses a pool beside persistent connections
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL,
        "timeout": 10,  # seconds a request waits for a free connection before it fails
    }  # CONN_HEALTH_CHECKS (on) makes Django check each connection the pool hands out

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
# Axes first: it refuses a locked-out user name + address before the password is even checked. Then
# Django's ModelBackend, refusing passwords in SSO-only mode but the break-glass admin's (access.sso.backends);
# sessions of SSO sign-ins name it too.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "access.sso.backends.ConsoleBackend",
]
SESSION_COOKIE_AGE = env_int("STREAMFORGE_SESSION_HOURS", 12, minimum=1) * 3600

# --- single sign-on (access.sso; README "Single sign-on") -----------------------------------------------------
# Identity providers: ids, issuers, client ids and *references* to their client secrets (a file or a variable's
# name), never the secrets themselves, so no settings dump shows one.
SSO_PROVIDERS = providers_from_env(os.environ)
SSO_ONLY = env_bool("STREAMFORGE_SSO_ONLY", default=False)
SSO_BREAK_GLASS_USER = env_str("STREAMFORGE_SSO_BREAK_GLASS_USER", "")
SSO_DEFAULT_TEAM = env_str("STREAMFORGE_SSO_DEFAULT_TEAM", "")
SSO_DEFAULT_ROLE = env_str("STREAMFORGE_SSO_DEFAULT_ROLE", "viewer")
# A session made by an SSO sign-in lasts this long: how long someone disabled at the provider may go on
# (an admin ends it at once: People, "End sessions").
SSO_SESSION_HOURS = env_int("STREAMFORGE_SSO_SESSION_HOURS", SESSION_COOKIE_AGE // 3600, minimum=1)
if SSO_ONLY and not SSO_PROVIDERS:
    raise ImproperlyConfigured("STREAMFORGE_SSO_ONLY needs an identity provider (STREAMFORGE_OIDC_PROVIDERS)")
if SSO_DEFAULT_ROLE not in {"viewer", "operator", "approver"}:
    raise ImproperlyConfigured("STREAMFORGE_SSO_DEFAULT_ROLE must be viewer, operator or approver")
ACCOUNT_ADAPTER = "access.sso.adapters.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "access.sso.adapters.SocialAccountAdapter"
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"provider_class": "access.sso.provider.StrictOIDCProvider"}}
# Just-in-time users: a first sign-in creates the user (identity: provider + subject, never the e-mail).
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_STORE_TOKENS = False
SOCIALACCOUNT_LOGIN_ON_GET = False  # the sign-in button posts (with the CSRF token): no sign-in CSRF
SOCIALACCOUNT_QUERY_EMAIL = False
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_UNIQUE_EMAIL = False  # two people may share an address at two providers; identity is the subject
ACCOUNT_LOGOUT_ON_GET = False

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = STATE_DIR / "staticfiles"
# In debug, serve straight from static/ (no collectstatic between edits).
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
if DEBUG:
    private_dir(STATE_DIR)
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- infrastructure -----------------------------------------------------------------------------------------
BEHIND_PROXY = env_bool("STREAMFORGE_BEHIND_PROXY", default=False)
# How many proxies append to X-Forwarded-For; the client address is the entry the outermost one added.
PROXY_COUNT = env_int("STREAMFORGE_PROXY_COUNT", 1 if BEHIND_PROXY else 0, minimum=0)
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
KAFKA_BOOTSTRAP_SERVERS = env_str("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
# Where a named Kafka cluster's referenced files (password, CA, client certificate and key) may be: a cluster
# row cannot point a client at any other file of the server (pipelines.clusters).
KAFKA_CREDENTIAL_DIRS = env_list(
    "STREAMFORGE_KAFKA_CREDENTIAL_DIRS", ["/run/secrets", "/etc/streamforge/kafka"]
)
SPARK_MASTER = env_str("SPARK_MASTER", "local[*]")
SPARK_MASTER_UI_URL = env_str("STREAMFORGE_SPARK_MASTER_UI_URL", "")


def _expand_jars(entries: list[str]) -> list[str]:
    # An entry may name a folder of jars (as in the container image) or one jar file.
    jars: list[str] = []
    for entry in entries:
        path = Path(entry)
        jars.extend(sorted(str(jar) for jar in path.glob("*.jar")) if path.is_dir() else [entry])
    return jars


# Cores one pipeline's application may take on a standalone cluster (spark.cores.max; without it the first
# application takes every free core and the next ones get no executor).
SPARK_CORES_MAX = env_int("STREAMFORGE_SPARK_CORES_MAX", 1, minimum=1)
SPARK_JARS = _expand_jars(env_list("STREAMFORGE_SPARK_JARS", []))
READINESS_TIMEOUT_SECONDS = env_int("STREAMFORGE_READINESS_TIMEOUT", 2, minimum=1)
READINESS_CACHE_SECONDS = env_int("STREAMFORGE_READINESS_CACHE", 5, minimum=0)

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True  # a task whose worker dies is redelivered, not lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
# Web and workers read it from the same environment, so they always agree; a test run on a Redis shared with
# other runs names its own queue, and no one else's worker takes its tasks.
CELERY_TASK_DEFAULT_QUEUE = env_str("STREAMFORGE_CELERY_QUEUE", "celery")

# Supervision of pipeline drivers (pipelines.supervision) and the beat's schedule.
RECONCILE_SECONDS = env_int("STREAMFORGE_RECONCILE_SECONDS", 5, minimum=1)
# The overview's rows and the pipeline list's pages, computed once per set of visible teams and shared for this
# long (access.shared_reads); 0 turns sharing off.
SHARED_READ_SECONDS = env_int("STREAMFORGE_SHARED_READ_SECONDS", 1, minimum=0)
DRIVER_START_TIMEOUT_SECONDS = env_int("STREAMFORGE_START_TIMEOUT", 300, minimum=10)
DRIVER_HEARTBEAT_STALE_SECONDS = env_int("STREAMFORGE_HEARTBEAT_STALE", 45, minimum=10)
DRIVER_STOP_TIMEOUT_SECONDS = env_int("STREAMFORGE_STOP_TIMEOUT", 90, minimum=1)
RESTART_BACKOFF_SECONDS = env_int("STREAMFORGE_RESTART_BACKOFF", 2, minimum=0)
RESTART_BACKOFF_MAX_SECONDS = env_int("STREAMFORGE_RESTART_BACKOFF_MAX", 300, minimum=1)
CRASH_LOOP_FAILURES = env_int("STREAMFORGE_CRASH_LOOP_FAILURES", 5, minimum=1)
CRASH_LOOP_MINUTES = env_int("STREAMFORGE_CRASH_LOOP_MINUTES", 10, minimum=1)
METRICS_RETENTION_DAYS = env_int("STREAMFORGE_METRICS_RETENTION_DAYS", 14, minimum=1)
PROGRESS_CONSUMER_GROUP = env_str("STREAMFORGE_PROGRESS_GROUP", "streamforge-web")
DLQ_MASKED_PATHS = env_list("STREAMFORGE_DLQ_MASKED_PATHS", [])
DLQ_MASKED_HEADERS = env_list("STREAMFORGE_DLQ_MASKED_HEADERS", [])
DLQ_MASK_KEYS = env_bool("STREAMFORGE_DLQ_MASK_KEYS", False)
DLQ_PRODUCE_TIMEOUT_SECONDS = env_int("STREAMFORGE_DLQ_PRODUCE_TIMEOUT", 20, minimum=1)
DLQ_BULK_APPROVAL_THRESHOLD = env_int("STREAMFORGE_DLQ_BULK_APPROVAL_THRESHOLD", 1000, minimum=0)
DLQ_BULK_APPROVAL_WINDOW_SECONDS = env_int("STREAMFORGE_DLQ_BULK_APPROVAL_WINDOW", 3600, minimum=0)
DLQ_RETENTION_DAYS = env_int("STREAMFORGE_DLQ_RETENTION_DAYS", 30, minimum=0)
DLQ_BULK_STALE_SECONDS = env_int("STREAMFORGE_DLQ_BULK_STALE", 60, minimum=5)

# Runner hosts, placement and leases (pipelines.supervision.placement, .agent; docs/design/runner-hosts.md).
RUNNER_NAME = env_str("STREAMFORGE_RUNNER_NAME", "") or None
if RUNNER_NAME is not None and not re.fullmatch(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", RUNNER_NAME):
    raise ImproperlyConfigured(
        f"STREAMFORGE_RUNNER_NAME={RUNNER_NAME!r}: 1-63 lower-case letters, digits and inner hyphens"
    )
RUNNER_SLOTS = env_int("STREAMFORGE_RUNNER_SLOTS", 4, minimum=0)
RUNNER_MEMORY_MB = env_int("STREAMFORGE_RUNNER_MEMORY_MB", 4096, minimum=0)
RUNNER_LABELS = env_list("STREAMFORGE_RUNNER_LABELS", [])
RUNNER_ADVERTISE_HOST = env_str("STREAMFORGE_RUNNER_ADVERTISE_HOST", "127.0.0.1")
HOST_TICK_SECONDS = env_int("STREAMFORGE_HOST_TICK_SECONDS", 3, minimum=1)
HOST_LOST_SECONDS = env_int("STREAMFORGE_HOST_LOST_SECONDS", 20, minimum=2)
LEASE_TTL_SECONDS = env_int("STREAMFORGE_LEASE_TTL_SECONDS", 15, minimum=3)
LEASE_GRACE_SECONDS = env_int("STREAMFORGE_LEASE_GRACE_SECONDS", 3, minimum=0)
DRIVER_FENCE_MARGIN_SECONDS = env_int("STREAMFORGE_DRIVER_FENCE_MARGIN_SECONDS", 3, minimum=0)
DRIVER_MEMORY_MB = env_int("STREAMFORGE_DRIVER_MEMORY_MB", 700, minimum=0)
DRIVER_NICENESS = min(env_int("STREAMFORGE_DRIVER_NICENESS", 0, minimum=0), 19)
CHECKPOINT_ROOT = env_str("STREAMFORGE_CHECKPOINT_ROOT", str(STATE_DIR / "checkpoints"))

#: How often the beat starts the redrive policies' due runs and checks their brakes (seconds).
REDRIVE_TICK_SECONDS = env_int("STREAMFORGE_REDRIVE_TICK_SECONDS", 30, minimum=1)

CELERY_BEAT_SCHEDULE = {
    "reconcile-pipelines": {"task": "pipelines.reconcile", "schedule": float(RECONCILE_SECONDS)},
    "ingest-progress": {"task": "pipelines.ingest_progress", "schedule": 2.0},
    "evaluate-alerts": {"task": "pipelines.evaluate_alerts", "schedule": 10.0},
    "resume-stale-bulks": {"task": "dlq.resume_stale_bulks", "schedule": 15.0},
    "resolve-in-doubt-replays": {"task": "dlq.resolve_in_doubt", "schedule": 60.0},
    "dlq-retention": {"task": "dlq.apply_retention", "schedule": 3600.0},
    "dlq-compact-counts": {"task": "dlq.compact_counts", "schedule": 60.0},
    "dlq-release-resolved-claims": {"task": "dlq.release_resolved_claims", "schedule": 60.0},
    "dlq-redrive-tick": {"task": "dlq.redrive_tick", "schedule": float(REDRIVE_TICK_SECONDS)},
    "notifications-flush-digests": {"task": "notifications.flush_due_digests", "schedule": 15.0},
}

# Throttle counters (DRF) live in Redis, so every web process counts the same requests.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "streamforge",
        "OPTIONS": {
            # One pool per process: under ASGI each request has a cache client of its own (redis_client).
            "pool_class": "streamforge_core.redis_client.ProcessConnectionPool",
            # Seconds: a Redis that stops answering fails a cache call (rate limits, shared reads fail open)
            # instead of holding the request.
            "socket_connect_timeout": 2,
            "socket_timeout": 2,
        },
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 30},
    }
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # TokenAuthentication that counts wrong tokens per client address and answers 429 past the limit
        "access.throttling.ThrottledTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": [
        "access.throttling.AnonThrottle",
        "access.throttling.UserThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env_str("STREAMFORGE_API_RATE_ANON", "60/minute"),
        "user": env_str("STREAMFORGE_API_RATE_USER", "1200/minute"),
        "failed_token": env_str("STREAMFORGE_API_RATE_FAILED_TOKEN", "10/minute"),
        "dsl": env_str("STREAMFORGE_API_RATE_DSL", "60/minute"),
    },
    # The client address DRF throttles by: the proxy-appended X-Forwarded-For entry, never a client's own.
    "NUM_PROXIES": PROXY_COUNT,
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON whose every string is encodable as UTF-8 (a lone surrogate is a 400 naming its field); forms and
    # multipart cannot carry one (Django decodes them with replacement characters).
    "DEFAULT_PARSER_CLASSES": [
        "streamforge_web.parsers.Utf8JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "StreamForge Web API",
    "DESCRIPTION": "Pipelines, delivery metrics and the dead-letter-queue console.",
    # The app this API belongs to, and every status each operation can answer (streamforge_web.openapi).
    "EXTERNAL_DOCS": {
        "description": "The StreamForge Web console (the API's browsable docs: /api/docs/)",
        "url": "/",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "streamforge_web.openapi.complete_responses",
    ],
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a "state" or "kind" choice field; name each enum after its model.
    "ENUM_NAME_OVERRIDES": {
        "ChannelKindEnum": "notifications.models.ChannelKind",
        "BulkKindEnum": "dlq.models.BulkKind",
        "BulkStateEnum": "dlq.models.BulkState",
        "ApprovalKindEnum": "dlq.models.ApprovalKind",
        "ApprovalStateEnum": "dlq.models.ApprovalState",
        "PipelineStateEnum": "pipelines.models.PipelineState",
        "ReplayStateEnum": "dlq.models.ReplayState",
        "DeadLetterStatusEnum": "dlq.models.Status",
        "DslKindEnum": ["filter", "transform", "key_transform", "header_transform", "timestamp"],
        "LifecycleActionEnum": ["start", "stop", "restart"],
        "RunbookActionEnum": [
            "fix",
            "replay",
            "skip",
            "request_delete",
            "bulk_replay",
            "bulk_skip",
            "bulk_fix",
        ],
    },
    # dlq.converters: Kafka coordinates in paths, bounded as Kafka bounds them (int32 and int64).
    "PATH_CONVERTER_OVERRIDES": {
        "partition": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
        "offset": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 2**63 - 1},
    },
}

# --- security ------------------------------------------------------------------------------------------------
HTTPS = env_bool("STREAMFORGE_HTTPS", default=not DEBUG)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]  # probes and scrapers speak plain HTTP
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# /metrics: Prometheus sends this as a bearer token; without one only signed-in admins may read it.
METRICS_TOKEN = env_str("STREAMFORGE_METRICS_TOKEN", "")

# Password guessing: django-axes locks out one user name from one address (so nobody can lock a colleague
# out from elsewhere) after this many failures; access.lockout records each lockout in the audit log and
# answers with the log-in page saying how long to wait. Attempts live in the database (admin: Axes).
AXES_FAILURE_LIMIT = env_int("STREAMFORGE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("STREAMFORGE_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "access.throttling.client_ip"
AXES_LOCKOUT_CALLABLE = "access.lockout.lockout_response"

# Content-Security-Policy on every response (django-csp): scripts, styles, fonts and images only from our own
# origin, no inline script, no inline event handler, no inline style; nothing may frame the console, and forms
# post only to us. 'self' also covers the same-origin ws:/wss: of the live updates (CSP Level 3, every current
# browser). A page must therefore keep its JavaScript in static/js and pass data through data- attributes or
# json_script; tests/streamforge_web/test_csp.py checks every page for it, tests/browser/test_csp.py in Chromium.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "frame-ancestors": [NONE],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
    },
}
# Signing in and out through an identity provider follows a form's redirect to the provider's origin, which
# form-action governs too.
CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"] += sorted({p.origin for p in SSO_PROVIDERS})

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("STREAMFORGE_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
