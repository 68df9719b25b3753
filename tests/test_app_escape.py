"""The app's one escaping helper (app/common.py esc / quoted / code): text from a user, a file or a run, put into
Markdown, renders as exactly that text: no HTML tag, image, link, emphasis, directive or formula forms."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from app.common import code, esc, quoted

HOSTILE = [
    '<img src="http://127.0.0.2/x.png">',
    "![x](http://127.0.0.2/y.png)",
    "[click](javascript:alert(1)) <http://127.0.0.2/auto>",
    "**bold** _it_ ~~gone~~ `tick` ``two``",
    ":red[colour] :material/home: $x^2$ $$y$$",
    "&lt;img src=x&gt; &#60;script&#62;",
    "line one\n# heading\n    indented\n> quote\n- item",
    "trailing backslash \\",
    "\\![x](http://127.0.0.2/z.png)",
    "- a list item", "+ another", "12. numbered", "3) numbered", "  * starred",
]
PLAIN = ["20261204-160609-attribute-3b5845", "activation_patching on 3 prompts: about 4 s", "Cannot read 'x.jsonl'",
         "3.5 prompts", "HF_HUB_OFFLINE is set"]

md = MarkdownIt("commonmark", {"html": True}).enable("strikethrough")  # raw HTML on: the worst case


def rendered(text: str) -> str:
    """The text as a block of its own (list items and headings form only there); the paragraph's tags off."""
    out = md.render(text).strip()
    return out.removeprefix("<p>").removesuffix("</p>")


@pytest.mark.parametrize("text", HOSTILE)
def test_escaped_text_renders_as_itself(text):
    out = rendered(esc(text))
    assert not re.search(r"<(img|a|script|em|strong|code|s|h\d|blockquote|li|ul|ol)\b", out), out
    # the same characters, nothing lost or added (a paragraph's leading spaces are Markdown's to drop)
    assert html.unescape(out) == " ".join(text.splitlines()).strip()


@pytest.mark.parametrize("text", HOSTILE)
def test_quoted_is_the_repr(text):
    assert html.unescape(rendered(quoted(text))) == repr(text).strip()


@pytest.mark.parametrize("text", HOSTILE + ["a ` b", "``", "`"])
def test_code_span_holds_the_text(text):
    out = rendered(code(text))
    assert out.startswith("<code>") and out.endswith("</code>") and out.count("<code>") == 1, out
    assert html.unescape(out[len("<code>"):-len("</code>")]).strip() == " ".join(text.splitlines()).strip()


@pytest.mark.parametrize("text", PLAIN)
def test_plain_text_is_left_as_it_is(text):
    """Only what would make Markdown is escaped: ids, names with inner underscores and messages read as typed."""
    assert esc(text) == text
