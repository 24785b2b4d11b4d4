"""missing_field_behavior="passthrough" reproduces the StreamForge runtime, quirks included.

Each test names the StreamForge behaviour (rahulbsw/streamforge, src/filter/mod.rs,
src/filter/envelope_*.rs, src/hash.rs, src/filter_parser.rs) it pins down.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from pipelines.dsl import (
    DestinationSpec,
    DictStore,
    ErrorHandling,
    EvaluationError,
    Message,
    apply_transform,
    evaluate_destination,
    evaluate_filter,
    evaluate_key,
    parse_filter,
    parse_key_transform,
    parse_transform,
)
from pipelines.dsl.evaluate import KeyValueStore

PASS = ErrorHandling(missing_field_behavior="passthrough")
NOW = 1_700_000_000_000


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def run(expr: str, value: Any, store: KeyValueStore | None = None) -> Any:
    return apply_transform(parse_transform(expr), value, error_handling=PASS, store=store)


def matches(expr: str, value: Any) -> bool:
    return evaluate_filter(parse_filter(expr), Message(value=b"{}"), value, now_ms=NOW)


# --- StreamForge's own filter_parser.rs test cases give the same answers ---------------------


def test_streamforge_parser_test_cases_give_the_same_results() -> None:
    assert matches("/message/siteId,>,10000", {"message": {"siteId": 15000}})
    assert not matches(
        "AND:/message/siteId,>,10000:/message/status,==,active",
        {"message": {"siteId": 15000, "status": "inactive"}},
    )
    assert matches(
        "OR:/message/siteId,>,10000:/message/priority,==,high",
        {"message": {"siteId": 5000, "priority": "high"}},
    )
    assert matches("NOT:/message/test,==,true", {"message": {"test": False}})
    assert run("/message", {"message": {"confId": 123}, "metadata": {}}) == {"confId": 123}
    assert run("ARRAY_MAP:/users,/id", {"users": [{"id": 1, "name": "Alice"}, {"id": 2, "name": "Bob"}]}) == [
        1,
        2,
    ]
    assert run("ARITHMETIC:ADD,/price,/tax", {"price": 100.0, "tax": 15.0}) == 115.0
    assert run("STRING:CONCAT,greeting,Hello , World", {"x": 1}) == {"x": 1, "greeting": "Hello  World"}


# --- missing data passes the message through unchanged ----------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "/nonexistent",
        "EXTRACT:/nonexistent,f",
        "ARITHMETIC:MUL,/missing,2.0",
        "ARITHMETIC:ADD,/price,/missing",
        "ARITHMETIC:DIV,/price,/zero",
        "ARITHMETIC:DIV,/price,/tiny",
        "ARITHMETIC:ADD,/name,1",
        "HASH:SHA256,/nonexistent",
        "ARRAY_MAP:/missing,/id",
        "ARRAY_MAP:/name,/id",
        "STRING:UPPER,/nonexistent",
        "STRING:UPPER,/obj",
        "STRING:UPPER,/nothing",
        "COALESCE:/a,/b",
    ],
)
def test_a_form_that_cannot_apply_leaves_the_message_unchanged(expr: str) -> None:
    message = {"price": 10.0, "zero": 0.0, "tiny": 1e-20, "name": "n", "obj": {"a": 1}, "nothing": None}
    assert run(expr, message) == message


def test_construct_leaves_out_fields_whose_path_is_missing() -> None:
    assert run("CONSTRUCT:a=/a:b=/b", {"a": 1}) == {"a": 1}
    assert run("CONSTRUCT:a=/x", {"a": 1}) == {}


def test_array_map_keeps_an_element_whose_element_path_is_missing() -> None:
    assert run("ARRAY_MAP:/users,/id", {"users": [{"id": 1}, {"name": "x"}, 7]}) == [1, {"name": "x"}, 7]


def test_arithmetic_always_produces_a_float_and_overflow_becomes_null() -> None:
    result = run("ARITHMETIC:ADD,/a,/b", {"a": 1, "b": 2})
    assert result == 3.0
    assert isinstance(result, float)
    assert run("ARITHMETIC:MUL,/a,10", {"a": 1e308}) is None  # serde_json's json!(inf) is null


def test_a_divisor_smaller_than_f64_epsilon_counts_as_zero() -> None:
    assert run("ARITHMETIC:DIV,/a,1e-17", {"a": 1.0}) == {"a": 1.0}
    assert run("ARITHMETIC:DIV,/a,1e-15", {"a": 1.0}) == pytest.approx(1e15)


def test_hash_of_a_present_null_hashes_the_text_null() -> None:
    assert run("HASH:MD5,/a", {"a": None}) == md5(b"null")


def test_hash_with_a_field_on_a_non_object_message_wraps_it_as_original() -> None:
    digest = md5(b"x")
    assert run("HASH:MD5,/0,h", ["x"]) == {"original": ["x"], "h": digest}


def test_hash_of_a_float_uses_serde_number_text() -> None:
    assert run("HASH:MD5,/v", {"v": 1e16}) == md5(b"1e16")
    assert run("HASH:MD5,/v", {"v": 0.00001}) == md5(b"0.00001")
    assert run("HASH:MD5,/v", {"v": {"b": 1e16, "a": 2}}) == md5(b'{"a":2,"b":1e16}')


def test_string_with_a_field_on_a_non_object_message_fails_the_record() -> None:
    with pytest.raises(EvaluationError) as caught:
        run("STRING:UPPER,/0,f", ["a"])
    assert caught.value.error_type == "TransformEvaluation"


def test_concat_uses_an_empty_string_for_missing_null_or_non_scalar_parts() -> None:
    value = {"first": "Jane", "n": None, "o": {"x": 1}}
    assert run("STRING:CONCAT,full,/first,-,/last,-,/n,-,/o", value) == {**value, "full": "Jane---"}


def test_concat_on_a_non_object_message_passes_it_through() -> None:
    assert run("STRING:CONCAT,f,/0,x", ["a"]) == ["a"]


def test_try_keeps_a_passed_through_inner_result_instead_of_the_fallback() -> None:
    # StreamForge's TRY only falls back on an error; a missing path is not an error there.
    assert run("TRY:/user/email,'unknown'", {"user": {}}) == {"user": {}}
    assert run("TRY:STRING:UPPER,/0,f,'fallback'", ["a"]) == "fallback"


def test_trim_uses_rusts_unicode_white_space_not_pythons_isspace() -> None:
    # U+001F is whitespace to Python's str.strip() but not to Rust's str::trim().
    assert run("STRING:TRIM,/s", {"s": "\x1f a \u00a0"}) == {"s": "\x1f a"}


def test_regex_replace_follows_rusts_empty_match_rule_in_every_mode() -> None:
    # Rust reports no empty match right after a match (Python's re and java.util.regex do: "-a-b--d-").
    # Security review #28, finding 1: both backends now run RE2 with Rust's rule, whatever the mode.
    assert run("STRING:REGEX_REPLACE,/s,x*,-", {"s": "abxd"}) == {"s": "-a-b-d-"}
    strict = apply_transform(
        parse_transform("STRING:REGEX_REPLACE,/s,x*,-"), {"s": "abxd"}, error_handling=ErrorHandling()
    )
    assert strict == {"s": "-a-b-d-"}


def test_regex_replace_reads_dollar_names_greedily_like_rust() -> None:
    # "$1a" names the (absent) group "1a", so it expands to nothing; "${1}a" is group 1 then "a".
    assert run("STRING:REGEX_REPLACE,/s,(b),$1a", {"s": "abc"}) == {"s": "ac"}
    assert run("STRING:REGEX_REPLACE,/s,(b),${1}a", {"s": "abc"}) == {"s": "abac"}


def test_cache_lookup_miss_bad_key_and_merge_on_non_objects_pass_through() -> None:
    store = DictStore()
    store.put("s", "k", "scalar")
    assert run("CACHE_LOOKUP:/id,s,f", {"id": "nope"}, store) == {"id": "nope"}
    assert run("CACHE_LOOKUP:/id,s,f", {"id": True}, store) == {"id": True}
    assert run("CACHE_LOOKUP:/id,s,f", {}, store) == {}
    assert run("CACHE_LOOKUP:/id,s,MERGE", {"id": "k"}, store) == {"id": "k"}
    assert run("CACHE_LOOKUP:/0,s,f", ["k"], store) == {"original": ["k"], "f": "scalar"}


def test_cache_put_skips_the_write_when_a_path_is_missing() -> None:
    store = DictStore()
    assert run("CACHE_PUT:/id,s,/v", {"id": "a"}, store) == {"id": "a"}
    assert run("CACHE_PUT:/id,s", {"x": 1}, store) == {"x": 1}
    assert store.data == {}


# --- filters are the same in every mode -------------------------------------------------------


def test_filter_quirks() -> None:
    assert not matches("/missing,!=,1", {})
    assert not matches("/code,==,200", {"code": "200"})
    assert matches("/code,!=,200", {"code": "200"})
    assert not matches("/name,>,a", {"name": "b"})
    assert matches("/x,==,1.0000000000000001", {"x": 1})
    assert not matches("/x,==,nan", {"x": "nan"})  # "nan" is a number to Rust, so never equal
    assert not matches("/x,!=,nan", {"x": 1.0})  # |x - NaN| >= EPSILON is false too


# --- key, header and timestamp forms fail the record as StreamForge does ----------------------


def test_a_missing_key_path_fails_the_record_even_in_passthrough() -> None:
    with pytest.raises(EvaluationError) as caught:
        evaluate_key(parse_key_transform("/nope"), Message(value=b"{}"), {}, error_handling=PASS)
    assert caught.value.error_type == "JsonPathNotFound"


def test_key_construct_leaves_out_missing_fields() -> None:
    key = evaluate_key(
        parse_key_transform("CONSTRUCT:a=/a:b=/b"), Message(value=b"{}"), {"b": 2}, error_handling=PASS
    )
    assert key == b'{"b":2}'


def test_a_key_template_writes_objects_as_sorted_json() -> None:
    key = evaluate_key(
        parse_key_transform("k-{/o}"), Message(value=b"{}"), {"o": {"b": 1, "a": None}}, error_handling=PASS
    )
    assert key == b'k-{"a":null,"b":1}'


def test_a_passthrough_destination_produces_the_unchanged_message() -> None:
    spec = DestinationSpec(name="d", topic="t", transform=parse_transform("/payload/pull_request"))
    message = Message(value=b'{"type": "PushEvent", "payload": {"size": 1}}')
    outcome = evaluate_destination(spec, message, error_handling=PASS, now_ms=NOW)
    assert outcome.kind == "produced"
    assert outcome.value == b'{"type":"PushEvent","payload":{"size":1}}'
