"""The rows of a sweep: the columns of ``rows.csv``, its row key, writing and reading it, aggregation.

``rows.csv`` is tidy: one row per (network, K, preset, epsilon, delta, method, repetition)
(:data:`ROW_KEY`), with the columns :data:`ROW_COLUMNS` in that order. :class:`_RowWriter` appends
rows one at a time (flushed and synced) and skips keys already in the file, which is how a rerun
resumes; :func:`read_rows` reads the file back into typed dicts. :func:`summarise` aggregates one
column per (method, K) over the repetitions into :class:`Cell` s (mean and 1.96 x sample std), what
the tables and figures show.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# rows.csv: columns and keys
# ---------------------------------------------------------------------------------------------


#: Columns that identify a row (a rerun skips rows whose key is already in ``rows.csv``).
ROW_KEY = ("network", "K", "preset", "epsilon_per_km", "delta", "method", "repetition")


#: Every column of ``rows.csv``, in order. Units are in the names; times are wall-clock seconds.
ROW_COLUMNS = (
    *ROW_KEY,
    "status",
    # utility and privacy (panda.compare.COLUMNS)
    "utility_loss_m",
    "users_loss_m",
    "violation_rate",
    "pmdp_user_rate_over_delta",
    "epsilon_min_per_km",
    "adversary_error_m",
    "audit_scope",
    # time
    "time_s",
    "cpu_time_s",
    "lp_time_s",
    "audit_time_s",
    "wall_time_s",
    "instance_time_s",
    "time_limit_s",
    "limit_enforced",
    # PAnDA only
    "anchor_union",
    "anchor_set_size_mean",
    "n_empty_anchor_sets",
    "n_constrained_pairs",
    "n_over_budget_pairs",
    "n_unreachable_target_pairs",
    "gamma_km",
    "far_value",
    "lp_objective_m",
    "relaxed_lower_bound_m",
    "approximation_ratio",
    "user_pair_violation_rate",
    "budget_pairs_finite",
    "phase1_share_median",
    "margin_share_median",
    "phase2_share_median",
    "phase1_share_mean",
    "margin_share_mean",
    "phase2_share_mean",
    "time_phase1_cost_s",
    "time_margins_s",
    "time_relaxed_lp_s",
    # instance and provenance
    "n_users",
    "n_outputs",
    "n_tasks",
    "loss",
    "instance_seed",
    "method_seed",
    "host",
    "finished_at",
    "details",
)


_INT_COLUMNS = {
    "K",
    "repetition",
    "anchor_union",
    "n_empty_anchor_sets",
    "n_constrained_pairs",
    "n_over_budget_pairs",
    "n_unreachable_target_pairs",
    "budget_pairs_finite",
    "n_users",
    "n_outputs",
    "n_tasks",
    "instance_seed",
    "method_seed",
}


_STR_COLUMNS = {"network", "preset", "method", "status", "audit_scope", "host", "finished_at", "details", "loss"}


_BOOL_COLUMNS = {"limit_enforced"}


def _key_float(value: object) -> str:
    if value is None or value == "":
        return ""
    x = float(value)  # type: ignore[arg-type]
    return "" if math.isnan(x) else repr(x)


def row_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    """Canonical key of a row (strings; floats through ``repr(float(.))``, so CSV round trips match)."""
    return (
        str(row["network"]),
        str(int(row["K"])),
        str(row["preset"] or ""),
        _key_float(row["epsilon_per_km"]),
        _key_float(row["delta"]),
        str(row["method"]),
        str(int(row["repetition"])),
    )


# ---------------------------------------------------------------------------------------------
# reading and writing rows.csv
# ---------------------------------------------------------------------------------------------


def _parse_value(column: str, text: str) -> object:
    if column in _STR_COLUMNS:
        return text
    if text == "":
        return "" if column in ("delta", "preset") else float("nan")
    if column in _BOOL_COLUMNS:
        return text.strip().lower() in ("true", "1", "yes")
    if column in _INT_COLUMNS:
        try:
            return int(text)
        except ValueError:
            return float(text)
    try:
        return float(text)
    except ValueError:
        return text


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Read ``rows.csv`` (or the folder holding it) into typed dicts (missing numbers are NaN)."""
    p = Path(path)
    if p.is_dir():
        p = p / "rows.csv"
    if not p.exists():
        return []
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return [{c: _parse_value(c, v if v is not None else "") for c, v in r.items() if c is not None} for r in reader]


def _format_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


class _RowWriter:
    """Appends rows to ``rows.csv`` one at a time (flushed and synced), skipping known keys."""

    def __init__(self, path: Path) -> None:
        self.path = path
        existing = read_rows(path) if path.exists() else []
        self.keys = {row_key(r) for r in existing}
        needs_header = not path.exists() or path.stat().st_size == 0
        if not needs_header:
            with path.open(newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), [])
            if tuple(header) != ROW_COLUMNS:  # written by another version: rewrite with today's columns
                self._rewrite(existing)
        self.fh = path.open("a", newline="", encoding="utf-8")
        self.writer = csv.writer(self.fh)
        if needs_header:
            self.writer.writerow(ROW_COLUMNS)
            self.fh.flush()
        self.n_written = 0

    def _rewrite(self, rows: list[dict]) -> None:
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(ROW_COLUMNS)
            for r in rows:
                w.writerow([_format_cell(r.get(c, "")) for c in ROW_COLUMNS])
        tmp.replace(self.path)

    def write(self, row: Mapping[str, Any]) -> bool:
        key = row_key(row)
        if key in self.keys:
            return False
        self.writer.writerow([_format_cell(row.get(c, "")) for c in ROW_COLUMNS])
        self.fh.flush()
        try:
            os.fsync(self.fh.fileno())
        except OSError:  # pragma: no cover
            pass
        self.keys.add(key)
        self.n_written += 1
        return True

    def close(self) -> None:
        self.fh.close()


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 64 else f"array{value.shape}"
    return str(value)


# ---------------------------------------------------------------------------------------------
# aggregation over repetitions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """Aggregate of one (method, K) over repetitions."""

    n: int
    n_solved: int
    mean: float
    half_width: float
    time_limit_s: float
    unsolved_time_s: float = float("nan")

    def unsolved_text(self, value: str) -> str:
        """Return the text of a cell with no solved repetition.

        For times: ``> limit`` (the paper's "> 1,800") when the limit was reached, ``unsolved after N s``
        when the method gave up earlier; ``-`` for every other value.
        """
        if not value.endswith("time_s") or not math.isfinite(self.time_limit_s):
            return "-"
        lim = self.time_limit_s
        if math.isfinite(self.unsolved_time_s) and self.unsolved_time_s < 0.95 * lim:
            return f"unsolved after {self.unsolved_time_s:,.0f} s"
        return f"> {lim:,.0f}" if lim >= 10 else f"> {lim:g}"

    def format(self, digits: int, *, unsolved: str = "-", percent: bool = False) -> str:
        """``mean ± 1.96 std`` (sample std), with how many repetitions were solved when not all."""
        if self.n == 0:
            return ""
        if self.n_solved == 0:
            return unsolved
        scale = 100.0 if percent else 1.0
        unit = " %" if percent else ""
        text = f"{self.mean * scale:,.{digits}f}"
        if self.n_solved >= 2:
            text += f" ± {self.half_width * scale:,.{digits}f}"
        text += unit
        if self.n_solved < self.n:
            text += f" ({self.n_solved}/{self.n} solved)"
        return text


def _solved(row: Mapping[str, Any]) -> bool:
    return str(row.get("status", "")).startswith("solved")


def _matches(row: Mapping[str, Any], network: str, preset: str, eps: float, delta: float | None) -> bool:
    if row["network"] != network or not math.isclose(float(row["epsilon_per_km"]), eps, rel_tol=1e-12):
        return False
    if not row.get("preset"):  # baselines: no preset and no delta, they belong to every table
        return True
    if row["preset"] != preset:
        return False
    return delta is None or (row["delta"] != "" and math.isclose(float(row["delta"]), delta, rel_tol=1e-12))


def summarise(
    rows: Sequence[Mapping[str, Any]],
    value: str,
    *,
    network: str,
    preset: str,
    epsilon_per_km: float,
    delta: float | None = None,
) -> dict[tuple[str, int], Cell]:
    """Aggregate ``value`` per (method, K) over repetitions: mean and 1.96 x sample std.

    Baseline rows (no preset) enter every preset's table. Unsolved rows count in ``n`` but not in
    the mean; for ``value="time_s"`` they are shown as "> limit" by :func:`markdown_table`.
    """
    groups: dict[tuple[str, int], list] = {}
    for r in rows:
        if _matches(r, network, preset, epsilon_per_km, delta):
            groups.setdefault((str(r["method"]), int(r["K"])), []).append(r)
    out = {}
    for key, rs in groups.items():
        vals = []
        for r in rs:
            v = r.get(value)
            if _solved(r) and isinstance(v, (int, float)) and math.isfinite(float(v)):
                vals.append(float(v))
        arr = np.asarray(vals)
        limits = [float(r["time_limit_s"]) for r in rs if isinstance(r.get("time_limit_s"), (int, float))]
        spent = [
            float(r["time_s"])
            for r in rs
            if not _solved(r) and isinstance(r.get("time_s"), (int, float)) and math.isfinite(float(r["time_s"]))
        ]
        out[key] = Cell(
            n=len(rs),
            n_solved=len(vals),
            mean=float(arr.mean()) if arr.size else float("nan"),
            half_width=float(1.96 * arr.std(ddof=1)) if arr.size >= 2 else float("nan"),
            time_limit_s=max(limits) if limits else float("nan"),
            unsolved_time_s=max(spent) if spent else float("nan"),
        )
    return out
