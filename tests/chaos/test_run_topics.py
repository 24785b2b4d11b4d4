"""A passed chaos run deletes its own topics, and only those (real broker)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic

from chaos.workload import delete_run_topics, source_topic

pytestmark = pytest.mark.kafka


def _wait_gone(kafka_admin, names: set[str], timeout: float = 30.0) -> set[str]:
    """The names still listed once they are all gone or ``timeout`` (s) passed."""
    deadline = time.monotonic() + timeout
    while True:
        left = names & set(kafka_admin.list_topics(timeout=10).topics)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def test_a_runs_topics_are_deleted_and_another_runs_are_kept(kafka_bootstrap, kafka_admin):
    tag, other = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    ours = {source_topic(tag), f"chaos.{tag}.alo.pushes", f"chaos.{tag}.alo.dlq"}
    # a tag that begins with ours must not match: the prefix ends with the dot
    theirs = {source_topic(other), f"chaos.{tag}x.events"}
    for future in kafka_admin.create_topics([NewTopic(n, 1, 1) for n in ours | theirs]).values():
        future.result(timeout=30)
    try:
        assert set(delete_run_topics(kafka_bootstrap, tag)) == ours
        assert _wait_gone(kafka_admin, ours) == set()
        assert theirs <= set(kafka_admin.list_topics(timeout=10).topics)
        assert delete_run_topics(kafka_bootstrap, tag) == []  # nothing left: nothing to do
    finally:
        for future in kafka_admin.delete_topics(list(theirs), operation_timeout=30).values():
            future.result(timeout=60)
