"""Figures and numbers of the Learn page (pure: no streamlit calls; figures are ``go.Figure``).

Three small teaching models, each computed exactly:

* the promise itself: the allowed factor ``e^(eps d)`` between two places ``d`` apart;
* a straight street of evenly spaced places with a uniform prior, where the exponential mechanism,
  the optimal mechanism (a linear program) and the Bayes-optimal attacker can be computed in
  milliseconds (:func:`street_posterior`, :func:`posterior_figure`, :func:`tradeoff_figure`);
* what PAnDA's anchor upload alone reveals about pairs of places of a real instance, from the exact
  log-likelihood sums of Phase I (:func:`phase1_spend`, :func:`phase1_figure`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from scipy.optimize import linprog

import panda
from panda.accounting import log_likelihood_sums
from panda.anchors import far_value, selection_probabilities
from panda.audit import adversary_error_m

__all__ = [
    "allowance_factor",
    "fmt_times",
    "fmt_chance",
    "allowance_sentence",
    "laplace_mean_m",
    "Street",
    "street",
    "street_em",
    "street_optimal",
    "street_posterior",
    "report_error_m",
    "attacker_error_m",
    "street_belief",
    "posterior_figure",
    "tradeoff_figure",
    "DECAY_NAMES",
    "mean_anchor_count",
    "decay_caption",
    "sample_pairs",
    "phase1_spend",
    "phase1_figure",
    "phase1_caption",
]

_MARGIN = {"l": 10, "r": 10, "t": 60, "b": 10}
BLUE, RED, GREEN, GREY, PURPLE = "#1f5fbf", "#d62728", "#2ca02c", "#9aa0a6", "#7f3fbf"


# --------------------------------------------------------------------------------------------
# Words with units
# --------------------------------------------------------------------------------------------


def allowance_factor(epsilon_per_km: float, distance_m: float | np.ndarray) -> float | np.ndarray:
    """How many times likelier a report may be from one place than from another ``distance_m`` away."""
    return np.exp(float(epsilon_per_km) * np.asarray(distance_m, dtype=float) / 1000.0)


def fmt_times(factor: float) -> str:
    """A factor in words: ``"2.7 times"``, ``"148 times"``, ``"22,000 times"``, ``"5.2e+21 times"``."""
    if not math.isfinite(factor):
        return "unboundedly many times"
    if factor < 10:
        return f"{factor:.2g} times" if factor < 9.95 else "10 times"
    if factor < 1000:
        return f"{factor:,.0f} times"
    if factor < 1e9:
        digits = int(math.floor(math.log10(factor))) - 1
        return f"{round(factor, -digits):,.0f} times"
    return f"{factor:.2g} times"


def fmt_chance(p: float) -> str:
    """A probability as a percentage with two significant digits (``"95 %"``, ``"0.0095 %"``)."""
    pct = 100.0 * float(p)
    if p >= 1:
        return "100 %"
    if pct >= 99.5:
        return f"{pct:.4g} %" if pct >= 99.95 else f"{pct:.3g} %"
    if pct >= 1e-3:
        return f"{pct:.2g} %"
    if p <= 0:
        return "0 %"
    return f"1 in {1.0 / p:,.0f}"


def allowance_sentence(epsilon_per_km: float, distances_m: tuple[float, ...] = (50, 200, 500, 1000)) -> str:
    """One line: the allowed factor at a few distances, for ``epsilon_per_km``."""
    parts = []
    for d in distances_m:
        where = f"{d / 1000:g} km" if d >= 1000 else f"{d:g} m"
        parts.append(f"{where} apart: at most **{fmt_times(float(allowance_factor(epsilon_per_km, d)))}**")
    return "; ".join(parts)


def laplace_mean_m(epsilon_per_km: float) -> float:
    """Average distance (m) planar Laplace noise moves a point: the radius is Gamma(2, 1/eps), mean 2/eps."""
    return 2000.0 / float(epsilon_per_km)


# --------------------------------------------------------------------------------------------
# The street: a one-dimensional teaching model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Street:
    """Evenly spaced places on a straight street (positions in metres), a prior, distances in metres."""

    positions_m: np.ndarray
    prior: np.ndarray

    @property
    def distance_m(self) -> np.ndarray:
        """``(n, n)`` distances between the places, metres."""
        return np.abs(self.positions_m[:, None] - self.positions_m[None, :])


def street(n_places: int = 21, spacing_m: float = 100.0) -> Street:
    """``n_places`` places ``spacing_m`` apart from 0 m, uniform prior; the reports are the same places."""
    positions = np.arange(int(n_places), dtype=float) * float(spacing_m)
    return Street(positions, np.full(positions.size, 1.0 / positions.size))


def street_em(epsilon_per_km: float, s: Street) -> np.ndarray:
    """The exponential mechanism on the street: ``Pr[y | x]`` proportional to ``exp(-eps d(x, y) / 2)``."""
    logits = -float(epsilon_per_km) * s.distance_m / 2000.0
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


@functools.lru_cache(maxsize=64)
def _street_optimal(epsilon_per_km: float, n_places: int, spacing_m: float) -> np.ndarray:
    s = street(n_places, spacing_m)
    n = s.positions_m.size
    cost = (s.prior[:, None] * s.distance_m).ravel()
    # On a line every distance is a sum of neighbour steps, so the neighbour constraints imply all the others.
    factor = math.exp(float(epsilon_per_km) * float(spacing_m) / 1000.0)
    rows = []
    for x in range(n - 1):
        for a, b in ((x, x + 1), (x + 1, x)):
            for y in range(n):
                row = np.zeros(n * n)
                row[a * n + y] = 1.0
                row[b * n + y] = -factor
                rows.append(row)
    a_eq = np.zeros((n, n * n))
    for x in range(n):
        a_eq[x, x * n : (x + 1) * n] = 1.0
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.zeros(len(rows)), A_eq=a_eq, b_eq=np.ones(n), method="highs")
    if res.status != 0:
        msg = f"The street's optimal mechanism did not solve (status {res.status}: {res.message})."
        raise RuntimeError(msg)
    p = np.clip(res.x.reshape(n, n), 0.0, None)
    # The solver's tolerance can leave zeros where the chain of neighbour constraints asks for values of
    # e^-40 or so: lift each column to its smallest log-Lipschitz majorant (exactly eps-mDP), renormalise.
    kernel = np.exp(-float(epsilon_per_km) * s.distance_m / 1000.0)
    p = (kernel[:, :, None] * p[None, :, :]).max(axis=1)
    p = p / p.sum(axis=1, keepdims=True)
    p.flags.writeable = False
    return p


def street_optimal(epsilon_per_km: float, n_places: int = 21, spacing_m: float = 100.0) -> np.ndarray:
    """The optimal eps-mDP mechanism on the street: least expected distance between truth and report (LP).

    Optimal and eps-mDP up to the LP solver's tolerance (a relative 1e-8 or so): no entry is zero.
    """
    return _street_optimal(float(epsilon_per_km), int(n_places), float(spacing_m)).copy()


def street_posterior(matrix: np.ndarray, prior: np.ndarray, report: int) -> np.ndarray:
    """The attacker's belief after seeing ``report``: prior times ``Pr[report | x]``, rescaled to sum to 1."""
    joint = np.asarray(prior, dtype=float) * np.asarray(matrix, dtype=float)[:, report]
    return joint / joint.sum()


def report_error_m(matrix: np.ndarray, s: Street) -> float:
    """Average distance (m) between the true place and the report (the utility loss on the street)."""
    return float((s.prior[:, None] * matrix * s.distance_m).sum())


def attacker_error_m(matrix: np.ndarray, s: Street) -> float:
    """Average distance (m) between the truth and the Bayes-optimal attacker's best guess."""
    return adversary_error_m(matrix, s.prior, s.distance_m)


def street_belief(epsilon_per_km: float, *, report: int = 2, n_places: int = 21, spacing_m: float = 100.0) -> dict:
    """The attacker's view of one report of the exponential mechanism on the street.

    Returns the places (m), the belief over them, the report's and the best guess's index, and
    the caption's numbers: the belief in the reported place, the belief within 100 m of it, and
    the best guess's expected error (m).
    """
    s = street(n_places, spacing_m)
    post = street_posterior(street_em(epsilon_per_km, s), s.prior, report)
    expected = s.distance_m @ post  # expected error (m) of guessing each place
    guess = int(np.argmin(expected))
    return {
        "positions_m": s.positions_m,
        "belief": post,
        "report": int(report),
        "guess": guess,
        "report_m": float(s.positions_m[report]),
        "guess_m": float(s.positions_m[guess]),
        "report_belief": float(post[report]),
        "within_100m": float(post[s.distance_m[report] <= 100.0 + 1e-9].sum()),
        "guess_error_m": float(expected[guess]),
        "street_m": float(s.positions_m[-1]),
        "n_places": int(s.positions_m.size),
        "spacing_m": float(spacing_m),
    }


def posterior_figure(epsilon_per_km: float, *, report: int = 2, n_places: int = 21, spacing_m: float = 100.0):
    """Bars: what the attacker believes about each place of the street after one report of EM."""
    b = street_belief(epsilon_per_km, report=report, n_places=n_places, spacing_m=spacing_m)
    pos, post, guess = b["positions_m"], b["belief"], b["guess"]
    colors = [RED if i == guess else (BLUE if i == report else GREY) for i in range(pos.size)]
    fig = go.Figure(
        go.Bar(
            x=pos,
            y=post,
            marker_color=colors,
            width=0.8 * spacing_m,
            hovertemplate="place at %{x:,.0f} m: %{y:.1%}<extra></extra>",
            name="belief",
        )
    )
    fig.add_hline(y=1.0 / pos.size, line_dash="dot", line_color=GREY)
    fig.add_annotation(
        x=pos[-1],
        y=1.0 / pos.size,
        text=f"before the report: {fmt_chance(1.0 / pos.size)} each",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
        font={"color": "#555"},
    )
    if guess == report:
        label = f"report = best guess: {pos[report]:,.0f} m"
    else:
        label = f"report: {pos[report]:,.0f} m"
        fig.add_annotation(
            x=pos[guess],
            y=post[guess],
            text=f"best guess: {pos[guess]:,.0f} m",
            showarrow=True,
            arrowhead=2,
            ax=50,
            ay=-45,
            font={"color": RED},
        )
    fig.add_annotation(
        x=pos[report], y=post[report], text=label, showarrow=True, arrowhead=2, ax=-50, ay=-30, font={"color": BLUE}
    )
    fig.update_xaxes(title_text="place on the street (m)", tickformat=",.0f")
    fig.update_yaxes(title_text="attacker's belief", tickformat=".0%", rangemode="tozero")
    fig.update_layout(
        title={"text": f"After one report: the attacker's belief about each place (ε = {epsilon_per_km:g} per km)"},
        height=330,
        margin=_MARGIN,
        showlegend=False,
        bargap=0.1,
    )
    return fig


def tradeoff_figure(
    epsilon_per_km: float,
    *,
    eps_grid: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0),
    n_places: int = 21,
    spacing_m: float = 100.0,
) -> go.Figure:
    """The privacy-utility trade-off on the street, against eps.

    Solid lines: the average distance between the truth and the report (utility loss, m) of the
    exponential mechanism and of the optimal mechanism; dashed: the Bayes-optimal attacker's average
    error (m) against the exponential mechanism (against the optimal one it equals the report's
    error on this street: the attacker's best guess is the report itself). The current eps is marked.
    """
    s = street(n_places, spacing_m)
    grid = sorted(set(eps_grid) | {float(epsilon_per_km)})
    rows: dict[str, list[float]] = {"em": [], "em_att": [], "opt": []}
    for eps in grid:
        em = street_em(eps, s)
        rows["em"].append(report_error_m(em, s))
        rows["em_att"].append(attacker_error_m(em, s))
        rows["opt"].append(report_error_m(street_optimal(eps, n_places, spacing_m), s))
    fig = go.Figure()
    lines = [
        ("em", "exponential mechanism: the report's error", BLUE, "solid"),
        ("em_att", "exponential mechanism: the attacker's error", BLUE, "dash"),
        ("opt", "optimal mechanism: the report's error (here also the attacker's)", GREEN, "solid"),
    ]
    for key, name, color, dash in lines:
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=rows[key],
                mode="lines+markers",
                name=name,
                line={"color": color, "dash": dash, "width": 2.5},
                marker={"size": 5},
                hovertemplate=f"{name}<br>ε = %{{x:g}} per km: %{{y:,.0f}} m<extra></extra>",
            )
        )
    fig.add_vline(x=float(epsilon_per_km), line_dash="dot", line_color="#444")
    fig.add_annotation(
        x=math.log10(float(epsilon_per_km)),
        y=1.0,
        yref="paper",
        text=f"sidebar: ε = {epsilon_per_km:g} per km",
        showarrow=False,
        xanchor="left",
        yanchor="top",
        xshift=4,
    )
    ticks = [t for t in (0.5, 1, 2, 5, 10, 20, 50) if grid[0] <= t <= grid[-1]]
    fig.update_xaxes(
        type="log",
        title_text="privacy budget ε (per km; left = more private)",
        tickvals=ticks,
        ticktext=[f"{t:g}" for t in ticks],
    )
    fig.update_yaxes(title_text="average error (m)", tickformat=",.0f", rangemode="tozero")
    fig.update_layout(
        title={"text": f"The trade-off on a {s.positions_m[-1] / 1000:g} km street: less budget, larger errors"},
        height=380,
        margin=_MARGIN,
        legend={"orientation": "h", "y": -0.22, "x": 0},
    )
    return fig


# --------------------------------------------------------------------------------------------
# PAnDA's Phase I on the current instance
# --------------------------------------------------------------------------------------------

#: Decay name of PandaConfig -> plain words.
DECAY_NAMES = {"exponential": "exponential", "power": "power law", "logistic": "logistic"}


def mean_anchor_count(d_km_rows: np.ndarray, config: panda.PandaConfig, gamma_km: float) -> float:
    """Expected number of anchors a user uploads, averaged over the rows (distances from users to all places)."""
    w = selection_probabilities(np.asarray(d_km_rows, dtype=float), config, gamma_km=gamma_km)
    return float(w.sum(axis=-1).mean())


def decay_caption(
    config: panda.PandaConfig,
    gamma_km: float,
    *,
    gamma_automatic: bool,
    mean_anchors: float | None = None,
    n_records: int | None = None,
) -> str:
    """The decay figure's caption in plain words (every number with its unit)."""
    g_m = gamma_km * 1000.0
    half = selection_probabilities(np.array([gamma_km / 2.0]), config, gamma_km=gamma_km)[0]
    at0 = selection_probabilities(np.array([0.0]), config, gamma_km=gamma_km)[0]
    far = far_value(config, gamma_km)
    text = (
        f"**Your settings:** {DECAY_NAMES[config.decay]} decay, α = {fmt_chance(config.alpha)} "
        f"(the chance at 0 m), λ = {config.lambda_per_km:g} per km, γ = {g_m:,.0f} m "
        f"({'automatic for this map' if gamma_automatic else 'set in the sidebar'}). "
        f"The user's own place becomes an anchor with chance {fmt_chance(at0)}, a place {g_m / 2:,.0f} m away "
        f"with {fmt_chance(half)}, and every place beyond {g_m:,.0f} m with {fmt_chance(far)}."
    )
    if mean_anchors is not None and n_records:
        share = mean_anchors / n_records
        text += (
            f" On this map each user uploads about **{mean_anchors:,.{1 if mean_anchors < 10 else 0}f} of the "
            f"{n_records:,} places** "
            f"({fmt_chance(share)} of them) as anchors."
        )
    if config.selection_form == "artifact":
        text += " (The curves are the published experiments' rescaled versions of the paper's formulas.)"
    return text


def sample_pairs(
    instance: panda.Instance, *, n_pairs: int = 150, min_m: float = 10.0, max_m: float = 1500.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of distinct places of ``instance`` spread over distances ``min_m`` to ``max_m`` (log-uniform).

    Each pair starts at a random place and takes the place whose distance is closest to a
    log-uniformly drawn target. Returns positions ``a``, ``b`` in X and their distances in km.
    """
    rng = np.random.default_rng(seed)
    k = instance.n_records
    a = rng.choice(k, size=min(int(n_pairs), k), replace=False)
    d = instance.distances_km(a)  # (P, K)
    target_km = np.exp(rng.uniform(math.log(min_m), math.log(max_m), size=a.size)) / 1000.0
    gap = np.abs(d - target_km[:, None])
    gap[np.arange(a.size), a] = np.inf
    gap[d <= 0] = np.inf
    b = np.argmin(gap, axis=1)
    dist = d[np.arange(a.size), b]
    keep = np.isfinite(gap[np.arange(a.size), b]) & (dist > 0)
    return a[keep], b[keep], dist[keep]


def phase1_spend(
    instance: panda.Instance, config: panda.PandaConfig, gamma_km: float, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """What the anchor upload alone reveals about each pair ``(a, b)``, as a multiple of the allowance eps*d.

    The exact Phase-I cost (the worst anchor set's log-likelihood ratio, summed over all of X)
    divided by ``eps * d(a, b)``: above 1, the upload alone breaks the promise for that pair.
    """
    a, b = np.asarray(a), np.asarray(b)
    w_a = selection_probabilities(instance.distances_km(a), config, gamma_km=gamma_km)
    w_b = selection_probabilities(instance.distances_km(b), config, gamma_km=gamma_km)
    s_max, s_min = log_likelihood_sums(w_a, w_b)
    d = instance.distances_km_pairs(a, b)
    return np.maximum(s_max, -s_min) / (config.epsilon_per_km * d)


def phase1_figure(distance_m: np.ndarray, spend: np.ndarray, epsilon_per_km: float) -> go.Figure:
    """Scatter: the upload's spend (multiple of eps*d, log) against the distance between the places (m, log)."""
    d = np.asarray(distance_m, dtype=float)
    s = np.asarray(spend, dtype=float)
    floor = 1e-3
    shown = np.clip(s, floor, None)
    over = s > 1.0
    fig = go.Figure()
    for mask, name, color in ((~over, "within the allowance", GREEN), (over, "beyond the allowance", RED)):
        fig.add_trace(
            go.Scatter(
                x=d[mask],
                y=shown[mask],
                mode="markers",
                name=f"{name} ({int(mask.sum())} pairs)",
                marker={"color": color, "size": 7, "opacity": 0.75},
                customdata=s[mask],
                hovertemplate="places %{x:,.0f} m apart: the most telling upload spends %{customdata:.3g} × ε·d"
                "<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="#444")
    fig.add_annotation(
        x=1.0,
        xref="paper",
        y=0.0,
        text="the whole allowance ε·d",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
    )
    hi = max(10.0, float(shown.max()) * 2.0) if shown.size else 10.0
    lo = min(0.1, float(shown.min()) / 2.0) if shown.size else 0.1
    ticks = [10.0**e for e in range(-3, 7) if lo <= 10.0**e <= hi]
    fig.update_yaxes(
        type="log",
        range=[math.log10(lo), math.log10(hi)],
        tickvals=ticks,
        ticktext=[f"{t:,g} ×" for t in ticks],
        title_text="upload's spend (× the allowance ε·d)",
    )
    xt = [t for t in (10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if d.size and d.min() / 1.5 <= t <= d.max() * 1.5]
    fig.update_xaxes(
        type="log", tickvals=xt, ticktext=[f"{t:,} m" for t in xt], title_text="distance between the two places (m)"
    )
    fig.update_layout(
        title={"text": f"What the anchor upload alone reveals about two places (ε = {epsilon_per_km:g} per km)"},
        height=360,
        margin=_MARGIN,
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0},
    )
    return fig


def phase1_caption(distance_m: np.ndarray, spend: np.ndarray, *, close_m: float = 300.0) -> str:
    """Plain-words summary of :func:`phase1_figure` (shares in %, multiples of the allowance)."""
    d = np.asarray(distance_m, dtype=float)
    s = np.asarray(spend, dtype=float)
    if not s.size:
        return "No pair of places could be drawn on this map."
    over = float((s > 1.0).mean())
    text = (
        f"The most telling upload alone spends more than the whole allowance for **{fmt_chance(over)} of these "
        f"{s.size} pairs**"
    )
    close = s[d <= close_m]
    if close.size:
        median = float(np.median(close))
        text += f"; for the {close.size} pairs closer than {close_m:,.0f} m, **{median:.3g} times** it (median)"
    return text + ". Nothing done afterwards (in Phase II) can take that back."
