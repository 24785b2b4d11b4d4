"""The driver's topic check on a real broker (``driver.topic_limits``): a topic created a moment before the
driver looks (as the launcher does) is waited for, one that never comes is refused by name."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.spark.driver import ConfigError, topic_limits
from streamforge_core.kafka import KafkaConnection, admin_config

pytestmark = pytest.mark.kafka


def test_a_topic_that_appears_while_the_driver_waits_is_found(kafka_bootstrap, kafka_admin):
    late = f"late-{uuid.uuid4().hex[:10]}"
    creator = threading.Timer(1.5, lambda: kafka_admin.create_topics([NewTopic(late, 1, 1)])[late].result(30))
    creator.start()
    try:
        limits = topic_limits(
            AdminClient(admin_config(KafkaConnection(kafka_bootstrap))), [late], wait_seconds=20
        )
    finally:
        creator.join()
        kafka_admin.delete_topics([late])[late].result(30)
    assert limits[late] > 0


def test_a_topic_that_never_comes_is_refused_by_name_after_the_wait(kafka_bootstrap):
    absent = f"absent-{uuid.uuid4().hex[:10]}"
    began = time.monotonic()
    with pytest.raises(ConfigError, match=absent):
        topic_limits(AdminClient(admin_config(KafkaConnection(kafka_bootstrap))), [absent], wait_seconds=2)
    assert 2 <= time.monotonic() - began < 15
