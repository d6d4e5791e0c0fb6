"""Repeated reports from one place: the attacker's posterior and error after k independent reports.

A device at a secret place ``x`` that reports k times, each report drawn independently from the
mechanism's row ``P[x, :]``, gives the attacker (who knows the prior ``p`` and the matrix ``P``) the
posterior::

    Pr[x | y_1 .. y_k]  proportional to  p_x * P[x, y_1] * ... * P[x, y_k]

:func:`posterior_after` computes it exactly, in log space (20 reports of probability 1e-20 each do
not underflow). Each report is eps-mDP, so k of them together are only (k eps)-mDP (sequential
composition): the posterior sharpens and the attacker's error falls with k.

:func:`attacker_error_vs_k` measures that fall: the Bayes-optimal attacker's expected error (metres)
after k reports, for k = 1 .. 20. For k = 1 it is exact (:func:`panda.audit.adversary_error_m`);
for k >= 2 the exact sum runs over ``M^k`` report sequences, so it is a Monte Carlo estimate with
its standard error. It also gives the *re-send defence*: the device re-sends the report it already
made for the same place (as Location Guard does with a fixed noisy location), so the attacker
learns nothing new, the error stays the exact k = 1 value and the budget stays eps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from panda.audit import adversary_error_m

__all__ = [
    "MAX_REPORTS",
    "DEFAULT_N_SEQUENCES",
    "RepeatedReports",
    "attacker_error_vs_k",
    "posterior_after",
]

#: The largest number of reports :func:`attacker_error_vs_k` accepts.
MAX_REPORTS = 20
#: Report sequences sampled by default: enough for a small standard error at an interactive cost on the
#: dashboard's views (``bench/bench_repeated.py`` times it); the standard error falls as ``1 / sqrt(n_sequences)``.
DEFAULT_N_SEQUENCES = 600
#: How far a row of the matrix or the prior may be from summing to 1 (LP rounding), absolute.
_SUM_TOL = 1e-6
#: Posterior weights below exp(-_LOG_FLOOR) times the largest are set to 0 before the guess.
_LOG_FLOOR = 60.0


@dataclass(frozen=True)
class RepeatedReports:
    """Outcome of :func:`attacker_error_vs_k`: one entry per k, in increasing k.

    Attributes
    ----------
    ks
        The numbers of independent reports, increasing, each in 1..20.
    error_m
        The Bayes-optimal attacker's expected error after k independent reports, metres: exact
        for k = 1, a Monte Carlo estimate for k >= 2.
    stderr_m
        The standard error of each estimate, metres (0.0 where the value is exact).
    exact
        True where ``error_m`` is exact (k = 1), False where it is estimated.
    defence_error_m
        The error with the re-send defence (the device repeats its first report): the exact
        k = 1 error for every k.
    single_report_error_m
        The exact error after one report (also when 1 is not in ``ks``).
    prior_only_error_m
        The error of the best guess from the prior alone (no report at all): no mechanism can
        leave the attacker worse off than this.
    n_sequences
        Report sequences sampled for the estimates (0 when every k is 1).
    epsilon_per_km
        The budget of one report, 1/km (``None`` when not given).
    elapsed_s
        Wall time of the computation, seconds.
    """

    ks: tuple[int, ...]
    error_m: tuple[float, ...]
    stderr_m: tuple[float, ...]
    exact: tuple[bool, ...]
    defence_error_m: tuple[float, ...]
    single_report_error_m: float
    prior_only_error_m: float
    n_sequences: int
    epsilon_per_km: float | None
    elapsed_s: float

    @property
    def independent_budget_per_km(self) -> tuple[float, ...] | None:
        """``k * eps`` for each k: what k independent reports cost together (sequential composition)."""
        if self.epsilon_per_km is None:
            return None
        return tuple(k * self.epsilon_per_km for k in self.ks)

    @property
    def defence_budget_per_km(self) -> tuple[float, ...] | None:
        """``eps`` for each k: re-sending one report costs no more than sending it once."""
        if self.epsilon_per_km is None:
            return None
        return tuple(self.epsilon_per_km for _ in self.ks)

    def summary(self) -> dict:
        """Plain-data description for JSON output (lists, floats, bools)."""
        budget = self.independent_budget_per_km
        defence_budget = self.defence_budget_per_km
        return {
            "ks": list(self.ks),
            "error_m": list(self.error_m),
            "stderr_m": list(self.stderr_m),
            "exact": list(self.exact),
            "defence_error_m": list(self.defence_error_m),
            "single_report_error_m": self.single_report_error_m,
            "prior_only_error_m": self.prior_only_error_m,
            "n_sequences": self.n_sequences,
            "epsilon_per_km": self.epsilon_per_km,
            "independent_budget_per_km": None if budget is None else list(budget),
            "defence_budget_per_km": None if defence_budget is None else list(defence_budget),
            "elapsed_s": self.elapsed_s,
        }


# --- validation ---


def _check_matrix(matrix: object, fn: str) -> np.ndarray:
    p = np.asarray(matrix, dtype=float)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 1:
        msg = (
            f"The 'matrix' parameter of {fn} must be a 2-D (K, M) array of probabilities. Got shape {p.shape} instead."
        )
        raise ValueError(msg)
    if not np.isfinite(p).all() or (p < 0).any():
        msg = (
            f"The 'matrix' parameter of {fn} must hold finite probabilities >= 0. "
            f"Got a smallest entry of {np.nanmin(p):g} instead."
        )
        raise ValueError(msg)
    sums = p.sum(axis=1)
    bad = np.abs(sums - 1.0) > _SUM_TOL
    if bad.any():
        i = int(np.argmax(bad))
        msg = (
            f"The 'matrix' parameter of {fn} must have rows that sum to 1 (Pr[y | x] for each place x). "
            f"Got a row {i} that sums to {sums[i]:.6g} instead."
        )
        raise ValueError(msg)
    return p


def _check_prior(prior: object, k: int, fn: str) -> np.ndarray:
    p = np.asarray(prior, dtype=float)
    if p.shape != (k,):
        msg = (
            f"The 'prior' parameter of {fn} must be a ({k},) array, one probability per row of the matrix. "
            f"Got shape {p.shape} instead."
        )
        raise ValueError(msg)
    if not np.isfinite(p).all() or (p < 0).any():
        msg = (
            f"The 'prior' parameter of {fn} must hold finite probabilities >= 0. "
            f"Got a smallest entry of {np.nanmin(p):g} instead."
        )
        raise ValueError(msg)
    if abs(float(p.sum()) - 1.0) > _SUM_TOL:
        msg = f"The 'prior' parameter of {fn} must sum to 1. Got a sum of {float(p.sum()):.6g} instead."
        raise ValueError(msg)
    return p


def _check_distance(distance_m: object, k: int, fn: str) -> np.ndarray:
    d = np.asarray(distance_m, dtype=float)
    if d.ndim != 2 or d.shape[0] != k or d.shape[1] < 1:
        msg = (
            f"The 'distance_m' parameter of {fn} must be a ({k}, G) array: the error in metres of each guess "
            f"for each true place (usually instance.d_km * 1000). Got shape {d.shape} instead."
        )
        raise ValueError(msg)
    if not np.isfinite(d).all() or (d < 0).any():
        msg = f"The 'distance_m' parameter of {fn} must hold finite distances >= 0 (metres)."
        raise ValueError(msg)
    return d


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_ks(ks: object, fn: str) -> tuple[int, ...]:
    values: list = [ks] if _is_int(ks) else list(ks) if isinstance(ks, Iterable) and not isinstance(ks, str) else []
    whole = [int(v) for v in values if _is_int(v)]
    if not values or len(whole) != len(values) or not all(1 <= v <= MAX_REPORTS for v in whole):
        msg = (
            f"The 'ks' parameter of {fn} must be a non-empty list of whole numbers of reports from 1 to "
            f"{MAX_REPORTS}. Got {ks!r} instead."
        )
        raise ValueError(msg)
    return tuple(sorted(set(whole)))


def _check_reports(reports: object, m: int, fn: str) -> np.ndarray:
    arr = np.asarray(reports)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        msg = (
            f"The 'reports' parameter of {fn} must be a 1-D list of output positions (whole numbers). "
            f"Got {reports!r} instead."
        )
        raise ValueError(msg)
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= m):
        msg = f"The 'reports' parameter of {fn} must hold output positions in [0, {m}). Got {reports!r} instead."
        raise ValueError(msg)
    return arr


def _check_n_sequences(n_sequences: int, fn: str) -> None:
    """Raise ValueError unless ``n_sequences`` is a whole number from 2 to 1,000,000."""
    if not _is_int(n_sequences) or not 2 <= int(n_sequences) <= 1_000_000:
        msg = (
            f"The 'n_sequences' parameter of {fn} must be a whole number from 2 to 1,000,000. "
            f"Got {n_sequences!r} instead."
        )
        raise ValueError(msg)


def _check_report_epsilon(epsilon_per_km: float | None, fn: str) -> float | None:
    """Return the budget of one report as a float (``None`` stays ``None``); ValueError unless it is > 0."""
    if epsilon_per_km is None:
        return None
    if isinstance(epsilon_per_km, bool) or not isinstance(epsilon_per_km, (int, float, np.floating, np.integer)):
        eps = float("nan")
    else:
        eps = float(epsilon_per_km)
    if not (math.isfinite(eps) and eps > 0):
        msg = f"The 'epsilon_per_km' parameter of {fn} must be a float > 0 or None. Got {epsilon_per_km!r} instead."
        raise ValueError(msg)
    return eps


# --- exact posterior ---


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def posterior_after(prior: np.ndarray, matrix: np.ndarray, reports: Sequence[int] | np.ndarray) -> np.ndarray:
    """Return the exact posterior ``Pr[x | y_1 .. y_k]`` after k independent reports from one place.

    ``log post(x) = log p_x + sum_j log P[x, y_j] - log Z``, computed in log space and normalised
    with the largest term factored out, so long sequences of tiny probabilities do not underflow.

    Parameters
    ----------
    prior
        ``(K,)`` prior over the places (sums to 1).
    matrix
        ``(K, M)`` perturbation matrix ``Pr[y | x]`` (rows sum to 1).
    reports
        The k reports ``y_1 .. y_k`` (output positions in ``[0, M)``), in any order; an empty
        sequence gives the prior back.

    Returns
    -------
    numpy.ndarray
        ``(K,)`` posterior, sums to 1.

    Raises
    ------
    ValueError
        On bad shapes or probabilities, or when no place with prior mass can produce all the reports
        (the sequence is impossible under this matrix and prior).
    """
    fn = "posterior_after"
    p = _check_matrix(matrix, fn)
    pr = _check_prior(prior, p.shape[0], fn)
    ys = _check_reports(reports, p.shape[1], fn)
    log_post = _log(pr) + _log(p[:, ys]).sum(axis=1)
    top = float(log_post.max())
    if not math.isfinite(top):
        msg = (
            f"The reports {ys.tolist()} cannot all come from one place: under this matrix and prior every place "
            "gives the sequence probability 0. Check that the reports were made with this mechanism."
        )
        raise ValueError(msg)
    w = np.exp(log_post - top)
    return w / w.sum()


# --- the attacker's error after k reports ---


def _guess_error(log_post: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """Per sequence, the Bayes guess's posterior expected error ``min_g sum_x post(x) D[x, g]``."""
    z = log_post - log_post.max(axis=1, keepdims=True)
    # Terms below e^-_LOG_FLOOR of the largest change the error by less than 1e-26 of it; dropping them
    # keeps subnormal numbers (far slower arithmetic) out of the product.
    z[z < -_LOG_FLOOR] = -np.inf
    w = np.exp(z)
    w /= w.sum(axis=1, keepdims=True)
    # Single precision makes the product cheaper (it dominates); a sum of K terms of metres keeps a
    # relative error near 1e-6, far below the estimate's standard error.
    return (w.astype(np.float32) @ dist).min(axis=1).astype(np.float64)


def _monte_carlo(
    p: np.ndarray, prior: np.ndarray, dist: np.ndarray, ks: tuple[int, ...], n: int, gen: np.random.Generator
) -> dict[int, tuple[float, float]]:
    """Estimate the error at each k in ``ks`` from ``n`` sampled sequences shared by every k.

    Each sequence draws a true place from the prior and ``max(ks)`` reports from its row; the
    estimate at k uses the first k reports of every sequence (common random numbers: the curve's
    differences are not swamped by independent noise). The per-sequence value is the Bayes guess's
    posterior expected error, whose mean is the attacker's expected error (a lower-variance
    estimator than the error against the sampled place).
    """
    k_max = max(ks)
    x = gen.choice(prior.size, size=n, p=prior / prior.sum())
    u = gen.random((n, k_max))
    rows = np.cumsum(p[x], axis=1)
    rows /= rows[:, -1:]  # the last positive entry of each row is exactly 1.0 > u
    log_pt = np.ascontiguousarray(_log(p).T)  # (M, K): log Pr[y | x] by report
    log_post = np.broadcast_to(_log(prior), (n, prior.size)).copy()
    dist = np.asarray(dist, dtype=np.float32)
    out: dict[int, tuple[float, float]] = {}
    want = set(ks)
    for j in range(k_max):
        y = (rows <= u[:, j : j + 1]).sum(axis=1)  # first output whose cumulative probability > u
        log_post += log_pt[y]
        if j + 1 in want:
            err = _guess_error(log_post, dist)
            out[j + 1] = (float(err.mean()), float(err.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"))
    return out


def attacker_error_vs_k(
    matrix: np.ndarray,
    prior: np.ndarray,
    distance_m: np.ndarray,
    ks: Iterable[int] = tuple(range(1, MAX_REPORTS + 1)),
    *,
    n_sequences: int = DEFAULT_N_SEQUENCES,
    epsilon_per_km: float | None = None,
    rng: np.random.Generator | int | None = None,
) -> RepeatedReports:
    """Return the Bayes-optimal attacker's expected error (metres) after k independent reports, for each k.

    The attacker knows the prior and the mechanism. Seeing reports ``y_1 .. y_k`` from one place it
    guesses the place ``g`` minimising the posterior expected error ``sum_x post(x) D[x, g]`` (as
    :func:`panda.audit.adversary_error_m` does for one report); its expected error is the mean of that
    minimum over places and report sequences.

    * k = 1 is exact: :func:`panda.audit.adversary_error_m`.
    * k >= 2 sums over ``M^k`` sequences exactly, which is intractable, so it is estimated: sample
      ``n_sequences`` places from the prior, ``max(ks)`` reports from each place's row, update each
      posterior report by report in log space, and at every k in ``ks`` average the Bayes guess's
      posterior expected error. Every k uses the same sequences (common random numbers), so the
      curve is smooth and its differences are sharper than the standard errors suggest.
    * The re-send defence (the device repeats its first report for the same place) leaves the
      attacker with one report's information: the exact k = 1 error at every k, for a budget of
      ``eps`` instead of ``k * eps``.

    Cost: with S = ``n_sequences``, K places, M outputs, G guesses (G = K usually) and k_max =
    ``max(ks)``, sampling takes ``O(S k_max M)``, the posterior updates ``O(S k_max K)`` and the
    guesses ``O(|ks| S K G)`` (one ``(S, K) @ (K, G)`` product per k in ``ks``), which dominates:
    linear in S, in the number of ks and in K G, and independent of M apart from the sampling.
    Memory is ``O(S (K + G + M))``. The exact k = 1 error costs ``O(K G M)``. ``bench/bench_repeated.py``
    times the default (docs/benchmarks.md, "Repeated reports"); pass fewer ks (e.g. 1, 2, 5, 10, 20) for less.

    Parameters
    ----------
    matrix
        ``(K, M)`` perturbation matrix ``Pr[y | x]`` (rows sum to 1 within 1e-6).
    prior
        ``(K,)`` prior over the places (sums to 1 within 1e-6).
    distance_m
        ``(K, G)`` error of guessing ``g`` when the truth is ``x``, metres; usually the privacy
        distance between places (``instance.d_km * 1000``).
    ks
        The numbers of reports to evaluate, whole numbers from 1 to 20 (repeats are dropped; the
        result is in increasing k).
    n_sequences
        Report sequences sampled for k >= 2 (the standard error falls as ``1 / sqrt(n_sequences)``).
    epsilon_per_km
        The budget of one report, 1/km: recorded so the result can state ``k * eps``.
    rng
        Random generator or seed of the sample.

    Returns
    -------
    RepeatedReports
        The error, its standard error and whether it is exact, per k, the defence curve and the
        budgets.
    """
    fn = "attacker_error_vs_k"
    t0 = time.perf_counter()
    p = _check_matrix(matrix, fn)
    pr = _check_prior(prior, p.shape[0], fn)
    dist = _check_distance(distance_m, p.shape[0], fn)
    k_list = _check_ks(ks, fn)
    _check_n_sequences(n_sequences, fn)
    eps = _check_report_epsilon(epsilon_per_km, fn)
    gen = np.random.default_rng(rng)

    single = adversary_error_m(p, pr, dist)
    prior_only = float((pr @ dist).min())
    estimated = [k for k in k_list if k >= 2]
    mc = _monte_carlo(p, pr, dist, tuple(estimated), int(n_sequences), gen) if estimated else {}
    error, stderr = [], []
    for k in k_list:
        e, s = (single, 0.0) if k == 1 else mc[k]
        error.append(e)
        stderr.append(s)
    return RepeatedReports(
        ks=k_list,
        error_m=tuple(error),
        stderr_m=tuple(stderr),
        exact=tuple(k == 1 for k in k_list),
        defence_error_m=tuple(single for _ in k_list),
        single_report_error_m=single,
        prior_only_error_m=prior_only,
        n_sequences=int(n_sequences) if estimated else 0,
        epsilon_per_km=eps,
        elapsed_s=time.perf_counter() - t0,
    )
