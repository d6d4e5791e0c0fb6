"""Figures of a sweep: plotly line charts against K (optional: plotly is imported here only)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from panda.experiments.results import summarise
from panda.experiments.tables import METHOD_LABELS, _ordered_methods


def write_figures(rows: Sequence[Mapping[str, Any]], folder: str | os.PathLike) -> list[Path]:
    """Write plotly line charts of loss, time and violation rate against K (HTML; PNG when kaleido works).

    One file per (network, epsilon, delta, measure), one line per method (and preset), error bars
    1.96 x std. Returns the files written; nothing when plotly is not installed.
    """
    try:
        import plotly.graph_objects as go
    except ImportError:
        return []
    if not rows:
        return []
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import kaleido  # noqa: F401

        png = True
    except ImportError:
        png = False
    written: list[Path] = []
    nets = list(dict.fromkeys(str(r["network"]) for r in rows))
    presets = sorted({str(r["preset"]) for r in rows if r.get("preset")}) or [""]
    epsilons = sorted({float(r["epsilon_per_km"]) for r in rows})
    deltas: list[float | None] = [*sorted({float(r["delta"]) for r in rows if r.get("delta") != ""})] or [None]
    measures = (
        ("users_loss_m", "Utility loss at users' true records (m)", False),
        ("time_s", "Computation time (s)", True),
        ("violation_rate", "mDP violation rate", False),
    )
    js = "directory"
    for net in nets:
        for eps in epsilons:
            for delta in deltas:
                for value, title, log_y in measures:
                    fig = go.Figure()
                    seen_baselines: set[str] = set()
                    for p in presets:
                        cells = summarise(rows, value, network=net, preset=p, epsilon_per_km=eps, delta=delta)
                        for m in _ordered_methods(m for m, _ in cells):
                            is_panda = m.startswith("panda")
                            if not is_panda and m in seen_baselines:
                                continue
                            if not is_panda:
                                seen_baselines.add(m)
                            ks = sorted(k for mm, k in cells if mm == m)
                            ys = [cells[(m, k)].mean for k in ks]
                            es = [cells[(m, k)].half_width for k in ks]
                            if all(not math.isfinite(y) for y in ys):
                                continue
                            label = METHOD_LABELS.get(m, m) + (f" ({p})" if is_panda and p else "")
                            fig.add_trace(
                                go.Scatter(
                                    x=ks,
                                    y=ys,
                                    error_y={"type": "data", "array": [e if math.isfinite(e) else 0 for e in es]},
                                    mode="lines+markers",
                                    name=label,
                                )
                            )
                    if not fig.data:
                        continue
                    dtext = f", delta={delta:g}" if delta is not None else ""
                    fig.update_layout(
                        title=f"{title}: {net}, eps={eps:g}/km{dtext}",
                        xaxis_title="K (secret domain size)",
                        yaxis_title=title,
                        template="plotly_white",
                    )
                    if log_y:
                        fig.update_yaxes(type="log")
                    stem = f"{value}_{net}_eps{eps:g}" + (f"_delta{delta:g}" if delta is not None else "")
                    html = folder / f"{stem}.html"
                    fig.write_html(html, include_plotlyjs=js)
                    written.append(html)
                    if png:
                        try:
                            fig.write_image(folder / f"{stem}.png")
                            written.append(folder / f"{stem}.png")
                        except Exception:  # kaleido without a usable browser: HTML only
                            png = False
    return written
