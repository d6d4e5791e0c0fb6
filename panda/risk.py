"""Risk in plain terms: what the best attacker learns from a mechanism's reports, exactly for one report.

A mechanism is a ``(K, M)`` row-stochastic matrix ``P[x, y] = Pr[y | x]`` over the true places ``x`` and the
outputs ``y``; ``p`` is the prior over the places and ``D[x, g]`` (metres) the error of guessing place ``g`` when
the truth is ``x`` (usually the privacy distance, ``instance.d_km * 1000``). The attacker is the project's
Bayes-optimal one (:func:`panda.audit.adversary_error_m`): it knows ``p`` and ``P`` and, seeing ``y``, guesses::

    guess(y) = argmin_g sum_x p_x P[x, y] D[x, g]

(ties go to the lowest index, as numpy's ``argmin`` and :func:`panda.class_round.bayes_guess` break them; a tie
changes no expected error, but it can change the chance of landing within ``r`` metres).

:func:`risk_report` gives, exactly (sums over the matrix, no sampling):

* the chance that the guess lands within ``r`` metres of the true place, for each radius ``r``:
  ``sum_x p_x sum_y P[x, y] 1[D[x, guess(y)] <= r]``;
* the attacker's expected error at each place, ``err(x) = sum_y P[x, y] D[x, guess(y)]``, whose prior-weighted
  mean is :func:`panda.audit.adversary_error_m` (the report carries that function's own value);
* the worst-off share (10 % by default): the people the attacker finds most easily. **Definition**: sort the
  places by ``err`` (lowest first) and take the lowest ones until they hold ``share`` of the prior mass (the
  place on the boundary counted in part); ``worst_share_error_m`` is the prior-weighted mean error over that
  mass, ``worst_share_threshold_m`` the error of the boundary place (the prior-weighted ``share`` quantile of
  ``err``). ``weights="places"`` uses every place with the same weight instead of the prior (10 % of the places,
  not of the people).

:func:`day_risk` is the attacker after ``k`` independent reports from one place (a day of ``k`` reports), reusing
:mod:`panda.repeated`: exact for ``k = 1``; a Monte Carlo estimate with its standard error for ``k >= 2``; and
the re-send defence (the device repeats its first report: the exact one-report error, for a budget of ``eps``
instead of ``k eps``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from panda.audit import adversary_error_m
from panda.repeated import DEFAULT_N_SEQUENCES, MAX_REPORTS, RepeatedReports, attacker_error_vs_k

__all__ = [
    "DEFAULT_RADII_M",
    "DEFAULT_WORST_SHARE",
    "RiskReport",
    "attacker_guesses",
    "day_risk",
    "risk_report",
]

#: The radii of :func:`risk_report`'s "within r metres" chances by default: a building, a block, a neighbourhood.
DEFAULT_RADII_M: tuple[float, ...] = (100.0, 250.0, 500.0)
#: The worst-off share of :func:`risk_report` by default.
DEFAULT_WORST_SHARE = 0.1
#: Largest ``k`` :func:`day_risk` accepts: a report every minute for a day.
MAX_DAY_REPORTS = 1440


@dataclass(frozen=True)
class RiskReport:
    """Outcome of :func:`risk_report` (all exact, for one report).

    Attributes
    ----------
    radii_m
        The radii asked for, metres.
    chance_within
        For each radius, the chance that the attacker's guess lands within it of the true place (0 to 1).
    place_error_m
        ``(K,)`` the attacker's expected error at each place, metres.
    mean_error_m
        The attacker's expected error over the prior, metres (:func:`panda.audit.adversary_error_m`).
    worst_share
        The worst-off share (e.g. 0.1).
    weights
        ``"prior"`` (the share is of the prior mass: people) or ``"places"`` (of the places).
    worst_share_error_m
        The mean error over the worst-off share (the places with the lowest error), metres.
    worst_share_threshold_m
        The error of the place on the worst-off share's boundary (the ``worst_share`` quantile), metres.
    guesses
        ``(M,)`` the attacker's guess (a place) for each output.
    """

    radii_m: tuple[float, ...]
    chance_within: tuple[float, ...]
    place_error_m: np.ndarray
    mean_error_m: float
    worst_share: float
    weights: str
    worst_share_error_m: float
    worst_share_threshold_m: float
    guesses: np.ndarray

    def summary(self) -> dict:
        """Plain data (no per-place arrays) for JSON output."""
        return {
            "radii_m": list(self.radii_m),
            "chance_within": list(self.chance_within),
            "mean_error_m": self.mean_error_m,
            "worst_share": self.worst_share,
            "weights": self.weights,
            "worst_share_error_m": self.worst_share_error_m,
            "worst_share_threshold_m": self.worst_share_threshold_m,
        }


def _checked(matrix: object, prior: object, distance_m: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the arrays as floats, or raise ValueError on bad shapes or values."""
    p = np.asarray(matrix, dtype=float)
    pr = np.asarray(prior, dtype=float)
    d = np.asarray(distance_m, dtype=float)
    if p.ndim != 2 or pr.shape != (p.shape[0],) or d.ndim != 2 or d.shape[0] != p.shape[0] or d.shape[1] < 1:
        msg = (
            "risk needs matrix (K, M), prior (K,) and distance_m (K, G) in metres. "
            f"Got {p.shape}, {pr.shape} and {d.shape} instead."
        )
        raise ValueError(msg)
    for name, a in (("matrix", p), ("prior", pr), ("distance_m", d)):
        if not np.isfinite(a).all() or (a < 0).any():
            msg = f"The '{name}' parameter of risk_report must hold finite values >= 0."
            raise ValueError(msg)
    return p, pr, d


def attacker_guesses(matrix: np.ndarray, prior: np.ndarray, distance_m: np.ndarray) -> np.ndarray:
    """Return the Bayes attacker's guess for each output, ``argmin_g sum_x p_x P[x, y] D[x, g]``: ``(M,)`` places.

    The same guess as :func:`panda.audit.adversary_error_m` makes (its ``attacker_prior`` branch computes it with
    the true prior the same way); that function returns only the error, not the guesses.
    """
    p, pr, d = _checked(matrix, prior, distance_m)
    return np.argmin(d.T @ (pr[:, None] * p), axis=0)


def _check_radii(radii_m: Sequence[float]) -> tuple[float, ...]:
    radii = tuple(float(r) for r in radii_m)
    if not radii or not all(np.isfinite(r) and r >= 0 for r in radii):
        msg = f"The 'radii_m' parameter of risk_report must be a non-empty list of metres >= 0. Got {radii_m!r}."
        raise ValueError(msg)
    return radii


def _worst_share(errors: np.ndarray, weights: np.ndarray, share: float) -> tuple[float, float]:
    """Return the weighted mean of the lowest ``errors`` holding ``share`` of the weight, and the boundary's error."""
    w = weights / weights.sum()
    order = np.argsort(errors, kind="stable")
    e, w = errors[order], w[order]
    before = np.concatenate([[0.0], np.cumsum(w)[:-1]])  # weight of the places before each one
    taken = np.clip(share - before, 0.0, w)  # each place's weight inside the share (the boundary in part)
    boundary = int(np.flatnonzero(taken > 0)[-1]) if (taken > 0).any() else 0
    return float((taken * e).sum() / taken.sum()), float(e[boundary])


def risk_report(
    matrix: np.ndarray,
    prior: np.ndarray,
    distance_m: np.ndarray,
    *,
    radii_m: Sequence[float] = DEFAULT_RADII_M,
    worst_share: float = DEFAULT_WORST_SHARE,
    weights: str = "prior",
) -> RiskReport:
    """Return the Bayes attacker's risk numbers for one report, exactly (see the module docstring).

    Parameters
    ----------
    matrix
        ``(K, M)`` mechanism ``Pr[y | x]``.
    prior
        ``(K,)`` prior over the places (sums to 1).
    distance_m
        ``(K, K)`` distances between the places in metres (``instance.d_km * 1000``): the attacker guesses
        among the places, and its error is the distance from its guess to the truth.
    radii_m
        Radii for the "within r metres" chances, metres.
    worst_share
        The worst-off share, in (0, 1].
    weights
        ``"prior"``: the share and its mean are over the prior mass (people); ``"places"``: every place alike.

    Cost: one ``(K, K) @ (K, M)`` product for the guesses and ``O(K M)`` per radius.
    """
    p, pr, d = _checked(matrix, prior, distance_m)
    radii = _check_radii(radii_m)
    if isinstance(worst_share, bool) or not (isinstance(worst_share, (int, float)) and 0 < worst_share <= 1):
        msg = f"The 'worst_share' parameter of risk_report must be in (0, 1]. Got {worst_share!r} instead."
        raise ValueError(msg)
    if weights not in ("prior", "places"):
        msg = f"The 'weights' parameter of risk_report must be 'prior' or 'places'. Got {weights!r} instead."
        raise ValueError(msg)
    if pr.sum() <= 0:
        raise ValueError("The 'prior' parameter of risk_report must have a positive sum.")
    guesses = attacker_guesses(p, pr, d)
    off = d[:, guesses]  # (K, M): how far the guess after output y lands from place x, metres
    place_error = (p * off).sum(axis=1)
    chances = tuple(float(pr @ (p * (off <= r)).sum(axis=1)) for r in radii)
    w = pr if weights == "prior" else np.ones_like(pr)
    share_error, threshold = _worst_share(place_error, w, float(worst_share))
    return RiskReport(
        radii_m=radii,
        chance_within=chances,
        place_error_m=place_error,
        mean_error_m=float(adversary_error_m(p, pr, d)),
        worst_share=float(worst_share),
        weights=weights,
        worst_share_error_m=share_error,
        worst_share_threshold_m=threshold,
        guesses=guesses,
    )


def day_risk(
    matrix: np.ndarray,
    prior: np.ndarray,
    distance_m: np.ndarray,
    reports_per_day: int,
    *,
    epsilon_per_km: float | None = None,
    n_sequences: int = DEFAULT_N_SEQUENCES,
    rng: np.random.Generator | int | None = None,
) -> RepeatedReports:
    """Return the attacker after a day of ``k`` independent reports from one place, and the re-send defence.

    The result has ``ks = (1, k)`` (just ``(1,)`` when ``k = 1``): the exact one-report error, and the error after
    ``k`` reports, a Monte Carlo estimate over ``n_sequences`` sampled days with its standard error
    (``stderr_m``); ``defence_error_m`` is the re-send defence's (exact); ``independent_budget_per_km`` is
    ``(eps, k eps)`` when ``epsilon_per_km`` is given (sequential composition), ``defence_budget_per_km`` ``eps``.

    Up to :data:`panda.repeated.MAX_REPORTS` reports this is :func:`panda.repeated.attacker_error_vs_k` itself;
    beyond (up to :data:`MAX_DAY_REPORTS`, e.g. 288: every 5 minutes) the same sampler without that function's cap
    (its checks and its exact one-report error first, then its Monte Carlo step), so the estimate is the same
    estimator. Cost, S = ``n_sequences``: ``O(S k (M + K))`` to sample and update the posteriors, plus
    ``O(S K^2)`` for the guess at ``k`` (and ``O(K^2 M)`` for the exact one-report error); memory ``O(S (K + M))``.
    """
    if isinstance(reports_per_day, bool) or not isinstance(reports_per_day, (int, np.integer)):
        msg = f"The 'reports_per_day' parameter of day_risk must be a whole number. Got {reports_per_day!r} instead."
        raise ValueError(msg)
    k = int(reports_per_day)
    if not 1 <= k <= MAX_DAY_REPORTS:
        msg = f"The 'reports_per_day' parameter of day_risk must be from 1 to {MAX_DAY_REPORTS}. Got {k} instead."
        raise ValueError(msg)
    if k <= MAX_REPORTS:
        ks = (1,) if k == 1 else (1, k)
        return attacker_error_vs_k(
            matrix, prior, distance_m, ks, n_sequences=n_sequences, epsilon_per_km=epsilon_per_km, rng=rng
        )
    from panda.repeated import _monte_carlo  # the estimator behind attacker_error_vs_k, without its cap on k

    t0 = time.perf_counter()
    one = attacker_error_vs_k(matrix, prior, distance_m, (1,), n_sequences=n_sequences, epsilon_per_km=epsilon_per_km)
    p, pr, d = _checked(matrix, prior, distance_m)
    error, stderr = _monte_carlo(p, pr, d, (k,), int(n_sequences), np.random.default_rng(rng))[k]
    return RepeatedReports(
        ks=(1, k),
        error_m=(one.single_report_error_m, error),
        stderr_m=(0.0, stderr),
        exact=(True, False),
        defence_error_m=(one.single_report_error_m, one.single_report_error_m),
        single_report_error_m=one.single_report_error_m,
        prior_only_error_m=one.prior_only_error_m,
        n_sequences=int(n_sequences),
        epsilon_per_km=one.epsilon_per_km,
        elapsed_s=time.perf_counter() - t0,
    )
