"""A hostile link's values, echoed in a real Chromium: the warnings show them as text, short, and load nothing.

`streamlit run app` on a loopback port (the fixtures of browser_support.py): markdown links, images, HTML, character
references, Streamlit's own icon and emoji shortcodes and a right-to-left override go into a link; each warning must
read as the literal sentence app.model.params wrote (the value cut at ECHO_MAX_CHARS), with no link, image or icon in
it, and the page must ask no other host for anything.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest
from browser_support import CHROMIUM, LOCAL_HOSTS, browser, server  # noqa: F401 (fixtures)

from app.model.messages import ZERO_WIDTH_SPACE
from app.model.params import from_query

pytestmark = pytest.mark.browser

assert CHROMIUM
#: One link per page load: a few hostile values each.
LINKS = [
    {
        "city": "[Session expired: sign in again](https://example.invalid/login)",
        "preset": "![x](https://example.invalid/pixel.png)",
        "decay": "<img src=https://example.invalid/a.png>",
    },
    {
        "city": "x :material/warning: :smile: y",
        "preset": "&lt;b&gt; &amp; &copy; **b** _i_ `c`",
        "decay": "\u202eevil\u202c www.example.invalid a@example.invalid",
    },
    {"city": "x" * 20_000, "loss": "$x^2$ ~~s~~ # h", "prior": ":red[red] :blue-background[b]"},
]


LINK_WARNING = '[data-testid="stAlert"]:has-text("Link parameter")'


def _warnings(page, count: int) -> list[dict]:
    """The link warnings' visible text and what they hold (links, images, icons), once ``count`` are shown."""
    page.locator(LINK_WARNING).nth(count - 1).wait_for(timeout=120_000)
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="stAlert"]')]
            .filter(t => t.innerText.includes('Link parameter')).map(t => {
            const body = t.querySelector('[data-testid="stMarkdownContainer"]') || t;
            return {
                text: body.innerText,
                links: body.querySelectorAll('a').length,
                images: body.querySelectorAll('img').length,
                icons: body.querySelectorAll('[data-testid="stIconMaterial"], [data-testid="stIconEmoji"]').length,
                tags: [...body.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
            };
        })"""
    )


@pytest.mark.parametrize("query", LINKS, ids=["links-images-html", "references-icons-bidi", "long-maths-colours"])
def test_a_hostile_link_is_echoed_as_plain_text(server, browser, query):  # noqa: F811
    _, problems = from_query(query)
    assert len(problems) == len(query)
    expected = [" ".join(f"Link parameter {p}".split()) for p in problems]
    foreign: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("request", lambda r: foreign.append(r.url) if urlsplit(r.url).hostname not in LOCAL_HOSTS else None)
    try:
        page.goto(f"{server}/?{urlencode(query)}", wait_until="domcontentloaded")
        toasts = _warnings(page, len(expected))
        anchors = page.evaluate(  # the addresses of the links the warnings hold (none)
            """() => [...document.querySelectorAll('[data-testid="stAlert"] [data-testid="stMarkdownContainer"] a')]
                .map(e => e.href)"""
        )
    finally:
        page.close()
    shown = sorted(" ".join(t["text"].replace(ZERO_WIDTH_SPACE, "").split()) for t in toasts)  # it reads the same
    assert shown == sorted(expected), (shown, expected)
    for toast in toasts:
        assert toast["links"] == toast["images"] == toast["icons"] == 0, (toast, anchors)
        assert set(toast["tags"]) <= {"p", "span", "div"}, toast["tags"]  # no strong, em, code, del, math, h1
    assert not foreign, foreign
