"""The class's rounds as a CSV file for the lecturer's records (one row per round; no streamlit)."""

from __future__ import annotations

import csv
import io

from app.game.types import HostView

__all__ = ["CSV_COLUMNS", "rounds_csv"]

#: The rounds table's CSV columns (one row per round).
CSV_COLUMNS = (
    "round",
    "mechanism",
    "epsilon_per_km",
    "n_reports",
    "secret_mode",
    "status",
    "n_players",
    "n_guesses",
    "class_mean_m",
    "class_median_m",
    "best_m",
    "bayes_mean_m",
    "bayes_expected_m",
)


def rounds_csv(view: HostView) -> str:
    """The lecturer's rounds table as CSV (errors in metres, empty before the reveal)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in view.rounds:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()
