"""The privacy-utility curve (panda.tradeoff), its figure (app.figures.curve_charts) and its dashboard job, on Kotka."""

from __future__ import annotations

import math

import numpy as np
import pytest

import panda
from panda import tradeoff
from panda.mechanisms.base import MechanismResult
from panda.tradeoff import CURVE_COLUMNS, tradeoff_curve

EPS = (1.0, 5.0, 20.0, 50.0)
METHODS = ("em", "em-br", "lp", "panda-e")
OUTCOMES = {"solved", "time limit", "failed", "skipped"}


@pytest.fixture(scope="module")
def tiny(kotka):
    """60 records, 15 outputs on Kotka (~2 km across): every LP here solves in seconds."""
    return panda.make_instance(kotka, n_records=60, n_outputs=15, n_users=8, seed=0)


@pytest.fixture(scope="module")
def curve(tiny):
    calls = []
    rows = tradeoff_curve(
        tiny, METHODS, EPS, lp_time_limit_s=15.0, progress=lambda message, fraction: calls.append((message, fraction))
    )
    return rows, calls


def _series(rows, method, key="loss_m"):
    pts = [r for r in rows if r["method"] == method and r["outcome"] == "solved"]
    return [r["epsilon_per_km"] for r in pts], np.array([r[key] for r in pts])


def test_rows_are_complete_and_honest(curve):
    rows, calls = curve
    assert [(r["method"], r["epsilon_per_km"]) for r in rows] == [(m, e) for m in METHODS for e in EPS]
    for r in rows:
        assert set(CURVE_COLUMNS) <= set(r), set(CURVE_COLUMNS) - set(r)
        assert r["outcome"] in OUTCOMES
        if r["outcome"] == "solved":
            assert math.isfinite(r["loss_m"]) and math.isfinite(r["adversary_error_m"]) and r["audited"]
            assert r["audit_passed"] in (True, False)
        elif r["method"] == "lp" and r["outcome"] == "time limit" and math.isfinite(r["loss_m"]):
            # cut short by its time limit (a loaded machine): its best audited mechanism and its bound
            assert r["audited"] and r["audit_passed"] and 0 < r["lower_bound_m"] < r["loss_m"], r
        else:
            assert math.isnan(r["loss_m"]) and not r["audited"] and r["audit_passed"] is None
    # progress between points, fractions in [0, 1], the last one 1
    assert len(calls) == len(rows) + 1 and calls[-1] == ("done", 1.0)
    assert all(0.0 <= f <= 1.0 for _, f in calls)


def test_loss_and_attacker_error_fall_with_eps(curve):
    rows, _ = curve
    # EM's loss falls exactly; the optimal LP's optimum does too, and each solved point is within its
    # certified gap (at most 0.5 %) of it, so two points may differ by up to that much the other way.
    for method, tolerance in (("em", 1e-6), ("lp", 0.005)):
        eps, loss = _series(rows, method)
        assert len(eps) >= 3, f"{method}: too few solved points"
        assert np.all(np.diff(loss) <= tolerance * loss[:-1] + 1e-9), (method, loss)
    eps, err = _series(rows, "em", "adversary_error_m")
    assert len(eps) == len(EPS) and np.all(np.diff(err) < 0), err


def test_em_passes_the_exact_audit_everywhere_and_lp_is_best(curve):
    rows, _ = curve
    em = [r for r in rows if r["method"] == "em"]
    assert all(r["audited"] and r["audit_passed"] for r in em)
    assert all(r["epsilon_min_per_km"] <= r["epsilon_per_km"] * (1 + 1e-9) for r in em)
    assert all(r["audit_scope"].startswith("all ") for r in em)
    # The optimal LP (or its certified lower bound) is below every audited eps-mDP mechanism.
    for eps in EPS:
        lp = next(r for r in rows if r["method"] == "lp" and r["epsilon_per_km"] == eps)
        floor = lp["loss_m"] if lp["outcome"] == "solved" else lp["lower_bound_m"]
        if not math.isfinite(floor):
            continue
        for r in rows:
            if r["epsilon_per_km"] == eps and r["method"] in ("em", "em-br") and r["audit_passed"]:
                assert floor - lp["floor_slack_m"] <= r["loss_m"] * (1 + 1e-9), (eps, r["method"])


def test_panda_rows_count_phase_one(curve, tiny):
    rows, _ = curve
    pts = [r for r in rows if r["method"] == "panda-e"]
    assert len(pts) == len(EPS) and all(r["label"] == "PAnDA-e" for r in pts)
    for r in pts:
        if r["outcome"] == "solved":
            assert "PmDP" in r["audit_kind"] and "Phase I" in r["audit_kind"]
            assert math.isnan(r["epsilon_min_per_km"])
            assert 0.0 <= r["pmdp_user_rate_over_delta"] <= r["pmdp_user_rate_over_delta_upper"] <= 1.0
            assert r["audit_passed"] == (r["pmdp_user_rate_over_delta_upper"] == 0.0)
            assert math.isfinite(r["users_loss_m"])


def test_panda_rows_carry_both_losses_computed(curve, tiny):
    """PAnDA's loss at its users is the PandaResult's (the paper's measure, as Compare shows); its loss
    over every place is its surrogate mixture's under the prior: both recomputed here, and they differ."""
    from panda.mechanisms.base import expected_loss_m
    from panda.mechanisms.panda_mech import panda_mixture_matrix

    rows, _ = curve
    solved = [r for r in rows if r["method"] == "panda-e" and r["outcome"] == "solved"]
    assert len(solved) >= 2
    for r in solved:
        cfg = panda.PandaConfig().replace(epsilon_per_km=r["epsilon_per_km"], solve_relaxed=False)
        res = panda.run_panda(tiny, cfg, seed=0)
        assert r["users_loss_m"] == pytest.approx(res.loss_expected_m, rel=1e-9)
        assert r["users_loss_m"] == pytest.approx(res.summary()["loss_expected_m"], rel=1e-9)
        assert r["users_counted"] == int((res.surrogates >= 0).sum()) > 0
        mixture, _ = panda_mixture_matrix(tiny, res)
        assert r["loss_m"] == pytest.approx(expected_loss_m(tiny, mixture), rel=1e-9)
        assert r["loss_m"] != r["users_loss_m"]  # two measures (close here: 60 places, 2 km across)
    # the baselines average over every user
    em = [r for r in rows if r["method"] == "em" and r["outcome"] == "solved"]
    assert em and all(r["users_counted"] == tiny.n_users for r in em)


def test_panda_on_the_lessons_instance_far_apart_and_both_drawn():
    """The Lesson's default view (Neubrandenburg, 500 places, 20 users, artifact preset): its users'
    loss is the PAnDA page's number, the mixture over every place is several times larger, and the
    figure draws both, labelled, with these values (issue 26, item 8)."""
    from app.figures.curve_charts import tradeoff_figure, tradeoff_notes

    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=500, n_users=20, n_outputs=100, seed=0)
    cfg = panda.preset("artifact")
    rows = tradeoff_curve(inst, ("panda-e",), (0.5, 5.0, 50.0), panda_config=cfg, seed=0)
    assert [r["outcome"] for r in rows] == ["solved"] * 3
    for r in rows:
        res = panda.run_panda(inst, cfg.replace(epsilon_per_km=r["epsilon_per_km"]), seed=0)
        assert r["users_loss_m"] == pytest.approx(res.loss_expected_m, rel=1e-9)
        assert r["loss_m"] > 4 * r["users_loss_m"], r
    fig = tradeoff_figure(rows, 5.0, metric="both", labels={"panda-e": "PAnDA-e"})
    loss = {t.name: list(t.y) for t in _lines(fig, "loss")}
    assert loss == {
        "PAnDA-e at its users": [r["users_loss_m"] for r in rows],
        "PAnDA-e over every place": [r["loss_m"] for r in rows],
    }
    (note,) = [n for n in tradeoff_notes(rows, labels={"panda-e": "PAnDA-e"}) if "over every place" in n]
    from app.model.panda_numbers import fmt_m

    for key, scope in (("users_loss_m", "at its users ("), ("loss_m", "over every place (")):
        at = note.index(scope) + len(scope)
        assert note[at:].startswith(fmt_m(min(r[key] for r in rows))), note  # the measured values


def test_an_impossible_time_limit_is_a_row(tiny):
    (row,) = tradeoff_curve(tiny, ("lp",), (2.0,), lp_time_limit_s=1e-3)
    assert row["outcome"] in ("time limit", "failed") and row["status"].startswith(("unsolved", "failed"))
    bound = row["lower_bound_m"]
    if row["audited"]:
        # PDHG (dense instances) always finishes its first round: an audited, unsolved mechanism
        # with both bounds is returned, however short the limit.
        assert row["status"].startswith("unsolved: gap") and row["audit_passed"]
        assert 0 < bound < row["loss_m"]
        return
    assert math.isnan(row["loss_m"])
    assert math.isnan(bound) or bound > 0


def test_an_unfinished_lp_row_brackets_the_optimum():
    """An LP cut short with a matrix: its audited loss and its proven bound are both in the row and the figure."""
    from app.figures.curve_charts import tradeoff_figure

    # K = 300 at 1/km: gap 11.7 % at 1.5 s on 2 cores (K = 150 at 5/km, used before, now solves in
    # 1.5 s on a fast machine: the solver got faster, so the instance must be harder)
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=300, n_outputs=100, n_users=20, seed=0)
    (row,) = tradeoff_curve(inst, ("lp",), (1.0,), lp_time_limit_s=1.5)
    assert row["outcome"] == "time limit" and "bound" in row["status"]
    assert row["audited"] and row["audit_passed"]
    assert 0 < row["lower_bound_m"] < row["loss_m"]
    fig = tradeoff_figure([row], 1.0, metric="loss")
    kinds = [t.meta.get("kind") for t in fig.data if isinstance(t.meta, dict)]
    assert "lower bound" in kinds and "best found" in kinds  # the certified interval: bound and mechanism
    found = next(t for t in fig.data if isinstance(t.meta, dict) and t.meta.get("kind") == "best found")
    assert list(found.y) == [pytest.approx(row["loss_m"])]


def test_failures_skips_and_estimates_never_raise(tiny, monkeypatch):
    real = tradeoff._build
    k, m = tiny.n_records, tiny.n_outputs

    def fake(method, instance, eps, config, seed, time_limit_s):
        if method == "em":
            raise RuntimeError("boom")
        if method == "lp-ca":  # the largest eps hits its limit: the smaller ones are not attempted
            return MechanismResult("lp-ca", eps, None, "unsolved: time limit after 0.1 s", 0.1, float("nan"), {})
        if method == "laplace":  # a sampled estimate with zeros: an exact audit would fail on it
            p = np.zeros((k, m))
            p[:, 0] = 1.0
            p[0] = 1.0 / m
            return MechanismResult("laplace", eps, p, "solved", 0.0, 1.0, {"estimated": True})
        return real(method, instance, eps, config, seed, time_limit_s)

    monkeypatch.setattr(tradeoff, "_build", fake)
    rows = tradeoff_curve(tiny, ("em", "lp-ca", "laplace", "em-br"), (1.0, 5.0, 50.0))
    by = {(r["method"], r["epsilon_per_km"]): r for r in rows}
    assert all(by[("em", e)]["outcome"] == "failed" and "boom" in by[("em", e)]["status"] for e in (1.0, 5.0, 50.0))
    assert by[("lp-ca", 50.0)]["outcome"] == "time limit"
    assert by[("lp-ca", 5.0)]["outcome"] == by[("lp-ca", 1.0)]["outcome"] == "skipped"
    lap = by[("laplace", 5.0)]
    assert lap["outcome"] == "solved" and not lap["audited"] and lap["audit_passed"] is None
    assert "sampled" in lap["audit_kind"] and math.isfinite(lap["adversary_error_m"])
    assert all(by[("em-br", e)]["outcome"] == "solved" for e in (1.0, 5.0, 50.0))


def test_a_method_the_busy_queue_never_ran_is_busy_not_failed(monkeypatch):
    """The dashboard's curve: a method whose job found no free worker (JobBusy) is a "busy" row, not a failure."""
    from app import page_jobs, state
    from panda.execution import JobBusy

    def fake(instance_key, method, eps, items, seed, limit, _progress=None):
        if method == "em":
            raise JobBusy("waited 300 s without a free worker")
        return tradeoff.status_rows(method, eps, "solved")

    monkeypatch.setattr(state, "tradeoff_method", fake)
    rows = page_jobs.tradeoff_curve(
        ("city:kotka", 40, 5, 10, 0, "road", 1, "uniform"), ("em", "em-br"), (1.0, 5.0), (), 0, 5.0
    )
    by = {(r["method"], r["epsilon_per_km"]): r for r in rows}
    assert [by[("em", e)]["outcome"] for e in (1.0, 5.0)] == ["busy", "busy"]
    assert by[("em", 1.0)]["status"].startswith("busy: ")
    assert by[("em-br", 5.0)]["outcome"] == "solved"


def test_bad_arguments(tiny):
    with pytest.raises(ValueError, match="methods"):
        tradeoff_curve(tiny, ("nope",), EPS)
    with pytest.raises(ValueError, match="epsilons_per_km"):
        tradeoff_curve(tiny, ("em",), (0.0,))


# --- the figure ---------------------------------------------------------------------------------


def _lines(fig, metric):
    return [t for t in fig.data if t.meta and t.meta.get("metric") == metric and "kind" not in t.meta]


def test_figure(curve):
    pytest.importorskip("plotly")
    from app.figures.curve_charts import tradeoff_figure, tradeoff_notes

    rows = [dict(r) for r in curve[0]]
    # make the picture show every case: a failed audit, an unsolved LP with and without a bound
    rows[1].update(audit_passed=False)  # em at eps = 5
    lp = [r for r in rows if r["method"] == "lp"]
    lp[0].update(outcome="time limit", loss_m=float("nan"), lower_bound_m=123.0, audited=False, audit_passed=None)
    lp[1].update(outcome="time limit", loss_m=float("nan"), lower_bound_m=float("nan"), audited=False)
    fig = tradeoff_figure(rows, 5.0, metric="loss")
    lines = _lines(fig, "loss")
    assert [t.meta["method"] for t in lines] == [*METHODS, "panda-e"]
    assert [t.name for t in lines] == [
        "EM",
        "EM+BR",
        "Optimal LP",
        "PAnDA-e at its users",
        "PAnDA-e over every place",
    ]
    # PAnDA's two losses, each from its own column of the rows, labelled, the mixture's dashed
    users_line, every_line = lines[3], lines[4]
    assert (users_line.meta["scope"], every_line.meta["scope"]) == ("users", "every place")
    assert (users_line.line.dash, every_line.line.dash) == ("solid", "dash")
    panda_rows = [r for r in rows if r["method"] == "panda-e"]
    for line, key in ((users_line, "users_loss_m"), (every_line, "loss_m")):
        want = [r[key] if r["outcome"] == "solved" else None for r in panda_rows]
        assert list(line.y) == want
    solved = [i for i, r in enumerate(panda_rows) if r["outcome"] == "solved"]
    assert solved and all(users_line.y[i] != every_line.y[i] for i in solved)
    i = solved[0]
    assert "the paper's measure" in users_line.hovertext[i] and "over every place" in users_line.hovertext[i]
    assert f"at its {panda_rows[i]['users_counted']} users" in users_line.hovertext[i]
    em = lines[0]
    assert list(em.marker.symbol) == ["circle", "circle-open", "circle", "circle"]
    for t in lines:
        assert [c[0] for c in t.customdata] == list(EPS)
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "ε (1/km)"
    vlines = [s for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1 == 5.0]
    assert len(vlines) == 1
    (bound,) = [t for t in fig.data if t.meta and t.meta.get("kind") == "lower bound"]
    assert list(bound.y)[0] == 123.0 and bound.y[1] is None and "LP ≥ 123 m" in bound.text[0]
    assert bound.cliponaxis is False  # a bound near the x axis keeps its label
    assert "no mechanism can do better than 123 m" in bound.hovertext[0]
    assert [c[0] for c in bound.customdata] == list(EPS)
    assert any("no bound" in a.text for a in fig.layout.annotations)
    notes = tradeoff_notes(rows)
    assert any("no mechanism can do better than 123 m at ε = 1" in n for n in notes)
    (scope_note,) = [n for n in notes if "over every place" in n]
    assert "PAnDA-e at its users" in scope_note and "the paper's measure" in scope_note
    short = tradeoff_notes(rows, labels={"panda-e": "PAnDA"})
    assert any("PAnDA at its users" in n and "PAnDA over every place" in n for n in short)
    # both panels: one line per mechanism in each (PAnDA's two losses on top), the current eps in both
    both = tradeoff_figure(rows, 20.0, metric="both", height=600)
    assert len(_lines(both, "loss")) == len(METHODS) + 1
    attacker = _lines(both, "attacker")
    assert [t.name for t in attacker] == ["EM", "EM+BR", "Optimal LP", "PAnDA-e over every place"]
    want = [r["adversary_error_m"] if r["outcome"] == "solved" else None for r in panda_rows]
    assert list(attacker[3].y) == want and attacker[3].showlegend is False
    names = {t.name for t in both.data}
    assert {"PAnDA-e at its users", "PAnDA-e over every place"} <= names
    assert len([s for s in both.layout.shapes if s.x0 == 20.0]) == 2
    with pytest.raises(ValueError, match="metric"):
        tradeoff_figure(rows, 5.0, metric="utility")


def test_close_bound_labels_are_pushed_apart():
    """The curve's grid has 3.5 and 5/km 0.15 decades apart: their labels overlapped at 1280 px."""
    pytest.importorskip("plotly")
    from app.figures.curve_bounds import _bound_label_positions

    xs = [0.5, 1.0, 2.0, 3.5, 5.0, 10.0, 20.0, 50.0]
    ys = [1263.0, 952.0, 570.0, 377.0, 256.0, 109.0, None, None]
    assert _bound_label_positions(xs, ys) == [
        "bottom right",  # the leftmost: centred it ran off the plot's left edge
        "bottom center",
        "bottom center",
        "bottom left",
        "bottom right",
        "bottom center",
        "bottom center",
        "bottom center",
    ]
    # only bounds count: a solved point between two bounds leaves them far enough apart
    apart = ["bottom right", "bottom center", "bottom center"]
    assert _bound_label_positions([2.0, 3.5, 5.0], [570.0, None, 256.0]) == apart


# --- the dashboard's job ------------------------------------------------------------------------


def test_dashboard_curve_runs_in_the_worker_and_reports_failures(monkeypatch):
    pytest.importorskip("streamlit")
    from app import page_jobs, state
    from panda.execution import LOW, JobError
    from panda.jobs import tradeoff_curve_job

    assert tradeoff_curve_job.priority == LOW
    key = ("city:kotka", 40, 6, 10, 0)
    items = state.config_items(panda.preset("artifact"))
    try:
        messages = []
        job = page_jobs.start_tradeoff_curve(key, ("panda-e", "em"), (2.0, 20.0), items, 0, 5.0)
        rows = job.result(lambda message, fraction: messages.append(fraction))
        assert [(r["method"], r["epsilon_per_km"]) for r in rows] == [
            ("panda-e", 2.0),
            ("panda-e", 20.0),
            ("em", 2.0),
            ("em", 20.0),
        ]
        assert all(r["outcome"] == "solved" for r in rows) and messages and messages[-1] == 1.0

        def broken(*args, **kwargs):
            raise JobError("the computation did not finish within 60 s and was stopped")

        monkeypatch.setattr(state, "tradeoff_method", broken)
        rows = page_jobs.tradeoff_curve(key, ("lp-ca",), (2.0, 20.0), (), 0, 5.0)
        assert [r["outcome"] for r in rows] == ["failed", "failed"] and "60 s" in rows[0]["status"]
    finally:
        state.panda_worker().close()
        state.clear_all()
