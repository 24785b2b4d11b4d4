"""The DSL parser: every form, StreamForge's splitting rules, and every refusal with its position."""

from __future__ import annotations

import math

import pytest

from pipelines.dsl import ast
from pipelines.dsl.errors import DslParseError
from pipelines.dsl.parser import (
    check_regex,
    parse_filter,
    parse_header_transform,
    parse_key_transform,
    parse_timestamp,
    parse_transform,
)


def p(text: str) -> ast.JsonPath:
    return ast.JsonPath(text, tuple(text[1:].split("/")))


def lit(text: str) -> ast.Literal:
    from pipelines.dsl.parser import make_literal

    return make_literal(text)


def cmp(path: str, op: ast.CompareOp, value: str) -> ast.Compare:
    return ast.Compare(p(path), op, lit(value))


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------

FILTER_FORMS: list[tuple[str, ast.Filter]] = [
    ("/message/siteId,>,10000", cmp("/message/siteId", ">", "10000")),
    ("/a,==,x", cmp("/a", "==", "x")),
    ("/a,!=,true", cmp("/a", "!=", "true")),
    ("/a,>=,1.5", cmp("/a", ">=", "1.5")),
    ("/a,<,-3", cmp("/a", "<", "-3")),
    ("/a,<=,1e3", cmp("/a", "<=", "1e3")),
    ("/a,==,", cmp("/a", "==", "")),
    ("/items/0/sku,==,A-1", cmp("/items/0/sku", "==", "A-1")),
    ("/a,==,b:c", cmp("/a", "==", "b:c")),
    ("AND:/a,==,1:/b,==,2", ast.And((cmp("/a", "==", "1"), cmp("/b", "==", "2")))),
    ("OR:/a,==,1:/b,==,2", ast.Or((cmp("/a", "==", "1"), cmp("/b", "==", "2")))),
    ("NOT:/a,==,1", ast.Not(cmp("/a", "==", "1"))),
    ("REGEX:/e,^a.*b$", ast.Regex(p("/e"), "^a.*b$")),
    ("ARRAY_ANY:/tasks,/priority,==,high", ast.ArrayAny(p("/tasks"), cmp("/priority", "==", "high"))),
    ("ARRAY_ALL:/users,/status,==,active", ast.ArrayAll(p("/users"), cmp("/status", "==", "active"))),
    ("ARRAY_CONTAINS:/tags,urgent", ast.ArrayContains(p("/tags"), lit("urgent"))),
    ("ARRAY_LENGTH:/items,>=,2", ast.ArrayLength(p("/items"), ">=", 2)),
    ("EXISTS:/a/b", ast.Exists(p("/a/b"))),
    ("NOT_EXISTS:/a", ast.NotExists(p("/a"))),
    ("KEY_EXISTS", ast.KeyExists()),
    ("KEY_PREFIX:user-", ast.KeyPrefix("user-")),
    ("KEY_SUFFIX:-prod", ast.KeySuffix("-prod")),
    ("KEY_CONTAINS:abc", ast.KeyContains("abc")),
    ("KEY_MATCHES:^user-\\d+$", ast.KeyMatches("^user-\\d+$")),
    ("KEY_PREFIX:a:b", ast.KeyPrefix("a:b")),
    ("HEADER_EXISTS:x-tenant", ast.HeaderExists("x-tenant")),
    ("HEADER:x-tenant,==,prod", ast.HeaderCompare("x-tenant", "==", "prod")),
    ("HEADER:x-tenant,!=,prod", ast.HeaderCompare("x-tenant", "!=", "prod")),
    ("TIMESTAMP_AGE:<,60", ast.TimestampAge("<", 60)),
    ("TIMESTAMP_AFTER:1626847200000", ast.TimestampAfter(1626847200000)),
    ("TIMESTAMP_BEFORE:1626847200000", ast.TimestampBefore(1626847200000)),
]


@pytest.mark.parametrize(("expr", "expected"), FILTER_FORMS)
def test_each_filter_form_parses_to_its_node_and_renders_back(expr: str, expected: ast.Filter) -> None:
    node = parse_filter(expr)
    assert node == expected
    assert parse_filter(ast.render(node)) == node


def test_a_literal_is_a_number_when_rust_can_parse_it_then_a_boolean_then_a_string() -> None:
    assert lit("10").value == 10.0
    assert isinstance(lit("10").value, float)
    assert lit("+.5").value == 0.5
    assert lit("1.").value == 1.0
    assert lit("1e3").value == 1000.0
    assert lit("true").value is True
    assert lit("false").value is False
    assert lit("True").value == "True"
    assert lit("1_000").value == "1_000"  # Python's float() would accept it, Rust does not
    assert lit(" 1").value == " 1"
    assert lit("0x10").value == "0x10"
    value = lit("NaN").value
    assert isinstance(value, float)
    assert math.isnan(value)
    assert lit("inf").value == math.inf


def test_an_or_inside_and_runs_until_the_next_and_or_not_like_streamforge() -> None:
    node = parse_filter("AND:/a,==,1:OR:/b,==,2:/c,==,3:NOT:/d,==,4")
    assert node == ast.And(
        (
            cmp("/a", "==", "1"),
            ast.Or((cmp("/b", "==", "2"), cmp("/c", "==", "3"))),
            ast.Not(cmp("/d", "==", "4")),
        )
    )


def test_not_inside_a_list_negates_only_the_next_condition() -> None:
    node = parse_filter("AND:NOT:/a,==,1:/b,==,2")
    assert node == ast.And((ast.Not(cmp("/a", "==", "1")), cmp("/b", "==", "2")))


def test_key_filters_inside_a_list_take_exactly_one_argument() -> None:
    node = parse_filter("AND:KEY_PREFIX:user:KEY_EXISTS:TIMESTAMP_AFTER:5:/a,==,1")
    assert node == ast.And(
        (ast.KeyPrefix("user"), ast.KeyExists(), ast.TimestampAfter(5), cmp("/a", "==", "1"))
    )


def test_header_at_the_end_of_a_list_takes_the_rest_like_streamforge() -> None:
    node = parse_filter("AND:/a,==,1:HEADER:h,==,a:b")
    assert node == ast.And((cmp("/a", "==", "1"), ast.HeaderCompare("h", "==", "a:b")))


def test_header_in_the_middle_of_a_list_takes_one_item() -> None:
    node = parse_filter("AND:HEADER:h,==,v:/a,==,1")
    assert node == ast.And((ast.HeaderCompare("h", "==", "v"), cmp("/a", "==", "1")))


def test_a_regex_pattern_may_contain_colons_and_commas() -> None:
    assert parse_filter("REGEX:/url,^https?://a,b") == ast.Regex(p("/url"), "^https?://a,b")


def test_a_regex_inside_a_list_takes_the_rest_of_the_list() -> None:
    node = parse_filter("AND:/a,==,1:REGEX:/t,(?:x|y):z")
    assert node == ast.And((cmp("/a", "==", "1"), ast.Regex(p("/t"), "(?:x|y):z")))


def test_not_accepts_any_condition_at_top_level() -> None:
    assert parse_filter("NOT:KEY_PREFIX:a:b") == ast.Not(ast.KeyPrefix("a:b"))
    assert parse_filter("NOT:REGEX:/a,x") == ast.Not(ast.Regex(p("/a"), "x"))
    assert parse_filter("NOT:AND:/a,==,1:/b,==,2") == ast.Not(
        ast.And((cmp("/a", "==", "1"), cmp("/b", "==", "2")))
    )


def test_nested_groups_of_the_same_kind_are_accepted() -> None:
    node = parse_filter("OR:/a,==,1:AND:/b,==,2:/c,==,3")
    assert node == ast.Or((cmp("/a", "==", "1"), ast.And((cmp("/b", "==", "2"), cmp("/c", "==", "3")))))


# --------------------------------------------------------------------------------------------
# Transforms
# --------------------------------------------------------------------------------------------

TRANSFORM_FORMS: list[tuple[str, ast.Transform]] = [
    ("/message", ast.Extract(p("/message"))),
    ("EXTRACT:/user/email", ast.Extract(p("/user/email"))),
    ("EXTRACT:/user/email,userEmail", ast.Extract(p("/user/email"), "userEmail")),
    (
        "CONSTRUCT:id=/message/confId:site=/message/siteId",
        ast.Construct((("id", p("/message/confId")), ("site", p("/message/siteId")))),
    ),
    ("ARRAY_MAP:/users,/id", ast.ArrayMap(p("/users"), p("/id"))),
    ("ARITHMETIC:ADD,/price,/tax", ast.Arithmetic("ADD", p("/price"), p("/tax"))),
    ("ARITHMETIC:MUL,/price,1.2", ast.Arithmetic("MUL", p("/price"), ast.NumberLiteral("1.2", 1.2))),
    ("ARITHMETIC:SUB,/a,-3", ast.Arithmetic("SUB", p("/a"), ast.NumberLiteral("-3", -3.0))),
    ("ARITHMETIC:DIV,/a,2.0", ast.Arithmetic("DIV", p("/a"), ast.NumberLiteral("2.0", 2.0))),
    ("HASH:MD5,/userId", ast.Hash("MD5", p("/userId"), None, "MD5")),
    ("HASH:sha-256,/e,emailHash", ast.Hash("SHA256", p("/e"), "emailHash", "sha-256")),
    ("HASH:SHA512,/a", ast.Hash("SHA512", p("/a"), None, "SHA512")),
    ("HASH:murmur64,/a", ast.Hash("MURMUR64", p("/a"), None, "murmur64")),
    ("HASH:MURMUR128,/a", ast.Hash("MURMUR128", p("/a"), None, "MURMUR128")),
    ("STRING:UPPER,/email", ast.StringUnary("UPPER", p("/email"))),
    ("STRING:LOWER,/s,low", ast.StringUnary("LOWER", p("/s"), "low")),
    ("STRING:TRIM,/n", ast.StringUnary("TRIM", p("/n"))),
    ("STRING:TRIM_START,/n", ast.StringUnary("TRIM_START", p("/n"))),
    ("STRING:TRIM_END,/n", ast.StringUnary("TRIM_END", p("/n"))),
    ("STRING:LENGTH,/bio,bioLength", ast.StringUnary("LENGTH", p("/bio"), "bioLength")),
    ("STRING:SUBSTRING,/d,0,10", ast.StringSubstring(p("/d"), 0, 10)),
    ("STRING:SUBSTRING,/d,7", ast.StringSubstring(p("/d"), 7)),
    ("STRING:SUBSTRING,/d,7,tail", ast.StringSubstring(p("/d"), 7, None, "tail")),
    ("STRING:SUBSTRING,/d,0,3,head", ast.StringSubstring(p("/d"), 0, 3, "head")),
    ("STRING:REPLACE,/m,foo,bar", ast.StringReplace(p("/m"), "foo", "bar", False)),
    ("STRING:REPLACE_ALL,/m,foo,,out", ast.StringReplace(p("/m"), "foo", "", True, "out")),
    ("STRING:REGEX_REPLACE,/e,@.*,@example.com", ast.StringRegexReplace(p("/e"), "@.*", "@example.com")),
    ("STRING:SPLIT,/tags,|", ast.StringSplit(p("/tags"), "|")),
    (
        "STRING:CONCAT,fullName,/firstName, ,/lastName",
        ast.StringConcat("fullName", (p("/firstName"), " ", p("/lastName"))),
    ),
    ("COALESCE:/a,/b", ast.Coalesce((p("/a"), p("/b")))),
    ("COALESCE:/a,/b,unknown", ast.Coalesce((p("/a"), p("/b")), lit("unknown"))),
    (
        "TRY:/user/email,'unknown@example.com'",
        ast.Try(ast.Extract(p("/user/email")), "'unknown@example.com'", "unknown@example.com"),
    ),
    (
        'TRY:STRING:UPPER,/name,"DEFAULT"',
        ast.Try(ast.StringUnary("UPPER", p("/name")), '"DEFAULT"', "DEFAULT"),
    ),
    ("TRY:/amount,0", ast.Try(ast.Extract(p("/amount")), "0", 0)),
    ("TRY:/amount,1.5", ast.Try(ast.Extract(p("/amount")), "1.5", 1.5)),
    ("TRY:/a,null", ast.Try(ast.Extract(p("/a")), "null", None)),
    ("TRY:/a,{}", ast.Try(ast.Extract(p("/a")), "{}", {})),
    ("CACHE_LOOKUP:/userId,users,profile", ast.CacheLookup(p("/userId"), "users", "profile")),
    ("CACHE_LOOKUP:/userId,users,MERGE", ast.CacheLookup(p("/userId"), "users", None)),
    ("CACHE_PUT:/userId,users", ast.CachePut(p("/userId"), "users")),
    ("CACHE_PUT:/userId,users,/profile", ast.CachePut(p("/userId"), "users", p("/profile"))),
]


@pytest.mark.parametrize(("expr", "expected"), TRANSFORM_FORMS)
def test_each_transform_form_parses_to_its_node_and_renders_back(expr: str, expected: ast.Transform) -> None:
    node = parse_transform(expr)
    assert node == expected
    assert parse_transform(ast.render(node)) == node


def test_try_splits_at_the_last_comma_like_streamforge() -> None:
    node = parse_transform("TRY:HASH:MD5,/a,h,'x'")
    assert node == ast.Try(ast.Hash("MD5", p("/a"), "h", "MD5"), "'x'", "x")


KEY_FORMS: list[tuple[str, ast.KeyTransform]] = [
    ("/user/id", ast.KeyFromPath(p("/user/id"))),
    ("CONSTRUCT:t=/tenant:u=/user", ast.KeyConstruct((("t", p("/tenant")), ("u", p("/user"))))),
    ("HASH:SHA256,/user/id", ast.KeyHash("SHA256", p("/user/id"), "SHA256")),
    ("user-{/user/id}", ast.KeyTemplate("user-{/user/id}", ("user-", p("/user/id")))),
    ("{/a}:{/b}", ast.KeyTemplate("{/a}:{/b}", (p("/a"), ":", p("/b")))),
    ("static-key", ast.KeyConstant("static-key")),
]


@pytest.mark.parametrize(("expr", "expected"), KEY_FORMS)
def test_each_key_transform_form_parses_and_renders_back(expr: str, expected: ast.KeyTransform) -> None:
    node = parse_key_transform(expr)
    assert node == expected
    assert parse_key_transform(node.render()) == node


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("FROM:/tenant", ast.HeaderFrom(p("/tenant"))),
        ("COPY:x-source", ast.HeaderCopy("x-source")),
        ("REMOVE", ast.HeaderRemove()),
    ],
)
def test_each_header_transform_form_parses_and_renders_back(expr: str, expected: ast.HeaderTransform) -> None:
    node = parse_header_transform(expr)
    assert node == expected
    assert parse_header_transform(node.render()) == node


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("PRESERVE", ast.TimestampPreserve()),
        ("CURRENT", ast.TimestampCurrent()),
        ("FROM:/event/ts", ast.TimestampFrom(p("/event/ts"))),
        ("ADD:60", ast.TimestampAdd(60)),
        ("SUBTRACT:3600", ast.TimestampSubtract(3600)),
        ("ADD:-5", ast.TimestampAdd(-5)),
    ],
)
def test_each_timestamp_rule_parses_and_renders_back(expr: str, expected: ast.TimestampRule) -> None:
    node = parse_timestamp(expr)
    assert node == expected
    assert parse_timestamp(node.render()) == node


# --------------------------------------------------------------------------------------------
# Refusals, with positions
# --------------------------------------------------------------------------------------------

FILTER_ERRORS: list[tuple[str, int, str]] = [
    ("FOO:/a", 0, "unknown keyword 'FOO'"),
    ("KEY_EXIST", 0, "unknown keyword 'KEY_EXIST'"),
    ("AND:/a,==,1:BAR:/b", 12, "unknown keyword 'BAR'"),
    ("/a,=,1", 3, "unknown operator '='"),
    ("/a,=>,1", 3, "unknown operator '=>'"),
    ("a,==,1", 0, "must start with '/'"),
    ("/,==,1", 0, "empty path"),
    (",==,1", 0, "empty path"),
    ("/a//b,==,1", 3, "empty segment"),
    ("/a/,==,1", 2, "trailing '/'"),
    ("/a,==", 5, "expected /path,OP,value"),
    ("/a,==,1,2", 7, "unexpected ','"),
    ("", 0, "empty condition"),
    ("AND:/a,==,1:", 12, "empty condition"),
    ("AND", 3, "needs ':'"),
    ("AND:/a,==,1:OR", 14, "OR needs at least one condition"),
    ("AND:/a,==,1:NOT", 15, "NOT needs a condition"),
    ("KEY_EXISTS:x", 10, "takes no argument"),
    ("KEY_PREFIX:", 11, "must not be empty"),
    ("HEADER:h,==", 11, "expected HEADER"),
    ("HEADER:h,<,v", 9, "unknown header operator"),
    ("HEADER:,==,v", 7, "header name must not be empty"),
    ("TIMESTAMP_AGE:=,60", 14, "unknown age operator"),
    ("TIMESTAMP_AGE:<,1.5", 16, "must be an integer"),
    ("TIMESTAMP_AFTER:soon", 16, "must be an integer"),
    ("TIMESTAMP_AFTER:99999999999999999999", 16, "out of the 64-bit range"),
    ("REGEX:/a", 8, "expected REGEX:/path,pattern"),
    ("REGEX:/a,(", 9, "invalid regular expression"),
    ("REGEX:/a,ab(?=c)", 11, "lookahead"),
    ("REGEX:/a,(a+)+\\1", 14, "back-references"),
    ("REGEX:/a,x\\Z", 10, "invalid regular expression"),
    ("ARRAY_ANY:/a,/b,==", 18, "expected /path,OP,value"),
    ("ARRAY_ANY:/a,b,==,1", 13, "element path"),
    ("ARRAY_LENGTH:/a,>,x", 18, "non-negative integer"),
    ("ARRAY_LENGTH:/a,>,-1", 18, "non-negative integer"),
    ("EXISTS:a", 7, "must start with '/'"),
    ("KEY_MATCHES:(?P<id>x)(?P<id>y)", 25, "used twice"),
]


@pytest.mark.parametrize(("expr", "position", "fragment"), FILTER_ERRORS)
def test_a_bad_filter_is_refused_with_its_position(expr: str, position: int, fragment: str) -> None:
    with pytest.raises(DslParseError) as caught:
        parse_filter(expr)
    error = caught.value
    assert (error.position, fragment in error.message) == (position, True), error.message
    assert error.expr == expr
    assert error.error_type == "DslParse"
    assert str(error).startswith(f"DslParse at {position}: ")


TRANSFORM_ERRORS: list[tuple[str, int, str]] = [
    ("", 0, "empty transform"),
    ("FOO:/a", 0, "unknown keyword 'FOO'"),
    ("message", 0, "unknown keyword 'message'"),
    ("a,b", 0, "must be /path"),
    ("/", 0, "empty path"),
    ("/a/", 2, "trailing '/'"),
    ("EXTRACT:/a,", 11, "must not be empty"),
    ("EXTRACT", 7, "needs ':'"),
    ("CONSTRUCT:a=/x:b", 16, "expected field=/path"),
    ("CONSTRUCT:a=/x:a=/y", 15, "duplicate CONSTRUCT field"),
    ("CONSTRUCT:=/x", 10, "field name must not be empty"),
    ("CONSTRUCT:a=x", 12, "must start with '/'"),
    ("ARRAY_MAP:/a", 12, "expected ARRAY_MAP"),
    ("ARITHMETIC:POW,/a,2", 11, "unknown arithmetic operation"),
    ("ARITHMETIC:ADD,/a,abc", 18, "must be a /path or a finite number"),
    ("ARITHMETIC:ADD,/a,inf", 18, "finite number"),
    ("ARITHMETIC:ADD,/a", 17, "expected ARITHMETIC"),
    ("ARITHMETIC:ADD,/a,1,2", 19, "unexpected ','"),
    ("HASH:CRC32,/a", 5, "unknown hash algorithm"),
    ("HASH:MD5", 8, "expected HASH"),
    ("HASH:MD5,/a,f,g", 13, "unexpected ','"),
    ("STRING:CAPITALIZE,/name", 7, "unknown STRING operation"),
    ("STRING:UPPER", 12, "needs arguments"),
    ("STRING:SUBSTRING,/a,x", 20, "non-negative integer"),
    ("STRING:SUBSTRING,/a,0,f,g", 23, "unexpected argument"),
    ("STRING:REPLACE,/a,,x", 18, "must not be empty"),
    ("STRING:REPLACE,/a,x", 19, "expected STRING:REPLACE"),
    ("STRING:REGEX_REPLACE,/a,[,x", 24, "invalid regular expression"),
    ("STRING:SPLIT,/a,", 16, "delimiter must not be empty"),
    ("STRING:CONCAT,f,/a,,b", 19, "CONCAT part must not be empty"),
    ("STRING:CONCAT,f", 15, "expected STRING:CONCAT"),
    ("COALESCE:", 9, "empty path"),
    ("COALESCE:/a,nan", 12, "finite number"),
    ("TRY:/a", 6, "expected TRY"),
    ("TRY:/a,", 7, "fallback"),
    ("TRY:/a,'", 7, "fallback"),
    ("TRY:/a,abc", 7, "fallback"),
    ("TRY:/a,nan", 7, "not a finite number"),
    ("TRY:BAD:/x,1", 4, "unknown keyword 'BAD'"),
    ("CACHE_LOOKUP:/k,users", 21, "expected CACHE_LOOKUP"),
    ("CACHE_LOOKUP:/k,,f", 16, "store name must not be empty"),
    ("CACHE_PUT:/k", 12, "expected CACHE_PUT"),
    ("CACHE_PUT:/k,s,v", 15, "must start with '/'"),
]


@pytest.mark.parametrize(("expr", "position", "fragment"), TRANSFORM_ERRORS)
def test_a_bad_transform_is_refused_with_its_position(expr: str, position: int, fragment: str) -> None:
    with pytest.raises(DslParseError) as caught:
        parse_transform(expr)
    assert (caught.value.position, fragment in caught.value.message) == (position, True), caught.value.message


@pytest.mark.parametrize(
    ("parse", "expr", "position", "fragment"),
    [
        (parse_key_transform, "", 0, "empty key_transform"),
        (parse_key_transform, "HASH:MD5,/a,b", 11, "unexpected ','"),
        (parse_key_transform, "HASH:XX,/a", 5, "unknown hash algorithm"),
        (parse_key_transform, "/a//b", 3, "empty segment"),
        (parse_key_transform, "k-{/a//b}", 6, "empty segment"),
        (parse_key_transform, "CONSTRUCT:x", 11, "expected field=/path"),
        (parse_header_transform, "SET:x", 0, "unknown header operation 'SET'"),
        (parse_header_transform, "FROM:x", 5, "must start with '/'"),
        (parse_header_transform, "COPY:", 5, "must not be empty"),
        (parse_header_transform, "REMOVE:x", 0, "unknown header operation"),
        (parse_timestamp, "NOW", 0, "unknown timestamp operation 'NOW'"),
        (parse_timestamp, "ADD:1m", 4, "must be an integer"),
        (parse_timestamp, "SUBTRACT:", 9, "must be an integer"),
        (parse_timestamp, "FROM:", 5, "empty path"),
        (parse_timestamp, "CURRENT:1", 7, "takes no argument"),
    ],
)
def test_bad_destination_level_forms_are_refused_with_their_position(
    parse: object, expr: str, position: int, fragment: str
) -> None:
    assert callable(parse)
    with pytest.raises(DslParseError) as caught:
        parse(expr)
    assert (caught.value.position, fragment in caught.value.message) == (position, True), caught.value.message


# --------------------------------------------------------------------------------------------
# Regular expressions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [
        "^user-\\d+$",
        "^[\\w\\.-]+@[\\w\\.-]+\\.\\w+$",
        "(?i)push",
        "(?i:a)b",
        "a{2}b{1,}c{1,3}",
        "a+?b*?",
        "[]a]",
        "[^]a]",
        "\\{literal\\}",
        "x|y|",
        "",
        # RE2 syntax the Rust regex crate shares (accepted since the move to RE2, review #28 finding 1)
        "(?P<name>a)",
        "(?<n>a)",
        "[[:alpha:]]",
        "[^[:^digit:]x]",
        "\\p{L}",
        "\\pL\\PN",
        "\\p{Greek}",
        "\\x{263a}",
        "a\\v",
        "(?U)a+",
        "\\Aa\\z",
        "(a+)+$",
        "(.*a){20}",
    ],
)
def test_portable_regular_expressions_are_accepted(pattern: str) -> None:
    assert check_regex(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "position"),
    [
        ("a(?=b)", 1),
        ("a(?!b)", 1),
        ("(?<=a)b", 0),
        ("(?<!a)b", 0),
        ("(a)\\1", 3),
        ("\\0", 0),
        ("(?P=name)", 0),
        ("(?>a)", 0),
        ("a*+", 2),
        ("a{2}+", 4),
        ("(?#note)a", 0),
        ("(a)?(?(1)b|c)", 4),
        ("(?x)a b", 2),
        ("(?a)\\w", 2),
        ("abc\\Z", 3),
        ("\\N{DASH}", 0),
        ("[\\b]", 1),
        ("[a[b]]", 2),
        ("[a&&b]", 2),
        ("[a--b]", 2),
        ("a{", 1),
        ("a{,3}", 1),
        ("x{a}", 1),
        ("(", 0),
        ("\\", 0),
        ("\\U0001F600", 0),
        # outside RE2, or read differently by Rust or RE2/J (review #28 finding 1)
        ("a\\C", 1),
        ("\\Q.\\E", 0),
        ("x\\<", 1),
        ("\\123", 0),
        ("a\\e", 1),
        ("\\u0041", 0),
        ("(?P<1a>x)", 4),
        ("(?<a>x)(?<a>y)", 10),
        ("a{1001}", 1),
        ("((a{100}){100}){100}", 3),
        ("[a~~b]", 2),
        ("(?U)(?u)a", 6),
        ("ab)", 2),
        ("a(b(c)", 1),
        ("[z-a]", 1),
    ],
)
def test_regular_expressions_that_differ_between_engines_are_refused(pattern: str, position: int) -> None:
    assert check_regex(pattern) == position


def test_a_regex_error_position_is_an_offset_into_the_whole_expression() -> None:
    with pytest.raises(DslParseError) as caught:
        parse_filter("OR:/a,==,1:REGEX:/b,x(?=y)")
    assert caught.value.position == len("OR:/a,==,1:REGEX:/b,x")


def test_non_string_input_is_refused_as_a_parse_error() -> None:
    with pytest.raises(DslParseError):
        parse_filter(None)  # type: ignore[arg-type]


def test_absurdly_deep_nesting_is_refused_not_crashed() -> None:
    with pytest.raises(DslParseError) as caught:
        parse_filter("NOT:" * 5000 + "/a,==,1")
    assert "nested too deeply" in caught.value.message
    with pytest.raises(DslParseError):
        parse_transform("TRY:" * 5000 + "/a" + ",1" * 5000)
