"""Numbers the views show, derived from a PandaResult and its Instance (pure numpy: testable).

Every distance leaves this module in metres unless its name says km; log-ratios are in nats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import panda
from panda.phase2 import pair_log_ratio

__all__ = [
    "UserPairs",
    "surrogate_rows",
    "user_pairs",
    "user_loss_m",
    "budget_shares",
    "quantiles",
    "mechanism_at_users",
    "fmt_m",
    "fmt_pct",
    "fmt_pct_range",
    "fmt_s",
    "verdict",
]


def fmt_m(value: float) -> str:
    """Metres, readable: '—' for nan, '1.2 km' above 10 km."""
    if value is None or not np.isfinite(value):
        return "—"
    if abs(value) >= 10_000:
        return f"{value / 1000:,.1f} km"
    return f"{value:,.0f} m"


def fmt_pct(value: float) -> str:
    """A rate as a percentage ('—' for nan)."""
    if value is None or not np.isfinite(value):
        return "—"
    return f"{100 * value:.1f} %"


def fmt_pct_range(low: float, high: float) -> str:
    """A rate known to lie in [low, high], short enough for a metric: '12.3 %', or '12–15 %' when they differ."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return fmt_pct(low if low is not None and np.isfinite(low) else high)
    lo, hi = f"{100 * low:.0f}", f"{100 * high:.0f}"
    if abs(high - low) < 5e-4 or lo == hi:
        return fmt_pct(low)
    return f"{lo}–{hi} %"


def fmt_s(value: float) -> str:
    """Seconds, readable."""
    if value is None or not np.isfinite(value):
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def surrogate_rows(result: panda.PandaResult) -> np.ndarray:
    """``(N,)`` each user's row in ``result.z`` (the surrogate's position in the anchor union), -1 if none."""
    rows = np.full(result.surrogates.size, -1, dtype=np.int64)
    ok = result.surrogates >= 0
    rows[ok] = np.searchsorted(result.anchor_union, result.surrogates[ok])
    return rows


@dataclass(frozen=True)
class UserPairs:
    """The realised privacy check over user pairs (both users with a surrogate).

    ``n``, ``m`` are user indices; ``allowed`` = (eps - eps_bar) d and ``actual`` = max_y |ln z[s_n, y] -
    ln z[s_m, y]| are in nats; ``excess = actual - allowed`` (> 0: the pair violates eps-mDP).
    """

    n: np.ndarray
    m: np.ndarray
    d_km: np.ndarray
    eps_bar_per_km: np.ndarray
    allowed: np.ndarray
    actual: np.ndarray
    violated: np.ndarray

    @property
    def excess(self) -> np.ndarray:
        """actual - allowed, nats (inf where a row has a zero the other has not)."""
        with np.errstate(invalid="ignore"):
            return self.actual - self.allowed

    @property
    def size(self) -> int:
        """Number of user pairs checked."""
        return int(self.n.size)


def user_pairs(result: panda.PandaResult, instance: panda.Instance) -> UserPairs:
    """Recompute run_panda's user-pair check, pair by pair (same pairs, same order, same tolerance)."""
    rows = surrogate_rows(result)
    idx = np.flatnonzero(rows >= 0)
    empty = np.zeros(0)
    if result.z is None or idx.size < 2:
        z = np.zeros(0, dtype=np.int64)
        return UserPairs(z, z, empty, empty, empty, empty, np.zeros(0, dtype=bool))
    ui, uj = np.triu_indices(idx.size, k=1)
    n, m = idx[ui], idx[uj]
    users = result.user_records
    d = instance.distances_km_pairs(users[n], users[m])
    eps_bar = np.asarray(result.user_pair_eps_bar_per_km, dtype=float)
    with np.errstate(invalid="ignore"):
        allowed = (result.config.epsilon_per_km - eps_bar) * d
    allowed = np.where(np.isnan(allowed), -np.inf, allowed)
    actual = pair_log_ratio(result.z[rows[n]], result.z[rows[m]])
    violated = actual > allowed * (1 + 1e-9) + 1e-9
    return UserPairs(n, m, d, eps_bar, allowed, actual, violated)


def user_loss_m(result: panda.PandaResult, instance: panda.Instance) -> np.ndarray:
    """``(N,)`` expected utility loss of each user at its true record, metres (nan without a surrogate)."""
    rows = surrogate_rows(result)
    out = np.full(rows.size, np.nan)
    if result.z is None:
        return out
    ok = rows >= 0
    out[ok] = (instance.cost_m[result.user_records[ok]] * result.z[rows[ok]]).sum(axis=1)
    return out


def quantiles(values: np.ndarray) -> dict:
    """Median and quartiles of the finite values (nan when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"q1": float("nan"), "median": float("nan"), "q3": float("nan"), "n": 0}
    q1, med, q3 = np.quantile(v, [0.25, 0.5, 0.75])
    return {"q1": float(q1), "median": float(med), "q3": float(q3), "n": int(v.size)}


def budget_shares(result: panda.PandaResult) -> dict:
    """Shares of each constrained anchor pair's budget eps*d spent on Phase I, the margin, Phase II.

    Shares above 1 (or a negative Phase II share) mean the pair is over budget. Pairs whose margin
    is infinite (target 1 - delta unreachable, ``margin_fallback="infinite"``) have no finite margin
    or Phase II share; they are counted separately.
    """
    eps = result.config.epsilon_per_km
    d = np.asarray(result.pair_d_km, dtype=float)
    eps_bar = np.asarray(result.pair_eps_bar_per_km, dtype=float)
    xi = np.asarray(result.pair_xi, dtype=float)
    pos = d > 0
    total = eps * d
    with np.errstate(divide="ignore", invalid="ignore"):
        phase1 = np.where(pos, eps_bar / eps, np.nan)
        margin = np.where(pos & np.isfinite(xi), xi / total, np.nan)
        phase2 = np.where(pos & np.isfinite(xi), 1.0 - phase1 - margin, np.nan)
    return {
        "n_pairs": int(d.size),
        "n_infinite_margin": int((~np.isfinite(xi)).sum()),
        "n_phase1_over": int((eps_bar >= eps).sum()),
        "n_over_budget": int(np.asarray(result.pair_over_budget).sum()),
        "n_unreachable": int(np.asarray(result.pair_unreachable).sum()),
        "phase1": quantiles(phase1),
        "margin": quantiles(margin),
        "phase2": quantiles(phase2),
    }


def mechanism_at_users(rows: np.ndarray, cost_rows: np.ndarray, guess_distance_m: np.ndarray) -> dict:
    """Utility loss and Bayes-adversary error of a mechanism restricted to the users' true records.

    Parameters
    ----------
    rows
        ``(N', M)`` the mechanism's output distribution at each user's true record.
    cost_rows
        ``(N', M)`` the utility cost (m) of each output for each user.
    guess_distance_m
        ``(N', G)`` the error (m) of guessing each candidate record, for each user's true record.

    Returns
    -------
    dict
        ``loss_m`` (mean expected cost) and ``adversary_error_m`` (the Bayes-optimal attacker who knows
        that the true record is one of the users', uniformly, and the mechanism).
    """
    rows = np.asarray(rows, dtype=float)
    if rows.shape[0] == 0:
        return {"loss_m": float("nan"), "adversary_error_m": float("nan")}
    loss = float((rows * cost_rows).sum(axis=1).mean())
    prior = np.full(rows.shape[0], 1.0 / rows.shape[0])
    try:
        from panda.audit import adversary_error_m
    except ImportError:
        adv = _adversary_error_m(rows, prior, guess_distance_m)
    else:
        adv = adversary_error_m(rows, prior, guess_distance_m)
    return {"loss_m": loss, "adversary_error_m": float(adv)}


def _adversary_error_m(matrix: np.ndarray, prior: np.ndarray, distance_m: np.ndarray) -> float:
    joint = prior[:, None] * matrix
    return float((distance_m.T @ joint).min(axis=0).sum())


def verdict(r: panda.PandaResult) -> str:
    """The PAnDA page's first sentence: does this view keep its ε-mDP promise between users, and at what error?

    Every number in it is the run's own (the user-pair violation rate, counted exactly with Phase I's anchor
    upload, and the expected error at the users who can report).
    """
    n_ok = int((r.surrogates >= 0).sum())
    n_pairs = n_ok * (n_ok - 1) // 2
    rate = float(r.user_pair_violation_rate)
    eps = f"ε = {r.config.epsilon_per_km:g}/km"
    if n_pairs == 0 or not np.isfinite(rate):
        head = f"**Verdict on this view:** fewer than two users can report, so {eps} between users cannot be checked"
    elif rate > 0:
        share = "every one" if rate >= 1 else fmt_pct(rate)
        head = (
            f"**Verdict on this view: PAnDA breaks its promise of {eps} for {share} of the {n_pairs:,} user pairs** "
            "(counted exactly, with what the anchor upload of Phase I reveals)"
        )
    else:
        head = (
            f"**Verdict on this view: PAnDA keeps its promise of {eps} for all {n_pairs:,} user pairs** "
            "(counted exactly, with what the anchor upload of Phase I reveals)"
        )
    loss = f", at an expected error of {fmt_m(r.loss_expected_m)} at the users who can report" if n_ok else ""
    blind = (
        " Every anchor got the same output distribution: a report says nothing about where its user is."
        if r.lp_info.get("row_groups") == 1 and r.anchor_union.size > 1
        else ""
    )
    return f"{head}{loss}.{blind}"
