"""The lecturer's rounds table and chart (the host page): an open round, or one revealed without guesses,
reads "open" and "—", never "None"; the chart's log axis has the rounds' ε as its only ticks, and a round
without a class median does not break the class's line.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from apptest_support import clear_caches, make_app, release_resources, run_ok  # noqa: F401

from app.figures import charts, tables
from app.game import rounds
from app.model.params import Params
from panda import class_round


# ---------------------------------------------------------------------------------------------
# The lecturer's rounds table and chart
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
