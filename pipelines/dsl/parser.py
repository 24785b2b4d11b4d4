"""Parser of the StreamForge DSL: text -> :mod:`pipelines.dsl.ast` nodes.

Every public function either returns a node or raises :class:`DslParseError` with the 0-based
offset of the problem; no other exception escapes, whatever the input (a hypothesis test holds
us to it).

Splitting rules (StreamForge ``src/filter_parser.rs``, kept so existing configs parse the same):
- A top-level filter is ``KEYWORD:rest``, or a comparison ``/path,OP,value`` whose value may
  contain ``:`` but not ``,``.
- ``AND:``/``OR:`` lists are split on ``:``. In a list, a plain comparison and ``KEY_EXISTS`` take
  one item; ``KEY_PREFIX|KEY_SUFFIX|KEY_CONTAINS|KEY_MATCHES|HEADER_EXISTS|TIMESTAMP_AFTER|
  TIMESTAMP_BEFORE`` take their keyword plus one item; ``NOT`` negates the next condition;
  a nested ``OR``/``AND`` group runs until the next item that is exactly ``AND``, ``OR`` or
  ``NOT``, or the end (StreamForge's rule for ``OR`` inside ``AND``); ``HEADER`` takes the rest of
  the list when the rest is one ``name,op,value`` (as StreamForge does), else one item.
- Extensions (StreamForge refused these): ``NOT`` of any condition; ``AND`` inside ``OR`` and
  nested groups of the same kind; ``REGEX`` inside a list takes the rest of the list (so it must
  be last there; its pattern may then contain ``:`` and ``,``); ``EXISTS``, ``NOT_EXISTS``,
  ``ARRAY_ANY``, ``ARRAY_ALL``, ``ARRAY_CONTAINS``, ``ARRAY_LENGTH``, ``TIMESTAMP_AGE`` inside a
  list take one item; at top level the ``REGEX`` pattern is everything after the first comma.

Stricter than StreamForge on purpose (refused at save time): unknown keywords, paths without a
leading ``/`` or with empty segments (``/``, ``/a//b``, ``/a/``), empty key/header arguments,
trailing arguments StreamForge silently ignored, empty ``STRING:SPLIT`` delimiters, non-finite
numbers where a number is produced, and regular expressions outside the RE2 syntax both backends run
(RE2 in Python, RE2/J in Spark) or whose meaning differs from Rust's (StreamForge) -- see
:func:`check_regex`, which also states the one kept difference: ``\\w \\d \\s \\b`` are ASCII.

One long module on purpose: it is one grammar, and its splitting rules depend on each other.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar, cast

import re2

from pipelines.dsl import ast
from pipelines.dsl.errors import DslParseError
from pipelines.dsl.evaluate import compile_regex, decode_json_text

__all__ = [
    "FILTER_KEYWORDS",
    "TRANSFORM_KEYWORDS",
    "check_regex",
    "parse_filter",
    "parse_header_transform",
    "parse_key_transform",
    "parse_timestamp",
    "parse_transform",
]

FILTER_KEYWORDS = frozenset(
    {
        "AND",
        "OR",
        "NOT",
        "REGEX",
        "ARRAY_ANY",
        "ARRAY_ALL",
        "ARRAY_CONTAINS",
        "ARRAY_LENGTH",
        "EXISTS",
        "NOT_EXISTS",
        "KEY_EXISTS",
        "KEY_PREFIX",
        "KEY_SUFFIX",
        "KEY_CONTAINS",
        "KEY_MATCHES",
        "HEADER_EXISTS",
        "HEADER",
        "TIMESTAMP_AGE",
        "TIMESTAMP_AFTER",
        "TIMESTAMP_BEFORE",
    }
)
TRANSFORM_KEYWORDS = frozenset(
    {
        "EXTRACT",
        "CONSTRUCT",
        "ARRAY_MAP",
        "ARITHMETIC",
        "HASH",
        "STRING",
        "COALESCE",
        "TRY",
        "CACHE_LOOKUP",
        "CACHE_PUT",
    }
)

_COMPARE_OPS: tuple[ast.CompareOp, ...] = ("==", "!=", ">", ">=", "<", "<=")
_AGE_OPS: tuple[ast.AgeOp, ...] = (">", ">=", "<", "<=")
_HASH_ALGORITHMS: dict[str, ast.HashAlgorithm] = {
    "md5": "MD5",
    "sha256": "SHA256",
    "sha-256": "SHA256",
    "sha512": "SHA512",
    "sha-512": "SHA512",
    "murmur64": "MURMUR64",
    "murmur-64": "MURMUR64",
    "murmur128": "MURMUR128",
    "murmur-128": "MURMUR128",
}
_STRING_UNARY: tuple[ast.StringUnaryOpName, ...] = (
    "UPPER",
    "LOWER",
    "TRIM",
    "TRIM_START",
    "TRIM_END",
    "LENGTH",
)
_ARITHMETIC_OPS: tuple[ast.ArithmeticOpName, ...] = ("ADD", "SUB", "MUL", "DIV")

# Rust's ``f64::from_str`` grammar (what StreamForge uses to type literals).
_RUST_F64 = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf|infinity|nan))")
# Rust's ``i64::from_str`` / ``usize::from_str`` grammars (no whitespace, no underscores).
_RUST_INT = re.compile(r"[+-]?[0-9]+")
_RUST_UINT = re.compile(r"\+?[0-9]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_MAX_DEPTH = 64

_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def parse_filter(expr: str) -> ast.Filter:
    """Parse a destination ``filter`` expression (DSL.md "Filters").

    Raises :class:`DslParseError` (position = offset in ``expr``) for anything that does not parse.
    """
    return _guarded(expr, lambda p: p.filter_at(0, len(expr), 0))


def parse_transform(expr: str) -> ast.Transform:
    """Parse a destination ``transform`` expression (DSL.md "Transforms").

    Raises :class:`DslParseError` for anything that does not parse.
    """
    return _guarded(expr, lambda p: p.transform_at(0, len(expr), 0))


def parse_key_transform(expr: str) -> ast.KeyTransform:
    """Parse a ``key_transform``: ``/path``, ``CONSTRUCT:...``, ``HASH:ALG,/path``, a template
    with ``{/path}`` placeholders, or a constant (StreamForge ``parse_key_transform``).

    Raises :class:`DslParseError`.
    """
    return _guarded(expr, lambda p: p.key_transform())


def parse_header_transform(expr: str) -> ast.HeaderTransform:
    """Parse a ``header_transforms`` operation: ``FROM:/path``, ``COPY:header``, ``REMOVE``.

    Raises :class:`DslParseError`.
    """
    return _guarded(expr, lambda p: p.header_transform())


def parse_timestamp(expr: str) -> ast.TimestampRule:
    """Parse a ``timestamp`` rule: ``PRESERVE``, ``CURRENT``, ``FROM:/path``, ``ADD:s``,
    ``SUBTRACT:s`` (seconds, signed 64-bit).

    Raises :class:`DslParseError`.
    """
    return _guarded(expr, lambda p: p.timestamp())


def _guarded(expr: object, run: Callable[[_Parser], _T]) -> _T:
    if not isinstance(expr, str):
        raise DslParseError(repr(expr), 0, "an expression must be a string")
    parser = _Parser(expr)
    try:
        return run(parser)
    except RecursionError:
        raise DslParseError(expr, 0, "expression is nested too deeply") from None


# --------------------------------------------------------------------------------------------
# Regular expressions
# --------------------------------------------------------------------------------------------

_ALLOWED_FLAGS = frozenset("imsU-")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_POSIX_CLASS = re.compile(r"\[:\^?[a-z]+:\]")


def check_regex(pattern: str) -> int | None:
    """Return ``None`` if ``pattern`` is accepted, else the offset of the first problem.

    Use :func:`regex_problem` for the message. The syntax is the Rust ``regex`` crate's (DSL.md "Regular
    expressions"), as far as both DSL backends agree on it: accepted = RE2 (``google-re2``, the Python
    evaluator) compiles it and none of the refusals below applies; the Spark plan runs the same pattern on
    RE2/J, which accepts the same syntax. Every accepted pattern matches in time linear in the input on
    both backends (no backtracking engine is involved anywhere).

    Refused, with the offset of the construct: anything RE2 cannot compile (look-around, back-references,
    atomic groups, possessive quantifiers, ``\\Z``, ``\\u``, ``\\e``, ``(?x)``, conditionals, comments,
    a repetition over 1,000, ...), and these, which RE2 compiles but which Rust reads differently or not
    at all, or which RE2 and RE2/J disagree on: octal escapes ``\\0``/``\\123`` (and ``\\1``), ``\\C``
    (one byte, RE2 only), ``\\Q...\\E``, ``\\<``/``\\>`` (word start/end in Rust, a literal in RE2),
    a ``[`` inside a class other than a POSIX class ``[:alpha:]`` and the class set operators ``&&``,
    ``--``, ``~~`` (nested classes and set operations in Rust, literals in RE2), a ``{`` that does not
    start a ``{n}``/``{n,}``/``{n,m}`` quantifier, inline flags other than ``i``, ``m``, ``s``, ``U``
    (``U`` swaps greedy and lazy, as in Rust), and group names that are not ``[A-Za-z_][A-Za-z0-9_]*`` or
    appear twice (``(?P<name>...)`` and ``(?<name>...)`` are both accepted).

    Known difference from Rust, kept and documented rather than refused: ``\\w``, ``\\d``, ``\\s`` and
    ``\\b`` are ASCII (RE2 and RE2/J have no Unicode-aware ``\\b``, so translating ``\\w`` alone would make
    ``\\b`` and ``\\w`` disagree); Rust's are Unicode. Write ``\\pL``, ``\\p{Nd}``, ``[\\pL\\pN_]`` for
    Unicode classes. Unicode tables follow each engine's version (a newly assigned code point may differ).
    """
    problem = regex_problem(pattern)
    return None if problem is None else problem[0]


def regex_problem(pattern: str) -> tuple[int, str] | None:
    """``(offset, message)`` of the first refused construct in ``pattern``, or ``None`` (see
    :func:`check_regex`). Never raises."""
    found = _scan_regex(pattern)
    if found is not None:
        return found
    try:
        compile_regex(pattern)
    except re2.error as exc:
        return _re2_problem(pattern, exc)
    except UnicodeEncodeError as exc:
        return (exc.start, "invalid regular expression: a lone surrogate is not a character")
    except (OverflowError, RecursionError, ValueError, TypeError) as exc:
        return (0, f"invalid regular expression: {exc}")
    return None


def _re2_problem(pattern: str, exc: re2.error) -> tuple[int, str]:
    """RE2's error as ``(offset, message)``: RE2 says ``"<what>: <the offending fragment>"``, so the offset
    is where that fragment starts (the end of the pattern for a missing ``)``)."""
    raw = exc.args[0] if exc.args else ""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    what, _, fragment = text.partition(": ")
    if what.startswith(("missing )", "unexpected )")):
        position = _unbalanced_paren(pattern)
    else:
        found = pattern.find(fragment) if fragment else -1
        position = max(found, 0)
    return (position, f"invalid regular expression: {text}")


def _unbalanced_paren(p: str) -> int:
    """Offset of the first ``)`` without its ``(``, else of the first ``(`` never closed, else 0
    (escapes and character classes skipped)."""
    opened: list[int] = []
    i, n, in_class = 0, len(p), False
    while i < n:
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            i += 1 if p.startswith("^", i) else 0
            i += 1 if p.startswith("]", i) else 0  # a leading ']' is literal
            continue
        elif c == "(":
            opened.append(i)
        elif c == ")":
            if not opened:
                return i
            opened.pop()
        i += 1
    return opened[0] if opened else 0


_QUANTIFIER_RE = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")


def _scan_regex(p: str) -> tuple[int, str] | None:
    i = 0
    n = len(p)
    in_class = False
    class_start = 0
    after_quantifier = False
    names: set[str] = set()
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                return (i, "invalid regular expression: trailing backslash")
            d = p[i + 1]
            if d.isdigit():
                return (i, "back-references and octal escapes are not supported (Rust regex)")
            if d == "C":
                return (i, r"\C (any single byte) is not supported (Rust regex, RE2/J)")
            if d == "Q":
                return (i, r"\Q...\E quoting is not supported (Rust regex); escape each character")
            if d in "<>":
                return (i, rf"\{d} is a word boundary in Rust regex but a literal elsewhere; use \b")
            if d == "b" and in_class:
                return (i, r"\b inside a character class is not supported")
            if p.startswith("{", i + 2) and d.isalpha():
                if d not in "pPx":
                    return (i, rf"\{d}{{...}} is not supported")
                close = p.find("}", i + 3)
                i = n if close < 0 else close + 1  # \p{Greek}, \x{263a}: RE2 checks the name/number
                after_quantifier = False
                continue
            i += 2
            after_quantifier = False
            continue
        if in_class:
            if c == "]" and i > class_start:
                in_class = False
            elif c == "[":
                posix = _POSIX_CLASS.match(p, i)
                if posix is None:
                    return (i, "nested character classes / set operations are not supported")
                i = posix.end()
                continue
            elif p.startswith(("&&", "--", "~~"), i):
                return (i, "character-class set operators are not supported (a literal in RE2)")
            i += 1
            continue
        if c == "[":
            in_class = True
            j = i + 1
            if j < n and p[j] == "^":
                j += 1
            if j < n and p[j] == "]":
                j += 1  # a leading ']' is literal
            class_start = j
            i = j
            after_quantifier = False
            continue
        if c == "(" and p.startswith("(?", i):
            rest = p[i + 2 : i + 4]
            if rest.startswith(":"):
                i += 3
                after_quantifier = False
                continue
            if rest.startswith(("=", "!", "<=", "<!")):
                return (i, "lookahead/lookbehind is not supported (Rust regex)")
            if rest.startswith(("P<", "<")):
                start = i + (4 if rest.startswith("P<") else 3)
                close = p.find(">", start)
                name = p[start:close] if close >= 0 else ""
                if _GROUP_NAME.fullmatch(name) is None:
                    return (start, "a group name must be letters, digits and '_', not starting with a digit")
                if name in names:
                    return (start, f"the group name {name!r} is used twice")
                names.add(name)
                i = close + 1
                after_quantifier = False
                continue
            if rest.startswith("P"):
                return (i, "(?P=name) back-references are not supported (Rust regex)")
            if rest.startswith(">"):
                return (i, "atomic groups are not supported (Rust regex)")
            if rest.startswith("#"):
                return (i, "(?#...) comments are not supported (Rust regex)")
            if rest.startswith("("):
                return (i, "conditional groups are not supported (Rust regex)")
            j = i + 2
            while j < n and p[j] not in ":)":
                if p[j] not in _ALLOWED_FLAGS:
                    return (j, f"inline flag {p[j]!r} is not supported (only i, m, s, U)")
                j += 1
            i = j
            after_quantifier = False
            continue
        if c in "*+?":
            if c == "+" and after_quantifier:
                return (i, "possessive quantifiers are not supported (Rust regex)")
            # 'a+?' is lazy; a '+' after it is possessive-lazy nonsense RE2 refuses.
            after_quantifier = not (c == "?" and after_quantifier)
            i += 1
            continue
        if c == "{":
            m = _QUANTIFIER_RE.match(p, i)
            if m is None:
                return (i, "a literal '{' must be escaped as '\\{'")
            i = m.end()
            after_quantifier = True
            continue
        after_quantifier = False
        i += 1
    return None


# --------------------------------------------------------------------------------------------
# Literals and numbers
# --------------------------------------------------------------------------------------------


def make_literal(text: str) -> ast.Literal:
    """Type a literal like StreamForge: Rust ``f64`` if it parses, else ``true``/``false``, else text."""
    if _RUST_F64.fullmatch(text):
        return ast.Literal(text, float(text))
    if text == "true":
        return ast.Literal(text, True)
    if text == "false":
        return ast.Literal(text, False)
    return ast.Literal(text, text)


# --------------------------------------------------------------------------------------------
# The parser proper
# --------------------------------------------------------------------------------------------

_Span = tuple[int, int]


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr

    # ---- helpers ---------------------------------------------------------------------------

    def fail(self, pos: int, message: str) -> DslParseError:
        return DslParseError(self.expr, pos, message)

    def text(self, span: _Span) -> str:
        return self.expr[span[0] : span[1]]

    def split(self, start: int, end: int, sep: str, maxsplit: int = -1) -> list[_Span]:
        spans: list[_Span] = []
        pos = start
        while maxsplit < 0 or len(spans) < maxsplit:
            found = self.expr.find(sep, pos, end)
            if found < 0:
                break
            spans.append((pos, found))
            pos = found + len(sep)
        spans.append((pos, end))
        return spans

    def path(self, span: _Span, what: str = "path") -> ast.JsonPath:
        start, end = span
        text = self.expr[start:end]
        if not text:
            raise self.fail(start, f"empty {what}: expected /field")
        if not text.startswith("/"):
            raise self.fail(start, f"{what} {text!r} must start with '/'")
        if text == "/":
            raise self.fail(start, f"empty {what}: '/' names no field")
        empty = text.find("//")
        if empty >= 0:
            raise self.fail(start + empty + 1, f"empty segment in {what} {text!r}")
        if text.endswith("/"):
            raise self.fail(end - 1, f"trailing '/' in {what} {text!r}")
        return ast.JsonPath(text, tuple(text[1:].split("/")))

    def nonempty(self, span: _Span, what: str) -> str:
        text = self.text(span)
        if not text:
            raise self.fail(span[0], f"{what} must not be empty")
        return text

    def regex(self, span: _Span) -> str:
        pattern = self.text(span)
        problem = regex_problem(pattern)
        if problem is not None:
            raise self.fail(span[0] + problem[0], problem[1])
        return pattern

    def i64(self, span: _Span, what: str) -> int:
        text = self.text(span)
        if not _RUST_INT.fullmatch(text):
            raise self.fail(span[0], f"{what} must be an integer, got {text!r}")
        value = int(text)
        if not _I64_MIN <= value <= _I64_MAX:
            raise self.fail(span[0], f"{what} {text!r} is out of the 64-bit range")
        return value

    def usize(self, span: _Span, what: str) -> int:
        text = self.text(span)
        if not _RUST_UINT.fullmatch(text):
            raise self.fail(span[0], f"{what} must be a non-negative integer, got {text!r}")
        value = int(text)
        if value > 2**64 - 1:
            raise self.fail(span[0], f"{what} {text!r} is too large")
        return value

    def compare_op(self, span: _Span) -> ast.CompareOp:
        text = self.text(span)
        for op in _COMPARE_OPS:
            if text == op:
                return op
        raise self.fail(span[0], f"unknown operator {text!r} (expected ==, !=, >, >=, <, <=)")

    def exact_parts(self, span: _Span, count: int, shape: str) -> list[_Span]:
        parts = self.split(span[0], span[1], ",")
        if len(parts) < count:
            raise self.fail(span[1], f"expected {shape}")
        if len(parts) > count:
            raise self.fail(parts[count][0] - 1, f"unexpected ',' (expected {shape})")
        return parts

    def keyword_error(self, start: int, end: int, known: frozenset[str]) -> DslParseError:
        word = self.expr[start:end]
        return self.fail(start, f"unknown keyword {word!r} (expected one of {', '.join(sorted(known))})")

    # ---- filters ---------------------------------------------------------------------------

    def filter_at(self, start: int, end: int, depth: int) -> ast.Filter:
        if depth > _MAX_DEPTH:
            raise self.fail(start, "expression is nested too deeply")
        colon = self.expr.find(":", start, end)
        head_end = end if colon < 0 else colon
        head = self.expr[start:head_end]
        if head in FILTER_KEYWORDS:
            if head == "KEY_EXISTS":
                if colon >= 0:
                    raise self.fail(colon, "KEY_EXISTS takes no argument")
                return ast.KeyExists()
            if colon < 0:
                raise self.fail(end, f"{head} needs ':' and an argument")
            if head in ("AND", "OR"):
                items = self.split(colon + 1, end, ":")
                conditions = self.filter_list(items, depth + 1)
                return ast.And(conditions) if head == "AND" else ast.Or(conditions)
            if head == "NOT":
                return ast.Not(self.filter_at(colon + 1, end, depth + 1))
            return self.single_filter(head, (colon + 1, end), depth)
        if _IDENT.fullmatch(head) and (colon >= 0 or "," not in head):
            raise self.keyword_error(start, head_end, FILTER_KEYWORDS)
        return self.compare((start, end))

    def compare(self, span: _Span, relative: bool = False) -> ast.Compare:
        if not self.text(span):
            raise self.fail(span[0], "empty condition: expected /path,OP,value")
        path_s, op_s, value_s = self.exact_parts(span, 3, "/path,OP,value")
        what = "element path" if relative else "path"
        return ast.Compare(self.path(path_s, what), self.compare_op(op_s), make_literal(self.text(value_s)))

    def filter_list(self, items: list[_Span], depth: int) -> tuple[ast.Filter, ...]:
        if depth > _MAX_DEPTH:
            raise self.fail(items[0][0], "expression is nested too deeply")
        conditions: list[ast.Filter] = []
        i = 0
        while i < len(items):
            node, consumed = self.list_item(items, i, depth)
            conditions.append(node)
            i += consumed
        return tuple(conditions)

    def list_item(self, items: list[_Span], i: int, depth: int) -> tuple[ast.Filter, int]:
        if depth > _MAX_DEPTH:
            raise self.fail(items[i][0], "expression is nested too deeply")
        span = items[i]
        word = self.text(span)
        last = len(items)
        if word in ("AND", "OR"):
            j = i + 1
            while j < last and self.text(items[j]) not in ("AND", "OR", "NOT"):
                j += 1
            if j == i + 1:
                raise self.fail(span[1], f"{word} needs at least one condition")
            group = self.filter_list(items[i + 1 : j], depth + 1)
            node: ast.Filter = ast.And(group) if word == "AND" else ast.Or(group)
            return node, j - i
        if word == "NOT":
            if i + 1 >= last:
                raise self.fail(span[1], "NOT needs a condition")
            inner, consumed = self.list_item(items, i + 1, depth + 1)
            return ast.Not(inner), consumed + 1
        if word == "KEY_EXISTS":
            return ast.KeyExists(), 1
        if word in FILTER_KEYWORDS:
            if i + 1 >= last:
                raise self.fail(span[1], f"{word} needs ':' and an argument")
            rest: _Span = (items[i + 1][0], items[-1][1])
            if word == "REGEX":
                return self.single_filter(word, rest, depth), last - i
            if word == "HEADER" and self.expr.count(",", rest[0], rest[1]) == 2:
                return self.single_filter(word, rest, depth), last - i
            return self.single_filter(word, items[i + 1], depth), 2
        if _IDENT.fullmatch(word):
            raise self.keyword_error(span[0], span[1], FILTER_KEYWORDS)
        return self.compare(span), 1

    def single_filter(self, word: str, span: _Span, depth: int) -> ast.Filter:
        start, end = span
        if word in ("KEY_PREFIX", "KEY_SUFFIX", "KEY_CONTAINS"):
            value = self.nonempty(span, f"{word} argument")
            if word == "KEY_PREFIX":
                return ast.KeyPrefix(value)
            if word == "KEY_SUFFIX":
                return ast.KeySuffix(value)
            return ast.KeyContains(value)
        if word == "KEY_MATCHES":
            self.nonempty(span, "KEY_MATCHES pattern")
            return ast.KeyMatches(self.regex(span))
        if word == "HEADER_EXISTS":
            return ast.HeaderExists(self.nonempty(span, "header name"))
        if word == "HEADER":
            name_s, op_s, value_s = self.exact_parts(span, 3, "HEADER:name,==|!=,value")
            name = self.nonempty(name_s, "header name")
            op_text = self.text(op_s)
            if op_text == "==":
                return ast.HeaderCompare(name, "==", self.text(value_s))
            if op_text == "!=":
                return ast.HeaderCompare(name, "!=", self.text(value_s))
            raise self.fail(op_s[0], f"unknown header operator {op_text!r} (expected == or !=)")
        if word == "TIMESTAMP_AGE":
            op_s, seconds_s = self.exact_parts(span, 2, "TIMESTAMP_AGE:OP,seconds")
            op_text = self.text(op_s)
            age_op = next((op for op in _AGE_OPS if op == op_text), None)
            if age_op is None:
                raise self.fail(op_s[0], f"unknown age operator {op_text!r} (expected <, <=, >, >=)")
            return ast.TimestampAge(age_op, self.i64(seconds_s, "seconds"))
        if word == "TIMESTAMP_AFTER":
            return ast.TimestampAfter(self.i64(span, "epoch_ms"))
        if word == "TIMESTAMP_BEFORE":
            return ast.TimestampBefore(self.i64(span, "epoch_ms"))
        if word == "EXISTS":
            return ast.Exists(self.path(span))
        if word == "NOT_EXISTS":
            return ast.NotExists(self.path(span))
        comma = self.expr.find(",", start, end)
        if word == "ARRAY_LENGTH":
            path_s, op_s, n_s = self.exact_parts(span, 3, "ARRAY_LENGTH:/path,OP,n")
            return ast.ArrayLength(self.path(path_s), self.compare_op(op_s), self.usize(n_s, "length"))
        if comma < 0:
            shapes = {
                "REGEX": "REGEX:/path,pattern",
                "ARRAY_ANY": "ARRAY_ANY:/path,/elem,OP,value",
                "ARRAY_ALL": "ARRAY_ALL:/path,/elem,OP,value",
                "ARRAY_CONTAINS": "ARRAY_CONTAINS:/path,value",
            }
            raise self.fail(end, f"expected {shapes.get(word, word)}")
        path = self.path((start, comma))
        tail: _Span = (comma + 1, end)
        if word == "REGEX":
            return ast.Regex(path, self.regex(tail))
        if word == "ARRAY_ANY":
            return ast.ArrayAny(path, self.compare(tail, relative=True))
        if word == "ARRAY_ALL":
            return ast.ArrayAll(path, self.compare(tail, relative=True))
        if word == "ARRAY_CONTAINS":
            return ast.ArrayContains(path, make_literal(self.text(tail)))
        raise self.fail(start, f"{word} cannot be used here")  # pragma: no cover - exhaustive

    # ---- transforms ------------------------------------------------------------------------

    def transform_at(self, start: int, end: int, depth: int) -> ast.Transform:
        if depth > _MAX_DEPTH:
            raise self.fail(start, "expression is nested too deeply")
        text = self.expr[start:end]
        if not text:
            raise self.fail(start, "empty transform: expected /path or KEYWORD:...")
        if text.startswith("/"):
            return ast.Extract(self.path((start, end)))
        colon = self.expr.find(":", start, end)
        head = self.expr[start : end if colon < 0 else colon]
        if head not in TRANSFORM_KEYWORDS:
            if _IDENT.fullmatch(head):
                raise self.keyword_error(start, start + len(head), TRANSFORM_KEYWORDS)
            raise self.fail(start, "a transform must be /path or KEYWORD:arguments")
        if colon < 0:
            raise self.fail(end, f"{head} needs ':' and arguments")
        body: _Span = (colon + 1, end)
        method = cast(Callable[[_Span, int], ast.Transform], getattr(self, "t_" + head.lower()))
        return method(body, depth)

    def optional_field(self, span: _Span | None) -> str | None:
        if span is None or span[0] == span[1]:
            return None
        return self.text(span)

    def t_extract(self, body: _Span, depth: int) -> ast.Transform:
        parts = self.split(body[0], body[1], ",", 1)
        path = self.path(parts[0])
        if len(parts) == 1:
            return ast.Extract(path)
        return ast.Extract(path, self.nonempty(parts[1], "EXTRACT field name"))

    def construct_fields(self, body: _Span) -> tuple[tuple[str, ast.JsonPath], ...]:
        fields: list[tuple[str, ast.JsonPath]] = []
        seen: set[str] = set()
        for item in self.split(body[0], body[1], ":"):
            pieces = self.split(item[0], item[1], "=")
            if len(pieces) != 2:
                pos = item[1] if len(pieces) < 2 else pieces[2][0] - 1
                raise self.fail(pos, "expected field=/path")
            name = self.nonempty(pieces[0], "CONSTRUCT field name")
            if name in seen:
                raise self.fail(pieces[0][0], f"duplicate CONSTRUCT field {name!r}")
            seen.add(name)
            fields.append((name, self.path(pieces[1])))
        return tuple(fields)

    def t_construct(self, body: _Span, depth: int) -> ast.Transform:
        return ast.Construct(self.construct_fields(body))

    def t_array_map(self, body: _Span, depth: int) -> ast.Transform:
        parts = self.split(body[0], body[1], ",", 1)
        if len(parts) < 2:
            raise self.fail(body[1], "expected ARRAY_MAP:/path,/elemPath")
        return ast.ArrayMap(self.path(parts[0]), self.path(parts[1], "element path"))

    def t_arithmetic(self, body: _Span, depth: int) -> ast.Transform:
        op_s, left_s, right_s = self.exact_parts(body, 3, "ARITHMETIC:OP,/left,/right-or-number")
        op_text = self.text(op_s)
        op = next((o for o in _ARITHMETIC_OPS if o == op_text), None)
        if op is None:
            raise self.fail(
                op_s[0], f"unknown arithmetic operation {op_text!r} (expected ADD, SUB, MUL, DIV)"
            )
        left = self.path(left_s)
        right_text = self.text(right_s)
        right: ast.JsonPath | ast.NumberLiteral
        if right_text.startswith("/"):
            right = self.path(right_s)
        elif _RUST_F64.fullmatch(right_text) and math.isfinite(float(right_text)):
            right = ast.NumberLiteral(right_text, float(right_text))
        else:
            raise self.fail(right_s[0], f"right operand {right_text!r} must be a /path or a finite number")
        return ast.Arithmetic(op, left, right)

    def hash_algorithm(self, span: _Span) -> tuple[ast.HashAlgorithm, str]:
        text = self.text(span)
        algorithm = _HASH_ALGORITHMS.get(text.lower()) if text.isascii() else None
        if algorithm is None:
            raise self.fail(
                span[0],
                f"unknown hash algorithm {text!r} (expected MD5, SHA256, SHA512, MURMUR64, MURMUR128)",
            )
        return algorithm, text

    def t_hash(self, body: _Span, depth: int) -> ast.Transform:
        parts = self.split(body[0], body[1], ",")
        if len(parts) < 2:
            raise self.fail(body[1], "expected HASH:ALG,/path[,field]")
        if len(parts) > 3:
            raise self.fail(parts[3][0] - 1, "unexpected ',' (expected HASH:ALG,/path[,field])")
        algorithm, text = self.hash_algorithm(parts[0])
        path = self.path(parts[1])
        field = self.nonempty(parts[2], "HASH field name") if len(parts) == 3 else None
        return ast.Hash(algorithm, path, field, text)

    def t_string(self, body: _Span, depth: int) -> ast.Transform:
        parts = self.split(body[0], body[1], ",", 1)
        op_s = parts[0]
        op = self.text(op_s)
        rest: _Span = parts[1] if len(parts) == 2 else (body[1], body[1])
        known = (*_STRING_UNARY, "SUBSTRING", "REPLACE", "REPLACE_ALL", "REGEX_REPLACE", "SPLIT", "CONCAT")
        if len(parts) < 2 and op in known:
            raise self.fail(body[1], f"STRING:{op} needs arguments")
        unary = next((u for u in _STRING_UNARY if u == op), None)
        if unary is not None:
            pieces = self.split(rest[0], rest[1], ",", 1)
            field = self.optional_field(pieces[1] if len(pieces) == 2 else None)
            return ast.StringUnary(unary, self.path(pieces[0]), field)
        if op == "SUBSTRING":
            pieces = self.split(rest[0], rest[1], ",", 3)
            if len(pieces) < 2:
                raise self.fail(rest[1], "expected STRING:SUBSTRING,/path,start[,length][,field]")
            path = self.path(pieces[0])
            start = self.usize(pieces[1], "start index")
            length: int | None = None
            field = None
            if len(pieces) >= 3:
                third = self.text(pieces[2])
                if _RUST_UINT.fullmatch(third):
                    length = self.usize(pieces[2], "length")
                    field = self.optional_field(pieces[3] if len(pieces) == 4 else None)
                else:
                    field = self.nonempty(pieces[2], "SUBSTRING field name")
                    if len(pieces) == 4:
                        raise self.fail(pieces[3][0] - 1, "unexpected argument after the field name")
            return ast.StringSubstring(path, start, length, field)
        if op in ("REPLACE", "REPLACE_ALL", "REGEX_REPLACE"):
            pieces = self.split(rest[0], rest[1], ",", 3)
            if len(pieces) < 3:
                shape = "pattern,replacement" if op == "REGEX_REPLACE" else "from,to"
                raise self.fail(rest[1], f"expected STRING:{op},/path,{shape}[,field]")
            path = self.path(pieces[0])
            field = self.optional_field(pieces[3] if len(pieces) == 4 else None)
            if op == "REGEX_REPLACE":
                pattern = self.regex(pieces[1])
                return ast.StringRegexReplace(path, pattern, self.text(pieces[2]), field)
            old = self.nonempty(pieces[1], "REPLACE 'from' text")
            return ast.StringReplace(path, old, self.text(pieces[2]), op == "REPLACE_ALL", field)
        if op == "SPLIT":
            pieces = self.split(rest[0], rest[1], ",", 2)
            if len(pieces) < 2:
                raise self.fail(rest[1], "expected STRING:SPLIT,/path,delimiter[,field]")
            delimiter = self.nonempty(pieces[1], "SPLIT delimiter")
            field = self.optional_field(pieces[2] if len(pieces) == 3 else None)
            return ast.StringSplit(self.path(pieces[0]), delimiter, field)
        if op == "CONCAT":
            pieces = self.split(rest[0], rest[1], ",")
            if len(pieces) < 2:
                raise self.fail(rest[1], "expected STRING:CONCAT,field,part,...")
            field_name = self.nonempty(pieces[0], "CONCAT field name")
            concat_parts: list[ast.JsonPath | str] = []
            for piece in pieces[1:]:
                text = self.nonempty(piece, "CONCAT part")
                concat_parts.append(self.path(piece) if text.startswith("/") else text)
            return ast.StringConcat(field_name, tuple(concat_parts))
        if _IDENT.fullmatch(op):
            raise self.fail(op_s[0], f"unknown STRING operation {op!r}")
        raise self.fail(op_s[0], "expected STRING:OPERATION,...")

    def t_coalesce(self, body: _Span, depth: int) -> ast.Transform:
        pieces = self.split(body[0], body[1], ",")
        default: ast.Literal | None = None
        if len(pieces) > 1 and not self.text(pieces[-1]).startswith("/"):
            literal = make_literal(self.text(pieces[-1]))
            if isinstance(literal.value, float) and not math.isfinite(literal.value):
                raise self.fail(pieces[-1][0], "a COALESCE default must be a finite number")
            default = literal
            pieces = pieces[:-1]
        return ast.Coalesce(tuple(self.path(p) for p in pieces), default)

    def t_try(self, body: _Span, depth: int) -> ast.Transform:
        comma = self.expr.rfind(",", body[0], body[1])
        if comma < 0:
            raise self.fail(body[1], "expected TRY:transform,fallback")
        inner = self.transform_at(body[0], comma, depth + 1)
        fallback_span: _Span = (comma + 1, body[1])
        return ast.Try(inner, self.text(fallback_span), self.fallback(fallback_span))

    def fallback(self, span: _Span) -> ast.JSONValue:
        text = self.text(span)
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            return text[1:-1]
        if text == "null":
            return None
        if text in ("true", "false"):
            return text == "true"
        if _RUST_INT.fullmatch(text) and _I64_MIN <= int(text) <= _I64_MAX:
            return int(text)
        if _RUST_F64.fullmatch(text):
            number = float(text)
            if not math.isfinite(number):
                raise self.fail(span[0], f"fallback {text!r} is not a finite number")
            return number
        try:
            return decode_json_text(text)
        except ValueError:
            raise self.fail(
                span[0], f"fallback {text!r} is not a quoted string, number, boolean, null or JSON"
            ) from None

    def t_cache_lookup(self, body: _Span, depth: int) -> ast.Transform:
        pieces = self.split(body[0], body[1], ",", 2)
        if len(pieces) < 3:
            raise self.fail(body[1], "expected CACHE_LOOKUP:/keyPath,store,field|MERGE")
        store = self.nonempty(pieces[1], "store name")
        output = self.nonempty(pieces[2], "CACHE_LOOKUP field name (or MERGE)")
        return ast.CacheLookup(self.path(pieces[0]), store, None if output == "MERGE" else output)

    def t_cache_put(self, body: _Span, depth: int) -> ast.Transform:
        pieces = self.split(body[0], body[1], ",", 2)
        if len(pieces) < 2:
            raise self.fail(body[1], "expected CACHE_PUT:/keyPath,store[,/valuePath]")
        store = self.nonempty(pieces[1], "store name")
        value_path = self.path(pieces[2], "value path") if len(pieces) == 3 else None
        return ast.CachePut(self.path(pieces[0]), store, value_path)

    # ---- destination-level forms -----------------------------------------------------------

    def key_transform(self) -> ast.KeyTransform:
        expr = self.expr
        end = len(expr)
        if not expr:
            raise self.fail(0, "empty key_transform")
        if expr.startswith("CONSTRUCT:"):
            return ast.KeyConstruct(self.construct_fields((10, end)))
        if expr.startswith("HASH:"):
            alg_s, path_s = self.exact_parts((5, end), 2, "HASH:ALG,/path")
            algorithm, text = self.hash_algorithm(alg_s)
            return ast.KeyHash(algorithm, self.path(path_s), text)
        if expr.startswith("/"):
            return ast.KeyFromPath(self.path((0, end)))
        if "{/" in expr:
            parts: list[str | ast.JsonPath] = []
            pos = 0
            for match in re.finditer(r"\{(/[^}]+)\}", expr):
                if match.start() > pos:
                    parts.append(expr[pos : match.start()])
                parts.append(self.path((match.start(1), match.end(1)), "placeholder path"))
                pos = match.end()
            if pos < end:
                parts.append(expr[pos:])
            return ast.KeyTemplate(expr, tuple(parts))
        return ast.KeyConstant(expr)

    def header_transform(self) -> ast.HeaderTransform:
        expr = self.expr
        if expr.startswith("FROM:"):
            return ast.HeaderFrom(self.path((5, len(expr))))
        if expr.startswith("COPY:"):
            return ast.HeaderCopy(self.nonempty((5, len(expr)), "source header name"))
        if expr == "REMOVE":
            return ast.HeaderRemove()
        head = expr.split(":", 1)[0]
        if _IDENT.fullmatch(head):
            raise self.fail(0, f"unknown header operation {head!r} (expected FROM:, COPY:, REMOVE)")
        raise self.fail(0, "expected FROM:/path, COPY:header or REMOVE")

    def timestamp(self) -> ast.TimestampRule:
        expr = self.expr
        if expr == "PRESERVE":
            return ast.TimestampPreserve()
        if expr == "CURRENT":
            return ast.TimestampCurrent()
        if expr.startswith("FROM:"):
            return ast.TimestampFrom(self.path((5, len(expr))))
        if expr.startswith("ADD:"):
            return ast.TimestampAdd(self.i64((4, len(expr)), "seconds"))
        if expr.startswith("SUBTRACT:"):
            return ast.TimestampSubtract(self.i64((9, len(expr)), "seconds"))
        head = expr.split(":", 1)[0]
        if head in ("PRESERVE", "CURRENT"):
            raise self.fail(len(head), f"{head} takes no argument")
        if _IDENT.fullmatch(head):
            raise self.fail(
                0,
                f"unknown timestamp operation {head!r} (expected PRESERVE, CURRENT, FROM:, ADD:, SUBTRACT:)",
            )
        raise self.fail(0, "expected PRESERVE, CURRENT, FROM:/path, ADD:seconds or SUBTRACT:seconds")
