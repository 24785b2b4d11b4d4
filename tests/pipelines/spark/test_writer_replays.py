"""A replayed record that names its destinations (``x-streamforge-replay-destinations``) is written only for
those: the writer on the real broker, with the columns Spark hands it, and the header parse on its own. The
replay headers count only under the console's signature (``x-streamforge-replay-signature``): forged,
copied or unsigned ones make an ordinary record (security review #28, finding 4)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pipelines.spark import writer
from pipelines.spec import RetryPolicy
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import KafkaConnection
from tests.pipelines.spark.harness import consume_all

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


KEY = b"the installation's replay key"


def _headers(*pairs: tuple[str, bytes]) -> list[dict[str, object]]:
    return [{"key": k, "value": v} for k, v in pairs]


def _signed(value: bytes, of: str = "", to: str = "", *, key: bytes = KEY) -> tuple[str, bytes]:
    """The signature header the console adds for these replay header values and ``value``."""
    return (c.H_REPLAY_SIGNATURE, replay_signing.sign(key, of, to, value).encode())


def test_the_restriction_is_read_from_the_header_and_only_names_known_destinations():
    values = [b'{"i":%d}' % i for i in range(14)]
    v = values.__getitem__
    headers = pa.array(
        [
            None,
            [],
            _headers(("trace", b"1")),
            _headers(("trace", b"2"), (c.H_REPLAY_DESTINATIONS, b"pushes"), _signed(v(3), to="pushes")),
            _headers((c.H_REPLAY_DESTINATIONS, b"archive, pushes"), _signed(v(4), to="archive, pushes")),
            # none known: every destination
            _headers((c.H_REPLAY_DESTINATIONS, b"renamed"), _signed(v(5), to="renamed")),
            # this pipeline's, for every destination
            _headers((c.H_REPLAY_OF, b"mine.dlq/0/7"), _signed(v(6), "mine.dlq/0/7")),
            _headers(
                (c.H_REPLAY_OF, b"other.dlq/0/7"),
                (c.H_REPLAY_DESTINATIONS, b"pushes"),
                _signed(v(7), "other.dlq/0/7", "pushes"),
            ),
            # another consumer's failure: none here
            _headers((c.H_REPLAY_OF, b"connect.dlq/2/9"), _signed(v(8), "connect.dlq/2/9")),
            _headers(  # the last header counts, and the signature is over the last
                (c.H_REPLAY_DESTINATIONS, b"archive"),
                (c.H_REPLAY_DESTINATIONS, b"prs"),
                _signed(v(9), to="prs"),
            ),
            # finding 4: a producer's own replay headers decide nothing (no signature, another key's, a
            # signature copied from another record's value, headers changed after signing)
            _headers((c.H_REPLAY_OF, b"connect.dlq/2/9")),
            _headers((c.H_REPLAY_DESTINATIONS, b"pushes"), _signed(v(11), to="pushes", key=b"a guess")),
            _headers((c.H_REPLAY_DESTINATIONS, b"pushes"), _signed(v(3), to="pushes")),
            _headers((c.H_REPLAY_DESTINATIONS, b"archive"), _signed(v(13), to="pushes")),
        ],
        HEADERS,
    )
    found = writer.replay_restrictions(
        headers, pa.array(values), ["pushes", "archive", "prs"], "mine.dlq", KEY
    )
    assert found == {
        3: frozenset({"pushes"}),
        4: frozenset({"archive", "pushes"}),
        7: frozenset(),
        8: frozenset(),
        9: frozenset({"prs"}),
    }
    assert writer.replay_restrictions(headers, pa.array(values), ["pushes"], "mine.dlq", b"") == {}
    nothing = pa.array([None, None], HEADERS)
    assert writer.replay_restrictions(nothing, pa.array([b"", b""]), ["pushes"], "mine.dlq", KEY) == {}


@pytest.mark.kafka
def test_a_replay_for_one_destination_is_written_there_only_and_counted_as_skipped_elsewhere(
    kafka_bootstrap, make_topic
):
    """Two destinations, five records as Spark's plan leaves them: an ordinary one (both produce), a replay
    for ``a`` (b skips it), a replay for ``b`` that ``b`` dead-letters (a skips it; one DLQ record, for
    ``b``), a replay naming no destination of this pipeline (both produce: skipping it everywhere would
    lose it), a replay for ``b`` whose value does not decode (dead-lettered for ``b`` only), and another
    pipeline's replay that does not decode (nothing at all: it was never this pipeline's failure)."""
    topics = {"a": make_topic("dest-a"), "b": make_topic("dest-b")}
    dlq = make_topic("dlq")
    config = writer.WriterConfig(
        pipeline="p",
        revision=1,
        kafka=KafkaConnection(kafka_bootstrap),
        mode="at_least_once",
        consumer_group="g",
        destinations=tuple(writer.DestinationInfo(n, t, None, None, 1_048_588) for n, t in topics.items()),
        dlq_topic=dlq,
        dlq_max_message_bytes=1_048_588,
        include_original_headers=True,
        include_stack_trace=False,
        max_dlq_retries=1,
        retry=RetryPolicy(3, 1, 1, 2.0, 0.0),
        replay_key=KEY,
    )
    rows = [  # replay headers (of, to), deser_error, outcome for a, outcome for b
        (None, None, "produced", "produced"),
        (("", "a"), None, "produced", "produced"),
        (("", "b"), None, "produced", "dead_lettered"),
        (("", "gone"), None, "produced", "produced"),
        (("", "b"), "not JSON", "dead_lettered", "dead_lettered"),
        # another pipeline's replay read from a shared source topic: for no destination here
        (("other.dlq/0/3", ""), "not JSON", "dead_lettered", "dead_lettered"),
    ]
    n = len(rows)
    values = [b'{"i":%d}' % i for i in range(n)]

    def replay_headers(i: int) -> list[dict[str, object]] | None:
        if rows[i][0] is None:
            return None
        of, to = rows[i][0]
        named = [(c.H_REPLAY_OF, of.encode())] if of else []
        named += [(c.H_REPLAY_DESTINATIONS, to.encode())] if to else []
        return _headers(*named, _signed(values[i], of, to))

    columns = {
        "topic": pa.array(["src"] * n),
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(100, 100 + n), pa.int64()),
        "key": pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([replay_headers(i) for i in range(n)], HEADERS),
        "deser_error": pa.array([r[1] for r in rows], pa.string()),
    }
    for i in range(len(topics)):
        outcomes = [r[2 + i] for r in rows]
        produced = [o == "produced" for o in outcomes]
        columns[f"o{i}"] = pa.array(outcomes)
        columns[f"v{i}"] = pa.array(
            [b'{"i":%d}' % j if p else None for j, p in enumerate(produced)], pa.binary()
        )
        columns[f"k{i}"] = pa.array(
            [f"k{j}".encode() if p else None for j, p in enumerate(produced)], pa.binary()
        )
        columns[f"h{i}"] = pa.array([None] * n, HEADERS)
        columns[f"t{i}"] = pa.array([None] * n, pa.int64())
        dead = [o == "dead_lettered" and rows[j][1] is None for j, o in enumerate(outcomes)]
        columns[f"e{i}"] = pa.array(["FilterEvaluation" if d else None for d in dead], pa.string())
        columns[f"m{i}"] = pa.array(["bad" if d else None for d in dead], pa.string())

    [summary] = list(writer.BatchWriter(config).write(iter([pa.RecordBatch.from_pydict(columns)])))

    counts = json.loads(summary.column("counts")[0].as_py())
    assert {k: v for k, v in counts.items() if k.startswith("dest:") and v} == {
        "dest:a:produced": 3,  # 0, 1, 3
        "dest:a:replay_skipped": 3,  # 2, 4, 5
        "dest:b:produced": 2,  # 0, 3
        "dest:b:dead_lettered": 2,  # 2, 4
        "dest:b:replay_skipped": 2,  # 1, 5
    }
    for name in topics:  # records = produced + filtered + dead-lettered + replay-skipped, per destination
        assert sum(counts.get(f"dest:{name}:{o}", 0) for o in ("produced", "filtered", "dead_lettered",
                   "replay_skipped")) == n  # fmt: skip
    lineage = {
        name: sorted(str(r.header(c.H_LINEAGE)) for r in consume_all(kafka_bootstrap, t))
        for name, t in topics.items()
    }
    assert lineage == {"a": ["src/0/100", "src/0/101", "src/0/103"], "b": ["src/0/100", "src/0/103"]}
    dead_letters = consume_all(kafka_bootstrap, dlq)
    assert sorted(
        (r.header(c.H_SOURCE_OFFSET), r.header(c.H_DESTINATION), r.header(c.H_ERROR_TYPE))
        for r in dead_letters
    ) == [
        ("102", "b", "FilterEvaluation"),
        ("104", "b", c.MESSAGE_DESERIALIZATION),
    ]
