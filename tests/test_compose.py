"""compose.yaml cannot run here (no Docker engine): it is kept correct by reading, and by these checks that it
parses and that every application container gets the same settings as `make up` gives the local stack."""

from pathlib import Path

import yaml

from devstack.config import PROFILES
from devstack.services import django_env

COMPOSE = Path(__file__).resolve().parent.parent / "compose.yaml"
APP_SERVICES = ("migrate", "web", "worker", "beat")


def _compose():
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_has_kafka_redis_postgresql_and_the_application_processes():
    services = _compose()["services"]
    assert set(services) >= {"kafka", "redis", "postgres", *APP_SERVICES}
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["registry"]["image"] == "apicurio/apicurio-registry:3.3.3"


def test_every_application_container_gets_the_settings_the_local_stack_uses():
    services = _compose()["services"]
    local_keys = set(django_env(PROFILES["dev"])) - {
        "DJANGO_SETTINGS_MODULE",  # the image's default
        "STREAMFORGE_SPARK_JARS",  # baked into the image
        "STREAMFORGE_STATE_DIR",  # baked into the image
        "STREAMFORGE_DRIVER_CLASS_ARCHIVE",  # dumped into the image (Dockerfile)
        # the dev profile's local mail and webhook sinks for the demo (devstack.sinks): not in a deployment
        "EMAIL_HOST",
        "EMAIL_PORT",
        "STREAMFORGE_NOTIFY_ALLOW_PRIVATE",
        "STREAMFORGE_WEB_URL",  # only the demo script reads it
    }
    for name in APP_SERVICES:
        environment = services[name]["environment"]
        assert local_keys <= set(environment), name
        assert environment["DATABASE_URL"].startswith("postgres://")
        assert environment["KAFKA_BOOTSTRAP_SERVERS"] == "${KAFKA_BOOTSTRAP_SERVERS:-kafka:9092}"
        # A secured cluster comes from the environment; the password only as a file, never a value here.
        assert environment["KAFKA_SECURITY_PROTOCOL"] == "${KAFKA_SECURITY_PROTOCOL:-PLAINTEXT}"
        assert "KAFKA_SASL_PASSWORD" not in environment
        assert environment["KAFKA_SASL_PASSWORD_FILE"] == "${KAFKA_SASL_PASSWORD_FILE:-}"


def test_the_worker_and_beat_run_the_celery_app_of_the_project():
    services = _compose()["services"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "streamforge_web", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "streamforge_web", "beat"]
