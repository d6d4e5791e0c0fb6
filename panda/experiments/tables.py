"""Markdown tables of a sweep, shaped like the paper's Tables 2 and 4 (rows = methods, columns = K)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from panda.experiments.results import _matches, summarise
from panda.experiments.spec import ExperimentSpec

#: Display names (the paper's spelling) of the method short names.
METHOD_LABELS = {
    "em": "EM",
    "em-br": "EM+BR",
    "laplace": "Planar Laplace",
    "lp": "LP",
    "lp-ca": "LP+CA",
    "lp-bd": "paper's LP+BD (0.8 km pairs, not eps-mDP)",
    "lp-em": "LP+EM",
    "panda-e": "PAnDA-e",
    "panda-p": "PAnDA-p",
    "panda-l": "PAnDA-l",
}


_METHOD_ORDER = tuple(METHOD_LABELS)


def _ordered_methods(methods: Iterable[str]) -> list[str]:
    ms = set(methods)
    return [m for m in _METHOD_ORDER if m in ms] + sorted(ms - set(_METHOD_ORDER))


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    value: str = "users_loss_m",
    *,
    network: str,
    preset: str,
    epsilon_per_km: float,
    delta: float | None = None,
    methods: Sequence[str] | None = None,
    k_values: Sequence[int] | None = None,
    digits: int = 2,
    percent: bool = False,
) -> str:
    """Render a Markdown table shaped like the paper's Tables 2 and 4: rows = methods, columns = K.

    Cells are ``mean ± 1.96 std`` over repetitions. For times (``value`` ending in ``time_s``) a method
    unsolved in every repetition shows ``> limit``; for other values it shows ``-`` (as the paper).
    """
    cells = summarise(rows, value, network=network, preset=preset, epsilon_per_km=epsilon_per_km, delta=delta)
    ms = list(methods) if methods is not None else _ordered_methods(m for m, _ in cells)
    ks = sorted(set(k_values) if k_values is not None else {k for _, k in cells})
    lines = ["| Method | " + " | ".join(f"K={k:,}" for k in ks) + " |", "|---|" + "---:|" * len(ks)]
    for m in ms:
        if not any((m, k) in cells for k in ks):
            continue
        texts = []
        for k in ks:
            c = cells.get((m, k))
            if c is None:
                texts.append("")
                continue
            texts.append(c.format(digits, unsolved=c.unsolved_text(value), percent=percent))
        lines.append(f"| {METHOD_LABELS.get(m, m)} | " + " | ".join(texts) + " |")
    return "\n".join(lines)


#: (column, title, digits, percent) of the tables :func:`markdown_tables` writes.
TABLES = (
    ("time_s", "Computation time, s (Table 2 shape; everything the method builds, audits excluded)", 2, False),
    ("users_loss_m", "Utility loss at the users' true records, m (Table 4 shape)", 2, False),
    ("utility_loss_m", "Expected utility loss over the prior (all records), m", 2, False),
    ("violation_rate", "mDP violation rate of the record-level matrix (audited pairs)", 2, True),
    ("pmdp_user_rate_over_delta", "PmDP: user pairs whose violation probability exceeds delta", 2, True),
    ("anchor_union", "Anchor union size |A|", 1, False),
    ("phase1_share_median", "Budget split: Phase-I share of eps*d (median over constrained pairs)", 3, False),
    ("margin_share_median", "Budget split: safety-margin share (median)", 3, False),
    ("phase2_share_median", "Budget split: Phase-II share (median)", 3, False),
)


def markdown_tables(rows: Sequence[Mapping[str, Any]], *, spec: ExperimentSpec | None = None) -> str:
    """All tables of a sweep: for each (network, preset, epsilon, delta), :data:`TABLES`."""
    if not rows:
        return "# Experiment tables\n\nNo rows yet.\n"
    nets = list(dict.fromkeys(str(r["network"]) for r in rows))
    presets = sorted({str(r["preset"]) for r in rows if r.get("preset")}) or [""]
    epsilons = sorted({float(r["epsilon_per_km"]) for r in rows})
    deltas: list[float | None] = [*sorted({float(r["delta"]) for r in rows if r.get("delta") != ""})] or [None]
    reps = sorted({int(r["repetition"]) for r in rows})
    out = [
        "# Experiment tables",
        "",
        f"Cells: mean ± 1.96 x sample standard deviation over repetitions ({len(reps)} repetition(s) in the file); "
        "'-' = unsolved in every repetition, '> N' = time limit N s reached, 'unsolved after N s' = the method "
        "gave up before its limit; "
        "'(s/n solved)' when only some were solved. "
        "Baselines do not depend on the preset or delta and appear in every table.",
        "",
    ]
    if spec is not None:
        out += [f"Specification hash {spec.config_hash()}; see experiment.json.", ""]
    for net in nets:
        for p in presets:
            for eps in epsilons:
                for delta in deltas:
                    has_panda = any(_matches(r, net, p, eps, delta) and r.get("preset") for r in rows)
                    head = f"## {net}, preset {p or '-'}, eps = {eps:g}/km" + (
                        f", delta = {delta:g}" if delta is not None else ""
                    )
                    out += [head, ""]
                    for value, title, digits, percent in TABLES:
                        if not has_panda and value in {
                            "pmdp_user_rate_over_delta",
                            "anchor_union",
                            "phase1_share_median",
                            "margin_share_median",
                            "phase2_share_median",
                        }:
                            continue
                        table = markdown_table(
                            rows,
                            value,
                            network=net,
                            preset=p,
                            epsilon_per_km=eps,
                            delta=delta,
                            digits=digits,
                            percent=percent,
                        )
                        if table.count("\n") < 2:
                            continue
                        out += [f"### {title}", "", table, ""]
    return "\n".join(out)


def write_tables(
    rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, spec: ExperimentSpec | None = None
) -> Path:
    """Write :func:`markdown_tables` to ``path``."""
    p = Path(path)
    p.write_text(markdown_tables(rows, spec=spec) + "\n", encoding="utf-8")
    return p
