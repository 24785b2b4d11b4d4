"""The topic browser's range read (``dlq.topic_browser._read``) against a stand-in consumer that posts its
events in a set order: an end-of-partition event below the range's end (librdkafka posts the offset its
fetcher stood at) does not end the read, so a page never shows "no records" for a range that has them."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message, TopicPartition

from dlq import topic_browser


class ScriptedConsumer:
    """Hands out ``events`` in order, a few per ``consume`` call, then nothing (as a consumer at the end)."""

    def __init__(self, events: list[Message]) -> None:
        self.events = list(events)
        self.assigned: list[TopicPartition] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        batch, self.events = self.events[:2], self.events[2:]
        return batch


def eof(offset: int) -> Message:
    return Message(topic="t", partition=0, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))


def record(offset: int) -> Message:
    return Message(topic="t", partition=0, offset=offset, key=b"k", value=b'{"n": %d}' % offset)


def read(events: list[Message], end: int, *, timeout: float = 5.0) -> tuple[list[int], bool]:
    """The offsets ``_read`` returns for partition 0's range [0, ``end``) as ``events`` arrive, and whether it
    stopped early."""
    records, stopped_early = topic_browser._read(
        ScriptedConsumer(events),  # type: ignore[arg-type]  # a stand-in for the two methods _read calls
        "t",
        {0: (0, end)},
        timeout=timeout,
        max_bytes=1 << 20,
    )
    return [r.offset for r in records], stopped_early


def test_an_end_seen_below_the_range_end_does_not_end_the_read():
    assert read([eof(0), record(0), record(1), record(2), eof(3)], 3) == ([0, 1, 2], False)


def test_a_range_whose_records_never_come_is_reported_as_stopped_early_not_as_empty():
    assert read([eof(0)], 3, timeout=0.3) == ([], True)


def test_an_end_at_the_range_end_ends_the_read_with_nothing_missing():
    # Offset 0 holds no visible record (a transaction marker, or an aborted record under read_committed).
    assert read([eof(1)], 1) == ([], False)
