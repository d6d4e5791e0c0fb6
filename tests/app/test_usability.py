"""The dashboard's usability fixes under AppTest and as pure functions: stable widget labels, the
pages' state in the link, plain error texts, readable tables, tooltips and downloads, a link whose
road network cannot be loaded.

Small views (K = 200 through the link's query parameters) keep the file fast.
"""

from __future__ import annotations

import io
import json
import math
import re

import apptest_support as support
import numpy as np
import pytest
from apptest_support import (  # noqa: F401 (autouse fixtures)
    clear_caches,
    release_resources,
    run_ok,
)
from conftest import OAKLAND_BBOX, ROOT
from streamlit.testing.v1 import AppTest

EXPLORE = "app_pages/explore.py"
COMPARE = "app_pages/compare.py"
#: Code in a text a person reads: exception classes, snake_case names, calls, module paths.
CODE = re.compile(r"\b\w*Error\b|\b[a-z]+_[a-z0-9_]+\b|\b\w+\([\w, ]*\)|\bpanda\.\w+|Traceback")


def make_app(page: str | None = EXPLORE, **query: str) -> AppTest:
    return support.make_app(page, **query)


def get_metric(at: AppTest, label: str):
    for m in at.metric:
        if m.label == label:
            return m
    raise AssertionError(f"no metric {label!r} among {[m.label for m in at.metric]}")


def qp(at: AppTest, key: str) -> str | None:
    if key not in at.query_params:
        return None
    value = at.query_params[key]
    return value[-1] if isinstance(value, list) else value


def texts(at: AppTest, *kinds: str) -> list[str]:
    """Every text of the given element kinds (error, warning, info, toast ...), sidebar included."""
    return [e.value for kind in kinds for e in getattr(at, kind)]


@pytest.fixture(scope="module")
def small_view():
    import panda
    from app.model.params import Params, to_config

    net = panda.load_city("kotka")
    inst = panda.make_instance(net, n_records=120, n_users=10, n_outputs=40, seed=1)
    p = Params(source="city:kotka", n_records=120, n_users=10, n_outputs=40, seed=1)
    result = panda.run_panda(inst, to_config(p), seed=1)
    return net, inst, p, result


# --------------------------------------------------------------------------------------------
# 1. The selected user's label is fixed; a stale value from the browser does not crash the page
# --------------------------------------------------------------------------------------------


def test_selected_user_labels_do_not_change_with_the_run():
    at = run_ok(make_app())
    before = list(at.selectbox(key="sel_user").options)
    at.number_input(key="w_seed").set_value(1)
    run_ok(at)
    after = list(at.selectbox(key="sel_user").options)
    assert before == after == [f"User {n}" for n in range(12)]


@pytest.mark.parametrize(
    ("stale", "expected"),
    [("User 6 (4 anchors)", 6), ("User 6", 6), (np.int64(6), 6), (6, 6), ("somebody", None), (99, None), (-1, None)],
)
def test_a_stale_selected_user_is_recognised_or_refused(stale, expected):
    """The browser sends a selectbox's value as its label: the page turns it back into a user or refuses it."""
    from app.widgets.current_view import valid_user

    assert valid_user(stale, 12) == expected
    assert valid_user(True, 12) is None


# --------------------------------------------------------------------------------------------
# 2. Map tooltips: line breaks that render (no HTML in the escaped text), a box that stays in view
# --------------------------------------------------------------------------------------------


def test_tooltips_are_plain_text_with_newlines(small_view):
    from app.figures import maps
    from app.model import panda_numbers

    net, inst, _, result = small_view
    deck = maps.build_deck(net, inst, result, layers=tuple(maps.LAYERS), pairs=panda_numbers.user_pairs(result, inst))
    spec = json.loads(deck.to_json())
    tips = [row["tooltip"] for layer in spec["layers"] if layer.get("pickable") for row in layer["data"]]
    assert tips
    assert not [t for t in tips if "<" in t or "&" in t], "HTML in a tooltip is shown literally"
    assert any("\n" in t for t in tips)
    tooltip = deck._tooltip  # what st.pydeck_chart sends with the deck
    assert tooltip["text"] == "{tooltip}"  # inserted as text: newlines become line breaks
    style = tooltip["style"]
    assert style["whiteSpace"] == "pre-line"  # the newlines render as line breaks
    assert style["transform"] == "none" and style["left"] == "8px"  # pinned inside the map, not at the pointer


# --------------------------------------------------------------------------------------------
# 3 and 6. Short metric values; the utility loss says over how many users it is computed
# --------------------------------------------------------------------------------------------


def test_metric_values_are_short_in_every_state(small_view):
    from app.widgets import current_view

    _, _, _, result = small_view
    bounds = [
        None,
        {"status": "Optimal", "objective_m": 123.4, "time_s": 0.1},
        {"status": "Time limit reached", "objective_m": float("nan"), "time_s": 5.0},
        {"status": "too large", "objective_m": float("nan"), "time_s": 0.0, "rows": 10**6},
        {"status": "failed", "reason": "The computation needs more memory.", "objective_m": float("nan")},
    ]
    values = [m.value for m in current_view.metric_texts(result).values()]
    for bound in bounds:
        values += [m.value for m in current_view.bound_texts(result, bound).values()]
    values += [m.value for m in current_view.bound_texts(result, None, pending=True).values()]
    assert max(len(v) for v in values) <= current_view.MAX_METRIC_CHARS, values
    assert current_view.bound_texts(result, bounds[2])["bound"].note == "time limit"


def test_utility_loss_says_how_many_users_it_covers():
    at = run_ok(make_app(alpha="0.05", **{"lambda": "10"}))  # 10 of the 12 users draw no anchor
    loss = get_metric(at, "Utility loss at users")
    assert loss.value.endswith(" m")
    assert loss.delta == "only 2 of 12 users"
    assert get_metric(at, "Empty anchor sets").value == "10"
    at = run_ok(make_app())
    assert get_metric(at, "Utility loss at users").delta == "all 12 users"


# --------------------------------------------------------------------------------------------
# 4. The Compare table: words for missing and infinite values, short statuses with a detail column
# --------------------------------------------------------------------------------------------


def test_compare_table_cells_are_readable():
    from app.figures import tables

    rows = [
        {"method": "PAnDA-e", "status": "Optimal", "loss_m": 200.0, "prior_loss_m": float("nan"), "time_s": 0.1},
        {"method": "EM+BR", "status": "solved", "loss_m": 150.0, "epsilon_min_per_km": math.inf},
        {
            "method": "LP",
            "status": "unsolved: time limit after 20.3 s; loss >= 104.6 m (last finished round)",
            "time_s": 20.3,
        },
        {"method": "LP+CA", "status": "failed: ValueError: The 'grid' parameter of build_lp_ca must be an int"},
    ]
    frame = tables.compare_frame(rows)
    assert list(frame["status"]) == ["solved", "solved", "unsolved", "failed"]
    assert frame.loc[2, "detail"] == "time limit after 20.3 s; loss >= 104.6 m (last finished round)"
    assert not CODE.search(frame.loc[3, "detail"]), frame.loc[3, "detail"]
    shown = tables.compare_styler(frame).to_html()
    for word in ("None", "nan", "inf", "Infinity", "NaN"):
        assert not re.search(rf">\s*{word}\s*<", shown), word
    assert tables.cell("epsilon_min_per_km", math.inf) == tables.NO_FINITE_EPS
    assert tables.cell("prior_loss_m", float("nan")) == tables.MISSING
    notes = "\n".join(tables.compare_notes(frame))
    assert tables.MISSING in notes and tables.NO_FINITE_EPS in notes
    assert "**LP**: unsolved: time limit after 20.3 s" in notes


def test_compare_page_shows_words_not_none():
    from app.figures import tables

    at = run_ok(make_app(COMPARE, baselines="em,em-br,laplace"))
    assert not at.dataframe  # a static table: every cell is readable, nothing is cut off
    frame = at.table[0].value
    assert list(frame[tables.HEADERS["method"]]) == ["PAnDA-e", "EM", "EM + remap", "Planar Laplace"]
    assert set(frame[tables.HEADERS["status"]]) == {"solved"}
    assert np.isnan(frame.loc[0, tables.HEADERS["prior_loss_m"]])  # PAnDA has no loss over the prior ...
    shown = tables.compare_styler(tables.compare_frame([{"method": "PAnDA-e", "status": "Optimal"}])).to_html()
    assert f">{tables.MISSING}<" in shown  # ... shown as a dash
    assert any(tables.MISSING in c.value for c in at.main.caption)  # and explained under the table


# --------------------------------------------------------------------------------------------
# 5. Identical Phase-II rows: no "perfect privacy" while Phase I leaks
# --------------------------------------------------------------------------------------------


def test_collapsed_rows_are_not_called_perfect_privacy():
    at = run_ok(make_app(preset="paper"))  # K = 200: the LP collapses every anchor into one row
    note = next(i.value for i in at.info if "same output distribution" in i.value)
    assert "(perfect privacy)" not in note
    assert "not perfect privacy" in note and "Phase I" in note
    rate = get_metric(at, "Violation rate").value
    assert rate in note  # the leak the violation rate measures, in numbers


# --------------------------------------------------------------------------------------------
# 7. The pages' own state in the link
# --------------------------------------------------------------------------------------------


def test_page_query_registry_reads_and_writes():
    from app.model.page_links import PAGE_QUERY, page_query, read_page_query
    from app.model.params import Params, to_query

    assert not set(PAGE_QUERY) & set(to_query(Params())), "a page key collides with a view key"
    values, problems = read_page_query(
        {"user": "3", "layers": "roads,users", "tab": "time", "baselines": "em,lp-ca", "grid": "7", "junk": "1"}
    )
    assert values == {
        "sel_user": 3,
        "layers": ["roads", "users"],
        "chart_tab": "Time per phase",
        "cmp_methods": ["EM", "LP+CA"],
    }
    assert len(problems) == 1 and problems[0].startswith("'grid=7'") and problems[0].endswith("ignored.")
    # Written from the session; defaults left out; a key of a page not shown is kept from the link if valid.
    session = {"sel_user": 3, "layers": ["users", "roads", "records", "anchors"]}
    out = page_query(session | {"cmp_grid": 8}, {"tab": "delta", "baselines": "nonsense", "junk": "1"})
    assert out == {"user": "3", "layers": "roads,records,users,anchors", "tab": "delta"}
    assert page_query({"sel_user": "User 3 (4 anchors)"}, {}) == {}  # an unvalidated widget value is left out


def test_explore_state_comes_from_the_link_and_goes_back_into_it():
    at = run_ok(make_app(user="3", layers="roads,users,violations", tab="time"))
    assert at.session_state["sel_user"] == 3
    assert at.selectbox(key="sel_user").value == 3
    assert sorted(at.pills(key="layers").value) == ["roads", "users", "violations"]
    plot = at.get("plotly_chart")
    assert len(plot) == 1 and json.loads(plot[0].proto.spec)["layout"]["title"]["text"].startswith("Time")
    assert (qp(at, "user"), qp(at, "layers"), qp(at, "tab")) == ("3", "roads,users,violations", "time")
    at.selectbox(key="sel_user").set_value(5)
    at.pills(key="layers").set_value(["roads", "records"])
    run_ok(at)
    assert (qp(at, "user"), qp(at, "layers")) == ("5", "roads,records")
    # Compare's keys: read from the link while Explore is shown, kept in it, then used by Compare.
    at = run_ok(make_app(baselines="em,laplace", grid="10", lptime="30", junk="x"))
    assert (qp(at, "baselines"), qp(at, "grid"), qp(at, "lptime")) == ("em,laplace", "10", "30")
    assert qp(at, "junk") is None  # only registered keys stay
    at.switch_page(COMPARE)
    run_ok(at)
    assert at.multiselect(key="cmp_methods").value == ["EM", "Planar Laplace"]
    assert at.selectbox(key="cmp_grid").value == 10 and at.slider(key="cmp_time").value == 30
    assert qp(at, "user") is not None  # Explore's selected user stays in the link on Compare


def test_bad_page_values_in_the_link_are_reported():
    at = run_ok(make_app(user="x", layers="roads,streets", tab="maps"))
    toasts = texts(at, "warning")
    assert any("'user=x'" in t for t in toasts) and any("'layers=roads,streets'" in t for t in toasts)
    assert any("'tab=maps'" in t for t in toasts)
    assert get_metric(at, "LP status").value == "Optimal"
    assert qp(at, "layers") is None and qp(at, "tab") is None  # the defaults again


# --------------------------------------------------------------------------------------------
# 8. Downloads: strict JSON, a plain CSV with the outputs' coordinates
# --------------------------------------------------------------------------------------------


def _strict(text: str) -> dict:
    def refuse(name: str) -> float:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_summary_json_writes_null_for_missing_numbers(small_view):
    from app.model import export_files

    _, _, p, result = small_view
    bound = {"status": "Time limit reached", "objective_m": float("nan"), "time_s": 5.0, "rows": 10}
    text = export_files.summary_json(result, bound)
    data = _strict(text)
    assert data["dashboard_lower_bound"]["objective_m"] is None
    assert '"nan"' not in text and '"inf"' not in text
    assert "null" in data["notes"]
    _strict(export_files.config_json(p, result.config))
    assert export_files.jsonable({"a": float("inf"), "b": [np.float64("nan"), 1.5]}) == {"a": None, "b": [None, 1.5]}


def test_matrix_csv_is_a_plain_table_with_output_coordinates(small_view):
    import pandas as pd

    from app.model import export_files

    _, inst, _, result = small_view
    frame = pd.read_csv(io.StringIO(export_files.matrix_csv(result, inst)))
    assert frame.shape == (result.n_anchors, 3 + inst.n_outputs)
    assert list(frame.columns[:3]) == ["anchor_record", "anchor_lon", "anchor_lat"]
    assert list(frame["anchor_record"]) == result.anchor_union.tolist()
    assert np.allclose(frame["anchor_lat"], inst.lat[result.anchor_union], atol=1e-6)
    probs = frame.iloc[:, 3:].to_numpy(dtype=float)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    pattern = re.compile(r"output (\d+) \(record (\d+) at lon (-?[\d.]+) lat (-?[\d.]+)\)")
    for j, name in enumerate(frame.columns[3:]):
        m = pattern.fullmatch(name)
        assert m, name
        y = int(inst.outputs[j])
        assert (int(m.group(1)), int(m.group(2))) == (j, y)
        assert abs(float(m.group(3)) - inst.lon[y]) < 1e-5 and abs(float(m.group(4)) - inst.lat[y]) < 1e-5


# --------------------------------------------------------------------------------------------
# 9 and 10. A link's bounding box that cannot be loaded; a failed download leaves one message
# --------------------------------------------------------------------------------------------


def test_a_bbox_link_not_downloaded_here_shows_the_box_and_a_button_and_the_city(
    osmnx_settings, closed_port_url, tmp_path, monkeypatch
):
    """A link never downloads by itself (issue 29): the page names the box and offers a button, the map shows
    the embedded city meanwhile, and a click that cannot connect says so in plain words beside the button."""
    from panda.network import folders

    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path)  # no cached copy of the box
    osmnx_settings.overpass_url = closed_port_url
    at = run_ok(make_app(bbox="13.25,53.55,13.26,53.56"))
    assert at.radio(key="w_source_kind").value == "Embedded city (offline)"  # what the map really shows
    assert at.selectbox(key="w_city").value == "neubrandenburg"
    panel = [m.value for m in at.main.markdown if "not downloaded on this server yet" in m.value]
    assert len(panel) == 1 and "13.25" in panel[0] and "Neubrandenburg" in panel[0], panel
    assert not CODE.search(panel[0]), panel[0]
    button = at.button(key="w_pending_download")
    assert button.label.startswith("Download this area (≈ ")
    assert get_metric(at, "LP status").value == "Optimal"
    # The link keeps naming the box (not the city shown meanwhile), so a reload shows this panel again.
    assert qp(at, "bbox") == "13.25,53.55,13.26,53.56" and qp(at, "city") is None
    button.click()
    run_ok(at)
    errors = [e.value for e in at.main.error]
    assert len(errors) == 1 and "connection" in errors[0].lower(), errors
    assert not CODE.search(errors[0]), errors[0]
    assert at.button(key="w_pending_download")  # kept, to try again
    # Choosing another city ends the notice.
    at.selectbox(key="w_city").set_value("kotka")
    run_ok(at)
    assert not [m for m in at.main.markdown if "not downloaded on this server yet" in m.value]


def test_a_failed_download_leaves_one_plain_message(osmnx_settings, closed_port_url, tmp_path, monkeypatch):
    from panda.network import folders

    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path)
    osmnx_settings.overpass_url = closed_port_url
    at = run_ok(make_app())
    at.radio(key="w_source_kind").set_value("Bounding box (live download)")
    run_ok(at)
    at.selectbox(key="w_box_preset").set_value("Custom box")
    for key, value in (("w_west", 13.25), ("w_south", 53.55), ("w_east", 13.26), ("w_north", 53.56)):
        at.number_input(key=key).set_value(value)
    at.sidebar.button[0].click()
    run_ok(at)
    assert not at.sidebar.status, [s.label for s in at.sidebar.status]  # no "Downloading ..." box left
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and "No connection" in errors[0]
    assert not CODE.search(errors[0]), errors[0]  # no network_from_file(path), load_city(name) ...


# --------------------------------------------------------------------------------------------
# 11. Plain error texts
# --------------------------------------------------------------------------------------------


def test_a_too_heavy_setting_is_explained_in_plain_words():
    # gamma = 5 km with every pair constrained: the library refuses the safety-margin search.
    at = run_ok(make_app(gamma="5", radius="5", decay="l"))
    errors = texts(at, "error")
    assert errors, "no error shown"
    for text in errors:
        assert not CODE.search(text), text
    assert any("γ" in t and "smaller" in t for t in errors)


def _raised(call) -> BaseException:
    """The exception ``call()`` raises (it must raise)."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 (any class: the test reads the library's own exception)
        return exc
    raise AssertionError(f"{call} raised nothing")


def _too_heavy_margins(kotka, request) -> tuple[BaseException, str]:
    import panda
    from app.model.params import from_query, to_config

    p, problems = from_query({"gamma": "5", "radius": "5", "decay": "l"})  # as the link of the test above
    assert not problems
    inst = panda.make_instance(kotka, n_records=200, n_users=10, n_outputs=40, seed=0)
    exc = _raised(lambda: panda.run_panda(inst, to_config(p), seed=0))
    assert "safety-margin search" in str(exc)
    return exc, f"γ = {p.gamma_km * 1000:.0f} m"


def _offline(kotka, request) -> tuple[BaseException, str]:
    from panda import network as pn

    request.getfixturevalue("osmnx_settings").overpass_url = request.getfixturevalue("closed_port_url")
    cache = request.getfixturevalue("tmp_path")
    return _raised(lambda: pn.network_from_bbox(*OAKLAND_BBOX, cache_dir=cache)), "no connection"


def _too_many_records(kotka, request) -> tuple[BaseException, str]:
    import panda

    net = request.getfixturevalue("oakland")
    exc = _raised(lambda: panda.make_instance(net, n_records=500))
    return exc, f"at most {net.n_nodes} secret records"


def _out_of_memory(kotka, request) -> tuple[BaseException, str]:
    from panda.execution import MEMORY_MESSAGE, JobMemoryError

    return JobMemoryError(MEMORY_MESSAGE), "more memory"


def _box_too_large(kotka, request) -> tuple[BaseException, str]:
    from panda import network as pn

    box = (10.0, 40.0, 14.0, 44.0)  # far beyond the limit: the library refuses it before any connection
    area = pn.BoundingBox(*box).area_km2
    exc = _raised(lambda: pn.network_from_bbox(*box, cache_dir=request.getfixturevalue("tmp_path")))
    return exc, f"about {area:,.0f} km², the limit is {pn.MAX_BBOX_AREA_KM2:,.0f} km²"


def _unexpected(kotka, request) -> tuple[BaseException, str]:
    return _raised(lambda: {}["lp_status"]), "unexpected error"


@pytest.mark.parametrize(
    "make", [_too_heavy_margins, _offline, _too_many_records, _out_of_memory, _box_too_large, _unexpected]
)
@pytest.mark.parametrize("relayed", [False, True], ids=["raised-here", "relayed-by-a-worker"])
def test_library_messages_become_plain_words(make, relayed, kotka, request):
    """The library's real exceptions (raised here, not copied: a changed message is tested as it is now),
    as the page gets them in the server and as a job worker relays them ("Type: message")."""
    from app.model.messages import plain_error
    from panda.execution import JobError, _describe

    exc, expected = make(kotka, request)
    if relayed and not isinstance(exc, JobError):
        exc = JobError(_describe(exc))
    plain, details = plain_error(exc)
    assert expected in plain, (plain, str(exc))
    assert not CODE.search(plain), plain
    assert str(exc) in details  # the original text is kept for a Details line


@pytest.mark.parametrize(
    "name",
    [
        "widgets/current_view.py",
        "widgets/sidebar.py",
        "app_pages/explore.py",
        "app_pages/compare.py",
        "app_pages/audit.py",
    ],
)
def test_no_exception_class_names_in_page_strings(name):
    """These modules build no text a person reads from an exception's class name (messages.py keeps the
    original text for the "Details" line; the worker relays the class to the server)."""
    source = (ROOT / "app" / name).read_text(encoding="utf-8")
    assert "__name__" not in source, name


def test_a_qualified_solved_status_reads_as_solved():
    from app.model.messages import short_status

    word, detail = short_status("solved (paper's LP+BD: 0.8 km pairs, not eps-mDP, stopped at gap 3.5 %)")
    assert word == "solved" and detail.startswith("paper's LP+BD: 0.8 km pairs, not eps-mDP")


def test_compare_offers_the_optimal_lp_and_the_papers_lp_bd():
    at = run_ok(make_app(COMPARE, K="100", M="40", baselines="em,lp,lp-bd"))
    from app.figures.tables import HEADERS

    table = at.table[0].value.rename(columns={v: k for k, v in HEADERS.items()})
    rows = table.set_index("method")
    assert rows.loc["Optimal LP", "violation_rate"] == 0  # certified: an exactly audited mechanism
    assert rows.loc["Paper's LP+BD", "status"] == "solved"
    assert "not eps-mDP" in rows.loc["Paper's LP+BD", "detail"]  # said plainly; its audit shows the violations


def test_a_smaller_city_clamps_k_and_a_larger_one_gives_it_back():
    # Kotka has 224 nodes: K = 300 is clamped there; back on the default city the K asked for returns.
    at = run_ok(make_app(K="300", N="10", M="40"))
    assert at.number_input(key="w_K").value == 300
    at.selectbox(key="w_city").set_value("kotka")
    run_ok(at)
    assert at.number_input(key="w_K").value == 224
    at.selectbox(key="w_city").set_value("neubrandenburg")
    run_ok(at)
    assert at.number_input(key="w_K").value == 300
    # A K chosen on the small city is the one kept.
    at.selectbox(key="w_city").set_value("kotka")
    run_ok(at)
    at.number_input(key="w_K").set_value(150)
    run_ok(at)
    at.selectbox(key="w_city").set_value("neubrandenburg")
    run_ok(at)
    assert at.number_input(key="w_K").value == 150
