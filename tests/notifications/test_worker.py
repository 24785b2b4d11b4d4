"""The notification acceptance cases through a real Celery worker process: the code that emits an event
queues its delivery on Redis after commit, and a worker started by the test (``worker_process``) delivers it
to a real HTTP receiver and a real SMTP server, retries with backoff and flushes digest windows by their
countdown. Nothing here calls a delivery in process: the test only stores dead letters and watches.

The worker runs with a 1 s first backoff, 4 attempts and a digest window of ``WORKER_DIGEST_SECONDS`` (see the fixture) so the cases
settle in seconds; production's 5 s / 6 / 60 s differ only in those numbers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest

from access.models import Role
from dlq.ingest import TopicOwner, store_batch
from notifications import channels
from notifications.models import DeliveryAttempt, Notification, NotificationState
from pipelines.models import Pipeline
from pipelines.services import create_pipeline
from tests.dlq.conftest import github_spec
from tests.factories import member
from tests.notifications.conftest import GROUP, WORKER_DIGEST_SECONDS, failure_records, webhook_channel

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _pipeline(team, name: str) -> tuple[Pipeline, dict[str, TopicOwner]]:
    pipeline = create_pipeline(
        actor=member(team, Role.ADMIN), name=name, team=team, spec=github_spec(f"{name}.events", name)
    )
    assert pipeline.current_revision is not None
    owners = {pipeline.current_revision.spec["dlq"]["topic"]: TopicOwner(team.pk, pipeline.pk, pipeline.name)}
    return pipeline, owners


def _wait(condition: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``condition()`` held (polled every 50 ms); fails the test after ``seconds``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_new_failure_group_reaches_a_webhook_and_a_mailbox_through_the_worker_within_10_seconds(
    team, manager, receiver, smtp, worker_process
):
    webhook_channel(manager, team, receiver)
    channels.create_channel(
        actor=manager, team=team, name="mail", kind="email", events=[GROUP], recipients=["oncall@example.com"]
    )
    pipeline, owners = _pipeline(team, "worker-pipe")

    started = time.monotonic()
    store_batch(failure_records(pipeline, 3, distinct=False), owners)
    elapsed = (
        time.monotonic()
        - started
        + _wait(lambda: len(receiver.requests) >= 1 and len(smtp.messages) >= 1, 10)
    )

    print(f"\nfailure group -> webhook and e-mail delivered by the worker in {elapsed:.2f} s")
    time.sleep(1)  # nothing else follows
    assert len(receiver.requests) == 1
    assert receiver.bad_signatures == 0
    assert receiver.bodies()[0]["event"] == GROUP
    assert len(smtp.messages) == 1
    assert b"New failure group in worker-pipe" in smtp.messages[0][1]
    assert set(Notification.objects.values_list("state", flat=True)) == {NotificationState.SENT}
    assert DeliveryAttempt.objects.filter(ok=True, status_code=200).count() == 1  # the webhook's


def test_a_storm_of_a_thousand_new_groups_is_one_notification_and_one_digest_from_the_worker(
    team, manager, receiver, worker_process
):
    webhook_channel(manager, team, receiver)
    pipeline, owners = _pipeline(team, "storm-worker")

    started = time.monotonic()
    for start in range(0, 1000, 250):
        store_batch(failure_records(pipeline, 250, start=start), owners)  # 1,000 new failure groups
    stored = time.monotonic() - started
    assert stored < WORKER_DIGEST_SECONDS, (
        "the storm must fit in the digest window for the case to mean anything"
    )
    elapsed = _wait(lambda: len(receiver.requests) >= 2, WORKER_DIGEST_SECONDS + 15)

    print(
        f"\n1,000 groups stored in {stored:.1f} s; the worker sent the first and the digest by {elapsed:.1f} s"
    )
    time.sleep(2)  # the window's flush ran once; no late stragglers
    assert len(receiver.requests) == 2
    assert receiver.bad_signatures == 0
    first, digest = receiver.bodies()
    assert first["event"] == GROUP
    assert digest["digest"] is True
    assert digest["count"] == 999
    assert Notification.objects.filter(state=NotificationState.FOLDED).count() == 999
    assert Notification.objects.filter(state=NotificationState.SENT).count() == 2


def test_a_receiver_that_is_down_is_retried_by_the_worker_with_growing_backoff_then_failed(
    team, manager, closed_port_url, worker_process
):
    channels.create_channel(
        actor=manager, team=team, name="down", kind="webhook", events=[GROUP], url=closed_port_url
    )
    pipeline, owners = _pipeline(team, "down-pipe")

    store_batch(failure_records(pipeline, 1), owners)
    notification = Notification.objects.get()
    _wait(lambda: Notification.objects.get(pk=notification.pk).state == NotificationState.FAILED, 30)

    rows = list(DeliveryAttempt.objects.filter(notification=notification).order_by("attempt"))
    assert [row.attempt for row in rows] == [1, 2, 3, 4]
    assert not any(row.ok for row in rows)
    assert all(row.status_code is None and row.error for row in rows)
    gaps = [
        (later.created_at - earlier.created_at).total_seconds() for earlier, later in itertools.pairwise(rows)
    ]
    print(f"\ngaps between the worker's attempts: {', '.join(f'{gap:.2f} s' for gap in gaps)}")
    assert [gap >= floor for gap, floor in zip(gaps, (1, 2, 4), strict=True)] == [True] * 3  # plus jitter
    assert gaps[0] < gaps[1] < gaps[2]
    notification.refresh_from_db()
    assert notification.attempts == 4
