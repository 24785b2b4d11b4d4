"""effectively_once against a zombie, on the real broker: a writer of the same partition's transactional id
that was frozen mid-transaction (a partitioned host) and wakes up while its successor writes the same range.

The successor must fence before it reads the committed offsets (``BatchWriter._open`` then
``_already_committed``, KIP-447's order): the zombie's commit then fails, and the range is committed once.
Read the other way round, the zombie commits between the read and the fence and both copies are committed
(``make chaos``, host_partition, saw 67 duplicates under read_committed)."""

from __future__ import annotations

import uuid

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from pipelines.spark import writer
from pipelines.spec import RetryPolicy
from streamforge_core.kafka import KafkaConnection, consumer_config, transactional_producer_config

ROWS = 5
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch(source: str) -> pa.RecordBatch:
    """The writer's Arrow columns for offsets 0..ROWS-1 of ``source`` partition 0, every row produced to
    destination 0 unchanged."""
    values = [b'{"n":%d}' % i for i in range(ROWS)]
    return pa.RecordBatch.from_pydict(
        {
            "topic": pa.array([source] * ROWS, pa.string()),
            "partition": pa.array([0] * ROWS, pa.int32()),
            "offset": pa.array(range(ROWS), pa.int64()),
            "key": pa.array([None] * ROWS, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array([None] * ROWS, _HEADERS),
            "deser_error": pa.array([None] * ROWS, pa.string()),
            "o0": pa.array(["produced"] * ROWS, pa.string()),
            "v0": pa.array(values, pa.binary()),
            "k0": pa.array([None] * ROWS, pa.binary()),
            "h0": pa.array([None] * ROWS, _HEADERS),
            "t0": pa.array([None] * ROWS, pa.int64()),
            "e0": pa.array([None] * ROWS, pa.string()),
            "m0": pa.array([None] * ROWS, pa.string()),
        }
    )


def _committed_records(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        consumer_config(
            KafkaConnection(bootstrap), group_id=f"check-{uuid.uuid4().hex[:8]}", offset_reset="earliest"
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    empty = 0
    while empty < 3:
        message = consumer.poll(1.0)
        if message is None:
            empty += 1
            continue
        value = message.value()
        if message.error() is None and value is not None:
            seen.append(value)
    consumer.close()
    return seen


def test_a_zombie_that_wakes_between_the_check_and_the_fence_cannot_commit_the_range_again(
    kafka_bootstrap, make_topic, monkeypatch
):
    source, dest, dlq = make_topic("zsrc"), make_topic("zdst"), make_topic("zdlq")
    group = f"zombie-{uuid.uuid4().hex[:8]}"
    config = writer.WriterConfig(
        pipeline=f"zombie-{uuid.uuid4().hex[:6]}", revision=1, kafka=KafkaConnection(kafka_bootstrap),
        mode="effectively_once", consumer_group=group,
        destinations=(writer.DestinationInfo("d", dest, None, None, 1_048_588),),
        dlq_topic=dlq, dlq_max_message_bytes=1_048_588, include_original_headers=True, include_stack_trace=False,
        max_dlq_retries=1, retry=RetryPolicy(3, 1, 1, 2.0, 0.0),
    )  # fmt: skip
    # The zombie: the same transactional id, frozen after producing the range, before its offsets and commit.
    zombie = Producer(
        transactional_producer_config(
            KafkaConnection(kafka_bootstrap), transactional_id=f"streamforge-{config.pipeline}-{source}-0"
        )
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(ROWS):
        zombie.produce(dest, value=b'{"n":%d}' % i)
    zombie.flush(30)
    metadata = Consumer(
        consumer_config(KafkaConnection(kafka_bootstrap), group_id=group)
    ).consumer_group_metadata()
    zombie_outcome: list[str] = []
    check = writer.BatchWriter._already_committed

    def check_then_zombie_wakes(self: writer.BatchWriter) -> bool:
        committed: bool = check(self)
        try:  # the zombie thaws now: it adds its offsets and commits
            zombie.send_offsets_to_transaction([TopicPartition(source, 0, ROWS)], metadata, 30)
            zombie.commit_transaction(30)
            zombie_outcome.append("committed")
        except KafkaException as exc:
            zombie_outcome.append(f"refused: {exc.args[0].name()}")
        return committed

    monkeypatch.setattr(writer.BatchWriter, "_already_committed", check_then_zombie_wakes)
    summaries = list(writer.BatchWriter(config).write(iter([_batch(source)])))

    assert len(zombie_outcome) == 1
    assert zombie_outcome[0].startswith("refused"), zombie_outcome
    assert summaries[0].column("skipped")[0].as_py() is False
    assert sorted(_committed_records(kafka_bootstrap, dest)) == [b'{"n":%d}' % i for i in range(ROWS)]
