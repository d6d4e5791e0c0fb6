"""The Lesson page (the app's first screen): its pure numbers, its map and chart builders, every control.

Small views (K = 200 through the link) keep the file fast; the real-browser walk is in
tests/browser/test_browser_lesson.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("pydeck")
pytest.importorskip("plotly")

import apptest_support as support  # noqa: E402
from apptest_support import (  # noqa: E402, F401 (autouse fixtures)
    clear_caches,
    metric,
    release_resources,
)
from streamlit.testing.v1 import AppTest  # noqa: E402

import panda  # noqa: E402
from app.figures import lesson_charts, lesson_maps, maps  # noqa: E402
from app.model import lesson_numbers
from panda.mechanisms import build_em  # noqa: E402


@pytest.fixture(scope="module")
def small():
    net = panda.load_city("kotka")
    return net, panda.make_instance(net, n_records=80, n_outputs=30, n_users=8, seed=0)


def make_app(**query: str) -> AppTest:
    return support.make_app(None, **query)


def run_ok(at: AppTest) -> AppTest:
    support.run_ok(at)
    assert not at.error, [e.value for e in at.error]
    return at


def deck_layers(at: AppTest) -> dict:
    charts = at.get("deck_gl_json_chart")
    assert len(charts) == 1
    return {layer["id"]: layer for layer in json.loads(charts[0].proto.json)["layers"]}


# --------------------------------------------------------------------------------------------
# Pure numbers
# --------------------------------------------------------------------------------------------


def test_times_reads_like_a_factor():
    assert lesson_numbers.times(math.log(2.7)) == "×2.7"
    assert lesson_numbers.times(0.1) == "×1.11"
    assert lesson_numbers.times(math.log(148.4)) == "×148"
    assert lesson_numbers.times(float("inf")) == "×∞"
    assert lesson_numbers.times(-math.log(3.0)) == "×3.0"  # the factor of the larger over the smaller


def test_pair_check_holds_and_fails_exactly():
    eps, d_km = 5.0, 0.2  # allows e^1
    a = np.array([0.5, 0.3, 0.2, 0.0])
    within = np.array([0.4, 0.35, 0.25, 0.0])
    check = lesson_numbers.pair_check(a, within, d_km, eps)
    assert check.allowed == pytest.approx(1.0)
    assert np.isnan(check.log_ratio[3])  # 0 / 0: no evidence
    assert check.worst == pytest.approx(math.log(0.25 / 0.2))
    assert check.holds
    beyond = np.array([0.1, 0.3, 0.6, 0.0])  # ln(0.5 / 0.1) = 1.61 > 1
    bad = lesson_numbers.pair_check(a, beyond, d_km, eps)
    assert not bad.holds and bad.worst_output == 0
    assert "beyond the promise" in lesson_numbers.ratio_sentence(bad)
    assert "within the promise" in lesson_numbers.ratio_sentence(check)
    assert "promise" not in lesson_numbers.ratio_sentence(bad, verdict=False)
    zero = lesson_numbers.pair_check(a, np.array([0.5, 0.5, 0.0, 0.0]), d_km, eps)
    assert zero.worst == math.inf and not zero.holds
    # PAnDA: the anchor upload's leak counts against the same allowance.
    leak = lesson_numbers.pair_check(a, within, d_km, eps, phase1=0.9)
    assert not leak.holds
    assert "anchor upload" in lesson_numbers.ratio_sentence(leak)


def test_em_rows_hold_for_every_pair_of_places(small):
    _, inst = small
    mech = build_em(inst, 3.0)
    for a, b in [(0, 1), (5, 40), (10, 79)]:
        d = float(inst.distances_km_pairs(np.array([a]), np.array([b]))[0])
        assert lesson_numbers.pair_check(mech.matrix[a], mech.matrix[b], d, 3.0).holds


def test_posterior_and_bayes_guess(small):
    _, inst = small
    mech = build_em(inst, 20.0)
    y = 3
    post = lesson_numbers.posterior(inst.prior, mech.matrix, y)
    assert post.sum() == pytest.approx(1.0)
    expected = inst.prior * mech.matrix[:, y]
    assert np.allclose(post, expected / expected.sum())
    d_m = inst.d_km * 1000
    guess = lesson_numbers.bayes_guess(post, d_m)
    assert np.all(post @ d_m >= (post @ d_m)[guess])
    # At a large eps the attacker's best guess is next to the reported output.
    assert d_m[guess, inst.outputs[y]] < 0.5 * np.median(d_m)


def test_default_and_second_place(small):
    _, inst = small
    a = lesson_numbers.default_place(inst)
    assert 0 <= a < inst.n_records
    b = lesson_numbers.second_place(inst, a, target_m=300)
    assert b != a
    d_m = 1000 * inst.distances_km(np.array([a]), None)[0]
    others = np.delete(np.abs(d_m - 300), a)
    assert abs(d_m[b] - 300) == pytest.approx(others.min())


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def test_lesson_deck_layers(small):
    net, inst = small
    segs, _ = maps.road_segments(net)
    row = build_em(inst, 5.0).matrix[0]
    deck = lesson_maps.build_lesson_deck(
        inst,
        segs,
        place_a=0,
        place_b=1,
        row_a=row,
        ring_m=250.0,
        samples=[1, 2],
        density=lesson_maps.laplace_density_image(float(inst.lon[0]), float(inst.lat[0]), 5.0, half_width_km=1.0),
    )
    spec = json.loads(deck.to_json())
    layers = {layer["id"]: layer for layer in spec["layers"]}
    assert {"roads", "density", "reports", "places", "ring", "samples", "markers"} <= set(layers)
    assert layers["places"]["pickable"] is True
    assert len(layers["places"]["data"]) == inst.n_records
    assert [obj["x"] for obj in layers["places"]["data"]] == list(range(inst.n_records))
    assert layers["ring"]["data"][0]["r"] == 250.0
    assert layers["density"]["image"].startswith("data:image/png;base64,")  # a literal, not an "@@=" expression
    assert spec.get("mapProvider") is None or spec.get("mapProvider") == ""  # no basemap, no outside request
    tips = [d["tooltip"] for d in layers["reports"]["data"]]
    assert all("<br" not in t for t in tips) and any("\n" in t for t in tips)
    # Attacker mode: a belief layer instead of the reports.
    post = lesson_numbers.posterior(inst.prior, build_em(inst, 5.0).matrix, 0)
    deck = lesson_maps.build_lesson_deck(inst, segs, place_a=0, belief=post, report=0, guess=3)
    ids = {layer["id"] for layer in json.loads(deck.to_json())["layers"]}
    assert {"belief", "guess_line", "markers"} <= ids and "reports" not in ids


def test_laplace_density_image_peaks_at_the_place():
    import base64
    import io

    from PIL import Image

    uri, bounds = lesson_maps.laplace_density_image(13.26, 53.56, 5.0, half_width_km=1.0, size_px=41)
    w, s, e, n = bounds
    assert w < 13.26 < e and s < 53.56 < n
    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))
    alpha = img[..., 3].astype(float)
    assert alpha[20, 20] == alpha.max() and alpha[0, 0] < alpha[20, 20]


def test_two_places_chart(small):
    _, inst = small
    m = build_em(inst, 5.0).matrix
    d = float(inst.distances_km_pairs(np.array([0]), np.array([1]))[0])
    check = lesson_numbers.pair_check(m[0], m[1], d, 5.0)
    fig = lesson_charts.two_places(check, m[0], m[1])
    assert [t.name for t in fig.data] == ["from A", "from B", "ln(A / B)"]
    lines = [s.y0 for s in fig.layout.shapes]
    assert pytest.approx(check.allowed) in lines and pytest.approx(-check.allowed) in lines


def test_two_places_svg_draws_the_same_bars(small):
    import re
    import xml.etree.ElementTree as ET

    _, inst = small
    m = build_em(inst, 5.0).matrix
    d = float(inst.distances_km_pairs(np.array([0]), np.array([1]))[0])
    check = lesson_numbers.pair_check(m[0], m[1], d, 5.0)
    svg = lesson_charts.two_places_svg(check, m[0], m[1], width=360, height=300)
    ns = "{http://www.w3.org/2000/svg}"
    rects = ET.fromstring(svg).findall(f"{ns}rect")
    fig = lesson_charts.two_places(check, m[0], m[1])
    n = len(fig.data[0].x)  # the outputs the plotly figure shows
    assert len(rects) == 3 * n  # A, B and the log-ratio bar per output
    tips = [r.find(f"{ns}title").text for r in rects]
    a_tips = [t for t in tips if "Pr[report | A]" in t]
    # Bars are as tall as their probability, in the plotly figure's order.
    heights = np.array([float(r.get("height")) for r in rects if "Pr[report | A]" in r.find(f"{ns}title").text])
    pa = np.asarray(fig.data[0].y)
    np.testing.assert_allclose(heights / heights[0], pa / pa[0], rtol=1e-3, atol=1e-3)
    assert [re.search(r"output (\d+)", t).group(1) for t in a_tips] == list(fig.data[0].x)
    # The allowance is drawn twice (±ε·d) and labelled; red bars are exactly the outputs beyond it.
    dashed = ET.fromstring(svg).findall(f"{ns}line[@stroke-dasharray='6 4']")
    assert len(dashed) == 2
    assert "ε·d allows" in svg
    red = sum(r.get("fill") == "#b00020" for r in rects)
    assert red == int(np.sum(np.asarray(fig.data[2].marker.color) == "#b00020"))


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------


def test_lesson_is_the_first_screen_and_works():
    at = run_ok(make_app())
    assert at.main.markdown[0].value.startswith("# Geo-indistinguishability")  # the page's h1 (styled small)
    assert metric(at, "Error at A").endswith(" m")
    assert metric(at, "Attacker").endswith(" m")
    assert at.selectbox(key="lesson_mech").value == "laplace"
    layers = deck_layers(at)
    assert {"places", "reports", "ring", "markers"} <= set(layers)
    assert not at.warning, [w.value for w in at.warning]  # no warning on the first screen


def test_epsilon_spreads_the_reports_and_follows_the_sidebar():
    at = make_app()
    at.session_state["lesson_mech"] = "em"
    run_ok(at)
    tight = float(metric(at, "Error at A").split()[0].replace(",", ""))
    at.select_slider(key="lesson_epsilon_per_km").set_value(1.0).run()
    assert not at.exception
    assert at.slider(key="w_epsilon_per_km").value == 1.0  # one epsilon for the whole app
    spread = float(metric(at, "Error at A").split()[0].replace(",", ""))
    assert spread > tight
    assert metric(at, "Geo-ind.") == "✓ holds"
    at.slider(key="w_epsilon_per_km").set_value(20.0).run()  # and the sidebar's moves the page's
    assert not at.exception
    assert at.select_slider(key="lesson_epsilon_per_km").value == 20.0


def test_no_ring_where_the_loss_is_not_a_distance_from_a():
    """Issue 39 item 6: the ring is A's expected error drawn as a distance around A; under the task cost (the
    distance from a report to a task, not to A) there is no ring, and the caption says why."""
    layers = deck_layers(run_ok(make_app()))
    assert "ring" in layers  # the Lesson's own loss: road distance from A to its report
    at = run_ok(make_app(loss="task"))
    assert "ring" not in deck_layers(at)
    captions = " ".join(c.value for c in at.caption)
    assert "no ring: the paper's task cost (1 task) is not a distance from A" in captions
    assert "orange ring" not in captions


def test_epsilon_is_on_a_stepped_scale_read_in_metres():
    """Issue 39 item 7: ε moves on a log scale of round steps, a value between two steps (the sidebar's, a link's)
    keeps its place, and beside it ε is read in metres: ln 2 / ε, the distance within which any report is at most
    twice as likely from one place as from the other."""
    from app.model.lesson_numbers import EPSILON_STEPS

    at = run_ok(make_app())
    eps = at.select_slider(key="lesson_epsilon_per_km")
    assert eps.value == 5.0
    assert [float(o) for o in eps.options] == list(EPSILON_STEPS)
    assert EPSILON_STEPS[0] == 0.5 and EPSILON_STEPS[-1] == 50.0
    assert all(b / a <= 1.5 + 1e-9 for a, b in zip(EPSILON_STEPS, EPSILON_STEPS[1:], strict=False))  # no big jumps
    reading = [m.value for m in at.markdown if m.value.startswith("**ε = ")]
    assert reading and reading[0].startswith(f"**ε = 5/km ≈ {1000 * math.log(2) / 5:,.0f} m**"), reading
    at.slider(key="w_epsilon_per_km").set_value(8.5).run()
    eps = at.select_slider(key="lesson_epsilon_per_km")
    assert eps.value == 8.5 and 8.5 in [float(o) for o in eps.options]
    reading = [m.value for m in at.markdown if m.value.startswith("**ε = ")]
    assert reading[0].startswith(f"**ε = 8.5/km ≈ {1000 * math.log(2) / 8.5:,.0f} m**"), reading


@pytest.mark.parametrize("mech", ["laplace", "em", "em-br", "lp-ca", "panda-e"])
def test_every_fast_mechanism_shows_its_numbers(mech):
    at = make_app()
    at.session_state["lesson_mech"] = mech
    run_ok(at)
    assert metric(at, "Error at A").endswith(" m")
    verdict = metric(at, "Geo-ind.")
    if mech == "panda-e":
        assert verdict.startswith("✗")  # the published setup leaks through Phase I: measured, shown
    else:  # the page's verdict is the library's exact audit of the same matrix
        from panda.audit import audit_mechanism
        from panda.mechanisms import BASELINES

        inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=200, n_users=12, n_outputs=50, seed=0)
        options = {"time_limit_s": 20.0} if mech.startswith("lp") else {}
        audit = audit_mechanism(BASELINES[mech](inst, 5.0, **options).matrix, inst.d_km, 5.0)
        rate = audit.violation_rate
        failed = f"✗ {100 * rate:.0f} %" if rate >= 0.01 else f"✗ {100 * rate:.1f} %"
        assert verdict == ("✓ holds" if audit.passed else failed)
    assert len(verdict) <= 8  # fits a third of the column at 1280x720 with the sidebar open
    assert any("likelier" in m.value for m in at.markdown)


def test_places_and_attacker_mode():
    at = make_app()
    at.session_state["lesson_mech"] = "em"
    run_ok(at)
    at.selectbox(key="lesson_a").set_value(10).run()
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=200, n_users=12, n_outputs=50, seed=0)
    assert at.selectbox(key="lesson_b").value == lesson_numbers.second_place(inst, 10)  # B follows A until picked
    at.selectbox(key="lesson_b").set_value(11).run()
    at.selectbox(key="lesson_a").set_value(12).run()
    assert not at.exception
    assert at.selectbox(key="lesson_b").value == 11  # picked: stays
    assert any("are" in c.value and "apart" in c.value for c in at.caption)
    at.button[0].click().run()  # Draw 10 reports
    assert not at.exception
    assert len(deck_layers(at)["samples"]["data"]) == 10
    at.session_state["lesson_mode"] = "attacker"
    at.run()
    assert not at.exception
    layers = deck_layers(at)
    assert "belief" in layers and "reports" not in layers
    assert any("best guess" in c.value for c in at.caption)
    report = at.selectbox(key="lesson_report")
    assert report.value == at.session_state["lesson_samples"][-1]  # the newest sampled report first
    belief = {d["x"]: d["tooltip"] for d in layers["belief"]["data"]}
    other = next(j for j in report.options if j != f"Output {report.value}")
    report.set_value(int(other.split()[-1])).run()
    assert not at.exception
    assert {d["x"]: d["tooltip"] for d in deck_layers(at)["belief"]["data"]} != belief
    assert any(f"sees output {other.split()[-1]}" in c.value for c in at.caption)


def test_presenter_view_from_the_link():
    at = run_ok(make_app(present="1"))
    assert at.toggle(key="w_present").value is True
    assert not any("Or explore freely" in c.value for c in at.caption)
    at.toggle(key="w_present").set_value(False).run()
    assert not at.exception
    assert any("Or explore freely" in c.value for c in at.caption)


def test_the_lesson_lives_in_the_link():
    at = run_ok(make_app(mech="em", place="10", place2="11", view="attacker", ltab="about"))
    assert at.selectbox(key="lesson_mech").value == "em"
    assert at.selectbox(key="lesson_a").value == 10 and at.selectbox(key="lesson_b").value == 11
    assert at.session_state["lesson_mode"] == "attacker"
    assert any(m.value.startswith("**Exponential (EM)**") for m in at.markdown)  # the About tab is open
    query = at.query_params
    assert query["mech"] == "em" and query["place"] == "10" and query["place2"] == "11"
    assert query["view"] == "attacker" and query["ltab"] == "about"
    at.selectbox(key="lesson_mech").set_value("em-br").run()
    at.selectbox(key="lesson_a").set_value(20).run()
    assert at.query_params["mech"] == "em-br" and at.query_params["place"] == "20"
    assert "present" not in at.query_params
    at.toggle(key="w_present").set_value(True).run()
    assert at.query_params["present"] == "1"


def test_a_bad_lesson_link_is_ignored_and_said():
    at = run_ok(make_app(mech="nonsense", place="99999", view="x"))
    assert at.selectbox(key="lesson_mech").value == "laplace"
    assert 0 <= at.selectbox(key="lesson_a").value < 200
    assert any("mech=nonsense" in t.value for t in at.warning)


def test_rate_ranges_fit_a_metric():
    from app.model.panda_numbers import fmt_pct_range

    assert fmt_pct_range(1.0, 1.0) == "100.0 %"
    assert fmt_pct_range(0.12, 0.153) == "12–15 %"
    assert fmt_pct_range(float("nan"), 0.5) == "50.0 %"
    assert max(len(fmt_pct_range(a, b)) for a, b in [(0.0, 1.0), (0.999, 1.0), (0.5, 0.5)]) <= 8


def test_the_trade_off_curve_tab():
    at = run_ok(make_app(K="100", M="30", ltab="curve"))
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    spec = json.loads(charts[0].proto.spec)
    names = {t.get("name") for t in spec["data"]}
    for key in ("laplace", "em", "em-br", "lp-ca"):
        assert lesson_numbers.MECHANISMS[key][0] in names, (key, names)
    # PAnDA twice, labelled: its loss at its users (the paper's) and over every place (its mixture)
    label = lesson_numbers.MECHANISMS["panda-e"][0]
    assert {f"{label} at its users", f"{label} over every place"} <= names, names
    assert any("over every place" in c.value and "at its users" in c.value for c in at.caption)
    eps_points = {round(p[0], 6) for t in spec["data"] for p in (t.get("customdata") or []) if isinstance(p, list)}
    assert {0.5, 5.0, 50.0} <= eps_points  # every point carries its eps for the click handler
    assert any("Click a point" in c.value for c in at.caption)
    assert not at.toggle(key="lesson_curve_lp").value  # the optimal LP only on request


def test_lesson_survives_seed_city_size_and_preset_changes():
    """The guide's walk: change seed, preset, city and size, then other controls; never an exception."""
    at = make_app(K="500")
    at.session_state["lesson_mech"] = "em"
    run_ok(at)
    at.selectbox(key="lesson_a").set_value(450).run()
    at.number_input(key="w_seed").set_value(3).run()
    at.select_slider(key="lesson_epsilon_per_km").set_value(2.0).run()
    assert not at.exception and not at.error
    at.number_input(key="w_K").set_value(200).run()  # place 450 no longer exists
    assert not at.exception and not at.error
    assert 0 <= at.selectbox(key="lesson_a").value < 200
    at.selectbox(key="w_city").set_value("kotka").run()
    at.selectbox(key="lesson_mech").set_value("panda-p").run()
    assert not at.exception and not at.error
    at.radio(key="w_preset").set_value("paper").run()
    at.select_slider(key="lesson_epsilon_per_km").set_value(10.0).run()
    assert not at.exception and not at.error
    assert metric(at, "Error at A").endswith(" m") or metric(at, "Error at A") == "—"


def test_the_optimal_mechanism_on_a_small_view():
    """The certified optimal LP: an exactly audited mechanism; if not proven optimal in time, its gap is stated."""
    at = run_ok(make_app(K="80", M="30", mech="lp"))
    assert metric(at, "Geo-ind.") == "✓ holds"
    assert metric(at, "Error at A").endswith(" m")
    notes = [c.value for c in at.caption if "not proven optimal" in c.value]
    assert not notes or "no mechanism can go below" in notes[0]


def test_the_numbers_say_their_scope_at_a_and_over_the_city():
    """Issue 39 item 6: rows "at A" and "city average", each with the report's error (its loss named) and the best
    attacker's, recomputed here from the library: A's row of planar Laplace's matrix, the attacker's exact expected
    error when the truth is A (a sum over the reports A can make), the mechanism's prior-weighted loss and the
    exact audit's attacker."""
    from app.model.panda_numbers import fmt_m
    from panda.audit import adversary_error_m
    from panda.mechanisms import BASELINES

    at = run_ok(make_app())
    inst = panda.make_instance(
        panda.load_city("neubrandenburg"), n_records=200, n_users=12, n_outputs=50, seed=0, loss="road"
    )
    mech = BASELINES["laplace"](inst, 5.0)
    p, d = mech.matrix, inst.d_km * 1000.0
    a = at.session_state["lesson_a"]
    attacker_at_a = 0.0
    for y in np.flatnonzero(p[a] > 0):  # the attacker's guess for each report A can make, weighted by its chance
        post = inst.prior * p[:, y] / (inst.prior @ p[:, y])
        attacker_at_a += p[a, y] * d[int(np.argmin(post @ d)), a]
    lines = next(m.value for m in at.markdown if m.value.startswith("**At A:**"))
    assert f"**At A:** report's error {fmt_m(float(p[a] @ inst.cost_m[a]))}, attacker's {fmt_m(attacker_at_a)}" in lines
    city = f"**City average:** report's error {fmt_m(float(inst.prior @ (p * inst.cost_m).sum(axis=1)))}, "
    assert city + f"attacker's {fmt_m(adversary_error_m(p, inst.prior, d))} (report's error: road distance)" in lines


def test_the_lessons_sidebar_folds_the_research_controls():
    """Issue 39 item 7: on the Lesson (and the guided lesson) users, outputs, seed and PAnDA's parameters wait under
    closed "Expert settings"; the places K, the loss and the prior stay in view. The PAnDA page shows them all."""
    at = run_ok(make_app())
    folded = {e.label: e for e in at.sidebar.expander}
    users = folded["Expert settings: users, outputs, seed"]
    assert {n.key for n in users.number_input} == {"w_N", "w_M", "w_seed"}
    assert "Expert settings: PAnDA's parameters" in folded
    assert "w_K" in {n.key for n in at.sidebar.number_input} and "w_K" not in {n.key for n in users.number_input}
    at.switch_page("app_pages/explore.py")
    run_ok(at)
    assert not [e for e in at.sidebar.expander if e.label.startswith("Expert settings")]
    assert {"w_N", "w_M", "w_seed"} <= {n.key for n in at.sidebar.number_input}
