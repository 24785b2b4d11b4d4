"""The accounting identity's pure logic (chaos.accounting): expectations from the evaluator and the
size rule, outputs indexed by lineage, and the verdict: lost, duplicates, reroutes, wrong outcomes."""

from __future__ import annotations

import json

from chaos import accounting
from pipelines.spec import parse_spec
from streamforge_core import contract as c
from streamforge_core import replay_signing
from streamforge_core.kafka import Record

SOURCE = "events"
SPEC = parse_spec(
    {
        "source": {"topics": [SOURCE]},
        "destinations": [
            {
                "name": "pushes",
                "topic": "pushes",
                "filter": "/type,==,PushEvent",
                "transform": "EXTRACT:/actor,a",
            },
            {"name": "archive", "topic": "archive"},
        ],
        "dlq": {"topic": "dlq"},
    },
    pipeline_name="p",
)
LIMITS = {"pushes": 1_048_588, "archive": 400}


def source(offset: int, value: bytes | None, partition: int = 0) -> Record:
    return Record(SOURCE, partition, offset, b"k", value, [], 0)


def produced(topic: str, offset: int, value: bytes, at: int, partition: int = 0) -> Record:
    return Record(topic, 0, at, None, value, [(c.H_LINEAGE, f"{SOURCE}/{partition}/{offset}".encode())], 0)


def dead(offset: int, dest: str, error_type: str, at: int) -> Record:
    headers: list[tuple[str, bytes | None]] = [
        (c.H_SOURCE_TOPIC, SOURCE.encode()),
        (c.H_SOURCE_PARTITION, b"0"),
        (c.H_SOURCE_OFFSET, str(offset).encode()),
        (c.H_DESTINATION, dest.encode()),
        (c.H_ERROR_TYPE, error_type.encode()),
    ]
    return Record("dlq", 0, at, b"k", b"", headers, 0)


PUSH = json.dumps({"type": "PushEvent", "actor": "ann"}).encode()
OTHER = json.dumps({"type": "WatchEvent", "actor": "bob"}).encode()
BIG = json.dumps({"type": "WatchEvent", "pad": "x" * 500}).encode()
RECORDS = [source(0, PUSH), source(1, OTHER), source(2, b"{not json"), source(3, BIG)]


def test_expectations_follow_the_evaluator_and_the_topic_size_limit():
    expected = accounting.expected_fates(SPEC, RECORDS, LIMITS)
    kinds = {k[2]: {d: (e.kind, e.error_type) for d, e in v.items()} for k, v in expected.items()}
    assert kinds == {
        0: {"pushes": ("produced", ""), "archive": ("produced", "")},
        1: {"pushes": ("filtered", ""), "archive": ("produced", "")},
        2: {"pushes": ("dlq", c.MESSAGE_DESERIALIZATION), "archive": ("dlq", c.MESSAGE_DESERIALIZATION)},
        3: {"pushes": ("filtered", ""), "archive": ("dlq", c.RECORD_TOO_LARGE)},
    }
    assert expected[(SOURCE, 0, 0)]["pushes"].value == accounting.value_digest(b'{"a": "ann"}')


def _outputs(pushes, archive, dlq):
    return accounting.observe(SPEC, {"pushes": pushes, "archive": archive}, dlq)


def test_a_complete_run_balances_and_one_dlq_record_for_star_counts_for_every_destination():
    expected = accounting.expected_fates(SPEC, RECORDS, LIMITS)
    observed = _outputs(
        [produced("pushes", 0, b'{"a": "ann"}', 0)],
        [produced("archive", 0, PUSH, 0), produced("archive", 1, OTHER, 1)],
        [
            dead(2, c.ALL_DESTINATIONS, c.MESSAGE_DESERIALIZATION, 0),
            dead(3, "archive", c.RECORD_TOO_LARGE, 1),
        ],
    )
    tallies = accounting.tally(expected, observed)
    assert tallies["pushes"].as_dict() | {"examples": []} == {
        "expected_produced": 1,
        "expected_filtered": 2,
        "expected_dlq": 1,
        "expected_replay_skipped": 0,
        "replay_written": 0,
        "delivered": 4,
        "lost": 0,
        "duplicates": 0,
        "rerouted": 0,
        "wrong": 0,
        "value_mismatch": 0,
        "examples": [],
    }
    assert tallies["archive"].delivered == 4
    assert tallies["archive"].lost == 0


def test_missing_outputs_are_lost_and_extra_copies_are_duplicates():
    expected = accounting.expected_fates(SPEC, RECORDS, LIMITS)
    observed = _outputs(
        [produced("pushes", 0, b'{"a": "ann"}', 0), produced("pushes", 0, b'{"a": "ann"}', 1)],
        [produced("archive", 0, PUSH, 0), produced("archive", 0, PUSH, 1), produced("archive", 0, PUSH, 2)],
        [dead(2, c.ALL_DESTINATIONS, c.MESSAGE_DESERIALIZATION, 0)],
    )
    tallies = accounting.tally(expected, observed)
    assert (tallies["pushes"].lost, tallies["pushes"].duplicates) == (0, 1)
    # archive: offset 1 (produced) and offset 3 (RecordTooLarge) are nowhere; offset 0 came three times.
    assert (tallies["archive"].lost, tallies["archive"].duplicates) == (2, 2)
    assert any("LOST" in e and "events/0/3" in e for e in tallies["archive"].examples)


def test_wrong_outcomes_and_reroutes_are_told_apart_from_losses():
    expected = accounting.expected_fates(SPEC, RECORDS[:2], LIMITS)
    observed = _outputs(
        [produced("pushes", 0, b'{"a": "somebody else"}', 0), produced("pushes", 1, b"{}", 1)],
        [produced("archive", 0, PUSH, 0)],
        [dead(1, "archive", c.RETRY_EXHAUSTED, 0)],
    )
    tallies = accounting.tally(expected, observed)
    assert tallies["pushes"].value_mismatch == 1  # offset 0: another value than the evaluator's
    assert tallies["pushes"].wrong == 1  # offset 1 should have been filtered
    assert (tallies["archive"].rerouted, tallies["archive"].lost, tallies["archive"].wrong) == (1, 0, 0)
    # The run-long totals count fates only: the same outputs, no value compared, every other count equal.
    counts = accounting.tally(expected, observed, compare_values=False)
    assert counts["pushes"].value_mismatch == 0
    assert (counts["pushes"].wrong, counts["archive"].rerouted) == (1, 1)


def test_values_equal_as_json_share_a_digest_and_others_do_not():
    same = [b'{"a": 1, "b": [1.0, "x"]}', b'{"b":[1,"x"],"a":1.0}', b'{ "a" : 1 , "b" : [ 1 , "x" ] }']
    assert len({accounting.value_digest(v) for v in same}) == 1
    differ = [b'{"a": 1}', b'{"a": 2}', b'{"a": "1"}', b"[1]", b"not json", b"not json ", None, b"\xff"]
    assert len({accounting.value_digest(v) for v in differ}) == len(differ)
    assert accounting.value_digest(None) == accounting.value_digest(b"null")


def test_outputs_without_lineage_are_counted_not_attributed():
    observed = _outputs([Record("pushes", 0, 0, None, b"{}", [], 0)], [], [])
    assert observed.unattributed == 1
    assert observed.fates == {}


def test_a_replay_is_expected_only_where_it_is_for_and_one_written_elsewhere_is_caught():
    """Offset 10 replays a ``pushes`` failure (for pushes only), 11 another pipeline's dead letter (for no
    destination of this one), 12 a replay for every destination. Archive writing 10 again is a second
    copy of a record it already had: counted as ``replay_written`` (and wrong), not as delivered."""
    key = b"replay key"

    def signed(value: bytes, of: str, to: str = "") -> list[tuple[str, bytes | None]]:
        named = [(c.H_REPLAY_OF, of.encode())] + ([(c.H_REPLAY_DESTINATIONS, to.encode())] if to else [])
        return [*named, (c.H_REPLAY_SIGNATURE, replay_signing.sign(key, of, to, value).encode())]

    replays = [
        Record(SOURCE, 0, 10, b"k", PUSH, signed(PUSH, "dlq/0/1", "pushes"), 0),
        Record(SOURCE, 0, 11, b"k", PUSH, signed(PUSH, "other.dlq/0/1"), 0),
        Record(SOURCE, 0, 12, b"k", OTHER, signed(OTHER, "dlq/0/2"), 0),
        # replay headers without the console's signature decide nothing (review #28, finding 4)
        Record(SOURCE, 0, 13, b"k", OTHER, [(c.H_REPLAY_OF, b"other.dlq/0/1")], 0),
    ]
    expected = accounting.expected_fates(SPEC, replays, LIMITS, replay_key=key)
    kinds = {k[2]: {d: e.kind for d, e in v.items()} for k, v in expected.items()}
    assert kinds == {
        10: {"pushes": "produced", "archive": "replay_skipped"},
        11: {"pushes": "replay_skipped", "archive": "replay_skipped"},
        12: {"pushes": "filtered", "archive": "produced"},
        13: {"pushes": "filtered", "archive": "produced"},
    }
    del expected[(SOURCE, 0, 13)]
    right = _outputs([produced("pushes", 10, b'{"a": "ann"}', 0)], [produced("archive", 12, OTHER, 0)], [])
    tallies = accounting.tally(expected, right)
    assert (tallies["archive"].expected_replay_skipped, tallies["archive"].replay_written) == (2, 0)
    assert tallies["archive"].delivered == 3
    twice = _outputs(
        [produced("pushes", 10, b'{"a": "ann"}', 0)],
        [produced("archive", 10, PUSH, 0), produced("archive", 12, OTHER, 1)],
        [],
    )
    archive = accounting.tally(expected, twice)["archive"]
    assert (archive.replay_written, archive.wrong, archive.delivered) == (1, 1, 2)
    assert "a replay not for it was written there" in archive.examples[0]


def test_copies_of_a_pipeline_share_their_evaluations_through_a_memo_and_expect_the_same(monkeypatch):
    copy = parse_spec(
        {
            **SPEC.to_json(),
            "destinations": [{**d, "topic": f"copy-{d['topic']}"} for d in SPEC.to_json()["destinations"]],
            "dlq": {"topic": "copy-dlq"},
        },
        pipeline_name="p2",
    )
    limits = {**LIMITS, **{f"copy-{topic}": limit for topic, limit in LIMITS.items()}}
    records = [source(i, json.dumps({"type": "PushEvent", "actor": f"u{i}"}).encode()) for i in range(5)]
    calls = []
    evaluate = accounting.evaluate_destination
    monkeypatch.setattr(
        accounting, "evaluate_destination", lambda *a, **k: calls.append(1) or evaluate(*a, **k)
    )

    memo: accounting.OutcomeMemo = {}
    first = accounting.expected_fates(SPEC, records, limits, memo=memo)
    second = accounting.expected_fates(copy, records, limits, memo=memo)
    assert first == second
    assert len(calls) == 5 * 2  # each record and destination evaluated once, for both pipelines
    other = parse_spec({**SPEC.to_json(), "dlq": {"topic": "dlq"}, "destinations": [
        {**SPEC.to_json()["destinations"][0], "filter": "/type,==,WatchEvent"}]}, pipeline_name="p3")  # fmt: skip
    assert all(
        f["pushes"].kind == "filtered"
        for f in accounting.expected_fates(other, records, limits, memo=memo).values()
    )
