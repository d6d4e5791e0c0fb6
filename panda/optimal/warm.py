"""The warm start: a solve of the same LP at another eps as the start of this one (``solve_optimal(warm=...)``).

The same records, outputs and cost at a neighbouring budget: the optimum's binding pair rows and its
multipliers change little between neighbouring eps, so the earlier run's last LP is a far better first
LP than a cold seed. What is carried over, and why each part keeps the certificate valid:

* **rows**: the earlier run's last pair rows ``(s, x, y)`` that exist at the new eps (``exp(eps d)
  eta < 1``) join the seed rows (PDHG: all of them; dual simplex: those with a positive multiplier,
  the binding ones, to keep the first LP small). Which rows the LP has never affects a bound's
  validity (rows left out have multiplier 0).
* **primal**: the earlier mechanism made exactly eps-feasible by :func:`exact_repair` at the new eps
  (the run's own certificate step), which is at once the run's first upper bound; PDHG starts from it.
* **dual**: PDHG starts from the earlier run's last row-sum multipliers and pair multipliers (the rows
  kept), scaled by :data:`WARM_DUAL_SCALE`'s rule, and from its primal weight. Any multipliers give a
  valid bound (:func:`dual_bound`), so the start only changes the speed.

The audit and the bound never look at where a run started: a warm run's answer is certified exactly as
a cold one's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import panda.optimal as _pkg
from panda.optimal.result import OptimalResult


@dataclass(frozen=True)
class WarmStart:
    """What :func:`solve_optimal` takes from an earlier result (checked and mapped to this run's eps).

    ``rows``: pair rows ``(s, x, y)`` to add to the first LP, ``lam``: their multipliers; ``u``: row-sum
    multipliers; ``matrix``: the earlier mechanism (repaired at the run's start); ``omega``: PDHG's primal
    weight (``None``: PDHG's default); ``epsilon_from``: the earlier run's eps (``nan`` if unknown).
    """

    rows: tuple[np.ndarray, np.ndarray, np.ndarray]
    lam: np.ndarray
    u: np.ndarray
    matrix: np.ndarray
    omega: float | None
    epsilon_from: float


def warm_start_of(warm: Any, cost: np.ndarray, a_full: np.ndarray, epsilon_per_km: float, method: str) -> WarmStart:
    """Check ``warm`` (an :class:`OptimalResult` of the same ``(K, M)`` LP) and take its start (raise ValueError)."""
    k, m = cost.shape
    if not isinstance(warm, OptimalResult):
        got = type(warm).__name__
        msg = f"The 'warm' parameter of solve_optimal must be an OptimalResult or None. Got {got} instead."
        raise ValueError(msg)
    if warm.matrix is None or np.shape(warm.matrix) != (k, m):
        shape = None if warm.matrix is None else np.shape(warm.matrix)
        msg = f"The 'warm' parameter of solve_optimal must hold a ({k}, {m}) matrix. Got {shape} instead."
        raise ValueError(msg)
    info = warm.info
    state = info.get("pdhg_state") or {}
    u = state.get("u", info.get("row_sum_duals"))
    u = np.zeros(k) if u is None or np.shape(u) != (k,) else np.asarray(u, dtype=float)
    last = info.get("last_pair_rows")
    if last is None:
        s = x = y = np.zeros(0, dtype=np.int64)
        lam = np.zeros(0)
    else:
        s, x, y = (np.asarray(v, dtype=np.int64) for v in last[:3])
        lam = np.asarray(last[3], dtype=float)
    ok = (s < k) & (x < k) & (y < m)
    ok[ok] = np.isfinite(a_full[s[ok], x[ok]])  # rows implied by the floor at this eps do not exist
    if method != "pdhg":
        ok &= lam > 0.0  # dual simplex: only the binding rows (a small first LP solves fast)
    s, x, y, lam = s[ok], x[ok], y[ok], lam[ok]
    eps_from = float(info.get("epsilon_per_km", np.nan))
    scale = _dual_scale(eps_from, float(epsilon_per_km))
    omega = state.get("omega")
    return WarmStart(
        rows=(s, x, y),
        lam=lam * scale,
        u=u * scale,
        matrix=np.asarray(warm.matrix, dtype=float),
        omega=None if omega is None or not np.isfinite(omega) else float(omega),
        epsilon_from=eps_from,
    )


def _dual_scale(eps_from: float, eps_to: float) -> float:
    """Return the factor the earlier multipliers are scaled by (:data:`WARM_DUAL_SCALE`)."""
    rule = _pkg.WARM_DUAL_SCALE
    if rule == "none" or not (np.isfinite(eps_from) and eps_from > 0):
        return 1.0
    if rule == "inverse":  # the loss of a mechanism near the optimum falls about as 1 / eps
        return float(eps_from / eps_to)
    if rule == "sqrt":
        return float(np.sqrt(eps_from / eps_to))
    msg = f"panda.optimal.WARM_DUAL_SCALE must be 'none', 'sqrt' or 'inverse'. Got {rule!r} instead."
    raise ValueError(msg)


def warm_duals(ws: WarmStart, s: np.ndarray, x: np.ndarray, y: np.ndarray, k: int, m: int) -> np.ndarray:
    """Return the warm multipliers of the rows ``(s, x, y)`` (0 for rows the earlier run did not have)."""
    ws_s, ws_x, ws_y = ws.rows
    keys = (ws_s * k + ws_x) * m + ws_y
    order = np.argsort(keys, kind="stable")
    keys, lam = keys[order], ws.lam[order]
    want = (s * k + x) * m + y
    pos = np.clip(np.searchsorted(keys, want), 0, max(keys.size - 1, 0))
    out = np.zeros(s.size)
    if keys.size:
        hit = keys[pos] == want
        out[hit] = lam[pos[hit]]
    return out


def solve_ladder(
    cost: np.ndarray,
    d_km: np.ndarray,
    epsilons: Sequence[float],
    *,
    warm: bool = True,
    options: Callable[[float], dict] | None = None,
    **common: Any,
) -> dict[float, OptimalResult]:
    """Solve the optimal LP at every eps of ``epsilons``, in that order, each warm from the nearest solved one.

    A curve's ladder (e.g. from the largest eps down): each solve starts from the result at the eps nearest
    to it (in ``log eps``) among those already solved and holding a matrix (``warm=False``: every solve
    cold, for comparison). ``options(eps)`` gives the solve's own keywords (seed rows, start matrix, ...),
    ``common`` the shared ones (``gap``, ``time_limit_s`` per solve, ``method``, ...). Every result is
    certified on its own, exactly as a cold one. Returns the results by eps.
    """
    out: dict[float, OptimalResult] = {}
    for eps in (float(e) for e in epsilons):
        start = None
        if warm:
            held = [e for e, r in out.items() if r.matrix is not None]
            if held:
                start = out[min(held, key=lambda e: abs(np.log(e / eps)))]
        kwargs = dict(common) | (options(eps) if options is not None else {})
        out[eps] = _pkg.solve_optimal(cost, d_km, eps, warm=start, **kwargs)
    return out
