"""``streamforge_core.json_depth`` (security review #28, finding 5): finding JSON nested deeper than the
limit without decoding it, naming where, fast enough to run on every request body. Pure logic."""

from __future__ import annotations

import json
import time

import pytest

from streamforge_core.json_depth import MAX_JSON_DEPTH, JsonTooDeep, loads, nesting_path


def test_a_document_at_the_limit_passes_and_one_level_more_is_named_where_it_crosses():
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert nesting_path(at_limit) is None
    assert loads(at_limit) is not None
    beyond = '{"messages": [{"value": ' + '{"a": ' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH + "}]}"
    assert nesting_path(beyond) == "messages.0.value" + ".a" * (MAX_JSON_DEPTH - 3)


def test_brackets_inside_strings_and_escaped_quotes_do_not_count():
    text = json.dumps({"s": "[" * 5000, "t": '\\"{{{' * 2000, "k[": {"x": 1}})
    assert nesting_path(text) is None


def test_keys_are_named_as_written_and_items_by_index_after_commas():
    inner = "[" * 130 + "]" * 130
    text = '{"first": 1, "second \\"q\\"": [0, {"x": 2}, ' + inner + "]}"
    assert nesting_path(text, limit=5) == 'second "q".2.0.0.0'


def test_loads_raises_a_value_error_where_json_would_raise_recursion_error():
    deep = '{"a":' * 3000 + "1" + "}" * 3000
    with pytest.raises(RecursionError):
        json.loads(deep)
    with pytest.raises(ValueError, match="nested deeper than 128") as raised:
        loads(deep)
    assert isinstance(raised.value, JsonTooDeep)
    assert raised.value.path.startswith("a.a.a")


def test_a_large_flat_document_is_scanned_in_well_under_a_second():
    text = json.dumps([{"a": "x" * 100, "b": [1, 2, {"c": 3}]}] * 20_000)  # 2.6 MB
    started = time.perf_counter()
    assert nesting_path(text) is None
    assert time.perf_counter() - started < 1.0
