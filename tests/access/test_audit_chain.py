"""The audit chain is keyed and anchored outside the database: someone who can rewrite the database (edit an
event and re-hash the ones after it, or delete the newest) is named, and a verify that cannot reach an anchor
says "unverified", never ok. On the real Kafka broker and Redis of the test profile."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from access import audit
from access.audit import verify_chain
from access.models import AuditEvent, Membership, Role, Team
from tests.factories import UserFactory

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _short_kafka_waits(settings) -> None:
    settings.AUDIT_ANCHOR_TIMEOUT = 2  # the unreachable-broker tests wait this long per verify


@pytest.fixture
def events(django_capture_on_commit_callbacks) -> list[AuditEvent]:
    """Six events, recorded and anchored (the after-commit hooks run)."""
    with django_capture_on_commit_callbacks(execute=True):
        for number in range(1, 7):
            audit.record(
                actor=None, action="test.step", target_type="test", target_id=number, reason=f"step {number}"
            )
    return list(AuditEvent.objects.order_by("sequence"))


def _unreachable() -> str:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _sha256(row: Mapping[str, Any]) -> str:
    """What the chain's hash was before it had a key: anyone with the code can compute it."""
    body = {
        name: row[name]
        for name in (
            "sequence",
            "actor_id",
            "actor_name",
            "action",
            "target_type",
            "target_id",
            "reason",
            "before_digest",
            "after_digest",
            "request_id",
            "prev_hash",
        )
    }
    body["created_at"] = row["created_at"].isoformat()
    body["details"] = json.loads(row["details"]) if isinstance(row["details"], str) else row["details"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _rewrite_from(sequence: int, *, reason: str | None = None, extra_sql: str = "") -> None:
    """What an attacker with database access but not the key does: edit event ``sequence`` and re-hash it and
    every later one so each links to the one before (raw SQL: the application refuses to update events)."""
    rows = list(AuditEvent.objects.filter(sequence__gte=sequence).order_by("sequence").values())
    prev = AuditEvent.objects.filter(sequence=sequence - 1).values_list("hash", flat=True).first() or "0" * 64
    with connection.cursor() as cursor:
        # Move every hash out of the way first: prev_hash and hash are unique.
        for row in rows:
            cursor.execute(
                "UPDATE access_auditevent SET hash = %s, prev_hash = %s WHERE id = %s",
                ["x" * 60 + str(row["id"]).zfill(4), "y" * 60 + str(row["id"]).zfill(4), row["id"]],
            )
        for row in rows:
            if row["sequence"] == sequence and reason is not None:
                row["reason"] = reason
            row["prev_hash"] = prev
            row["hash"] = prev = _sha256(row)
            cursor.execute(
                f"UPDATE access_auditevent SET reason = %s, prev_hash = %s, hash = %s{extra_sql} WHERE id = %s",  # noqa: S608  # the tests' own SQL
                [row["reason"], row["prev_hash"], row["hash"], row["id"]],
            )


def test_an_event_edited_and_every_later_one_rehashed_without_the_key_is_named(events):
    assert verify_chain().ok
    _rewrite_from(3, reason="nothing to see")
    report = verify_chain()
    assert (report.ok, report.broken_at) == (False, 3)
    assert report.status == "broken"
    assert report.problem == "content does not match its hash (edited)"


def test_keyed_events_rehashed_as_legacy_sha256_ones_are_named_as_a_rewrite(events):
    _rewrite_from(4, reason="nothing to see", extra_sql=", scheme = 'sha256', key_id = ''")
    report = verify_chain()
    assert (report.status, report.broken_at) == ("broken", 4)
    assert "hashed without the audit key after keyed events" in report.problem


def test_a_log_rehashed_from_its_first_event_as_legacy_is_caught_by_the_kafka_anchor(events):
    _rewrite_from(1, reason="nothing to see", extra_sql=", scheme = 'sha256', key_id = ''")
    report = verify_chain()
    assert (report.status, report.broken_at) == ("broken", 1)
    assert report.problem == "differs from its Kafka anchor (the log was rewritten)"


def test_a_deleted_tail_is_named_against_the_kafka_anchor_even_when_redis_was_wiped(
    events, settings, private_redis
):
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM access_auditevent WHERE sequence >= 4")
    settings.REDIS_URL = private_redis.url  # an empty Redis: its anchor was wiped as well
    report = verify_chain()
    assert (report.ok, report.broken_at) == (False, 4)
    assert report.problem == "events #4 to #6 were removed (the Kafka anchor saw #6)"
    assert report.status == "broken"


def test_an_emptied_log_is_named_against_the_kafka_anchor(events, settings, private_redis):
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM access_auditevent")
    settings.REDIS_URL = private_redis.url
    report = verify_chain()
    assert (report.ok, report.broken_at) == (False, 1)
    assert report.problem == "events #1 to #6 were removed (the Kafka anchor saw #6)"
    assert report.status == "broken"


def test_verify_is_unverified_never_ok_when_kafka_cannot_be_reached(events, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = _unreachable()
    report = verify_chain()
    assert report.ok is False
    assert "the Kafka anchor streamforge.audit-anchor could not be read" in report.problem
    assert (report.status, report.anchor) == ("unverified", "unavailable")


def test_verify_is_unverified_never_ok_when_redis_cannot_be_reached(events, settings, private_redis):
    settings.REDIS_URL = private_redis.url
    private_redis.stop()
    report = verify_chain()
    assert report.ok is False
    assert "the Redis anchor could not be read" in report.problem
    assert (report.status, report.anchor) == ("unverified", "unavailable")


def test_a_mutation_succeeds_while_kafka_is_down_and_verify_reports_the_anchor_behind(
    events, settings, django_capture_on_commit_callbacks
):
    reachable = settings.KAFKA_BOOTSTRAP_SERVERS
    settings.KAFKA_BOOTSTRAP_SERVERS = _unreachable()
    with django_capture_on_commit_callbacks(execute=True):
        audit.record(actor=None, action="test.step", target_type="test", target_id=7)
    settings.KAFKA_BOOTSTRAP_SERVERS = reachable
    report = verify_chain()
    assert (report.ok, report.events) == (False, 7)
    assert report.problem.startswith("the Kafka anchor has not seen events #7 to #7")
    assert (report.status, report.anchor, report.anchored) == ("unverified", "behind", 6)

    with django_capture_on_commit_callbacks(execute=True):  # Kafka is back: the next event anchors the chain
        audit.record(actor=None, action="test.step", target_type="test", target_id=8)
    assert verify_chain().status == "ok"


def test_events_hashed_before_the_key_existed_verify_as_legacy(settings, django_capture_on_commit_callbacks):
    prev = "0" * 64
    for number in range(1, 4):  # what the log held before the upgrade: plain SHA-256, no key
        event = AuditEvent(
            sequence=number,
            created_at=timezone.now(),
            actor_name="system",
            action="old.step",
            target_type="test",
            target_id=str(number),
            prev_hash=prev,
            scheme="sha256",
        )
        event.hash = prev = audit._event_hash(event, b"")
        event.save()
    with django_capture_on_commit_callbacks(execute=True):
        audit.record(actor=None, action="test.step", target_type="test", target_id=4)
    report = verify_chain()
    assert (report.status, report.events, report.legacy_events) == ("ok", 4, 3)

    # The keyed event after them covers them: re-hashing from a legacy one on breaks the keyed one.
    _rewrite_from(2, reason="rewritten")
    report = verify_chain()
    assert (report.status, report.broken_at) == ("broken", 4)


def test_an_event_made_under_another_key_is_named(events, settings):
    settings.AUDIT_KEY = "another key, e.g. after an unplanned rotation...."
    report = verify_chain()
    assert (report.ok, report.broken_at) == (False, 1)
    assert report.problem.startswith("hashed with another audit key")


def test_the_key_is_not_in_the_database(events, settings):
    stored = json.dumps([asdict(verify_chain()), list(AuditEvent.objects.values())], default=str)
    assert settings.AUDIT_KEY not in stored
    assert {(event.scheme, len(event.key_id)) for event in events} == {("hmac-sha256", 16)}


def test_the_api_page_and_command_say_unverified_when_an_anchor_cannot_be_read(events, settings, client):
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    Membership.objects.create(user=admin, team=Team.objects.create(name="ops"), role=Role.ADMIN)
    settings.KAFKA_BOOTSTRAP_SERVERS = _unreachable()
    client.force_login(admin)
    answer = client.get("/api/audit/verify/").json()
    assert answer["ok"] is False
    assert (answer["status"], answer["anchor"]) == ("unverified", "unavailable")
    page = client.get("/audit/").content.decode()
    assert "Chain verified" not in page
    assert "Chain unverified" in page
    assert 'data-status="unverified"' in page
    with pytest.raises(SystemExit) as exited:
        call_command("dlq", "verify-audit")
    assert exited.value.code == 2


@pytest.mark.django_db(transaction=True)
def test_thirty_writers_appending_at_once_all_land_in_one_unbroken_chain():
    """Guard: appends queue on a PostgreSQL advisory lock (``audit._queue_for_the_tail``). Without it they
    race for the tail and retry on the unique sequence; thirty writers whose transactions go on briefly after
    their event ran out of retries and their mutations failed (seen on PostgreSQL, where the suite runs).
    Each writer has its own thread and connection; the join is bounded, so a deadlock fails the test."""
    writers = 30
    barrier = threading.Barrier(writers)

    def write(number: int) -> Exception | None:
        try:
            barrier.wait(timeout=60)
            with transaction.atomic():
                audit.record(actor=None, action="test.burst", target_type="test", target_id=number)
                time.sleep(0.02)  # the rest of the mutation's transaction
            return None
        except Exception as exc:  # the assertion below lists what each writer met
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(writers) as pool:
        errors = [error for error in pool.map(write, range(writers), timeout=120) if error is not None]
    assert errors == []
    assert sorted(AuditEvent.objects.values_list("sequence", flat=True)) == list(range(1, writers + 1))
    report = verify_chain()
    assert (report.broken_at, report.events) == (None, writers)
