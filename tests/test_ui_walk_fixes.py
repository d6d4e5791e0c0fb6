"""Fixes from a walk through the dashboard in Chromium (screenshots at 1280x720 and on a 390x844 phone).

* The lecturer's rounds table and chart: an open round, or one revealed without guesses, reads "open" and
  "—", never "None"; the chart's log axis has the rounds' ε as its only ticks, and a round without a class
  median does not break the class's line.
* The Lesson's *Geo-ind.* value fits a third of the right column at 1280x720 ("✗ 21 %").
* *k reports* at k = 1 says something that is not circular.
* A student's map after the reveal names orange and blue too, and close markers nest (smaller on top).
* PAnDA-e and PAnDA-l on the Lesson's default view: one sentence with the computed agreement of the decays.
* The PAnDA page's budget chart title is not cut at 1280; phones hide plotly's mode bar and the Lesson's
  map leaves no blank under it (browser test at the end).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from apptest_support import SMALL, clear_caches, make_app, metric, release_resources, run_ok  # noqa: F401

import panda
from app.figures import charts, game_maps, repeated_charts, style, tables
from app.game import rounds
from app.model import lesson_numbers
from app.model.params import Params, to_config
from panda import class_round
from panda.anchors import far_value, resolve_gamma_km, selection_probabilities


# ---------------------------------------------------------------------------------------------
# 1. The lecturer's rounds table and chart
def _round(n, eps, status="revealed", **summary):
    return {"round": n, "mechanism": "laplace", "epsilon_per_km": eps, "n_reports": 1, "status": status} | summary


REVEALED = _round(
    1, 5.0, n_guesses=5, class_mean_m=3152.4, class_median_m=2215.0, best_m=2102.0, bayes_expected_m=367.2
)
NO_GUESSES = _round(2, 2.0, n_guesses=0, class_mean_m=None, class_median_m=None, best_m=None, bayes_expected_m=296.0)
OPEN = _round(3, 10.0, status="open")


def _shown(styler) -> list[list[str]]:
    """The table's cells as the page writes them (the styler's display text), row by row."""
    html = styler.hide(axis="index").to_html()
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", html, flags=re.S)]
    n = len(styler.data.columns)
    return [cells[i : i + n] for i in range(0, len(cells), n)]


def test_the_rounds_table_never_says_none():
    rows = [REVEALED, NO_GUESSES, OPEN]
    frame = tables.rounds_frame(rows, {"laplace": "Planar Laplace"})
    assert not frame.isna().to_numpy().any()  # the grid writes an empty cell "None"
    assert float(frame["Mean (m)"].iloc[0]) == 3152.4  # every digit (the grid's CSV export keeps them)
    shown = _shown(tables.rounds_styler(rows, {"laplace": "Planar Laplace"}))
    assert not any(cell in ("None", "nan", "<NA>", "") for row in shown for cell in row), shown
    columns = list(frame.columns)
    column = {c: [row[columns.index(c)] for row in shown] for c in columns}
    assert column["Guesses"] == ["5", "0", "open"]
    assert column["Mean (m)"] == ["3,152", "—", "—"]
    assert column["Bayes (m)"] == ["367", "296", "—"]
    assert column["Round"] == ["1", "2", "3"] and column["ε (1/km)"] == ["5", "2", "10"]
    closed = _shown(tables.rounds_styler([_round(4, 1.0, status="closed")]))[0]
    assert closed[columns.index("Guesses")] == "ended" and closed[columns.index("Median (m)")] == "—"


SAME_EPS = _round(3, 5.0, n_guesses=2, class_median_m=900.0, bayes_expected_m=300.0)


@pytest.mark.parametrize("rows", [[REVEALED], [REVEALED, NO_GUESSES], [NO_GUESSES, REVEALED, SAME_EPS]])
def test_the_rounds_chart_ticks_are_the_rounds_eps(rows):
    fig = charts.class_rounds([dict(r) for r in rows], {"class": "#000", "bayes": "#555"})
    eps = sorted({r["epsilon_per_km"] for r in rows})
    axis = fig.layout.xaxis
    assert axis.type == "log" and list(axis.tickvals) == eps and list(axis.ticktext) == [f"{e:g}" for e in eps]
    lo, hi = axis.range
    assert lo < np.log10(eps[0]) and hi > np.log10(eps[-1])
    for trace in fig.data:  # no gap in a line: a round without the number is left out of that line
        assert None not in trace.y and all(np.isfinite(trace.y))
    class_line = next(t for t in fig.data if t.name == "Class (median)")
    assert len(class_line.x) == sum(r.get("class_median_m") is not None for r in rows)


@pytest.mark.slow
def test_the_lecturers_table_shows_open_and_dashes(db):
    from app import state

    view = list(Params(n_records=200, n_users=12, n_outputs=50, page_loss="road").instance_key)
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0))
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    rng = np.random.default_rng(0)
    for i in range(2):
        t = rounds.join(code)
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 1, None, rng=rng))
        rounds.guess(code, t, 10 * i)

    def score(rnd, entries):
        d_m = inst.d_km * 1000.0
        return class_round.score_round(inst.prior, matrix, d_m, entries, 1, rng=np.random.default_rng(1))

    rounds.reveal(code, key, score)
    rounds.next_round(code, key, rounds.RoundSpec("laplace", 2.0))  # round 2: open, no guesses yet
    at = make_app("app_pages/host.py", code=code, key=key)
    run_ok(at)
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    shown = convert_arrow_bytes_to_pandas_df(at.dataframe[0].proto.arrow_data.styler.display_values)
    assert not shown.isna().to_numpy().any(), shown
    assert "None" not in shown.astype(str).to_numpy()
    assert list(shown["Guesses"]) == ["2", "open"]
    assert list(shown["Median (m)"])[1] == "—" and list(shown["Bayes (m)"])[1] == "—"
    data = at.dataframe[0].value
    assert not data.isna().to_numpy().any() and "None" not in data.astype(str).to_numpy()
    assert float(data["Mean (m)"].iloc[0]) == pytest.approx(rounds.host_view(code, key).rounds[0]["class_mean_m"])
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["xaxis"]["tickvals"] == [5.0]


# ---------------------------------------------------------------------------------------------
# 2.-3. The Lesson's numbers and sentences
@pytest.mark.parametrize(
    ("rate", "text"), [(0.2137, "✗ 21 %"), (1.0, "✗ 100 %"), (0.004, "✗ 0.4 %"), (0.0002, "✗ <0.1 %")]
)
def test_the_geoind_verdict_is_short(rate, text):
    assert lesson_numbers.geoind_verdict(rate) == text and len(text) <= 8


def _reports():
    from panda.repeated import RepeatedReports

    return RepeatedReports(
        ks=(1, 2, 3),
        error_m=np.array([720.0, 500.0, 400.0]),
        stderr_m=np.array([0.0, 12.0, 10.0]),
        exact=np.array([True, False, False]),
        defence_error_m=np.array([720.0, 720.0, 720.0]),
        single_report_error_m=720.0,
        prior_only_error_m=2000.0,
        n_sequences=600,
        epsilon_per_km=4.0,
        elapsed_s=0.1,
    )


def test_one_report_is_not_compared_with_itself():
    shown = _reports()
    one = repeated_charts.error_sentence("Exponential (EM)", shown, 1, 4.0)
    assert "after one report" in one and "720 m" in one and "Move k" in one
    assert "against" not in one and "not 4/km" not in one
    three = repeated_charts.error_sentence("Exponential (EM)", shown, 3, 4.0)
    assert "after 3 independent reports" in three and "against 720 m after one" in three and "not 12/km" in three


# ---------------------------------------------------------------------------------------------
# 4. A student's map after the reveal
def test_the_students_caption_names_every_colour_drawn():
    before = game_maps.student_legend(1, guess=None, secret=None, bayes_place=None)
    assert before == "White: your report · black: your guess"
    after = game_maps.student_legend(1, guess=3, secret=5, bayes_place=7)
    assert "orange: where it was made" in after and "blue: the Bayes attacker's guess" in after
    assert "blue" not in game_maps.student_legend(2, guess=None, secret=5, bayes_place=None)
    assert "black" not in game_maps.student_legend(2, guess=None, secret=5, bayes_place=None)


def test_close_markers_nest_with_the_smaller_on_top():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=60, n_users=5, n_outputs=20, seed=0)
    place = int(inst.outputs[0])  # report, guess, truth and the attacker's guess all on one place
    deck = game_maps.student_deck(inst, [], reports=[0], guess=place, secret=place, bayes_place=place)
    marks = next(layer for layer in deck.layers if layer.id == "marks").data
    radii = [m["r"] for m in marks]
    assert radii == sorted(radii, reverse=True), "deck.gl draws later data on top: the smaller ones last"
    # Each marker shows a ring of its own colour at least 2.5 px wide around the next one's outline.
    for outer, inner in zip(marks, marks[1:], strict=False):
        assert (outer["r"] - outer["w"] / 2) - (inner["r"] + inner["w"] / 2) >= 2.5


# ---------------------------------------------------------------------------------------------
# 5. PAnDA-e and PAnDA-l
def test_the_decays_agreement_is_computed():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=500, n_users=20, n_outputs=100, seed=0)
    configs = [to_config(Params(decay=d)) for d in ("exponential", "logistic")]
    agreement = lesson_numbers.decay_agreement(*configs, inst)
    gamma = resolve_gamma_km(configs[0], inst)
    assert agreement is not None and agreement.gamma_km == pytest.approx(gamma)
    d = np.linspace(0, gamma, 10_001)[:-1]
    we, wl = (selection_probabilities(d, c, gamma_km=gamma) for c in configs)
    assert agreement.max_rel_near == pytest.approx(np.max(np.abs(we - wl) / np.maximum(we, wl)), rel=1e-3)
    assert agreement.far == (far_value(configs[0], gamma), far_value(configs[1], gamma))
    sentence = lesson_numbers.same_decay_sentence(agreement, inst.n_records)
    assert sentence.startswith("**PAnDA-e and PAnDA-l agree here.**")
    assert "K = 500" in sentence and "121 m" in sentence and "0.029 %" in sentence and "9.5·10⁻⁵" in sentence
    # The paper's forms differ by about 5 % below gamma: no sentence.
    paper = [to_config(Params(decay=d, preset="paper")) for d in ("exponential", "logistic")]
    assert lesson_numbers.same_decay_sentence(lesson_numbers.decay_agreement(*paper, inst), inst.n_records) == ""


@pytest.mark.slow
def test_the_lesson_says_when_the_decays_agree():
    at = make_app()
    at.session_state["lesson_mech"] = "panda-l"
    run_ok(at)
    said = [c.value for c in at.caption if "agree here" in c.value]
    assert len(said) == 1 and "K = 200" in said[0]
    at = make_app()
    at.session_state["lesson_mech"] = "em"
    run_ok(at)
    assert not [c.value for c in at.caption if "agree here" in c.value]


# ---------------------------------------------------------------------------------------------
# 8.-9. Chart titles and phones
def test_the_budget_chart_title_fits_the_column():
    share = {"median": 0.5, "q1": 0.4, "q3": 0.6, "n": 10}
    fig = charts.budget_split({"phase1": share, "margin": share, "phase2": share})
    lines = [re.sub(r"<[^>]+>", "", part) for part in fig.layout.title.text.split("<br>")]
    assert max(len(line) for line in lines) <= 40, lines


def test_the_phone_css_hides_the_mode_bar_and_shrinks_the_map_element():
    css = style.css(presenting=False)
    phone = css[css.index("@media (max-width") :]
    assert ".modebar-container { display: none !important; }" in phone
    assert "stElementContainer" in phone and f"height: {style.PHONE_MAP_HEIGHT_PX}px !important" in phone
    assert ":has(:has" not in css.replace(" ", ""), "':has' does not nest"
