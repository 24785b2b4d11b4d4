"""The real infrastructure the product is built on: Kafka through confluent-kafka, Celery through Redis,
the Channels layer on Redis."""

import threading
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from confluent_kafka import Consumer, Producer

from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config
from streamforge_web.celery import app as celery_app
from streamforge_web.tasks import ping


@pytest.mark.kafka
def test_a_record_with_headers_round_trips_through_the_real_broker(kafka_bootstrap, make_topic):
    topic = make_topic("roundtrip")
    producer = Producer(producer_config(KafkaConnection(kafka_bootstrap)))
    delivered = []
    producer.produce(
        topic,
        key=b"k-1",
        value=b'{"hello": "world"}',
        headers=[("x-streamforge-pipeline", b"demo"), ("binary", b"\x00\xff")],
        on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
    )
    assert producer.flush(10) == 0
    assert delivered == [(None, 0)]

    consumer = Consumer(
        consumer_config(
            KafkaConnection(kafka_bootstrap), group_id=f"g-{uuid.uuid4()}", offset_reset="earliest"
        )
    )
    consumer.subscribe([topic])
    try:
        message = None
        for _ in range(30):
            message = consumer.poll(1.0)
            if message is not None:
                break
        assert message is not None
        assert message.error() is None
        assert (message.key(), message.value()) == (b"k-1", b'{"hello": "world"}')
        assert message.headers() == [("x-streamforge-pipeline", b"demo"), ("binary", b"\x00\xff")]
        assert (message.topic(), message.partition(), message.offset()) == (topic, 0, 0)
    finally:
        consumer.close()


@pytest.mark.redis
def test_a_celery_task_round_trips_through_redis_to_a_real_worker():
    from celery.contrib.testing.worker import start_worker

    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        reply = ping.delay().get(timeout=20)
    assert reply["pid"] > 0
    assert reply["host"]


@pytest.mark.redis
def test_a_channels_group_message_goes_through_the_redis_layer():
    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"
    group = f"pipelines-{uuid.uuid4().hex[:8]}"

    async def send_and_receive():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "pipeline.status", "state": "RUNNING"})
        received = await layer.receive(channel)
        await layer.group_discard(group, channel)
        return received

    assert async_to_sync(send_and_receive)() == {"type": "pipeline.status", "state": "RUNNING"}


@pytest.mark.redis
def test_a_group_message_reaches_a_receiver_in_another_thread():
    """Two layer instances (as in two processes) share groups only through Redis."""
    layer = get_channel_layer()
    group = f"dlq-{uuid.uuid4().hex[:8]}"
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    sender = threading.Thread(
        target=lambda: async_to_sync(get_channel_layer().group_send)(group, {"type": "dlq.arrival", "id": 7})
    )
    sender.start()
    sender.join()
    assert async_to_sync(layer.receive)(channel) == {"type": "dlq.arrival", "id": 7}
