"""Runbook markdown to HTML, safely: every character of the source is HTML-escaped first, then a small
subset of markdown is turned into tags this module writes itself, so nothing an author types can become
markup, a script or an event handler.

The subset is what runbooks use: ``#``/``##``/``###`` headings, paragraphs, ``-``/``*`` and ``1.`` lists,
fenced code blocks (```), inline ``code``, ``**bold**``, ``*italic*`` and ``[text](url)`` links whose url is
``http(s)://host...`` or a path on this site (``/dlq/...``; not ``//host`` or ``/\\host``, which browsers
take to another site). Anything else is shown as the text it is.

Server-side on purpose: one small, tested function instead of a vendored parser plus a sanitizer in every
browser, and the page is complete without JavaScript.
"""

from __future__ import annotations

import html
import re

from django.utils.safestring import SafeString, mark_safe

_HEADING = re.compile(r"^(#{1,3})\s+(.*)$")
_BULLET = re.compile(r"^\s*[-*]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.*)$")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
# A link goes to an absolute http(s) URL or to a path on this site, nowhere else. Browsers read "\\" as "/"
# and drop tabs and newlines inside a URL, so "//evil", "/\\evil" and "/<tab>/evil" all leave the site (a
# protocol-relative URL); "javascript:" and the like never match. Hence: no backslash, no whitespace, no
# control character anywhere, and a site path's second character is neither "/" nor "\\".
_URL_CHARS = r"[^\s\"'<>`\\\x00-\x1f\x7f-\x9f]"
_SAFE_URL = re.compile(rf"(?:https?://[A-Za-z0-9\[]|/(?![/\\]))(?:{_URL_CHARS})*")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*(?=\S)(.+?)(?<=\S)\*(?![*\w])")


def _inline(text: str) -> str:
    """Inline markup of one escaped line; code spans are left exactly as written."""
    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1 and i < len(parts) - 1:  # between two backticks
            out.append(f"<code>{part}</code>")
            continue
        if i % 2 == 1:  # an unpaired backtick is just a character
            part = "`" + part
        part = _LINK.sub(_link, part)
        part = _BOLD.sub(r"<strong>\1</strong>", part)
        part = _ITALIC.sub(r"<em>\1</em>", part)
        out.append(part)
    return "".join(out)


def _link(match: re.Match[str]) -> str:
    label, url = match.group(1), match.group(2)
    # The url was escaped with the rest (& -> &amp;), which is also what an href attribute needs.
    if not _SAFE_URL.fullmatch(html.unescape(url)):
        return match.group(0)
    external = url.startswith("http")
    rel = ' rel="noopener noreferrer" target="_blank"' if external else ""
    return f'<a href="{url}"{rel}>{label}</a>'


def render(source: str) -> SafeString:
    """The markdown ``source`` as safe HTML (see the module docstring for the subset)."""
    lines = html.escape(source.replace("\r\n", "\n"), quote=True).split("\n")
    out: list[str] = []
    paragraph: list[str] = []
    list_tag: str | None = None
    code: list[str] | None = None

    def close_paragraph() -> None:
        if paragraph:
            out.append("<p>" + " ".join(_inline(p) for p in paragraph) + "</p>")
            paragraph.clear()

    def close_list() -> None:
        nonlocal list_tag
        if list_tag:
            out.append(f"</{list_tag}>")
            list_tag = None

    for line in lines:
        if code is not None:
            if line.strip().startswith("```"):
                out.append('<pre class="code">' + "\n".join(code) + "</pre>")
                code = None
            else:
                code.append(line)
            continue
        if line.strip().startswith("```"):
            close_paragraph()
            close_list()
            code = []
            continue
        if not line.strip():
            close_paragraph()
            close_list()
            continue
        heading = _HEADING.match(line)
        if heading:
            close_paragraph()
            close_list()
            level = len(heading.group(1)) + 2  # h3..h5: a runbook sits inside a card under the page's h1/h2
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
            continue
        item = _BULLET.match(line)
        numbered = None if item else _NUMBERED.match(line)
        if item or numbered:
            close_paragraph()
            tag = "ul" if item else "ol"
            if list_tag != tag:
                close_list()
                out.append(f"<{tag}>")
                list_tag = tag
            found = item or numbered
            assert found is not None
            out.append(f"<li>{_inline(found.group(1))}</li>")
            continue
        close_list()
        paragraph.append(line.strip())
    if code is not None:  # an unclosed fence still shows its lines
        out.append('<pre class="code">' + "\n".join(code) + "</pre>")
    close_paragraph()
    close_list()
    return mark_safe("\n".join(out))  # noqa: S308  # built only from escaped text and our own tags
