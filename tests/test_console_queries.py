"""The console's list paths cost the same number of SQL queries whatever the number of pipelines (issue #29
item 8: the console's p95 with 20 pipelines running), and open no Kafka client while they answer.

Each test builds the same world with 3 and with 30 pipelines (real PostgreSQL or SQLite, whichever the run
uses): every pipeline RUNNING with a leased run on one of two runner hosts, an older ended run, a newer
revision saved but not applied, batches in the rate window, partition positions, totals, a firing alert and
parked dead letters; then reads ``GET /api/pipelines/``, ``/pipelines/overview.json``, ``/``, the DLQ list
page ``/dlq/`` and ``GET /api/dlq/messages/`` and counts the queries (``CaptureQueriesContext``). A per-row
lookup (an N+1) makes the 30-pipeline count larger.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import cast

import confluent_kafka
import confluent_kafka.admin
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import Role, Team
from bench.console_world import seed
from tests.factories import TeamFactory, member

pytestmark = pytest.mark.django_db

#: The console's list paths: (name, how an operator reads it).
PATHS: dict[str, Callable[[Client, APIClient], int]] = {
    "GET /api/pipelines/": lambda page, api: api.get("/api/pipelines/?page_size=100").status_code,
    "/pipelines/overview.json": lambda page, api: page.get("/pipelines/overview.json").status_code,
    "/": lambda page, api: page.get("/").status_code,
    "/dlq/": lambda page, api: page.get("/dlq/").status_code,
    "GET /api/dlq/messages/": lambda page, api: api.get("/api/dlq/messages/").status_code,
}


def build_world(n: int) -> tuple[Client, APIClient]:
    """``n`` running pipelines of one team (``bench.console_world.seed``); returns a signed-in page client
    and a token API client of one of the team's operators."""
    team = cast(Team, TeamFactory(name=f"console-{n}"))
    admin = member(team, Role.ADMIN, username=f"console-admin-{n}")
    operator = member(team, Role.OPERATOR, username=f"console-operator-{n}")
    assert len(seed(team=team, admin=admin, n=n, prefix=f"console-{n}")) == n
    page = Client()
    page.force_login(type(operator).objects.get(pk=operator.pk))
    api = APIClient()
    token, _ = Token.objects.get_or_create(user=operator)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return page, api


def queries_per_path(n: int) -> dict[str, int]:
    """The number of SQL queries each list path runs with ``n`` pipelines (after one warm-up read of each,
    so one-off work such as a session's first touch is not counted)."""
    page, api = build_world(n)
    counts: dict[str, int] = {}
    for name, read in PATHS.items():
        assert read(page, api) == 200, name
        with CaptureQueriesContext(connection) as captured:
            assert read(page, api) == 200, name
        counts[name] = len(captured.captured_queries)
    return counts


def test_the_list_paths_run_as_many_queries_for_30_pipelines_as_for_3():
    few, many = queries_per_path(3), queries_per_path(30)
    assert many == few


@pytest.fixture
def kafka_clients(monkeypatch) -> list[str]:
    """Every binding of confluent-kafka's Producer, Consumer and AdminClient in the loaded modules (``from
    confluent_kafka import Producer`` copies the class into the importer) replaced by one that records the
    creation and raises; returns the record. A view that catches the error still shows up in it."""
    made: list[str] = []
    originals = (confluent_kafka.Producer, confluent_kafka.Consumer, confluent_kafka.admin.AdminClient)

    def recorder(cls: type) -> Callable[..., object]:
        def create(*args: object, **kwargs: object) -> object:
            made.append(cls.__name__)
            raise AssertionError(f"a Kafka {cls.__name__} was created while serving a console list path")

        return create

    for module in list(sys.modules.values()):
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if any(value is cls for cls in originals):
                monkeypatch.setattr(module, attr, recorder(value))
    return made


def test_the_list_paths_create_no_kafka_client(kafka_clients):
    page, api = build_world(3)
    for name, read in PATHS.items():
        assert read(page, api) == 200, name
    assert kafka_clients == []
