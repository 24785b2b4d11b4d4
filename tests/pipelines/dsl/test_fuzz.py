"""Property tests: the parser only ever raises DslParseError, rendering round-trips, and the
evaluator only ever raises EvaluationError."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.dsl import (
    DictStore,
    ErrorHandling,
    EvaluationError,
    Message,
    apply_transform,
    evaluate_filter,
    evaluate_key,
    parse_filter,
    parse_header_transform,
    parse_key_transform,
    parse_timestamp,
    parse_transform,
    render,
)
from pipelines.dsl.errors import DslParseError

PARSERS: list[Callable[[str], object]] = [
    parse_filter,
    parse_transform,
    parse_key_transform,
    parse_header_transform,
    parse_timestamp,
]

TOKENS = [
    "AND:",
    "OR:",
    "NOT:",
    "REGEX:",
    "ARRAY_ANY:",
    "ARRAY_ALL:",
    "ARRAY_CONTAINS:",
    "ARRAY_LENGTH:",
    "EXISTS:",
    "NOT_EXISTS:",
    "KEY_EXISTS",
    "KEY_PREFIX:",
    "KEY_MATCHES:",
    "HEADER:",
    "HEADER_EXISTS:",
    "TIMESTAMP_AGE:",
    "TIMESTAMP_AFTER:",
    "EXTRACT:",
    "CONSTRUCT:",
    "ARRAY_MAP:",
    "ARITHMETIC:",
    "ADD",
    "DIV",
    "HASH:",
    "MD5",
    "murmur-128",
    "STRING:",
    "UPPER",
    "SUBSTRING",
    "REGEX_REPLACE",
    "CONCAT",
    "SPLIT",
    "COALESCE:",
    "TRY:",
    "CACHE_LOOKUP:",
    "CACHE_PUT:",
    "MERGE",
    "FROM:",
    "COPY:",
    "REMOVE",
    "PRESERVE",
    "CURRENT",
    "SUBTRACT:",
    "/",
    "/a",
    "/0",
    ",",
    ":",
    "=",
    "==",
    "!=",
    ">",
    ">=",
    "<",
    "<=",
    "1",
    "-1",
    "1.5",
    "1e999",
    "nan",
    "true",
    "null",
    "'",
    '"',
    "{",
    "}",
    "{/a}",
    "[",
    "]",
    "(",
    ")",
    "(?",
    "(?P<x>",
    "\\",
    "\\1",
    "*",
    "+",
    "?",
    "x",
    " ",
    "é",
    "\x00",
]

dsl_soup = st.lists(st.sampled_from(TOKENS), max_size=14).map("".join)
any_text = st.one_of(st.text(max_size=60), dsl_soup)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(any_text)
def test_every_parser_raises_only_dsl_parse_errors_with_an_in_range_position(expr: str) -> None:
    for parse in PARSERS:
        refused: DslParseError | None = None
        try:
            parse(expr)
        except DslParseError as error:
            refused = error
        if refused is not None:
            assert 0 <= refused.position <= len(expr)
            assert refused.expr == expr
            assert refused.message


# --------------------------------------------------------------------------------------------
# Generated valid expressions round-trip through render()
# --------------------------------------------------------------------------------------------

word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=6)
segment = st.one_of(word, st.integers(min_value=0, max_value=3).map(str))
path = st.lists(segment, min_size=1, max_size=3).map(lambda segs: "/" + "/".join(segs))
value_text = st.one_of(
    word,
    st.sampled_from(["true", "false", "0", "-1.5", "1e3", ".5", "+2", "inf", "NaN", "x y", ""]),
)
op = st.sampled_from(["==", "!=", ">", ">=", "<", "<="])
regex = st.sampled_from(["^a", "b+$", "[a-z]{2,}", "(?i)push", "a|b", "\\d+", "x.*y"])


@st.composite
def compare(draw: st.DrawFn) -> str:
    return f"{draw(path)},{draw(op)},{draw(value_text)}"


@st.composite
def leaf(draw: st.DrawFn) -> str:
    kind = draw(st.integers(min_value=0, max_value=12))
    if kind == 0:
        return f"KEY_PREFIX:{draw(word)}"
    if kind == 1:
        return "KEY_EXISTS"
    if kind == 2:
        return f"HEADER_EXISTS:{draw(word)}"
    if kind == 3:
        return f"TIMESTAMP_AFTER:{draw(st.integers(min_value=-(2**40), max_value=2**40))}"
    if kind == 4:
        return f"EXISTS:{draw(path)}"
    if kind == 5:
        return f"ARRAY_ANY:{draw(path)},{draw(compare())}"
    if kind == 6:
        return f"ARRAY_LENGTH:{draw(path)},{draw(op)},{draw(st.integers(min_value=0, max_value=9))}"
    if kind == 7:
        return f"ARRAY_CONTAINS:{draw(path)},{draw(value_text)}"
    if kind == 8:
        return f"KEY_MATCHES:{draw(regex)}"
    if kind == 9:
        return f"TIMESTAMP_AGE:{draw(st.sampled_from(['<', '>=']))},{draw(st.integers(0, 999))}"
    if kind == 10:
        return f"NOT_EXISTS:{draw(path)}"
    return draw(compare())


def list_body(
    items: st.SearchStrategy[str], *, nested: bool = False, tail: bool = True
) -> st.SearchStrategy[str]:
    """Items of an AND/OR list. A nested group runs until the next AND/OR/NOT item (StreamForge's
    rule), so its items are never negated; a REGEX or HEADER tail takes the rest of the list."""

    @st.composite
    def build(draw: st.DrawFn) -> str:
        parts = draw(st.lists(items, min_size=1, max_size=4))
        negate = [f"NOT:{p}" if not nested and draw(st.booleans()) else p for p in parts]
        end = draw(
            st.one_of(
                st.just(""),
                st.builds(lambda p, r: f":REGEX:{p},{r}", path, regex),
                st.builds(lambda n, v: f":HEADER:{n},==,{v}", word, word),
            )
        )
        return ":".join(negate) + (end if tail else "")

    return build()


@st.composite
def filter_expr(draw: st.DrawFn) -> str:
    kind = draw(st.integers(min_value=0, max_value=5))
    if kind == 0:
        return draw(leaf())
    if kind == 1:
        return f"NOT:{draw(leaf())}"
    if kind == 2:
        return f"REGEX:{draw(path)},{draw(regex)}"
    head = draw(st.sampled_from(["AND", "OR"]))
    body = draw(list_body(leaf(), tail=kind != 4))
    if kind == 4:
        inner = draw(st.sampled_from(["AND", "OR"]))
        body += f":{inner}:{draw(list_body(leaf(), nested=True))}"
    if kind == 5:
        return f"NOT:{head}:{body}"
    return f"{head}:{body}"


@st.composite
def transform_expr(draw: st.DrawFn) -> str:
    kind = draw(st.integers(min_value=0, max_value=14))
    p = draw(path)
    f = draw(word)
    if kind == 0:
        return p
    if kind == 1:
        return f"EXTRACT:{p},{f}"
    if kind == 2:
        fields = draw(st.lists(st.tuples(word, path), min_size=1, max_size=3, unique_by=lambda t: t[0]))
        return "CONSTRUCT:" + ":".join(f"{n}={q}" for n, q in fields)
    if kind == 3:
        return f"ARRAY_MAP:{p},{draw(path)}"
    if kind == 4:
        right = draw(st.one_of(path, st.sampled_from(["2", "0", "-1.5", "1e2", "0.001"])))
        return f"ARITHMETIC:{draw(st.sampled_from(['ADD', 'SUB', 'MUL', 'DIV']))},{p},{right}"
    if kind == 5:
        alg = draw(st.sampled_from(["MD5", "sha256", "SHA-512", "MURMUR64", "murmur128"]))
        return f"HASH:{alg},{p}" + draw(st.sampled_from(["", f",{f}"]))
    if kind == 6:
        op_name = draw(st.sampled_from(["UPPER", "LOWER", "TRIM", "TRIM_START", "TRIM_END", "LENGTH"]))
        return f"STRING:{op_name},{p}" + draw(st.sampled_from(["", f",{f}"]))
    if kind == 7:
        return f"STRING:SUBSTRING,{p},{draw(st.integers(0, 5))}" + draw(
            st.sampled_from(["", ",2", f",{f}", f",3,{f}"])
        )
    if kind == 8:
        return f"STRING:{draw(st.sampled_from(['REPLACE', 'REPLACE_ALL']))},{p},{f},{draw(word)}"
    if kind == 9:
        pattern = draw(regex.filter(lambda r: "," not in r))  # its arguments are split on ','
        return f"STRING:REGEX_REPLACE,{p},{pattern},{draw(st.sampled_from(['x', '$1', '${0}-', '$$']))}"
    if kind == 10:
        return f"STRING:SPLIT,{p},{draw(st.sampled_from(['|', ' ', 'ab']))}"
    if kind == 11:
        parts = draw(st.lists(st.one_of(path, word), min_size=1, max_size=3))
        return f"STRING:CONCAT,{f}," + ",".join(parts)
    if kind == 12:
        paths = draw(st.lists(path, min_size=1, max_size=3))
        default = draw(st.sampled_from(["", ",0", ",x", ",true", ",2.5"]))
        return "COALESCE:" + ",".join(paths) + default
    if kind == 13:
        return f"CACHE_LOOKUP:{p},{f},{draw(st.sampled_from(['MERGE', 'out']))}"
    inner = draw(st.sampled_from([p, f"STRING:UPPER,{p}", f"ARITHMETIC:DIV,{p},0", f"HASH:MD5,{p}"]))
    fallback = draw(st.sampled_from(["0", "null", "true", "'d'", '"q"', "1.5", "[1]"]))
    return f"TRY:{inner},{fallback}"


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(filter_expr())
def test_a_generated_filter_parses_and_its_rendering_parses_back_to_an_equal_ast(expr: str) -> None:
    node = parse_filter(expr)
    assert parse_filter(render(node)) == node


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(transform_expr())
def test_a_generated_transform_parses_and_its_rendering_parses_back_to_an_equal_ast(expr: str) -> None:
    node = parse_transform(expr)
    assert parse_transform(render(node)) == node


# --------------------------------------------------------------------------------------------
# The evaluator never fails in any other way
# --------------------------------------------------------------------------------------------

keys = st.sampled_from(["a", "b", "c", "0", "1", "x_y", "-"])
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
    max_leaves=20,
)
handlings = st.builds(
    ErrorHandling,
    missing_field_behavior=st.sampled_from(["error", "passthrough", "null"]),
    null_value_behavior=st.sampled_from(["passthrough", "error"]),
)
short_path = st.lists(keys, min_size=1, max_size=3).map(lambda segs: "/" + "/".join(segs))


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(transform_expr(), json_values, handlings)
def test_a_transform_raises_nothing_but_evaluation_errors(
    expr: str, value: Any, handling: ErrorHandling
) -> None:
    node = parse_transform(expr)
    error_type = None
    try:
        apply_transform(node, value, error_handling=handling, store=DictStore())
    except EvaluationError as error:
        error_type = error.error_type
    assert error_type in {None, "TransformEvaluation", "JsonPathNotFound"}


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    filter_expr(),
    json_values,
    st.one_of(st.none(), st.binary(max_size=6)),
    st.one_of(st.none(), st.integers(0, 2**45)),
)
def test_a_filter_always_answers_true_or_false(
    expr: str, value: Any, key: bytes | None, ts: int | None
) -> None:
    message = Message(value=b"{}", key=key, headers=(("a", b"1"), ("b", None)), timestamp_ms=ts)
    assert evaluate_filter(parse_filter(expr), message, value, now_ms=2**44) in (True, False)


@settings(max_examples=200)
@given(short_path, json_values, handlings)
def test_a_path_transform_on_random_json_is_a_value_or_a_clean_error(
    p: str, value: Any, handling: ErrorHandling
) -> None:
    for expr in (
        p,
        f"STRING:UPPER,{p}",
        f"ARITHMETIC:DIV,{p},{p}",
        f"HASH:MURMUR128,{p},h",
        f"STRING:CONCAT,c,{p},-",
    ):
        with contextlib.suppress(EvaluationError):
            apply_transform(parse_transform(expr), value, error_handling=handling)
    with contextlib.suppress(EvaluationError):
        evaluate_key(parse_key_transform(f"k{{{p}}}"), Message(value=b"{}"), value, error_handling=handling)
