"""The peer a user would otherwise write: one Python process with a confluent-kafka consumer, our pure-Python
DSL evaluator (``pipelines.dsl.evaluate_destinations``, the same expressions as the Spark pipeline) and an
idempotent producer, committing at-least-once (consume up to 1,000 records, produce every outcome, flush,
then commit the offsets synchronously). Failures go to the DLQ topic with the error type.

Run by the benchmark as a child process (``python -m bench.python_loop --spec-file ... --bootstrap ...``) so
the load generator of the latency phase does not share its interpreter. It prints one JSON line per commit:
``{"t": unix seconds, "consumed": {topic: records}}``, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import LINEAGE_HEADER, REPO, Context, LoadSampler, Measurement, load1, pipeline_spec
from bench.latency import latencies_ms, offer
from bench.stats import latency_summary, sustained_rate
from streamforge_core.kafka import KafkaConnection, consumer_config, producer_config

NAME = "python_loop"


def loop(spec_file: Path, pipeline: str, bootstrap: str) -> int:
    """The consume -> evaluate -> produce -> flush -> commit loop, until SIGTERM. Returns the exit code."""
    from confluent_kafka import Consumer, Producer

    from pipelines.dsl import Message, evaluate_destinations
    from pipelines.spec import parse_spec
    from streamforge_core import contract as c

    spec = parse_spec(json.loads(spec_file.read_text()), pipeline_name=pipeline)
    dests = [d.compiled() for d in spec.destinations]
    handling = spec.error_handling
    kafka = KafkaConnection(bootstrap)
    consumer = Consumer(consumer_config(kafka, group_id=spec.source.consumer_group, offset_reset="earliest"))
    producer = Producer(producer_config(kafka, extra={"linger.ms": 5}))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    consumer.subscribe(list(spec.source.topics))
    consumed: Counter[str] = Counter()

    def send(topic: str, value: bytes | None, key: bytes | None, headers: list[Any], ts: int | None) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts or 0)
                return
            except BufferError:
                producer.poll(0.05)

    while not stopping.is_set():
        messages = consumer.consume(1000, 0.2)
        if not messages:
            continue
        now_ms = int(time.time() * 1000)
        for m in messages:
            if m.error() is not None:
                raise RuntimeError(str(m.error()))
            topic, partition, offset = m.topic() or "", m.partition(), m.offset()
            original: Any = m.headers() or ()
            message = Message(
                value=m.value(), key=m.key(), headers=tuple(original), timestamp_ms=m.timestamp()[1]
            )
            outcomes = evaluate_destinations(dests, message, error_handling=handling, now_ms=now_ms)
            lineage = f"{topic}/{partition}/{offset}".encode()
            dead_lettered_once = False
            for dest, outcome in zip(dests, outcomes, strict=True):
                if outcome.kind == "produced":
                    headers = [*outcome.headers, (LINEAGE_HEADER, lineage)]
                    send(dest.topic, outcome.value, outcome.key, headers, outcome.timestamp_ms)
                elif outcome.kind == "dead_lettered" and not dead_lettered_once:
                    dead_lettered_once = outcome.error_type == c.MESSAGE_DESERIALIZATION
                    headers = [
                        *message.headers,
                        (c.H_ERROR_TYPE, (outcome.error_type or "").encode()),
                        (c.H_ERROR, (outcome.error_message or "").encode()),
                        (c.H_SOURCE_TOPIC, topic.encode()),
                        (c.H_SOURCE_PARTITION, str(partition).encode()),
                        (c.H_SOURCE_OFFSET, str(offset).encode()),
                        (c.H_DESTINATION, dest.name.encode()),
                    ]
                    send(spec.dlq.topic, m.value(), m.key(), headers, None)
            consumed[topic] += 1
            producer.poll(0)
        if producer.flush(60) != 0:
            raise RuntimeError("deliveries did not complete")
        consumer.commit(asynchronous=False)  # at-least-once: only after every acknowledgement
        print(json.dumps({"t": time.time(), "consumed": dict(consumed)}), flush=True)
    consumer.close()
    return 0


def run(ctx: Context) -> list[Measurement]:
    """Run the loop over the backlog (2 destinations), then at the fixed offered rate for latency."""
    destinations = int(ctx.options.get("python_loop_destinations", 2))
    topics = ctx.topics
    name = f"loop{destinations}"
    latency_topic = topics.create(f"{name}-lat", ctx.partitions, log_append_time=True)
    dest_topics = [
        topics.create(f"{name}-d{i}", ctx.partitions, log_append_time=True) for i in range(destinations)
    ]
    dlq = topics.create(f"{name}-dlq", 1)
    spec = pipeline_spec(
        source_topics=[ctx.backlog_topic, latency_topic], dest_topics=dest_topics, dlq_topic=dlq,
        mode="at_least_once", batch=ctx.batch,
    )  # fmt: skip
    spec_file = ctx.out_dir / f"{name}-spec.json"
    spec_file.write_text(json.dumps(spec))
    pipeline = f"{topics.prefix}-{name}"
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.python_loop", "--spec-file", str(spec_file), "--pipeline", pipeline,
         "--bootstrap", ctx.services.bootstrap],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    timeline: list[tuple[float, dict[str, int]]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            point = json.loads(line)
            timeline.append((point["t"], point["consumed"]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sampler = LoadSampler().start()
    before = load1()
    n = len(ctx.records)

    def backlog_done() -> int:
        return timeline[-1][1].get(ctx.backlog_topic, 0) if timeline else 0

    try:
        _wait(lambda: backlog_done() >= n, process, timeout=1800, what="the backlog")
        load = sampler.stop()
        points = [(t, consumed.get(ctx.backlog_topic, 0)) for t, consumed in timeline]
        seconds, rate = sustained_rate(points, n)
        since_ms = int(time.time() * 1000)
        offered, achieved = offer(ctx.services.bootstrap, latency_topic, ctx.records,
                                  rate=ctx.latency_rate, seconds=ctx.latency_seconds)  # fmt: skip
        _wait(lambda: bool(timeline) and timeline[-1][1].get(latency_topic, 0) >= offered, process,
              timeout=300, what="the latency records")  # fmt: skip
    finally:
        process.terminate()
        process.wait(60)
    lat = latencies_ms(ctx.services.bootstrap, latency_topic, dest_topics, since_ms)
    print(f"  python loop: {rate:,.0f} records/s; latency {latency_summary(lat)}")
    return [
        Measurement(
            scenario=NAME,
            variant=f"{destinations}dest",
            records=n,
            seconds=round(seconds, 2),
            records_per_s=round(rate),
            latency_ms=latency_summary(lat),
            load={"start": before, "end": load1(), **{f"during_{k}": v for k, v in load.items()}},
            extra={
                "destinations": destinations,
                "offered_rate": round(achieved),
                "latency_samples": len(lat),
            },
        )
    ]


def _wait(predicate: Any, process: subprocess.Popen[str], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise RuntimeError(f"the Python loop exited with {process.returncode} before {what} was done")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Python loop did not finish {what} within {timeout}s")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    parser = argparse.ArgumentParser(prog="bench.python_loop")
    parser.add_argument("--spec-file", type=Path, required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args(argv)
    return loop(args.spec_file, args.pipeline, args.bootstrap)


if __name__ == "__main__":
    sys.exit(main())
