"""Every value a link carries, fuzzed: a plain message, never a traceback (issue 29, items 5 and 7).

The parser (app.model.params.from_query and read_page_query) is fuzzed with many examples; the dashboard itself
(AppTest, the real script with the real sidebar and pages) with a few, on the Lesson and on Explore. A value the
parser rejects must come back as a warning that echoes it short and literally; a value it accepts must give a valid
view; nothing may raise.
"""

from __future__ import annotations

import dataclasses
import math
import re
from html import unescape
from urllib.parse import parse_qs, urlencode

import pytest
from apptest_support import SMALL, clear_caches, make_app, release_resources  # noqa: F401
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from streamlit.runtime.state.query_params import CLIENT_STATE_QUERY_STRING_MAX_LENGTH, sanitize_query_string

from app.model.messages import ZERO_WIDTH_SPACE, plain

#: Every key of the view's link (to_query of views that use every optional key, and of each kind of source).
from app.model.page_links import PAGE_QUERY, page_query, read_page_query
from app.model.params import ECHO_MAX_CHARS, RANGES, Params, from_query, parse_source, to_config, to_query

VIEW_KEYS = tuple(
    dict.fromkeys(
        key
        for p in (
            Params(loss="road", n_tasks=3, prior="poi", gamma_km=0.3),
            Params(source="bbox:12.2,41.6,12.8,42.1"),
            Params(source="file:0123456789abcdef"),
        )
        for key in to_query(p)
    )
)
LINK_KEYS = VIEW_KEYS + tuple(PAGE_QUERY)
#: The view's fields bounded by RANGES (link key -> Params field).
BOUNDED = {
    "n_records": "n_records",
    "n_users": "n_users",
    "n_outputs": "n_outputs",
    "seed": "seed",
    "epsilon_per_km": "epsilon_per_km",
    "alpha": "alpha",
    "lambda_per_km": "lambda_per_km",
    "neighbourhood_size": "neighbourhood_size",
    "lp_time_limit_s": "lp_time_limit_s",
    "n_tasks": "n_tasks",
}

LONG = "x" * 20_000
MD_LINK = "[Session expired: sign in again](https://example.invalid/login)"
HTML = "<img src=x onerror=alert(1)>"
#: The values issue 29 names (non-finite and huge numbers, -0, unicode, markup, 20,000 characters, empty), with
#: near misses of valid ones: every one goes to every key below.
HOSTILE = [
    "inf",
    "-inf",
    "Infinity",
    "nan",
    "-nan",
    "1e999",
    "-1e999",
    "1e-999",
    "-0",
    "-0.0",
    "5e-324",
    "2147483648",
    "9" * 400,  # a float overflows to inf
    "9" * 4_301,  # more digits than int() accepts
    "200.5",
    "0x10",
    "1_000",
    "１２",  # full-width digits
    "٣",  # Arabic-Indic digit
    "\u200b5",  # zero-width space
    "",
    " ",
    "\x00",
    "nan,nan,nan,nan",
    "inf,0,1,1",
    "-180,-90,180,90",
    "1,2,3",
    "é🙂" * 30,
    MD_LINK,
    "![x](https://example.invalid/pixel.png)",
    "<script>alert(1)</script>",
    HTML,
    "&lt;b&gt; &amp; &copy;",
    "\u202eevil\u202c",  # a right-to-left override
    "**bold** _it_ `code` # head $x^2$ ~~s~~",
    "javascript:alert(1) www.example.invalid a@example.invalid",
    "../../etc/passwd",
    LONG,
]
#: Valid values of some key or other (so that fuzzed links mix valid and invalid values).
VALID = [
    "neubrandenburg",
    "KOTKA",
    "0123456789abcdef",
    "13.25,53.55,13.26,53.56",
    "e",
    "logistic",
    "paper",
    "recommended",
    "auto",
    "all",
    "none",
    "road",
    "poi",
    "csv:0123456789abcdef",
    "time",
    "roads,users",
    "em,lp-ca",
    "8",
    "20",
    "em-br",
    "attacker",
    "curve",
    "0",
    "1",
    "3",
    "12",
    "0.3",
    "5.5",
    "1e-05",
]

values = st.one_of(
    st.sampled_from(HOSTILE),
    st.sampled_from(VALID),
    st.text(max_size=60),  # any unicode (surrogates excluded: a URL cannot carry them)
    st.text(alphabet="0123456789.-+eE,_ infa", max_size=25),  # near-numbers
    st.integers().map(str),
    st.floats().map(repr),
)
#: One value, or a repeated key (?K=1&K=2: the last one wins).
link_values = st.one_of(values, st.lists(values, min_size=2, max_size=3))
queries = st.dictionaries(
    st.one_of(st.sampled_from(LINK_KEYS), st.sampled_from(["junk", "code", "me"]), st.text(min_size=1, max_size=8)),
    link_values,
    max_size=8,
)


def as_received(query: dict) -> dict[str, str]:
    """The query as the dashboard reads it: encoded into a URL, parsed back, the last of repeated values
    (what ``st.query_params.to_dict()`` gives). Streamlit drops a whole query string over its limits (512 Ki
    characters, 1000 parameters) before the script runs: then the dashboard reads nothing."""
    encoded = sanitize_query_string(urlencode(query, doseq=True))
    parsed = parse_qs(encoded, keep_blank_values=True)
    return {key: vals[-1] for key, vals in parsed.items()}


def problems_of(query: dict) -> list[str]:
    return from_query(query)[1] + read_page_query(query)[1]


def named_key(problem: str) -> str:
    m = re.match(r"'([^=']+)=", problem)
    assert m, problem
    return m.group(1)


def same_view(a: Params, b: Params) -> bool:
    """Equal views, floats within a relative 1e-12 (the link writes 0.3 for 0.30000000000000004)."""
    pairs = zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    return all(math.isclose(x, y, rel_tol=1e-12) if isinstance(x, float) else x == y for x, y in pairs)


def check_sentence(problem: str) -> None:
    """One short line, rendered by markdown literally: no link, image, emphasis, code, heading or HTML."""
    assert "\n" not in problem and problem.endswith(": ignored."), problem
    assert len(problem) <= ECHO_MAX_CHARS + 150, problem
    toast = plain(f"Link parameter {problem}")
    html = MarkdownIt("commonmark").render(toast).strip()
    assert html.startswith("<p>") and html.endswith("</p>"), html
    inner = html[3:-4]
    assert "<" not in inner, html  # no tag at all (a "<" of the value is shown as &lt;)
    # What a reader sees is the sentence itself, the value cut at ECHO_MAX_CHARS (zero-width spaces break addresses).
    seen = unescape(inner).replace(ZERO_WIDTH_SPACE, "")
    assert seen == " ".join(f"Link parameter {problem}".split()), (seen, problem)
    assert not re.search(r"(?<!\\)://", toast) and "www." not in toast and not re.search(r"(?<!\\)@", toast)


# --------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------


def test_the_fuzz_knows_every_key_of_the_link():
    assert {"city", "bbox", "file", "K", "N", "M", "seed", "eps", "delta", "alpha", "lambda", "gamma"} <= set(VIEW_KEYS)
    assert {"loss", "tasks", "prior", "Gamma", "radius", "lb", "lbtime", "decay", "preset"} <= set(VIEW_KEYS)
    assert {"tab", "present", "user", "place", "k", "layers", "baselines"} <= set(LINK_KEYS)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=queries)
@example(query={"K": ["30", "40"], "city": ["atlantis", "kotka"]})  # repeated keys: the last one wins
@example(query={"city": "", "bbox": "", "file": ""})
@example(query={"file": "0123456789abcdef", "bbox": "13.25,53.55,13.26,53.56", "city": "kotka"})
@example(query={"user": "9" * 4_000, "place": "99999999999999999999", "k": "1e999"})
@example(query={"eps": "5.1234567", "alpha": "0.123456789", "lbtime": "1.0000001"})
def test_the_parser_answers_every_link_with_a_valid_view_and_one_sentence_per_bad_value(query):
    for q in (query, as_received(query)):
        p, problems = from_query(q)
        values, page_problems = read_page_query(q)
        # A valid view: every bounded field in its range, a source the app can read, a config panda accepts.
        for field in BOUNDED.values():
            low, high = RANGES[field]
            value = getattr(p, field)
            assert math.isfinite(value) and low <= value <= high, (field, value)
            if field in ("n_records", "n_users", "n_outputs", "seed", "neighbourhood_size", "n_tasks"):
                assert type(value) is int, (field, value)
        parse_source(p.source)
        to_config(p)
        # The link the dashboard writes back reads again as the same view (up to 1e-12), without a problem.
        back, no_problems = from_query(to_query(p))
        assert no_problems == [] and same_view(back, p), (back, p)
        written = page_query(values, {})  # defaults left out
        again, no_problems = read_page_query(written)
        assert no_problems == [] and page_query(again, {}) == written, written
        assert all(values[k] == v for k, v in again.items())
        assert read_page_query(page_query({}, q))[1] == []  # the values kept from the link are valid ones
        # One sentence per rejected key, naming it; every other key is taken as it is.
        named = [named_key(problem) for problem in problems + page_problems]
        assert len(named) == len(set(named)), named
        assert set(named) <= set(LINK_KEYS), named
        for problem in problems + page_problems:
            check_sentence(problem)
        # A rejected value is ignored: the link without it gives the same view, and no problem.
        kept = {k: v for k, v in q.items() if k not in named}
        assert from_query(kept) == (p, [])
        assert read_page_query(kept) == (values, [])


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(LINK_KEYS), value=st.one_of(st.sampled_from(HOSTILE), st.text(min_size=41, max_size=300)))
def test_an_echoed_value_is_literal_and_cut_short(key, value):
    problems = problems_of({key: value})
    for problem in problems:
        check_sentence(problem)
        flat = "".join(c if c.isprintable() else "\ufffd" for c in " ".join(value.split()))
        shown = flat if len(flat) <= ECHO_MAX_CHARS else flat[: ECHO_MAX_CHARS - 1] + "…"
        assert problem.startswith(f"'{key}={shown}' "), (problem, flat[:60])


#: Values no key takes.
TAKEN = ("1e-999", "-0", "-0.0", "5e-324", "2147483648", "１２", "٣", "1_000", "-180,-90,180,90")  # by some key
NO_VALUE = [v for v in HOSTILE if v not in TAKEN]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_every_hostile_value_in_every_key_is_refused_once_or_valid(value):
    """The named values, one key at a time: at most one sentence, naming the key (what is taken is valid: the
    fuzz above checks the view); the values that are no value of any key are refused by every key."""
    for key in LINK_KEYS:
        problems = problems_of({key: value})
        assert len(problems) <= 1, problems
        for problem in problems:
            assert named_key(problem) == key
            check_sentence(problem)
        if value in NO_VALUE:
            assert problems, (key, value)


def test_numbers_are_refused_with_the_right_sentence():
    cases = {
        ("K", "200.5"): "is not a whole number",
        ("K", "nan"): "is not a number",
        ("eps", "nan"): "is not a number",
        ("K", "1e999"): "is outside [20, 5000]",
        ("eps", "inf"): "is outside [0.5, 50]",
        ("eps", "-0"): "is outside [0.5, 50]",
        ("seed", "9" * 400): "is outside [0, 2.14748e+09]",
        ("user", "9" * 4_000): "is not a user number (0 to 199)",
        ("user", "9" * 4_301): "is not a whole number",  # more digits than int() reads
        ("user", "200"): "is not a user number (0 to 199)",
        ("place", "5000"): "is not a place number (0 to 4999)",
        ("city", ""): "is not an embedded city",
        ("file", ""): "is not an uploaded file's id",
    }
    for (key, raw), words in cases.items():
        (problem,) = problems_of({key: raw})
        assert words in problem, (key, raw, problem)
    p, problems = from_query({"K": "1e3", "seed": "-0", "eps": "5.1234567"})
    assert (p.n_records, p.seed, p.epsilon_per_km, problems) == (1000, 0, 5.1234567, [])
    assert to_query(p)["eps"] == "5.1234567" and to_query(Params())["eps"] == "5"  # exact, and short
    assert to_query(Params(alpha=0.1 + 0.2))["alpha"] == "0.3"  # 0.30000000000000004: float noise is not written
    p, problems = from_query({"city": "kotka", "bbox": "13.25,53.55,13.26,53.56"})
    assert p.source == "bbox:13.25,53.55,13.26,53.56"
    assert problems == ["'city=kotka' is not used because the link also has bbox=: ignored."]


# --------------------------------------------------------------------------------------------
# The dashboard (AppTest): the Lesson and Explore
# --------------------------------------------------------------------------------------------

PAGES = {"lesson": None, "explore": "app_pages/explore.py"}
#: The other pages of the sidebar, fuzzed with fewer links (name -> (page, examples)).
MORE_PAGES = {"learn": "app_pages/learn.py", "compare": "app_pages/compare.py", "audit": "app_pages/audit.py"}


def _strings(message) -> list[str]:
    """Every string in a protobuf message (text of an element, its label, help, ...)."""
    out = []
    for _, value in message.ListFields():
        scalar = isinstance(value, (str, bytes)) or hasattr(value, "ListFields")
        repeated = not scalar and hasattr(value, "__iter__")
        for item in value if repeated else [value]:
            if isinstance(item, str):
                out.append(item)
            elif hasattr(item, "ListFields"):
                out.extend(_strings(item))
    return out


def page_text(at) -> str:
    return "\n".join(s for node in at._tree if getattr(node, "proto", None) is not None for s in _strings(node.proto))


def check_run(at, query: dict) -> None:
    """No exception; one warning per rejected value, echoing it short and literally; the link written back is clean."""
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    received = as_received({**SMALL, **query})
    expected = [plain(f"Link parameter {problem}") for problem in problems_of(received)]
    toasts = [t.value for t in at.warning]
    assert [t for t in toasts if t.startswith("Link parameter")] == expected, (toasts, received)
    text = page_text(at)
    for key in map(named_key, problems_of(received)):
        flat = " ".join(received[key].split())
        if len(flat) > ECHO_MAX_CHARS:
            assert flat[: ECHO_MAX_CHARS + 1] not in text, key  # never echoed whole
    written = as_received(at.query_params)
    assert problems_of(written) == [], written


@pytest.fixture
def offline(osmnx_settings, closed_port_url, tmp_path, monkeypatch):
    """No download reaches a server: a box in a fuzzed link fails at once (and says so), from an empty cache."""
    from panda.network import folders

    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path)
    osmnx_settings.overpass_url = closed_port_url


def _light(query: dict) -> bool:
    """A view small enough for a quick run (a valid K = 5000 is a fine link, but a slow test)."""
    p, _ = from_query(as_received({**SMALL, **query}))
    return p.n_records <= 300 and p.n_outputs <= 100 and p.n_users <= 50


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "examples"),
    [(page, 25) for page in PAGES.values()] + [(page, 10) for page in MORE_PAGES.values()],
    ids=[*PAGES, *MORE_PAGES],
)
def test_a_fuzzed_link_gets_sentences_never_a_traceback(page, examples, offline):
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
    @given(query=queries.filter(_light))
    def run(query):
        check_run(make_app(page, **query), query)

    run()


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES.values(), ids=PAGES.keys())
@pytest.mark.parametrize(
    "value",
    ["inf", "nan", "1e999", "-0", "9" * 4_301, "１２", "é🙂" * 30, MD_LINK, HTML, "", LONG],
    ids=["inf", "nan", "1e999", "-0", "huge-int", "full-width", "unicode", "md-link", "html", "empty", "20k"],
)
def test_every_key_of_a_link_at_once(page, value, offline):
    """The named values in every key of one link (and K twice: the last one wins). 20,000 characters in every
    key would pass Streamlit's limit on a query string: those go in two links, half the keys each."""
    halves = [LINK_KEYS] if value != LONG else [LINK_KEYS[::2], LINK_KEYS[1::2]]
    for keys in halves:
        query = {key: value for key in keys}
        query["K"] = ["30", value]
        assert len(urlencode(query, doseq=True)) < CLIENT_STATE_QUERY_STRING_MAX_LENGTH
        assert problems_of(as_received(query)), "nothing to refuse: the test would show nothing"
        check_run(make_app(page, **query), query)


@pytest.mark.slow
def test_a_link_over_streamlits_limit_is_dropped_whole(offline):
    """Streamlit ignores a query string over 512 Ki characters before the script runs: the dashboard shows its
    default view, without a message (it never sees the link) and without an error."""
    query = {key: LONG for key in LINK_KEYS}
    assert len(urlencode(query)) > CLIENT_STATE_QUERY_STRING_MAX_LENGTH
    at = make_app(None, **query)
    check_run(at, query)
    assert not [t for t in at.warning if t.value.startswith("Link parameter")]
    assert at.session_state["params"].replace(page_loss=Params().page_loss) == Params()  # not even K=200 of SMALL


#: The class round's pages read their own keys (a join code, the lecturer's key, a player's token), not the sidebar's.
GAME_PAGES = {"host": "app_pages/host.py", "play": "app_pages/play.py"}
game_queries = st.fixed_dictionaries({}, optional={key: link_values for key in ("code", "key", "me")})


@pytest.mark.slow
@pytest.mark.parametrize("page", GAME_PAGES.values(), ids=GAME_PAGES.keys())
def test_a_fuzzed_class_round_link_gets_a_sentence_never_a_traceback(page):
    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(query=game_queries)
    @example(query={"code": LONG, "key": MD_LINK, "me": HTML})
    @example(query={"code": MD_LINK})
    def run(query):
        at = make_app(page, **query)
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        text = page_text(at)
        for value in as_received(query).values():
            flat = " ".join(value.split())
            assert len(flat) <= 64 or flat[:65] not in text  # never shown beyond 64 characters
        for element in [*at.error, *at.warning, *at.info, *at.markdown]:
            html = MarkdownIt("commonmark").render(element.value)
            assert "<a " not in html and "<img" not in html, element.value

    run()
