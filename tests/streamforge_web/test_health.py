"""Liveness and readiness probes against the real database, Redis and Kafka. The details of ``/readyz`` are
an admin's (anonymous callers get ready or not: test_cluster_secrets.py); its cache is off here
(``READINESS_CACHE_SECONDS = 0``) so each request sees the dependencies as they are now."""

import pytest
from django.test import Client

from access.models import Role
from tests.factories import TeamFactory, member

pytestmark = [pytest.mark.django_db, pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture(autouse=True)
def _no_cache(settings):
    settings.READINESS_CACHE_SECONDS = 0


@pytest.fixture
def admin_client():
    client = Client()
    client.force_login(member(TeamFactory(name="ops"), Role.ADMIN, username="ada"))
    return client


def test_healthz_answers_ok_without_logging_in(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_ready_when_database_redis_and_kafka_answer(client, admin_client):
    assert client.get("/readyz").json() == {"status": "ready"}
    response = admin_client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "redis", "kafka"}
    assert all(check["ok"] for check in body["checks"].values())


def test_readyz_names_redis_while_it_is_stopped_and_recovers_when_it_is_back(
    client, admin_client, settings, private_redis
):
    settings.REDIS_URL = private_redis.url
    assert client.get("/readyz").status_code == 200

    private_redis.stop()
    assert client.get("/readyz").status_code == 503
    response = admin_client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert body["status"] == "not ready"
    assert body["failing"] == ["redis"]
    assert "ConnectionError" in body["checks"]["redis"]["error"]

    private_redis.start()
    assert client.get("/readyz").status_code == 200


def test_readyz_names_kafka_when_no_broker_answers(admin_client, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # nothing listens on port 1
    settings.READINESS_TIMEOUT_SECONDS = 1
    response = admin_client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["kafka"]


def test_the_home_page_asks_an_anonymous_visitor_to_log_in(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_status_page_shows_each_dependency_to_a_logged_in_user(client, django_user_model):
    user = django_user_model.objects.create_user("ops", password="a-long-password-1")
    client.force_login(user)
    response = client.get("/status/")
    assert response.status_code == 200
    for name in ("database", "redis", "kafka"):
        assert f"<td>{name}</td>" in response.content.decode()
