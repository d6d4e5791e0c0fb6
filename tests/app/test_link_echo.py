"""Values a link carries are echoed back short and literal: no markup, no link, no image (issue 29, item 7)."""

from __future__ import annotations

import re

import pytest
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: F401
from markdown_it import MarkdownIt

from app.model.messages import ZERO_WIDTH_SPACE, plain
from app.model.params import ECHO_MAX_CHARS, from_query

HOSTILE = [
    "[Session expired: sign in again](https://example.invalid/login)",
    "see https://example.invalid/a or www.example.invalid or mail x@example.invalid",
    "![x](https://example.invalid/pixel.png)",
    "<img src=https://example.invalid/a.png>",
    "**bold** _it_ `code` # head",
    "x" * 20_000,
]


@pytest.mark.parametrize("value", HOSTILE, ids=["link", "bare-addresses", "image", "img-tag", "emphasis", "long"])
def test_a_hostile_value_is_shown_literally_and_short(value):
    _, problems = from_query({"city": value})
    (problem,) = problems
    assert len(problem) < ECHO_MAX_CHARS + 120
    html = MarkdownIt("commonmark").render(plain(problem))
    assert "<a " not in html and "<img" not in html and "<strong>" not in html and "<em>" not in html
    assert "<code>" not in html and "<h1>" not in html
    # Bare addresses (which GitHub-flavoured renderers, Streamlit's too, turn into links) are broken up by a
    # zero-width space, which a reader does not see.
    text = plain(problem)
    assert not re.search(r"(?i)://|www\.|\w\\?@", text), text
    # What a reader sees is the text itself (up to the cut).
    shown = " ".join(value.split())[: ECHO_MAX_CHARS - 1]
    assert shown[:20] in html.replace("&lt;", "<").replace("&gt;", ">").replace(ZERO_WIDTH_SPACE, "")


def test_the_warnings_of_a_hostile_link():
    at = make_app(city=HOSTILE[0], K="x" * 5000)
    run_ok(at)
    toasts = [t.value for t in at.warning if t.value.startswith("Link parameter")]
    assert len(toasts) == 2 and all(len(t) < 300 for t in toasts), toasts
    assert all("](" not in t.replace(r"\](", "") for t in toasts)  # a link's "](" only ever escaped
    assert any(r"city=\[Session expired: sign in again\]\(https:" in t for t in toasts)  # literal, cut at 40
