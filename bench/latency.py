"""End-to-end latency at a fixed offered rate, on one clock.

The load generator produces to a source topic created with ``message.timestamp.type=LogAppendTime`` and the
pipeline writes to destination topics with the same setting, so both timestamps come from the broker's clock.
Each produced record names its source record in the lineage header (``topic/partition/offset``), so a
destination record's latency is ``its append time - its source record's append time`` in milliseconds: what
the pipeline adds, without the load generator's own batching.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.common import LINEAGE_HEADER, end_offsets
from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config


def offer(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]], *, rate: float, seconds: float
) -> tuple[int, float]:
    """Produce records (cycling over ``records``) at ``rate`` records/s for ``seconds``, paced against the
    wall clock, round-robin over the topic's partitions; returns (records produced, the rate achieved)."""
    partitions = len(end_offsets(bootstrap, topic))
    producer = Producer(producer_config(KafkaConnection(bootstrap), extra={"linger.ms": 1}))
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        key, value = records[i % len(records)]
        producer.produce(topic, value=value, key=key + b"-l", partition=i % partitions)
        producer.poll(0)
    elapsed = time.perf_counter() - started
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not offer every record to {topic}")
    return total, total / elapsed


def _read_from(
    bootstrap: str, topic: str, since_ms: int, *, read_committed: bool, timeout: float
) -> list[tuple[int, int, int, list[tuple[str, bytes | None]]]]:
    """(partition, offset, timestamp ms, headers) of every record of ``topic`` appended at or after
    ``since_ms``, up to the end offsets as of the call."""
    consumer = Consumer(
        consumer_config(
            KafkaConnection(bootstrap),
            group_id=f"bench-latency-{uuid.uuid4().hex}",
            read_committed=read_committed,
        )
    )
    ends = end_offsets(bootstrap, topic)
    starts = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in ends], timeout=10)
    assignment = [
        tp if tp.offset >= 0 else TopicPartition(topic, tp.partition, ends[tp.partition]) for tp in starts
    ]
    consumer.assign(assignment)
    done = {tp.partition for tp in assignment if tp.offset >= ends[tp.partition]}
    out: list[tuple[int, int, int, list[tuple[str, bytes | None]]]] = []
    deadline = time.monotonic() + timeout
    while len(done) < len(ends) and time.monotonic() < deadline:
        batch = consumer.consume(1000, 0.5)
        if not batch:
            for tp in consumer.position([TopicPartition(topic, p) for p in ends if p not in done]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
            continue
        for message in batch:
            partition, offset = message.partition(), message.offset()
            if message.error() is not None or partition is None or offset is None:
                continue
            raw: Any = message.headers() or []
            out.append((partition, offset, message.timestamp()[1], list(raw)))
            if offset >= ends[partition] - 1:
                done.add(partition)
    consumer.close()
    return out


def latencies_ms(
    bootstrap: str,
    source_topic: str,
    dest_topics: Sequence[str],
    since_ms: int,
    *,
    read_committed: bool = False,
    timeout: float = 60.0,
) -> list[float]:
    """Latency (ms, broker clock) of every destination record whose source record is in ``source_topic``
    and was appended at or after ``since_ms``. Both topics must use LogAppendTime."""
    sources = {
        (partition, offset): ts
        for partition, offset, ts, _h in _read_from(
            bootstrap, source_topic, since_ms, read_committed=False, timeout=timeout
        )
    }
    prefix = f"{source_topic}/"
    out: list[float] = []
    for topic in dest_topics:
        for _p, _o, ts, headers in _read_from(
            bootstrap, topic, since_ms, read_committed=read_committed, timeout=timeout
        ):
            lineage = next((v for k, v in headers if k == LINEAGE_HEADER), None)
            if lineage is None or not lineage.startswith(prefix.encode()):
                continue
            partition, offset = lineage.decode()[len(prefix) :].split("/")
            sent = sources.get((int(partition), int(offset)))
            if sent is not None:
                out.append(float(ts - sent))
    return out
