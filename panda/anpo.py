"""The Anchor Perturbation Optimization LP (eq. 31-35) and its relaxation (eq. 36).

For every constrained anchor pair ``(a, b)`` the exponent is

    B[a, b] = (eps - eps_bar[a, b]) d[a, b] - xi_hat[a, b]

and the LP asks ``z[a, y] <= exp(B) z[b, y]`` both ways. ``B < 0`` asks for a ratio below 1 both
ways, which no row-stochastic pair can meet: those pairs are solved with identical rows (``B``
clipped to 0, the best Phase II can do) and reported as *over budget*. The Relaxed AnPO uses
``eps d`` on the same pairs; its optimum is a lower bound on the AnPO optimum (Proposition 10).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panda.lp import MdpLPResult, solve_mdp_lp

__all__ = ["AnpoPairs", "anchor_pairs", "solve_anpo"]


@dataclass(frozen=True)
class AnpoPairs:
    """Unordered anchor pairs ``i < j`` (indices into the anchor union) and their distances (km)."""

    i: np.ndarray
    j: np.ndarray
    d_km: np.ndarray


def anchor_pairs(d_pairs_fn, n_anchors: int, radius_km: float | None) -> AnpoPairs:
    """All unordered pairs of the anchor union, or those closer than ``radius_km``."""
    i, j = np.triu_indices(n_anchors, k=1)
    d = d_pairs_fn(i, j)
    if radius_km is not None:
        keep = d < radius_km
        i, j, d = i[keep], j[keep], d[keep]
    return AnpoPairs(i=i.astype(np.int64), j=j.astype(np.int64), d_km=d)


def solve_anpo(
    cost: np.ndarray,
    pairs: AnpoPairs,
    exponent: np.ndarray,
    *,
    eta: float,
    time_limit_s: float,
    solver: str,
) -> MdpLPResult:
    """Solve the AnPO LP for ``(A, M)`` objective ``cost`` and unordered pairs with (clipped) ``exponent``.

    Constraints are written in both directions (the exponent is symmetric).
    """
    b = np.maximum(np.asarray(exponent, dtype=float), 0.0)
    pi = np.concatenate([pairs.i, pairs.j])
    pj = np.concatenate([pairs.j, pairs.i])
    return solve_mdp_lp(cost, pi, pj, np.concatenate([b, b]), eta=eta, time_limit_s=time_limit_s, solver=solver)
