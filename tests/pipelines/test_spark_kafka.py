"""Spark with the Kafka connector reads the real broker."""

import pytest
from confluent_kafka import Producer

from streamforge_core.kafka import KafkaConnection, producer_config, spark_kafka_options

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_a_spark_batch_query_reads_keys_values_and_headers_from_kafka(
    spark_session, kafka_bootstrap, make_topic
):
    topic = make_topic("spark-read", partitions=2)
    producer = Producer(producer_config(KafkaConnection(kafka_bootstrap), idempotent=False))
    for i in range(10):
        producer.produce(
            topic, key=f"k{i}".encode(), value=f'{{"n": {i}}}'.encode(), headers=[("h", str(i).encode())]
        )
    assert producer.flush(10) == 0

    frame = (
        spark_session.read.format("kafka")
        .options(**spark_kafka_options(KafkaConnection(kafka_bootstrap)))
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = frame.selectExpr(
        "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "headers", "partition"
    ).collect()

    assert sorted(row.k for row in rows) == sorted(f"k{i}" for i in range(10))
    by_key = {row.k: row for row in rows}
    assert by_key["k3"].v == '{"n": 3}'
    assert [(h.key, bytes(h.value)) for h in by_key["k3"].headers] == [("h", b"3")]
    assert {row.partition for row in rows} <= {0, 1}
