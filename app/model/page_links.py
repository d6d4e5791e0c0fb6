"""The pages' own state in the link: the selected user, map layers, chart tab, Compare's baselines, the Lesson's
mechanism and tab, ... (the view itself is :mod:`app.model.params`'s).

Pure Python (no streamlit): :data:`PAGE_QUERY` names each page-level key once; the sidebar reads and writes
every entry.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from app.model.lesson_scenes import SCENES
from app.model.params import RANGES, _shown
from panda.risk import MAX_DAY_REPORTS

__all__ = [
    "PageParam",
    "PAGE_QUERY",
    "CHART_TABS",
    "LAYER_IDS",
    "DEFAULT_LAYER_IDS",
    "BASELINE_IDS",
    "DEFAULT_BASELINES",
    "GRID_OPTIONS",
    "COMPARE_TIME_LIMITS",
    "DEFAULT_GRID",
    "DEFAULT_COMPARE_TIME_S",
    "LESSON_MECHANISMS",
    "LESSON_TABS",
    "PLAN_TARGET_RANGE_M",
    "PLAN_PER_DAY_RANGE",
    "DEFAULT_TARGET_M",
    "read_page_query",
    "page_query",
]


class PageParam(NamedTuple):
    """One page-level value kept in the link: where it lives in ``st.session_state`` and its URL form.

    ``parse(text)`` turns the URL text into the session value and raises ``ValueError`` for a bad
    one; the error's message completes the sentence "'key=text' ..." in plain words (for example
    "is not a user number"), and the link problem is shown as "'key=text' <message>: ignored.".
    ``format(value)`` gives the URL text, or ``None`` to leave the key out of the link (its default).
    """

    session_key: str
    parse: Callable[[str], Any]
    format: Callable[[Any], str | None]


def _index_below(high: float, what: str) -> Callable[[str], int]:
    """The parser of a position in a list that never holds more than ``high`` items (a user, a place)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("is not a whole number") from None
        if value < 0:
            raise ValueError("is negative")
        if value >= high:  # ?user=99999999999999999999: no view has that many
            raise ValueError(f"is not {what} (0 to {high - 1:g})")
        return value

    return parse


def _format_count(value: Any) -> str | None:
    """A whole number's URL text (None for anything else, say a widget value not yet validated)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        return None
    return str(int(value))


def _whole(low: int, high: int, not_whole: str, not_in_range: str, unit: str = "") -> Callable[[str], int]:
    """The parser of a whole number from ``low`` to ``high``; its sentences: "is not <not_whole> (low to high)" and
    "is not <not_in_range> from low to high<unit>"."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"is not {not_whole} ({low:g} to {high:g})") from None
        if not low <= value <= high:
            raise ValueError(f"is not {not_in_range} from {low:g} to {high:g}{unit}")
        return value

    return parse


_parse_reports = _whole(*RANGES["n_reports"], "a whole number of reports", "a number of reports")


def _format_reports(value: Any) -> str | None:
    text = _format_count(value)
    return None if text in (None, "1") else text


def _format_metres(default: int) -> Callable[[Any], str | None]:
    def fmt(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value == default:
            return None
        return str(int(value))

    return fmt


def _one_of(options: Mapping[str, Any], what: str) -> Callable[[str], Any]:
    # A long list is not repeated in the message (``what`` says it: "5 to 120 in steps of 5").
    listed = f" ({', '.join(options)})" if len(options) <= 10 else ""

    def parse(text: str) -> Any:
        if text not in options:
            raise ValueError(f"is not {what}{listed}")
        return options[text]

    return parse


def _list_of(options: Mapping[str, Any], what: str) -> Callable[[str], list]:
    def parse(text: str) -> list:
        if text == "none":
            return []
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in options]
        if bad or not items:
            raise ValueError(f"names no {what} ({', '.join(options)}, or none)")
        return list(dict.fromkeys(options[t] for t in items))

    return parse


def _format_list(ids: Mapping[Any, str], default: tuple, *, sort: bool = False) -> Callable[[Any], str | None]:
    """A list's URL text (``sort``: in the order of ``ids``, as a set), None when it is the default."""

    def fmt(value: Any) -> str | None:
        items = list(dict.fromkeys(v for v in (value or []) if v in ids))
        if sort:
            items = [v for v in ids if v in items]
        if tuple(items) == tuple(default):
            return None
        return ",".join(ids[v] for v in items) if items else "none"

    return fmt


def _format_default(ids: Mapping[Any, str], default: Any) -> Callable[[Any], str | None]:
    def fmt(value: Any) -> str | None:
        return None if value == default or value not in ids else ids[value]

    return fmt


#: The planner's tolerable error and attacker's floor (metres), its reports a day (up to one a minute), the default.
PLAN_TARGET_RANGE_M = (0, 20_000)
PLAN_PER_DAY_RANGE = (1, MAX_DAY_REPORTS)
DEFAULT_TARGET_M = 500

#: Explore's chart tabs (their labels); the link names them by the short id (``?tab=time``).
CHART_TABS = {
    "budget": "Budget split",
    "utility": "Utility vs bound",
    "delta": "Violations vs δ",
    "time": "Time per phase",
}
#: Explore's map layers, bottom to top (app.figures.maps.LAYERS holds their labels); the defaults that are on.
LAYER_IDS = ("roads", "records", "users", "anchors", "surrogates", "perturbation", "violations")
DEFAULT_LAYER_IDS = ("roads", "records", "users", "anchors", "surrogates", "perturbation")
#: Compare's baselines: dashboard name -> registry name of panda.mechanisms.BASELINES (also the link's id).
BASELINE_IDS = {
    "EM": "em",
    "EM+BR": "em-br",
    "LP+CA": "lp-ca",
    "Planar Laplace": "laplace",
    "Optimal LP": "lp",
    "Paper's LP+BD": "lp-bd",
}
DEFAULT_BASELINES = ("Planar Laplace", "EM", "EM+BR", "LP+CA")
#: Compare's LP+CA grid sizes (cells per side) and LP time limits (s) offered, with the defaults.
GRID_OPTIONS = (8, 10, 6, 12)
COMPARE_TIME_LIMITS = tuple(range(5, 121, 5))
DEFAULT_GRID, DEFAULT_COMPARE_TIME_S = 8, 20

#: The Lesson's mechanisms (app.model.lesson_numbers.MECHANISMS holds their labels), the first the default; its tabs.
LESSON_MECHANISMS = ("laplace", "em", "em-br", "lp-ca", "lp-em", "lp", "panda-e", "panda-p", "panda-l")
LESSON_TABS = {
    "two": "Two places",
    "reports": "k reports",
    "prior": "Prior",
    "curve": "Curve",
    "about": "About",
}

#: The link's page-level keys: URL key -> PageParam(session_key, parse, format).
#:
#: To keep a page's own state in the link, add ONE entry here (nothing else is needed): the sidebar
#: reads every entry into ``st.session_state[session_key]`` once per session (bad values are ignored
#: and reported with the other link problems), and ``sidebar.write_query`` writes every entry whose
#: session key is set (or keeps the link's valid value while the page that owns it is not shown).
#: Keys the link holds that are neither here nor in :func:`to_query` are dropped. The URL keys must not
#: collide with :func:`to_query`'s. A widget whose value is kept here should use
#: ``persist_state="session"`` so that its value survives a visit to another page.
PAGE_QUERY: dict[str, PageParam] = {
    # Explore
    "user": PageParam("sel_user", _index_below(RANGES["n_users"][1], "a user number"), _format_count),
    "layers": PageParam(
        "layers",
        _list_of({k: k for k in LAYER_IDS}, "map layer"),
        _format_list({k: k for k in LAYER_IDS}, DEFAULT_LAYER_IDS, sort=True),
    ),
    "tab": PageParam(
        "chart_tab",
        _one_of(CHART_TABS, "a chart tab"),
        _format_default({v: k for k, v in CHART_TABS.items()}, CHART_TABS["budget"]),
    ),
    # Compare
    "baselines": PageParam(
        "cmp_methods",
        _list_of({v: k for k, v in BASELINE_IDS.items()}, "baseline"),
        _format_list(BASELINE_IDS, DEFAULT_BASELINES),
    ),
    "grid": PageParam(
        "cmp_grid",
        _one_of({str(g): g for g in GRID_OPTIONS}, "a grid size"),
        _format_default({g: str(g) for g in GRID_OPTIONS}, DEFAULT_GRID),
    ),
    "lptime": PageParam(
        "cmp_time",
        _one_of({str(t): t for t in COMPARE_TIME_LIMITS}, "a time limit in seconds, 5 to 120 in steps of 5"),
        _format_default({t: str(t) for t in COMPARE_TIME_LIMITS}, DEFAULT_COMPARE_TIME_S),
    ),
    # Lesson (the first screen)
    "mech": PageParam(
        "lesson_mech",
        _one_of({k: k for k in LESSON_MECHANISMS}, "a lesson mechanism"),
        _format_default({k: k for k in LESSON_MECHANISMS}, LESSON_MECHANISMS[0]),
    ),
    "place": PageParam("lesson_a", _index_below(RANGES["n_records"][1], "a place number"), _format_count),
    "place2": PageParam("lesson_b", _index_below(RANGES["n_records"][1], "a place number"), _format_count),
    "view": PageParam(
        "lesson_mode",
        _one_of({"reports": "reports", "attacker": "attacker"}, "a map view"),
        _format_default({"reports": "reports", "attacker": "attacker"}, "reports"),
    ),
    "k": PageParam("lesson_k", _parse_reports, _format_reports),
    "ltab": PageParam(
        "lesson_tab",
        _one_of(LESSON_TABS, "a lesson tab"),
        _format_default({v: k for k, v in LESSON_TABS.items()}, LESSON_TABS["two"]),
    ),
    # The guided lesson (its scene by name; the session holds its index)
    "scene": PageParam(
        "guided_scene",
        _one_of({scene.key: i for i, scene in enumerate(SCENES)}, "a scene of the guided lesson"),
        _format_default({i: scene.key for i, scene in enumerate(SCENES)}, 0),
    ),
    # The planner (its tolerable error and attacker's floor in metres, reports a day, the optimal LP asked for)
    "target": PageParam(
        "plan_target_m",
        _whole(*PLAN_TARGET_RANGE_M, "an error in whole metres", "an error", " m"),
        _format_metres(DEFAULT_TARGET_M),
    ),
    "floor": PageParam(
        "plan_floor_m",
        _whole(*PLAN_TARGET_RANGE_M, "an attacker's error in whole metres", "an attacker's error", " m"),
        _format_metres(0),
    ),
    "perday": PageParam(
        "plan_per_day",
        _whole(*PLAN_PER_DAY_RANGE, "a whole number of reports a day", "a number of reports a day"),
        _format_reports,
    ),
    "certify": PageParam("plan_lp", _one_of({"1": True, "0": False}, "1 or 0"), _format_default({True: "1"}, False)),
    # Every page
    "present": PageParam("w_present", _one_of({"1": True, "0": False}, "1 or 0"), _format_default({True: "1"}, False)),
}


def _last(value: Any) -> str | None:
    if isinstance(value, list):  # repeated parameter: the last one wins
        value = value[-1] if value else None
    return None if value is None else str(value).strip()


def read_page_query(query: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The session values of the link's :data:`PAGE_QUERY` keys; bad values are left out and reported.

    Returns
    -------
    values, problems
        ``{session_key: value}`` for every valid key, and one message per ignored one.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, entry in PAGE_QUERY.items():
        raw = _last(query.get(key))
        if raw is None:
            continue
        try:
            values[entry.session_key] = entry.parse(raw)
        except ValueError as exc:
            problems.append(f"'{key}={_shown(raw)}' {exc or 'is not valid'}: ignored.")
    return values, problems


def page_query(session: Mapping[str, Any], query: Mapping[str, Any]) -> dict[str, str]:
    """The link's page-level part: every :data:`PAGE_QUERY` key, from the session or kept from ``query``.

    A key whose session value is set is written from it (left out when ``format`` gives None, its
    default); a key the session does not hold (its page is not shown) keeps the link's value if that
    is valid. Nothing else from ``query`` is kept.
    """
    out: dict[str, str] = {}
    for key, entry in PAGE_QUERY.items():
        if entry.session_key in session:
            try:
                text = entry.format(session[entry.session_key])
            except Exception:  # a value the page has not validated yet: leave it out
                text = None
            if text is not None:
                out[key] = text
            continue
        raw = _last(query.get(key))
        if raw is None:
            continue
        try:
            entry.parse(raw)
        except ValueError:
            continue
        out[key] = raw
    return out
