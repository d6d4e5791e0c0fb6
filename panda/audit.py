"""Exact privacy audits of perturbation matrices, and the Bayes-optimal attacker's error.

A mechanism is a ``(K, M)`` row-stochastic matrix ``P[x, y] = Pr[y | x]``. It is eps-mDP (metric
differential privacy, geo-indistinguishability) under the distance ``d`` (km) when, for every pair of
records ``(x, x')`` and every output ``y``::

    P[x, y] <= exp(eps * d(x, x')) * P[x', y]

:func:`audit_mechanism` checks that inequality for every pair (or a given set of pairs plus a stated
random sample) exactly, with zeros handled exactly: ``P[x, y] > 0 = P[x', y]`` is an infinite
ratio (a violation at any budget), ``0 / 0`` is no evidence at all. A pair's *effective epsilon* is
``max_y |ln P[x, y] - ln P[x', y]| / d(x, x')``; the smallest budget the matrix satisfies is the
largest effective epsilon over the pairs checked.

:func:`adversary_error_m` is the expected inference error (metres) of the Bayes-optimal attacker
who knows the prior and the matrix, the privacy measure of Shokri et al. (2012).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from panda.checks import check_epsilon

__all__ = [
    "MdpAudit",
    "WorstPair",
    "audit_mechanism",
    "adversary_error_m",
    "audit_numbers",
    "kept_audit_numbers",
    "matrix_digest",
    "mechanism_numbers",
]

#: Elements of one ``chunk x K x M`` block of log-ratios (bounds the audit's memory, ~32 MB).
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class WorstPair:
    """One audited pair of records (positions in X).

    Attributes
    ----------
    i, j
        The two records.
    y
        The output (position in Y) where ``|ln P[i, y] - ln P[j, y]|`` is largest.
    d_km
        Their privacy distance.
    log_ratio
        ``max_y |ln P[i, y] - ln P[j, y]|`` (``inf`` if one row is zero where the other is not).
    allowed_log_ratio
        ``epsilon_per_km * d_km``, what eps-mDP allows.
    effective_epsilon_per_km
        ``log_ratio / d_km``: the smallest budget this pair satisfies.
    """

    i: int
    j: int
    y: int
    d_km: float
    log_ratio: float
    allowed_log_ratio: float
    effective_epsilon_per_km: float

    @property
    def violated(self) -> bool:
        """True when the pair breaks eps-mDP (without tolerance)."""
        return self.log_ratio > self.allowed_log_ratio


@dataclass(frozen=True)
class MdpAudit:
    """Outcome of :func:`audit_mechanism`.

    Attributes
    ----------
    epsilon_per_km
        The budget audited against, 1/km.
    rtol
        Relative tolerance: a pair passes when its largest ratio is ``<= exp(eps d) (1 + rtol)``.
    scope
        What was checked, for people ("all 435 pairs", "120 given pairs + 1,000 sampled pairs").
    n_pairs_checked
        Unordered pairs of distinct records checked (both directions each).
    n_violations
        Pairs that break eps-mDP beyond the tolerance.
    n_sampled_pairs, n_sampled_violations
        The part of the above that came from the random sample (0 when there was none).
    epsilon_min_per_km
        The largest effective epsilon over the pairs checked: the smallest budget the matrix
        satisfies on them (``inf`` when a zero-support mismatch exists, or when two rows at
        distance 0 differ by more than the tolerance).
    worst
        Up to ``n_worst`` pairs, largest effective epsilon first.
    """

    epsilon_per_km: float
    rtol: float
    scope: str
    n_pairs_checked: int
    n_violations: int
    n_sampled_pairs: int
    n_sampled_violations: int
    epsilon_min_per_km: float
    worst: tuple[WorstPair, ...]

    @property
    def violation_rate(self) -> float:
        """Share of the checked pairs that break eps-mDP (``nan`` when none were checked)."""
        return self.n_violations / self.n_pairs_checked if self.n_pairs_checked else float("nan")

    @property
    def sample_violation_rate(self) -> float:
        """Violation rate of the random sample alone (``nan`` without a sample)."""
        return self.n_sampled_violations / self.n_sampled_pairs if self.n_sampled_pairs else float("nan")

    @property
    def passed(self) -> bool:
        """True when no checked pair breaks eps-mDP."""
        return self.n_violations == 0

    def summary(self) -> dict:
        """Plain-data description for JSON output."""
        return {
            "epsilon_per_km": self.epsilon_per_km,
            "rtol": self.rtol,
            "scope": self.scope,
            "n_pairs_checked": self.n_pairs_checked,
            "n_violations": self.n_violations,
            "violation_rate": self.violation_rate,
            "n_sampled_pairs": self.n_sampled_pairs,
            "sample_violation_rate": self.sample_violation_rate,
            "epsilon_min_per_km": self.epsilon_min_per_km,
            "worst": [vars(w) | {"violated": w.violated} for w in self.worst],
        }


def _log_matrix(matrix: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(matrix)


def _pair_log_ratios(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``max_y |log_a - log_b|`` and its argmax along the last axis; ``0/0`` counts as 0."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(log_a - log_b)  # -inf - -inf = nan (both zero: fine); -inf - finite = inf
    np.nan_to_num(diff, copy=False, nan=0.0, posinf=np.inf)
    arg = np.argmax(diff, axis=-1)
    return np.take_along_axis(diff, arg[..., None], axis=-1)[..., 0], arg


def _effective_epsilon(log_ratio: np.ndarray, d: np.ndarray, tol: float) -> np.ndarray:
    """``log_ratio / d``; pairs at distance 0 give 0 when within the tolerance, else ``inf``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = log_ratio / d
    zero_d = d <= 0
    eff[zero_d] = np.where(log_ratio[zero_d] <= tol, 0.0, np.inf)
    return eff


class _Collector:
    """Accumulates counts, the largest effective epsilon and the worst pairs over chunks."""

    def __init__(self, epsilon: float, tol: float, n_worst: int) -> None:
        self.epsilon = epsilon
        self.tol = tol
        self.n_worst = n_worst
        self.n_checked = 0
        self.n_violations = 0
        self.eps_min = 0.0
        self.cand: list[tuple[np.ndarray, ...]] = []

    def add(self, i: np.ndarray, j: np.ndarray, d: np.ndarray, log_ratio: np.ndarray, y: np.ndarray) -> int:
        if i.size == 0:
            return 0
        allowed = self.epsilon * d
        viol = log_ratio > allowed + self.tol
        eff = _effective_epsilon(log_ratio, d, self.tol)
        self.n_checked += int(i.size)
        n_viol = int(viol.sum())
        self.n_violations += n_viol
        self.eps_min = max(self.eps_min, float(eff.max()))
        if self.n_worst > 0:
            top = np.argsort(-eff, kind="stable")[: self.n_worst]
            self.cand.append((i[top], j[top], y[top], d[top], log_ratio[top], eff[top]))
        return n_viol

    def worst(self) -> tuple[WorstPair, ...]:
        if not self.cand:
            return ()
        i, j, y, d, lr, eff = (np.concatenate(parts) for parts in zip(*self.cand, strict=True))
        top = np.argsort(-eff, kind="stable")[: self.n_worst]
        return tuple(
            WorstPair(
                i=int(i[t]),
                j=int(j[t]),
                y=int(y[t]),
                d_km=float(d[t]),
                log_ratio=float(lr[t]),
                allowed_log_ratio=float(self.epsilon * d[t]),
                effective_epsilon_per_km=float(eff[t]),
            )
            for t in top
        )


def _check_matrix(matrix: np.ndarray, d_km: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(matrix, dtype=float)
    if p.ndim != 2:
        msg = f"The 'matrix' parameter of audit_mechanism must be a 2-D (K, M) array. Got shape {p.shape} instead."
        raise ValueError(msg)
    if (p < 0).any() or not np.isfinite(p).all():
        msg = "The 'matrix' parameter of audit_mechanism must hold finite probabilities >= 0."
        raise ValueError(msg)
    d = np.asarray(d_km, dtype=float)
    k = p.shape[0]
    if d.shape != (k, k):
        msg = f"The 'd_km' parameter of audit_mechanism must be a ({k}, {k}) array. Got shape {d.shape} instead."
        raise ValueError(msg)
    return p, d


def _check_pairs(pairs: object, k: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(pairs, tuple) and len(pairs) == 2:
        pairs = np.stack([np.asarray(pairs[0]), np.asarray(pairs[1])], axis=1)
    arr = np.asarray(pairs)
    if arr.ndim == 2 and arr.shape[1] == 2:
        pi, pj = arr[:, 0], arr[:, 1]
    elif arr.ndim == 2 and arr.shape[0] == 2:
        pi, pj = arr[0], arr[1]
    else:
        msg = (
            "The 'pairs' parameter of audit_mechanism must be an (n, 2) array of record positions "
            f"(or a pair of index arrays). Got shape {arr.shape} instead."
        )
        raise ValueError(msg)
    pi = np.asarray(pi, dtype=np.int64)
    pj = np.asarray(pj, dtype=np.int64)
    if pi.size and (min(pi.min(), pj.min()) < 0 or max(pi.max(), pj.max()) >= k):
        msg = f"The 'pairs' parameter of audit_mechanism must hold record positions in [0, {k}). Got values outside."
        raise ValueError(msg)
    # Unordered, distinct, without repeats.
    lo, hi = np.minimum(pi, pj), np.maximum(pi, pj)
    keep = lo != hi
    key = np.unique(lo[keep] * k + hi[keep])
    return key // k, key % k


def _check_options(rtol: object, n_worst: object, sample_pairs: object) -> None:
    """Raise ValueError unless ``rtol``, ``n_worst`` and ``sample_pairs`` are in their ranges."""
    if not (isinstance(rtol, (int, float)) and 0 <= rtol < 1):
        msg = f"The 'rtol' parameter of audit_mechanism must be a float in [0, 1). Got {rtol!r} instead."
        raise ValueError(msg)
    if isinstance(n_worst, bool) or not isinstance(n_worst, (int, np.integer)) or n_worst < 0:
        msg = f"The 'n_worst' parameter of audit_mechanism must be an int >= 0. Got {n_worst!r} instead."
        raise ValueError(msg)
    if sample_pairs is not None and (
        isinstance(sample_pairs, bool) or not isinstance(sample_pairs, (int, np.integer)) or sample_pairs < 1
    ):
        msg = (
            "The 'sample_pairs' parameter of audit_mechanism must be an int >= 1 or None. "
            f"Got {sample_pairs!r} instead."
        )
        raise ValueError(msg)


def audit_mechanism(
    matrix: np.ndarray,
    d_km: np.ndarray,
    epsilon_per_km: float,
    *,
    pairs: np.ndarray | tuple[np.ndarray, np.ndarray] | None = None,
    rtol: float = 1e-9,
    n_worst: int = 10,
    sample_pairs: int | None = None,
    rng: np.random.Generator | int | None = None,
) -> MdpAudit:
    """Check eps-mDP of a perturbation matrix exactly, pair by pair.

    Parameters
    ----------
    matrix
        ``(K, M)`` perturbation matrix ``Pr[y | x]``.
    d_km
        ``(K, K)`` privacy distances between the records, km.
    epsilon_per_km
        The budget to audit against, 1/km.
    pairs
        Unordered pairs of records to check, as an ``(n, 2)`` array (e.g. the users' pairs).
        ``None`` checks every pair, unless ``sample_pairs`` is given.
    rtol
        A pair passes when ``max_y P[x, y] / P[x', y] <= exp(eps d) (1 + rtol)`` both ways: room for
        the LP solver's rounding, nothing more.
    n_worst
        How many of the worst pairs (largest effective epsilon) to return.
    sample_pairs
        Also check this many record pairs drawn uniformly at random (without replacement among
        unordered pairs of distinct records); with ``pairs=None`` only the sample is checked (for
        large K, where all pairs would take too long).
    rng
        Random generator or seed of the sample.

    Returns
    -------
    MdpAudit
        Counts, violation rate, the smallest budget the matrix satisfies on the checked pairs, and
        the worst pairs.
    """
    p, d = _check_matrix(matrix, d_km)
    eps = check_epsilon(epsilon_per_km, "audit_mechanism")
    _check_options(rtol, n_worst, sample_pairs)
    k = p.shape[0]
    n_all = k * (k - 1) // 2
    logp = _log_matrix(p)
    col = _Collector(eps, float(np.log1p(rtol)), int(n_worst))
    n_sampled = n_sampled_viol = 0
    if pairs is None and sample_pairs is None:
        _check_all_pairs(col, logp, d)
        scope = f"all {n_all:,} pairs"
    else:
        parts = []
        if pairs is not None:
            given_i, given_j = _check_pairs(pairs, k)
            _check_listed(col, logp, d, given_i, given_j)
            parts.append(f"{given_i.size:,} given pairs")
        if sample_pairs is not None:
            si, sj = _sampled_pairs(int(sample_pairs), k, rng)
            n_sampled = int(si.size)
            n_sampled_viol = _check_listed(col, logp, d, si, sj)
            parts.append(f"{n_sampled:,} sampled pairs (of {n_all:,})")
        scope = " + ".join(parts)
    return MdpAudit(
        epsilon_per_km=eps,
        rtol=float(rtol),
        scope=scope,
        n_pairs_checked=col.n_checked,
        n_violations=col.n_violations,
        n_sampled_pairs=n_sampled,
        n_sampled_violations=n_sampled_viol,
        epsilon_min_per_km=col.eps_min,
        worst=col.worst(),
    )


def _check_all_pairs(col: _Collector, logp: np.ndarray, d: np.ndarray) -> None:
    """Check every pair ``i < j`` into ``col``, by blocks of rows (each against the rows after it)."""
    k, m = logp.shape
    step = max(1, _CHUNK_ELEMENTS // max(k * m, 1))
    for a0 in range(0, k - 1, step):
        a1 = min(k - 1, a0 + step)
        # Rows a0..a1-1 against columns a0+1..K-1; keep only i < j.
        lr, y = _pair_log_ratios(logp[a0:a1, None, :], logp[None, a0 + 1 :, :])
        ii, jj = np.nonzero(np.arange(a0, a1)[:, None] < np.arange(a0 + 1, k)[None, :])
        col.add(ii + a0, jj + a0 + 1, d[ii + a0, jj + a0 + 1], lr[ii, jj], y[ii, jj])


def _check_listed(col: _Collector, logp: np.ndarray, d: np.ndarray, pi: np.ndarray, pj: np.ndarray) -> int:
    """Check the pairs ``(pi, pj)`` into ``col``, by chunks; return how many break eps-mDP."""
    m = logp.shape[1]
    n_viol = 0
    step = max(1, _CHUNK_ELEMENTS // max(m, 1))
    for s in range(0, pi.size, step):
        a, b = pi[s : s + step], pj[s : s + step]
        lr, y = _pair_log_ratios(logp[a], logp[b])
        n_viol += col.add(a, b, d[a, b], lr, y)
    return n_viol


def _sampled_pairs(sample_pairs: int, k: int, rng: np.random.Generator | int | None) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``sample_pairs`` unordered pairs of distinct records uniformly, without replacement (all when fewer)."""
    n_all = k * (k - 1) // 2
    gen = np.random.default_rng(rng)
    n_s = min(sample_pairs, n_all)
    # Uniform unordered pairs without replacement: draw linear indices of the upper triangle.
    flat = (
        gen.choice(n_all, size=n_s, replace=False)
        if n_all <= 50_000_000
        else np.unique(gen.integers(0, n_all, size=n_s))
    )
    return _triangle_index(flat, k)


def _triangle_index(flat: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Map linear indices ``0 .. K(K-1)/2 - 1`` to pairs ``i < j`` (row-major upper triangle)."""
    flat = np.asarray(flat, dtype=np.int64)

    def start(i: np.ndarray) -> np.ndarray:  # linear index of the pair (i, i + 1)
        return i * (2 * k - i - 1) // 2

    # Invert start(i) <= flat with the quadratic formula, then fix the floating-point rounding.
    i = np.floor(((2 * k - 1) - np.sqrt((2.0 * k - 1) ** 2 - 8.0 * flat)) / 2).astype(np.int64)
    i = np.clip(i, 0, k - 2)
    i -= start(i) > flat
    i += start(i + 1) <= flat
    return i, flat - start(i) + i + 1


def adversary_error_m(
    matrix: np.ndarray, prior: np.ndarray, distance_m: np.ndarray, *, attacker_prior: np.ndarray | None = None
) -> float:
    """Return the expected inference error of the Bayes-optimal attacker, metres.

    The attacker knows the prior ``p`` and the matrix ``P``. Seeing output ``y`` it guesses the
    record ``g`` minimising the posterior expected error ``sum_x p_x P[x, y] D[x, g]`` (the posterior
    is proportional to ``p_x P[x, y]``; the normaliser ``Pr[y]`` cancels in the sum over ``y``)::

        error = sum_y min_g sum_x p_x P[x, y] D[x, g]

    Parameters
    ----------
    matrix
        ``(K, M)`` perturbation matrix ``Pr[y | x]``.
    prior
        ``(K,)`` prior over the records.
    distance_m
        ``(K, G)`` error of guessing ``g`` when the truth is ``x``, metres; usually the privacy
        distance between records (``instance.d_km * 1000``, ``G = K``).
    attacker_prior
        ``(K,)`` what the attacker *believes* about where people are, when it differs from where they
        are (``prior``): it guesses ``g_q(y) = argmin_g sum_x q_x P[x, y] D[x, g]`` and its error is
        measured against the true prior, ``sum_y sum_x p_x P[x, y] D[x, g_q(y)]``. An attacker with no
        background knowledge is one with a uniform ``attacker_prior``. ``None``: the attacker knows
        the true prior (the Bayes-optimal attacker, the least error any guess can have).
    """
    p = np.asarray(matrix, dtype=float)
    prior = np.asarray(prior, dtype=float)
    dist = np.asarray(distance_m, dtype=float)
    if p.ndim != 2 or prior.shape != (p.shape[0],) or dist.ndim != 2 or dist.shape[0] != p.shape[0]:
        msg = (
            "adversary_error_m needs matrix (K, M), prior (K,) and distance_m (K, G). "
            f"Got {p.shape}, {prior.shape} and {dist.shape} instead."
        )
        raise ValueError(msg)
    joint = prior[:, None] * p  # (K, M): Pr[x, y]
    expected = dist.T @ joint  # (G, M): sum_x Pr[x, y] D[x, g]
    if attacker_prior is None:
        return float(expected.min(axis=0).sum())
    q = np.asarray(attacker_prior, dtype=float)
    if q.shape != prior.shape:
        msg = f"adversary_error_m needs attacker_prior of shape {prior.shape}. Got {q.shape} instead."
        raise ValueError(msg)
    guesses = np.argmin(dist.T @ (q[:, None] * p), axis=0)  # (M,): the believing attacker's guess per output
    return float(expected[guesses, np.arange(p.shape[1])].sum())


# --- PAnDA (PmDP) audit ---


def matrix_digest(matrix: np.ndarray) -> str:
    """Return a digest of a matrix's shape, type and bytes (which matrix an audit's numbers belong to)."""
    m = np.ascontiguousarray(matrix)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{m.shape}{m.dtype.str}".encode())
    h.update(memoryview(m).cast("B"))
    return h.hexdigest()


def audit_numbers(aud: MdpAudit, matrix: np.ndarray) -> dict:
    """Return an audit's numbers for :func:`mechanism_numbers`, with the budget and the digest of the matrix audited.

    A mechanism that was audited exactly when it was built keeps these in ``details["exact_audit"]``
    (the certified optimal LP), and :func:`mechanism_numbers` then reuses them instead of auditing the
    same matrix again.
    """
    return {
        "epsilon_per_km": float(aud.epsilon_per_km),
        "matrix": matrix_digest(matrix),
        "passed": bool(aud.passed),
        "violation_rate": float(aud.violation_rate),
        "epsilon_min_per_km": float(aud.epsilon_min_per_km),
        "scope": str(aud.scope),
    }


def kept_audit_numbers(mechanism: object, epsilon_per_km: float) -> dict | None:
    """Return the numbers of the exact audit made when ``mechanism`` was built (:func:`audit_numbers`), or ``None``.

    ``None`` unless they are of its matrix (the digest matches) and at this budget.
    """
    numbers = (getattr(mechanism, "details", None) or {}).get("exact_audit")
    matrix = getattr(mechanism, "matrix", None)
    if not isinstance(numbers, dict) or matrix is None or numbers.get("epsilon_per_km") != float(epsilon_per_km):
        return None
    return numbers if numbers.get("matrix") == matrix_digest(matrix) else None


def mechanism_numbers(instance: object, mechanism: object, epsilon_per_km: float) -> dict:
    """Exact mDP audit (every record pair), Bayes attacker's error and loss of a mechanism's matrix.

    ``instance`` is a :class:`panda.Instance` (``d_km``, ``prior``), ``mechanism`` a
    :class:`panda.mechanisms.Mechanism` (``status``, ``loss_m``, ``matrix``, ``details``). Plain values only,
    for the dashboard (the job ``mechanism_numbers`` of :mod:`panda.jobs`) and the prepare command. A sampled
    estimate (``details["estimated"]``) is not audited: an exact audit of sampling noise would report
    violations the mechanism does not have.
    """
    out: dict = {"status": mechanism.status, "audited": False, "loss_m": float(mechanism.loss_m)}
    matrix = mechanism.matrix
    if matrix is None:
        return out
    out["adversary_error_m"] = float(adversary_error_m(matrix, instance.prior, instance.d_km * 1000.0))
    if (mechanism.details or {}).get("estimated"):
        return out
    numbers = kept_audit_numbers(mechanism, float(epsilon_per_km))
    if numbers is None:
        numbers = audit_numbers(audit_mechanism(matrix, instance.d_km, float(epsilon_per_km)), matrix)
    out.update({key: numbers[key] for key in ("passed", "violation_rate", "epsilon_min_per_km", "scope")})
    out["audited"] = True
    return out
