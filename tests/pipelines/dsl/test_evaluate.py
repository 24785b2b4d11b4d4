"""The pure-Python evaluator: decoding, filters, transforms, error handling, whole destinations."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pipelines.dsl import (
    JSON,
    DestinationSpec,
    DictStore,
    ErrorHandling,
    EvaluationError,
    Message,
    apply_transform,
    decode_value,
    evaluate_destination,
    evaluate_destinations,
    evaluate_filter,
    evaluate_header_transform,
    evaluate_key,
    evaluate_timestamp,
    parse_filter,
    parse_header_transform,
    parse_key_transform,
    parse_timestamp,
    parse_transform,
    serialize_value,
)
from pipelines.dsl.evaluate import KeyValueStore, number_text

DATA = Path("/work/shared/data/github-events-2021-07-21.ndjson")
NOW = 1_626_847_200_000  # 2021-07-21T06:00:00Z in ms
ERROR = ErrorHandling()
NULL = ErrorHandling(missing_field_behavior="null")
PASS = ErrorHandling(missing_field_behavior="passthrough")
STRICT_NULLS = ErrorHandling(null_value_behavior="error")


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def matches(expr: str, value: Any, message: Message | None = None) -> bool:
    return evaluate_filter(parse_filter(expr), message or Message(value=b"{}"), value, now_ms=NOW)


def run(expr: str, value: Any, handling: ErrorHandling = ERROR, store: KeyValueStore | None = None) -> Any:
    return apply_transform(parse_transform(expr), value, error_handling=handling, store=store)


def fails_with(error_type: str, expr: str, value: Any, handling: ErrorHandling = ERROR) -> str:
    with pytest.raises(EvaluationError) as caught:
        run(expr, value, handling)
    assert caught.value.error_type == error_type
    return caught.value.message


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_bytes().splitlines()]


# --------------------------------------------------------------------------------------------
# Decoding and encoding
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "tombstone"),
        (b"", "empty"),
        (b"\xff{}", "invalid UTF-8"),
        (b'{"a": "\xc3"}', "invalid UTF-8"),
        (b"{", "invalid JSON"),
        (b"{'a': 1}", "invalid JSON"),
        (b"NaN", "invalid JSON"),
        (b'{"a": Infinity}', "invalid JSON"),
        (b'{"a": -Infinity}', "invalid JSON"),
        (b'{"a": 1e400}', "out of range"),
        (b'"\\ud800"', "surrogate"),
        (b"\xef\xbb\xbf{}", "invalid JSON: Unexpected UTF-8 BOM"),
        (b"{} {}", "invalid JSON"),
    ],
)
def test_an_undecodable_value_is_a_message_deserialization_error(raw: bytes | None, reason: str) -> None:
    with pytest.raises(EvaluationError) as caught:
        decode_value(raw)
    assert caught.value.error_type == "MessageDeserialization"
    assert reason in caught.value.message


def test_decoding_keeps_integers_as_int_and_fractions_as_float() -> None:
    value = decode_value(b'{"i": 12345678901234567890, "f": 1.0, "e": 1e2, "s": "\\ud83d\\ude00", "n": null}')
    assert value == {"i": 12345678901234567890, "f": 1.0, "e": 100.0, "s": "\U0001f600", "n": None}
    assert isinstance(value, dict)
    assert type(value["i"]) is int
    assert type(value["f"]) is float


def test_a_json_scalar_is_a_valid_value() -> None:
    assert decode_value(b" 42 ") == 42
    assert decode_value(b'"x"') == "x"


def test_serialize_value_is_compact_utf8_in_insertion_order() -> None:
    value: JSON = {"z": 1, "a": [1.5, 3.0, 1e16, 1e-05, True, None], "é": 'line\nbreak "q" \u0001 \u2028'}
    assert serialize_value(value) == (
        '{"z":1,"a":[1.5,3.0,1e+16,1e-05,true,null],"é":"line\\nbreak \\"q\\" \\u0001 \u2028"}'.encode()
    )


def test_serializing_a_non_finite_float_is_a_transform_error() -> None:
    with pytest.raises(EvaluationError) as caught:
        serialize_value({"x": float("inf")})
    assert caught.value.error_type == "TransformEvaluation"


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (12345, "12345"),
        (-7, "-7"),
        (1.0, "1.0"),
        (0.5, "0.5"),
        (100.0, "100.0"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e16"),
        (2.5e16, "2.5e16"),
        (1e-5, "0.00001"),
        (1e-6, "1e-6"),
        (1.5e-7, "1.5e-7"),
        (-0.0, "-0.0"),
        (0.0, "0.0"),
        (123.456, "123.456"),
        (2**64, "1.8446744073709552e19"),
    ],
)
def test_number_text_is_serde_jsons_spelling(number: float, text: str) -> None:
    assert number_text(number) == text


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


def test_a_numeric_comparison_needs_a_json_number() -> None:
    assert matches("/status,==,200", {"status": 200})
    assert matches("/status,==,200", {"status": 200.0})
    assert not matches("/status,==,200", {"status": "200"})
    assert not matches("/status,>,100", {"status": "200"})
    assert not matches("/status,>,100", {"status": True})


def test_a_missing_path_makes_every_comparison_false_including_not_equal() -> None:
    for op in ("==", "!=", ">", ">=", "<", "<="):
        assert not matches(f"/missing,{op},1", {"a": 1})
        assert not matches(f"/missing,{op},x", {"a": 1})
        assert not matches(f"/missing,{op},true", {"a": 1})


def test_a_type_mismatch_is_false_except_for_not_equal() -> None:
    assert matches("/a,!=,1", {"a": "x"})
    assert matches("/a,!=,x", {"a": 1})
    assert matches("/a,!=,true", {"a": "true"})
    assert matches("/a,!=,x", {"a": None})
    assert not matches("/a,==,1", {"a": "1"})
    assert not matches("/a,==,true", {"a": "true"})


def test_a_present_null_is_not_missing() -> None:
    assert matches("/a,!=,1", {"a": None})
    assert not matches("/a,!=,1", {})
    assert matches("EXISTS:/a", {"a": None})
    assert not matches("NOT_EXISTS:/a", {"a": None})
    assert matches("NOT_EXISTS:/a/b", {"a": None})


def test_strings_and_booleans_only_support_equality() -> None:
    assert matches("/s,==,active", {"s": "active"})
    assert not matches("/s,>,a", {"s": "b"})
    assert not matches("/b,>=,false", {"b": True})
    assert matches("/b,==,false", {"b": False})


def test_number_equality_is_within_f64_epsilon() -> None:
    assert matches("/x,==,0.30000000000000004", {"x": 0.3})
    assert not matches("/x,!=,0.30000000000000004", {"x": 0.3})
    assert matches("/x,>,1e2", {"x": 101})


def test_and_or_not_combine_conditions() -> None:
    value = {"message": {"siteId": 15000, "status": "active", "priority": "low"}}
    assert matches("AND:/message/siteId,>,10000:/message/status,==,active", value)
    assert not matches("AND:/message/siteId,>,10000:/message/status,==,inactive", value)
    assert matches("OR:/message/siteId,>,20000:/message/priority,==,low", value)
    assert matches("NOT:/message/priority,==,high", value)
    assert matches("AND:/message/siteId,>,1:OR:/x,==,1:/message/status,==,active", value)
    assert matches("NOT:AND:/message/siteId,>,1:/message/status,==,x", value)


def test_regex_searches_unanchored_and_only_strings() -> None:
    assert matches("REGEX:/email,@example\\.com", {"email": "user@example.com"})
    assert matches("REGEX:/email,^[\\w\\.-]+@[\\w\\.-]+\\.\\w+$", {"email": "user@example.com"})
    assert not matches("REGEX:/email,^[\\w\\.-]+@[\\w\\.-]+\\.\\w+$", {"email": "invalid"})
    assert not matches("REGEX:/n,1", {"n": 1})
    assert not matches("REGEX:/missing,.*", {})
    assert matches("REGEX:/t,a,b", {"t": "xa,by"})


def test_array_any_and_all_evaluate_the_element_filter_relative_to_each_element() -> None:
    users = {"users": [{"status": "active"}, {"status": "inactive"}]}
    assert matches("ARRAY_ANY:/users,/status,==,inactive", users)
    assert not matches("ARRAY_ALL:/users,/status,==,active", users)
    assert matches("ARRAY_ALL:/users,/status,==,active", {"users": [{"status": "active"}]})


def test_array_all_over_an_empty_array_is_true_and_any_is_false() -> None:
    assert matches("ARRAY_ALL:/users,/status,==,active", {"users": []})
    assert not matches("ARRAY_ANY:/users,/status,==,active", {"users": []})


def test_array_filters_on_a_non_array_or_missing_path_are_false() -> None:
    assert not matches("ARRAY_ALL:/users,/status,==,active", {"users": {"status": "active"}})
    assert not matches("ARRAY_ALL:/users,/status,==,active", {})


def test_array_contains_and_length() -> None:
    assert matches("ARRAY_CONTAINS:/tags,urgent", {"tags": ["a", "urgent"]})
    assert matches("ARRAY_CONTAINS:/ids,2", {"ids": [1, 2.0]})
    assert not matches("ARRAY_CONTAINS:/ids,2", {"ids": ["2"]})
    assert matches("ARRAY_LENGTH:/items,==,2", {"items": [1, 2]})
    assert matches("ARRAY_LENGTH:/items,<,1", {"items": []})
    assert not matches("ARRAY_LENGTH:/items,>=,0", {"items": "ab"})


def test_a_numeric_segment_indexes_arrays_and_is_a_key_on_objects() -> None:
    assert matches("/items/1/sku,==,B", {"items": [{"sku": "A"}, {"sku": "B"}]})
    assert matches("/items/1/sku,==,B", {"items": {"1": {"sku": "B"}}})
    assert not matches("/items/2/sku,==,B", {"items": [{"sku": "B"}]})
    assert not matches("/items/01/sku,==,B", {"items": [{}, {"sku": "B"}]})


def test_key_filters_read_the_key_as_utf8_text() -> None:
    keyed = Message(value=b"{}", key=b"premium-user-42")
    assert matches("KEY_EXISTS", {}, keyed)
    assert matches("KEY_PREFIX:premium-", {}, keyed)
    assert matches("KEY_SUFFIX:-42", {}, keyed)
    assert matches("KEY_CONTAINS:user", {}, keyed)
    assert matches("KEY_MATCHES:user-\\d+$", {}, keyed)
    assert not matches("KEY_MATCHES:^user", {}, keyed)


def test_a_record_without_a_key_fails_every_key_filter() -> None:
    for expr in ("KEY_EXISTS", "KEY_PREFIX:a", "KEY_SUFFIX:a", "KEY_CONTAINS:a", "KEY_MATCHES:.*"):
        assert not matches(expr, {}, Message(value=b"{}"))
    assert matches("KEY_EXISTS", {}, Message(value=b"{}", key=b""))


def test_header_filters_compare_text_and_a_missing_header_is_unequal() -> None:
    msg = Message(
        value=b"{}",
        headers=(("x-tenant", b"dev"), ("x-tenant", b"prod"), ("x-bin", b"\xff"), ("x-null", None)),
    )
    assert matches("HEADER_EXISTS:x-tenant", {}, msg)
    assert matches("HEADER_EXISTS:x-null", {}, msg)
    assert not matches("HEADER_EXISTS:x-other", {}, msg)
    assert matches("HEADER:x-tenant,==,prod", {}, msg)  # the last duplicate wins
    assert matches("HEADER:x-other,!=,prod", {}, msg)
    assert not matches("HEADER:x-other,==,prod", {}, msg)
    assert matches("HEADER:x-bin,!=,x", {}, msg)
    assert matches("HEADER:x-null,==,", {}, msg)


def test_timestamp_filters_use_the_record_timestamp_in_ms() -> None:
    msg = Message(value=b"{}", timestamp_ms=NOW - 100_500)
    assert matches("TIMESTAMP_AGE:>,99", {}, msg)
    assert matches("TIMESTAMP_AGE:<=,100", {}, msg)
    assert not matches("TIMESTAMP_AGE:>,100", {}, msg)  # 100.5 s truncates to 100
    assert matches(f"TIMESTAMP_AFTER:{NOW - 200_000}", {}, msg)
    assert matches(f"TIMESTAMP_BEFORE:{NOW}", {}, msg)
    assert not matches(f"TIMESTAMP_AFTER:{NOW - 100_500}", {}, msg)


def test_a_future_timestamp_has_an_age_truncated_toward_zero() -> None:
    msg = Message(value=b"{}", timestamp_ms=NOW + 1_500)
    assert matches("TIMESTAMP_AGE:>=,-1", {}, msg)
    assert not matches("TIMESTAMP_AGE:<,-1", {}, msg)


def test_a_record_without_a_timestamp_fails_timestamp_filters() -> None:
    for expr in ("TIMESTAMP_AGE:<,100", "TIMESTAMP_AFTER:0", "TIMESTAMP_BEFORE:99999999999999"):
        assert not matches(expr, {}, Message(value=b"{}"))


# --------------------------------------------------------------------------------------------
# Transforms (default error handling)
# --------------------------------------------------------------------------------------------


def test_a_path_transform_replaces_the_message_with_the_value() -> None:
    value = {"message": {"confId": 123, "siteId": 456}, "metadata": {"ts": 789}}
    assert run("/message", value) == {"confId": 123, "siteId": 456}
    assert run("EXTRACT:/message/confId", value) == 123
    assert run("EXTRACT:/message/confId,id", value) == {"id": 123}
    assert value == {"message": {"confId": 123, "siteId": 456}, "metadata": {"ts": 789}}


def test_a_missing_path_is_json_path_not_found() -> None:
    assert "/nonexistent" in fails_with("JsonPathNotFound", "/nonexistent", {"other": 1})


def test_construct_builds_an_object_in_written_order() -> None:
    value = {"message": {"confId": 123, "siteId": 456, "other": "ignored"}}
    result = run("CONSTRUCT:site=/message/siteId:id=/message/confId", value)
    assert list(result.items()) == [("site", 456), ("id", 123)]


def test_array_map_collects_each_elements_value() -> None:
    assert run("ARRAY_MAP:/users,/id", {"users": [{"id": 1}, {"id": 2}]}) == [1, 2]
    fails_with("JsonPathNotFound", "ARRAY_MAP:/users,/id", {"users": [{"id": 1}, {"name": "x"}]})
    fails_with("TransformEvaluation", "ARRAY_MAP:/users,/id", {"users": "x"})


def test_arithmetic_produces_a_float() -> None:
    assert run("ARITHMETIC:ADD,/price,/tax", {"price": 100, "tax": 15}) == 115.0
    assert isinstance(run("ARITHMETIC:ADD,/price,/tax", {"price": 100, "tax": 15}), float)
    assert run("ARITHMETIC:MUL,/price,1.2", {"price": 100.0}) == pytest.approx(120.0)
    assert run("ARITHMETIC:SUB,/total,/discount", {"total": 100.0, "discount": 20.0}) == 80.0
    assert run("ARITHMETIC:DIV,/value,2.0", {"value": 50.0}) == 25.0


def test_division_by_zero_is_a_transform_evaluation_error() -> None:
    assert "division by zero" in fails_with("TransformEvaluation", "ARITHMETIC:DIV,/a,0", {"a": 1})
    fails_with("TransformEvaluation", "ARITHMETIC:DIV,/a,/b", {"a": 1, "b": 0})
    fails_with("TransformEvaluation", "ARITHMETIC:DIV,/a,/b", {"a": 1, "b": 1e-20})


def test_a_non_number_operand_is_a_transform_evaluation_error() -> None:
    fails_with("TransformEvaluation", "ARITHMETIC:ADD,/a,1", {"a": "1"})
    fails_with("TransformEvaluation", "ARITHMETIC:ADD,/a,/b", {"a": 1, "b": True})
    fails_with("JsonPathNotFound", "ARITHMETIC:ADD,/a,/b", {"a": 1})
    fails_with("TransformEvaluation", "ARITHMETIC:MUL,/a,1e308", {"a": 1e308})


@pytest.mark.parametrize(
    ("algorithm", "digest"),
    [
        ("MD5", "5eb63bbbe01eeed093cb22bb8f5acdc3"),
        ("SHA256", "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"),
        (
            "SHA512",
            "309ecc489c12d6eb4cc40f50c902f2b4d0ed77ee511a7c7a9bcd3ca86d4cd86f989dd35bc5ff499670da34255b45b0cfd830e81f605dcf7dc5542e93ae9cd76f",
        ),
    ],
)
def test_hash_replaces_the_message_with_the_lowercase_hex_digest(algorithm: str, digest: str) -> None:
    assert run(f"HASH:{algorithm},/v", {"v": "hello world"}) == digest


def test_murmur_digests_match_streamforges_layout() -> None:
    fox = {"v": "The quick brown fox jumps over the lazy dog"}
    # MurmurHash3_x64_128 of this text: h1 = e34bbc7bbc071b6c, h2 = 7a433ca9c49a9347.
    assert run("HASH:MURMUR128,/v", fox) == "7a433ca9c49a9347e34bbc7bbc071b6c"
    assert run("HASH:MURMUR64,/v", fox) == "e34bbc7bbc071b6c"
    assert run("HASH:MURMUR128,/v", {"v": ""}) == "0" * 32


def test_a_number_hashes_as_its_decimal_text() -> None:
    assert run("HASH:MD5,/v", {"v": 12345}) == "827ccb0eea8a706c4c34a16891f84e7b"
    assert run("HASH:MD5,/v", {"v": 1.5}) == md5(b"1.5")
    assert run("HASH:MD5,/v", {"v": True}) == md5(b"true")


def test_an_object_hashes_as_compact_json_with_sorted_keys() -> None:
    expected = md5(b'{"id":123,"name":"t\\n","x":[1.0,null]}')
    assert run("HASH:MD5,/v", {"v": {"name": "t\n", "id": 123, "x": [1.0, None]}}) == expected


def test_hash_with_a_field_adds_the_digest_and_keeps_the_message() -> None:
    result = run("HASH:MD5,/userId,userIdHash", {"userId": "user123", "name": "Test"})
    assert result == {"userId": "user123", "name": "Test", "userIdHash": md5(b"user123")}


def test_string_operations() -> None:
    assert run("STRING:UPPER,/email", {"email": "user@EXAMPLE.com"}) == {"email": "USER@EXAMPLE.COM"}
    assert run("STRING:LOWER,/s", {"s": "ACTIVE"}) == {"s": "active"}
    assert run("STRING:TRIM,/n", {"n": "  Alice \u3000"}) == {"n": "Alice"}
    assert run("STRING:TRIM_START,/n", {"n": "  Alice  "}) == {"n": "Alice  "}
    assert run("STRING:TRIM_END,/n", {"n": "  Alice  "}) == {"n": "  Alice"}
    assert run("STRING:LENGTH,/d", {"d": "héllo"}) == {"d": 5}
    assert run("STRING:SUBSTRING,/d,0,10", {"d": "Hello, World!"}) == {"d": "Hello, Wor"}
    assert run("STRING:SUBSTRING,/t,7", {"t": "Hello, World!"}) == {"t": "World!"}
    assert run("STRING:SUBSTRING,/t,0,100", {"t": "short"}) == {"t": "short"}
    assert run("STRING:SUBSTRING,/t,99", {"t": "short"}) == {"t": ""}
    assert run("STRING:REPLACE,/m,foo,bar", {"m": "foo and foo"}) == {"m": "bar and foo"}
    assert run("STRING:REPLACE_ALL,/m,foo,bar", {"m": "foo and foo"}) == {"m": "bar and bar"}
    assert run("STRING:REGEX_REPLACE,/e,@.*,@example.com", {"e": "u@old.io"}) == {"e": "u@example.com"}
    assert run("STRING:REGEX_REPLACE,/d,(\\d+)-(\\d+),$2/${1}$$", {"d": "12-34"}) == {"d": "34/12$"}
    assert run("STRING:SPLIT,/tags,|", {"tags": "rust|kafka|"}) == {"tags": ["rust", "kafka", ""]}
    assert run("STRING:UPPER,/user/email", {"user": {"email": "me@x"}}) == {"user": {"email": "ME@X"}}
    assert run("STRING:UPPER,/items/0", {"items": ["a", "b"]}) == {"items": ["A", "b"]}


def test_a_string_operation_with_a_field_keeps_the_original() -> None:
    assert run("STRING:UPPER,/email,emailUpper", {"email": "a@b"}) == {"email": "a@b", "emailUpper": "A@B"}
    assert run("STRING:LENGTH,/bio,bioLength", {"bio": "I write Rust"}) == {
        "bio": "I write Rust",
        "bioLength": 12,
    }


def test_a_string_operation_coerces_numbers_and_booleans_to_text() -> None:
    assert run("STRING:LENGTH,/n", {"n": 12345}) == {"n": 5}
    assert run("STRING:UPPER,/b", {"b": True}) == {"b": "TRUE"}


def test_a_string_operation_on_an_object_is_a_transform_error() -> None:
    fails_with("TransformEvaluation", "STRING:UPPER,/o", {"o": {"a": 1}})
    fails_with("JsonPathNotFound", "STRING:UPPER,/missing", {"o": 1})
    fails_with("TransformEvaluation", "STRING:UPPER,/0,f", ["a"])


def test_concat_joins_paths_and_literals() -> None:
    result = run("STRING:CONCAT,fullName,/firstName, ,/lastName", {"firstName": "Jane", "lastName": "Doe"})
    assert result == {"firstName": "Jane", "lastName": "Doe", "fullName": "Jane Doe"}
    assert run("STRING:CONCAT,greeting,Hello , World", {"x": 1})["greeting"] == "Hello  World"
    assert run("STRING:CONCAT,c,/n,-,/b", {"n": 1.5, "b": False})["c"] == "1.5-false"
    fails_with("JsonPathNotFound", "STRING:CONCAT,c,/a,/b", {"a": "x"})


def test_coalesce_takes_the_first_present_non_null_value() -> None:
    assert run("COALESCE:/a,/b,/c", {"a": None, "c": 3, "b": 0}) == 0
    assert run("COALESCE:/a,/b,fallback", {"a": None}) == "fallback"
    assert run("COALESCE:/a,0", {}) == 0
    assert run("COALESCE:/a,2.5", {}) == 2.5
    assert run("COALESCE:/a,true", {}) is True
    fails_with("JsonPathNotFound", "COALESCE:/a,/b", {"a": None})


def test_try_returns_the_fallback_when_the_inner_transform_fails() -> None:
    assert run("TRY:/user/email,'unknown@example.com'", {"user": {}}) == "unknown@example.com"
    assert run("TRY:/user/email,'unknown@example.com'", {"user": {"email": "e"}}) == "e"
    assert run("TRY:ARITHMETIC:DIV,/a,0,0", {"a": 1}) == 0
    assert run("TRY:/a,null", {}, NULL) is None
    assert run("TRY:/a,[1]", {}, NULL) == [1]


def test_cache_lookup_enriches_from_the_store_and_a_miss_changes_nothing() -> None:
    store = DictStore()
    store.put("users", "u1", {"tier": "gold"})
    store.put("users", "7", {"tier": "silver", "id": 7})
    assert run("CACHE_LOOKUP:/userId,users,profile", {"userId": "u1"}, store=store) == {
        "userId": "u1",
        "profile": {"tier": "gold"},
    }
    assert run("CACHE_LOOKUP:/userId,users,MERGE", {"userId": 7, "id": 1}, store=store) == {
        "userId": 7,
        "id": 7,
        "tier": "silver",
    }
    assert run("CACHE_LOOKUP:/userId,users,profile", {"userId": "nobody"}, store=store) == {
        "userId": "nobody"
    }


def test_cache_put_stores_the_message_or_a_field_and_passes_it_on() -> None:
    store = DictStore()
    assert run("CACHE_PUT:/id,seen", {"id": "a", "v": 1}, store=store) == {"id": "a", "v": 1}
    assert run("CACHE_PUT:/id,seen,/v", {"id": 2, "v": 9}, store=store) == {"id": 2, "v": 9}
    assert store.get("seen", "a") == {"id": "a", "v": 1}
    assert store.get("seen", "2") == 9


def test_cache_forms_without_a_store_are_transform_errors() -> None:
    for expr in ("CACHE_LOOKUP:/id,s,f", "CACHE_PUT:/id,s"):
        for handling in (ERROR, NULL, PASS):
            fails_with("TransformEvaluation", expr, {"id": "a"}, handling)


# --------------------------------------------------------------------------------------------
# missing_field_behavior = null, null_value_behavior = error
# --------------------------------------------------------------------------------------------


def test_null_mode_makes_the_produced_value_null() -> None:
    assert run("/missing", {"a": 1}, NULL) is None
    assert run("EXTRACT:/missing,f", {"a": 1}, NULL) == {"f": None}
    assert run("CONSTRUCT:a=/a:b=/b", {"a": 1}, NULL) == {"a": 1, "b": None}
    assert run("ARRAY_MAP:/xs,/id", {"xs": [{"id": 1}, {}]}, NULL) == [1, None]
    assert run("ARRAY_MAP:/xs,/id", {}, NULL) is None
    assert run("ARITHMETIC:DIV,/a,0", {"a": 1}, NULL) is None
    assert run("ARITHMETIC:ADD,/a,/b", {"a": 1}, NULL) is None
    assert run("HASH:MD5,/missing", {}, NULL) is None
    assert run("HASH:MD5,/missing,h", {"a": 1}, NULL) == {"a": 1, "h": None}
    assert run("STRING:UPPER,/missing", {"a": 1}, NULL) == {"a": 1, "missing": None}
    assert run("STRING:UPPER,/a,out", {"a": [1]}, NULL) == {"a": [1], "out": None}
    assert run("STRING:CONCAT,c,/a,x", {}, NULL) == {"c": None}
    assert run("COALESCE:/a", {}, NULL) is None


def test_null_mode_still_fails_when_there_is_nowhere_to_put_the_null() -> None:
    fails_with("JsonPathNotFound", "STRING:UPPER,/a/b/c", {"a": 1}, NULL)
    fails_with("JsonPathNotFound", "HASH:MD5,/missing,h", [1], NULL)


def test_a_present_null_passes_through_as_null_by_default() -> None:
    assert run("/a", {"a": None}) is None
    assert run("CONSTRUCT:x=/a", {"a": None}) == {"x": None}
    assert run("STRING:UPPER,/a", {"a": None}) == {"a": None}
    assert run("ARITHMETIC:ADD,/a,1", {"a": None}) is None
    assert run("HASH:MD5,/a,h", {"a": None}) == {"a": None, "h": None}


def test_null_value_behavior_error_rejects_a_present_null() -> None:
    for expr in (
        "/a",
        "CONSTRUCT:x=/a",
        "STRING:UPPER,/a",
        "ARITHMETIC:ADD,/a,1",
        "HASH:MD5,/a",
        "ARRAY_MAP:/a,/b",
    ):
        message = fails_with("TransformEvaluation", expr, {"a": None}, STRICT_NULLS)
        assert "null value at /a" in message
    assert run("COALESCE:/a,1", {"a": None}, STRICT_NULLS) == 1


# --------------------------------------------------------------------------------------------
# Key, headers, timestamp
# --------------------------------------------------------------------------------------------


def key_of(expr: str, value: Any, handling: ErrorHandling = ERROR) -> bytes | None:
    return evaluate_key(parse_key_transform(expr), Message(value=b"{}"), value, error_handling=handling)


def test_key_transforms() -> None:
    value = {"user": {"id": "u-1", "n": 7}, "tenant": "acme"}
    assert key_of("/user/id", value) == b"u-1"
    assert key_of("/user/n", value) == b"7"
    assert key_of("/user", value) == b'{"id":"u-1","n":7}'
    assert key_of("CONSTRUCT:t=/tenant:u=/user/id", value) == b'{"t":"acme","u":"u-1"}'
    assert key_of("HASH:MD5,/user/id", value) == md5(b"u-1").encode()
    assert key_of("{/tenant}-{/user/id}-{/user/n}", value) == b"acme-u-1-7"
    assert key_of("constant", value) == b"constant"


def test_a_missing_key_path_fails_the_record_unless_null_mode_drops_the_key() -> None:
    for expr in ("/nope", "HASH:MD5,/nope", "k-{/nope}"):
        with pytest.raises(EvaluationError) as caught:
            key_of(expr, {})
        assert caught.value.error_type == "JsonPathNotFound"
        with pytest.raises(EvaluationError):
            key_of(expr, {}, PASS)
        assert key_of(expr, {}, NULL) is None


def test_header_transforms_from_copy_and_remove() -> None:
    headers: dict[str, bytes | None] = {"x-src": b"s", "x-old": b"o"}
    msg = Message(value=b"{}")
    value: JSON = {"tenant": "acme", "n": 2.0, "flag": False}
    evaluate_header_transform("x-tenant", parse_header_transform("FROM:/tenant"), msg, value, headers)
    evaluate_header_transform("x-n", parse_header_transform("FROM:/n"), msg, value, headers)
    evaluate_header_transform("x-flag", parse_header_transform("FROM:/flag"), msg, value, headers)
    evaluate_header_transform("x-copy", parse_header_transform("COPY:x-src"), msg, value, headers)
    evaluate_header_transform("x-none", parse_header_transform("COPY:x-absent"), msg, value, headers)
    evaluate_header_transform("x-old", parse_header_transform("REMOVE"), msg, value, headers)
    assert headers == {"x-src": b"s", "x-tenant": b"acme", "x-n": b"2.0", "x-flag": b"false", "x-copy": b"s"}


def test_a_header_from_a_missing_or_non_scalar_path_fails_the_record() -> None:
    cases: list[tuple[JSON, str]] = [
        ({}, "JsonPathNotFound"),
        ({"a": None}, "TransformEvaluation"),
        ({"a": [1]}, "TransformEvaluation"),
    ]
    for value, error_type in cases:
        with pytest.raises(EvaluationError) as caught:
            evaluate_header_transform("h", parse_header_transform("FROM:/a"), Message(value=b"{}"), value, {})
        assert caught.value.error_type == error_type


def test_timestamp_rules_are_in_milliseconds_and_offsets_in_seconds() -> None:
    msg = Message(value=b"{}", timestamp_ms=1_000_000)
    value: JSON = {"ts": 1_626_847_200_123, "f": 1.5}
    assert evaluate_timestamp(parse_timestamp("PRESERVE"), msg, value, now_ms=NOW) == 1_000_000
    assert evaluate_timestamp(parse_timestamp("CURRENT"), msg, value, now_ms=NOW) == NOW
    assert evaluate_timestamp(parse_timestamp("FROM:/ts"), msg, value, now_ms=NOW) == 1_626_847_200_123
    assert evaluate_timestamp(parse_timestamp("ADD:60"), msg, value, now_ms=NOW) == 1_060_000
    assert evaluate_timestamp(parse_timestamp("SUBTRACT:1"), msg, value, now_ms=NOW) == 999_000
    for expr, error_type in (("FROM:/nope", "JsonPathNotFound"), ("FROM:/f", "TransformEvaluation")):
        with pytest.raises(EvaluationError) as caught:
            evaluate_timestamp(parse_timestamp(expr), msg, value, now_ms=NOW)
        assert caught.value.error_type == error_type
    with pytest.raises(EvaluationError):
        evaluate_timestamp(parse_timestamp("ADD:1"), Message(value=b"{}"), value, now_ms=NOW)


# --------------------------------------------------------------------------------------------
# Whole destinations
# --------------------------------------------------------------------------------------------


def dest(**kwargs: Any) -> DestinationSpec:
    return DestinationSpec(name=kwargs.pop("name", "d"), topic=kwargs.pop("topic", "t"), **kwargs)


def test_a_destination_runs_filter_transform_key_headers_and_timestamp_in_order() -> None:
    spec = dest(
        filter=parse_filter("/type,==,PushEvent"),
        transform=parse_transform("CONSTRUCT:actor=/actor/login:size=/payload/size"),
        key_transform=parse_key_transform("/actor"),
        headers=(("x-static", "1"), ("x-keep", "new")),
        header_transforms=(
            ("x-actor", parse_header_transform("FROM:/actor")),
            ("x-gone", parse_header_transform("REMOVE")),
        ),
        timestamp=parse_timestamp("ADD:1"),
    )
    message = Message(
        value=b'{"type":"PushEvent","actor":{"login":"octo"},"payload":{"size":2}}',
        key=b"orig",
        headers=(("x-keep", b"old"), ("x-gone", b"bye")),
        timestamp_ms=5_000,
    )
    outcome = evaluate_destination(spec, message, error_handling=ERROR, now_ms=NOW)
    assert outcome.kind == "produced"
    assert outcome.value == b'{"actor":"octo","size":2}'
    assert outcome.key == b"octo"
    assert outcome.headers == (("x-keep", b"new"), ("x-static", b"1"), ("x-actor", b"octo"))
    assert outcome.timestamp_ms == 6_000
    assert outcome.error_type is None


def test_a_destination_without_forms_passes_the_record_through() -> None:
    message = Message(value=b'{"b": 1, "a": [1.0]}', key=b"k", headers=(("h", None),), timestamp_ms=3)
    outcome = evaluate_destination(dest(), message, error_handling=ERROR, now_ms=NOW)
    assert outcome == evaluate_destination(dest(), message, error_handling=ERROR, now_ms=NOW)
    assert (outcome.kind, outcome.value, outcome.key, outcome.headers, outcome.timestamp_ms) == (
        "produced",
        b'{"b":1,"a":[1.0]}',
        b"k",
        (("h", None),),
        3,
    )


def test_a_filtered_record_produces_nothing() -> None:
    outcome = evaluate_destination(
        dest(filter=parse_filter("/a,==,2")), Message(value=b'{"a":1}'), error_handling=ERROR, now_ms=NOW
    )
    assert outcome.kind == "filtered"
    assert outcome.value is None


def test_a_failing_transform_dead_letters_the_original_record() -> None:
    message = Message(value=b'{"a":1}', key=b"k", headers=(("h", b"v"),), timestamp_ms=7)
    outcome = evaluate_destination(
        dest(transform=parse_transform("/b")), message, error_handling=ERROR, now_ms=NOW
    )
    assert outcome.kind == "dead_lettered"
    assert (outcome.value, outcome.key, outcome.headers, outcome.timestamp_ms) == (
        b'{"a":1}',
        b"k",
        (("h", b"v"),),
        7,
    )
    assert outcome.error_type == "JsonPathNotFound"
    assert outcome.error_message is not None
    assert "/b" in outcome.error_message


def test_an_undecodable_record_is_dead_lettered_for_every_destination() -> None:
    outcomes = evaluate_destinations(
        [dest(name="one"), dest(name="two", filter=parse_filter("/a,==,1"))],
        Message(value=b"not json"),
        error_handling=ERROR,
        now_ms=NOW,
    )
    assert [o.kind for o in outcomes] == ["dead_lettered", "dead_lettered"]
    assert {o.error_type for o in outcomes} == {"MessageDeserialization"}


def test_fan_out_gives_each_destination_its_own_copy() -> None:
    specs = [
        dest(name="upper", transform=parse_transform("STRING:UPPER,/s")),
        dest(name="plain"),
        dest(name="none", filter=parse_filter("/s,==,zzz")),
    ]
    outcomes = evaluate_destinations(specs, Message(value=b'{"s":"x"}'), error_handling=ERROR, now_ms=NOW)
    assert [(o.kind, o.value) for o in outcomes] == [
        ("produced", b'{"s":"X"}'),
        ("produced", b'{"s":"x"}'),
        ("filtered", None),
    ]


# --------------------------------------------------------------------------------------------
# Real GitHub events
# --------------------------------------------------------------------------------------------


def test_extracting_the_actor_login_from_every_push_event(events: list[dict[str, Any]]) -> None:
    spec = dest(
        filter=parse_filter("/type,==,PushEvent"), transform=parse_transform("EXTRACT:/actor/login,login")
    )
    produced = []
    for event in events:
        outcome = evaluate_destination(
            spec, Message(value=json.dumps(event).encode()), error_handling=ERROR, now_ms=NOW
        )
        if event["type"] == "PushEvent":
            assert outcome.kind == "produced"
            assert outcome.value is not None
            produced.append(json.loads(outcome.value))
        else:
            assert outcome.kind == "filtered"
    assert len(produced) == 425
    assert produced == [{"login": e["actor"]["login"]} for e in events if e["type"] == "PushEvent"]


def test_constructing_a_summary_of_each_push_event(events: list[dict[str, Any]]) -> None:
    node = parse_transform("CONSTRUCT:actor=/actor/login:repo=/repo/name:commits=/payload/size")
    pushes = [e for e in events if e["type"] == "PushEvent"]
    for event in pushes:
        result = apply_transform(node, event, error_handling=ERROR)
        assert result == {
            "actor": event["actor"]["login"],
            "repo": event["repo"]["name"],
            "commits": event["payload"]["size"],
        }
    non_pushes = [e for e in events if "size" not in e["payload"]]
    with pytest.raises(EvaluationError) as caught:
        apply_transform(node, non_pushes[0], error_handling=ERROR)
    assert caught.value.error_type == "JsonPathNotFound"
    assert apply_transform(node, non_pushes[0], error_handling=PASS) == {
        "actor": non_pushes[0]["actor"]["login"],
        "repo": non_pushes[0]["repo"]["name"],
    }


def test_events_without_a_pull_request_are_dead_lettered_with_json_path_not_found(
    events: list[dict[str, Any]],
) -> None:
    spec = dest(transform=parse_transform("/payload/pull_request/title"))
    kinds: dict[str, int] = {}
    for event in events:
        outcome = evaluate_destination(
            spec, Message(value=json.dumps(event).encode()), error_handling=ERROR, now_ms=NOW
        )
        has_pr = "pull_request" in event["payload"]
        expected = "produced" if has_pr else "dead_lettered"
        assert outcome.kind == expected
        if not has_pr:
            assert outcome.error_type == "JsonPathNotFound"
        kinds[outcome.kind] = kinds.get(outcome.kind, 0) + 1
    assert kinds["dead_lettered"] > 600
    assert kinds["produced"] >= 64


def test_filters_over_real_events(events: list[dict[str, Any]]) -> None:
    def count(expr: str) -> int:
        node = parse_filter(expr)
        return sum(evaluate_filter(node, Message(value=b"{}"), e, now_ms=NOW) for e in events)

    assert count("/type,==,PushEvent") == 425
    assert count("/type,!=,PushEvent") == 375
    assert count("AND:/type,==,PushEvent:/payload/size,>,1") == sum(
        1 for e in events if e["type"] == "PushEvent" and e["payload"]["size"] > 1
    )
    assert count("OR:/type,==,WatchEvent:/type,==,ForkEvent") == 77
    assert count("EXISTS:/org") == sum(1 for e in events if "org" in e)
    assert count("REGEX:/actor/login,\\[bot\\]$") == sum(
        1 for e in events if e["actor"]["login"].endswith("[bot]")
    )
    assert count("ARRAY_ANY:/payload/commits,/distinct,==,false") == sum(
        1 for e in events if any(c["distinct"] is False for c in e["payload"].get("commits", []))
    )
    assert count("/payload/commits/0/author/name,!=,x") == sum(
        1 for e in events if e["payload"].get("commits")
    )


def test_the_dsl_package_imports_without_django_or_pyspark() -> None:
    import subprocess
    import sys

    code = (
        "import sys, pipelines.dsl, pipelines.dsl.parser, pipelines.dsl.evaluate, pipelines.dsl.hashing;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'pyspark', 'rest_framework')];"
        "assert not bad, bad"
    )
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
