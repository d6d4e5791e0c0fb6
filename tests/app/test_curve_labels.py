"""The trade-off curve's lower-bound labels never overlap (issue 28, item 4).

The labels ("▲ ε = E: LP ≥ B m") are annotations sharing one anchor (the loss panel's top right
corner) and moved down by pixel offsets, so their boxes can be computed from the figure alone: the
offset (``yshift``), the font size (times plotly's line height) and the padding. The check reads those
from the figure's annotations, not from the helper that placed them.
"""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("plotly")

from app.figures import curve_charts  # noqa: E402
from app.figures.curve_charts import tradeoff_figure  # noqa: E402

EPS = (0.5, 1.0, 2.0, 3.5, 5.0, 10.0, 20.0, 50.0)


def _crowded_rows(eps=EPS) -> list[dict]:
    """Every eps unsolved with a bound (the most labels), neighbours close in eps and in loss, plus two lines."""
    rows = []
    for e in eps:
        rows.append(
            {"method": "em", "epsilon_per_km": e, "outcome": "solved", "loss_m": 2000 / e**0.7,
             "adversary_error_m": 1500 / e**0.6, "audited": True, "audit_passed": True}
        )  # fmt: skip
        rows.append(
            {"method": "lp", "epsilon_per_km": e, "outcome": "time limit", "lower_bound_m": 1263 / e**0.8,
             "loss_m": 1300 / e**0.8, "adversary_error_m": 1000 / e**0.6, "audited": True, "audit_passed": True,
             "time_s": 20.0}
        )  # fmt: skip
    return rows


def _label_boxes(fig) -> list[tuple[float, float, dict]]:
    """Each bound label's vertical extent ``(top, bottom)`` in px from the common anchor, and its anchor."""
    boxes = []
    for a in fig.layout.annotations:
        if a.name != curve_charts.BOUND_LABEL_NAME:
            continue
        assert "\n" not in a.text and "<br>" not in a.text  # one line of text
        height = a.font.size * curve_charts.BOUND_LABEL_LINE_HEIGHT + 2 * (a.borderpad or 0) + 2 * (a.borderwidth or 0)
        assert a.yanchor == "top" and not a.showarrow
        top = a.yshift
        anchor = {"x": a.x, "y": a.y, "xref": a.xref, "yref": a.yref, "xanchor": a.xanchor}
        boxes.append((top, top - height, anchor))
    return boxes


@pytest.mark.parametrize("metric", ["loss", "both"])
@pytest.mark.parametrize("current", [None, 5.0, 50.0])
def test_bound_labels_never_overlap(metric, current):
    rows = _crowded_rows()
    fig = tradeoff_figure(rows, current, metric=metric, height=640 if metric == "both" else 380)
    boxes = _label_boxes(fig)
    assert len(boxes) == len(EPS)  # one label per bound
    anchors = {tuple(sorted(b[2].items())) for b in boxes}
    assert len(anchors) == 1  # one column: the same anchor, so only the vertical offsets separate them
    (anchor,) = anchors
    assert dict(anchor)["yref"] == "y domain" and dict(anchor)["xref"] == "x domain"  # the loss panel
    for (top1, bottom1, _), (top2, bottom2, _) in itertools.combinations(boxes, 2):
        gap = max(bottom1 - top2, bottom2 - top1)  # > 0: disjoint intervals
        assert gap >= curve_charts.BOUND_LABEL_GAP - 1e-9
    assert max(b[0] for b in boxes) <= 0  # inside the panel, below its top edge
    # the labels read top to bottom in eps order, and name the eps their triangle stands at
    texts = [a.text for a in fig.layout.annotations if a.name == curve_charts.BOUND_LABEL_NAME]
    assert texts[0].startswith("▲ ε = 0.5: LP ≥ ") and texts[-1].startswith("▲ ε = 50: LP ≥ ")
    # the triangles' own text is not drawn any more (plotly placed it beside each, overlapping)
    (bound,) = [t for t in fig.data if t.meta and t.meta.get("kind") == "lower bound"]
    assert bound.mode == "markers"


def test_bound_label_layout_is_disjoint_for_any_count_and_font():
    for n, font in itertools.product((1, 2, 8, 30), (8, 11, 16)):
        offsets = curve_charts.bound_label_layout(n, font)
        h = curve_charts.bound_label_height(font)
        for upper, lower in itertools.pairwise(offsets):
            assert upper - lower >= h + curve_charts.BOUND_LABEL_GAP - 1e-9


def test_labels_only_where_the_lp_did_not_solve():
    rows = _crowded_rows()
    for r in rows:
        if r["method"] == "lp" and r["epsilon_per_km"] in (1.0, 5.0, 20.0):
            r["outcome"] = "solved"
    fig = tradeoff_figure(rows, 5.0, metric="both")
    texts = [a.text for a in fig.layout.annotations if a.name == curve_charts.BOUND_LABEL_NAME]
    assert [t.split(":")[0] for t in texts] == ["▲ ε = 0.5", "▲ ε = 2", "▲ ε = 3.5", "▲ ε = 10", "▲ ε = 50"]
    assert not _label_boxes(tradeoff_figure([r for r in rows if r["method"] == "em"], 5.0))


def test_the_shown_lines_are_named_at_their_end_and_the_rest_one_click_away():
    """Issue 39 item 9: the shown mechanisms are drawn and labelled at their last point (in the axes' own units:
    log10 on a log axis); the others wait in the legend; PAnDA's two loss lines differ in colour, not only in
    dash; a log error axis when the lines span more than x10."""
    import math

    rows = []
    for e in EPS:
        rows.append({"method": "em", "epsilon_per_km": e, "outcome": "solved", "loss_m": 2000 / e,
                     "adversary_error_m": 1500 / e, "audited": True, "audit_passed": True})  # fmt: skip
        rows.append({"method": "panda-e", "epsilon_per_km": e, "outcome": "solved", "loss_m": 4600.0,
                     "users_loss_m": 500 / e, "adversary_error_m": 1000.0, "audited": True,
                     "audit_passed": False})  # fmt: skip
    assert curve_charts.wide_range(rows, {"panda-e"}) and not curve_charts.wide_range(rows[:1], {"em"})
    fig = tradeoff_figure(rows, 5.0, metric="both", shown={"panda-e"}, log_y=True)
    lines = [t for t in fig.data if (t.meta or {}).get("method")]
    assert {t.name for t in lines if t.visible == "legendonly"} == {"EM"}
    panda_loss = {t.meta["scope"]: t.line.color for t in lines if t.meta.get("scope") and t.meta["metric"] == "loss"}
    assert panda_loss["users"] != panda_loss["every place"]
    labels = [a for a in fig.layout.annotations if a.name == curve_charts.DIRECT_LABEL_NAME]
    assert sorted(a.text for a in labels) == sorted(t.name for t in lines if t.visible != "legendonly")
    users = next(a for a in labels if a.text.endswith("at its users"))
    assert users.x == pytest.approx(math.log10(EPS[-1])) and users.y == pytest.approx(math.log10(500 / EPS[-1]))
    assert not [a for a in tradeoff_figure(rows, 5.0).layout.annotations if a.name == curve_charts.DIRECT_LABEL_NAME]
