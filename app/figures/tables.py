"""The Compare table: short statuses, readable cells for missing and infinite values (pure pandas).

A number that does not exist is shown as a word, never as "None", "nan" or "Infinity": "—" when the
value is not available (the method has no mechanism, or PAnDA has no row for records outside its
anchors), "none finite" when the smallest ε the rows meet is infinite (an output that is possible at
one user's record is impossible at another's). A long status ("unsolved: time limit after 20.3 s;
loss >= 104.6 m (last finished round)") becomes a short word plus a detail column.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from app.model.messages import short_status

__all__ = [
    "MISSING",
    "NO_FINITE_EPS",
    "COLUMNS",
    "HEADERS",
    "COLUMN_HELP",
    "compare_frame",
    "compare_styler",
    "compare_notes",
    "cell",
    "ROUND_NUMBER_COLUMNS",
    "rounds_frame",
    "rounds_styler",
]

MISSING = "—"
NO_FINITE_EPS = "none finite"
#: Number columns -> how their cells are written (the column headers carry the units).
_FORMATS: dict[str, Callable[[float], str]] = {
    "loss_m": lambda v: f"{v:,.0f}",
    "prior_loss_m": lambda v: f"{v:,.0f}",
    "violation_rate": lambda v: f"{100 * v:.1f} %",
    "epsilon_min_per_km": lambda v: f"{v:.2f}",
    "adversary_error_m": lambda v: f"{v:,.0f}",
    "time_s": lambda v: f"{v:.3f}",
}
#: The detail last: it is often empty, and a long one is cut in its cell but repeated in full under the table.
COLUMNS = ["method", "status", *_FORMATS, "detail"]


def cell(column: str, value: object) -> str:
    """How one number of the table reads: formatted, or "—" / "none finite"."""
    if value is None:
        return MISSING
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return MISSING
    if math.isinf(v):
        return NO_FINITE_EPS if column == "epsilon_min_per_km" else ("∞" if v > 0 else "−∞")
    return _FORMATS[column](v)


def compare_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per method: name, short status, detail, and the numbers (NaN where there is none)."""
    out = []
    for row in rows:
        word, detail = short_status(str(row.get("status", "")))
        extra = str(row.get("note", "") or "")
        out.append(
            {
                "method": row["method"],
                "status": word,
                "detail": "; ".join(t for t in (detail, extra) if t),
                **{k: float(row.get(k, float("nan"))) for k in _FORMATS},
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)


#: Column -> header shown (units in every header of a number).
HEADERS = {
    "method": "Method",
    "status": "Status",
    "loss_m": "Utility loss at users (m)",
    "prior_loss_m": "Loss over the prior (m)",
    "violation_rate": "User pairs violating ε-mDP",
    "epsilon_min_per_km": "Smallest ε met (1/km)",
    "adversary_error_m": "Adversary error (m)",
    "time_s": "Time to build (s)",
    "detail": "Detail",
}
#: What each column means (the page shows it under the table: a static table has no header tooltips).
COLUMN_HELP = {
    "status": "solved, or why not: stopped, unsolved (time limit), skipped (too large), failed.",
    "loss_m": "mean expected road-distance error of the reported location at the users' true records.",
    "prior_loss_m": "the expected loss over all K records under the prior. PAnDA has no row for records outside "
    f"its anchors, so it has none ({MISSING}).",
    "violation_rate": "baselines: the exact audit of their rows at the users. PAnDA: its realised check, which "
    "also counts the Phase-I cost ε̄ of uploading the anchor set.",
    "epsilon_min_per_km": "the smallest budget the released rows satisfy over the user pairs (for PAnDA without "
    f"Phase I's cost); '{NO_FINITE_EPS}': an output possible at one user is impossible at another.",
    "adversary_error_m": "expected error of the Bayes-optimal attacker who knows the mechanism and that the true "
    "record is one of the users'. Larger is more private.",
    "time_s": "wall time to build the mechanism.",
}


def compare_styler(frame: pd.DataFrame):
    """The frame for ``st.table``: headers with units, cells written by :func:`cell` (never None or nan)."""
    shown = frame.rename(columns=HEADERS)
    formats = {HEADERS[k]: (lambda v, k=k: cell(k, v)) for k in _FORMATS}
    # No line break inside a method's name ("PAnDA-e", "Planar Laplace").
    formats[HEADERS["method"]] = lambda v: str(v).replace("-", "\u2011").replace(" ", "\u00a0")
    return shown.style.format(formats).hide(axis="index")


def compare_notes(frame: pd.DataFrame) -> list[str]:
    """What the words in the table mean (only those that occur), and each unfinished method's full status."""
    notes = []
    if frame[list(_FORMATS)].isna().to_numpy().any():
        notes.append(
            f"**{MISSING}**: not available: the method could not be built (see its status), or, for PAnDA, "
            "there is no row for records outside its anchors (so no loss over the prior) or fewer than two "
            "users can report."
        )
    if (frame["epsilon_min_per_km"] == math.inf).any():
        notes.append(
            f"**{NO_FINITE_EPS}**: some output is possible at one user's record and impossible at another's, "
            "so no finite ε covers that pair."
        )
    for _, row in frame.iterrows():
        if row["status"] not in ("solved",) and row["detail"]:
            notes.append(f"**{row['method']}**: {row['status']}: {row['detail']}.")
    return notes


#: The class rounds table's error columns (metres): header -> the round summary's key.
ROUND_NUMBER_COLUMNS = {
    "Mean (m)": "class_mean_m",
    "Median (m)": "class_median_m",
    "Best (m)": "best_m",
    "Bayes (m)": "bayes_expected_m",
}
#: A round's ``Guesses`` cell before its summary exists, by the round's status.
_ROUND_STATUS_WORD = {"open": "open", "scoring": "scoring", "closed": "ended"}


def _exact(value: object) -> str:
    """A number as text that reads back exactly (``repr``), or "—" when there is none."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return MISSING
    return repr(v) if math.isfinite(v) else MISSING


def rounds_frame(rows: list[dict], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """The lecturer's rounds table, one row per round; no cell is empty (the data grid writes an empty one "None").

    ``Guesses`` is the count, or "open" while the round runs ("ended" when it was closed without a reveal); an
    error that does not exist (not revealed yet, or no guesses) is "—". The errors are text that reads back
    exactly, so the grid's own CSV export keeps every digit; :func:`rounds_styler` shows them in whole metres.
    """
    labels = labels or {}
    return pd.DataFrame(
        {
            "Round": [int(r["round"]) for r in rows],
            "Mechanism": [labels.get(r["mechanism"], r["mechanism"]) for r in rows],
            "ε (1/km)": [float(r["epsilon_per_km"]) for r in rows],
            "k": [int(r["n_reports"]) for r in rows],
            "Guesses": [
                str(int(r["n_guesses"]))
                if r.get("n_guesses") is not None
                else _ROUND_STATUS_WORD.get(str(r.get("status")), MISSING)
                for r in rows
            ],
            **{col: [_exact(r.get(key)) for r in rows] for col, key in ROUND_NUMBER_COLUMNS.items()},
        }
    )


def _whole_metres(text: str) -> str:
    return text if text == MISSING else f"{float(text):,.0f}"


def rounds_styler(rows: list[dict], labels: dict[str, str] | None = None):
    """:func:`rounds_frame` for ``st.dataframe``: the errors in whole metres ("3,152"), "—" where there is none."""
    frame = rounds_frame(rows, labels)
    return frame.style.format(_whole_metres, subset=list(ROUND_NUMBER_COLUMNS)).format("{:g}", subset=["ε (1/km)"])
