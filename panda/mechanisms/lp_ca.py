"""LP+CA: the optimal LP over a coarse grid of representatives (the PAnDA paper's 4.3 baseline).

A ``g x g`` grid over the records' bounding box (lon/lat); every non-empty cell gets one
representative, the record nearest the cell centre. The LP runs over the representatives only::

    minimise   sum_{cells c} sum_y (sum_{x in c} p_x cost[x, y]) z[c, y]
    subject to sum_y z[c, y] = 1,   eta <= z <= 1,
               z[c, y] <= exp(s * eps * d(rep_c, rep_c')) z[c', y]      for every ordered pair of cells

and every record reports with its cell's row. The objective is the exact expected loss of that
mechanism (every member's own cost, not the representative's). ``s`` is ``exponent_scale``: 1 by
default; the published artifact used a 10 x 10 grid and ``s = 1/10``.

The guarantee holds between representatives only: two records of one cell share a row (fine),
but records of neighbouring cells can be much closer than their representatives, so LP+CA
generally violates eps-mDP between records. That is the baseline as published; audit it.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from panda.instance import Instance
from panda.lp import MAX_EXPONENT, ROW_GENERATION_TOL, SOLVERS, solve_mdp_lp
from panda.mechanisms._common import (
    check_positive,
    finish,
    rank_in_groups,
    repair_mdp,
    solve_two_term_lp,
    unsolved_status,
)
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.mechanisms.lp_full import check_eta, mdp_pairs
from panda.network import haversine_km

__all__ = ["build_lp_ca", "grid_cells"]

_GUARANTEE = "eps-mDP between representatives only; records are audited separately"


def grid_cells(lon: np.ndarray, lat: np.ndarray, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """Assign points to a ``grid x grid`` lattice over their bounding box.

    Returns
    -------
    cell, representative
        ``(K,)`` cell index (``row * grid + col``) of every point, and for every non-empty cell (in
        increasing cell order) the position of the point nearest to the cell centre.
    """
    west, east = float(lon.min()), float(lon.max())
    south, north = float(lat.min()), float(lat.max())
    width = (east - west) / grid or 1.0
    height = (north - south) / grid or 1.0
    col = np.clip(((lon - west) / width).astype(np.int64), 0, grid - 1)
    row = np.clip(((lat - south) / height).astype(np.int64), 0, grid - 1)
    cell = row * grid + col
    centre_lon = west + (col + 0.5) * width
    centre_lat = south + (row + 0.5) * height
    to_centre = haversine_km(lon, lat, centre_lon, centre_lat)
    order = np.lexsort((to_centre, cell))  # by cell, nearest to the centre first
    first = np.ones(order.size, dtype=bool)
    first[1:] = cell[order][1:] != cell[order][:-1]
    return cell, order[first]


def build_lp_ca(
    instance: Instance,
    epsilon_per_km: float,
    *,
    grid: int = 8,
    exponent_scale: float = 1.0,
    eta: float = 1e-6,
    time_limit_s: float = 1800.0,
    solver: str = "ipm",
    row_generation: bool = True,
    initial_pairs: int = 1,
    per_entry: int = 2,
) -> MechanismResult:
    """LP over the representatives of a ``grid x grid`` partition; every record uses its cell's row.

    Parameters
    ----------
    instance
        The problem instance.
    epsilon_per_km
        Privacy budget, 1/km.
    grid
        Cells per side (paper text: 8; published artifact: 10).
    exponent_scale
        Multiplies ``eps d`` between representatives (1: the paper's text; 0.1: the artifact).
    eta
        Floor on every entry (pairs it implies are left out exactly).
    time_limit_s, solver
        HiGHS settings; beyond the limit the status is ``"unsolved: ..."`` and the matrix ``None``.
        ``solver`` is that of the one monolithic LP (``row_generation=False``); row generation always
        runs HiGHS's dual simplex (it goes on from the last basis).
    row_generation, initial_pairs, per_entry
        Solve by constraint (row) generation (default; :func:`panda.mechanisms._common.solve_two_term_lp`):
        the first LP has the row sums and, for every entry ``z[c', y]``, the pair rows of the
        ``initial_pairs`` cells most nearly between ``c'`` and the output; each round adds every entry's
        ``per_entry`` most violated pair rows, until none is violated (then it is the whole LP's optimum).
        ``False``: every pair row in one LP (:func:`panda.lp.solve_mdp_lp`, the former way).
    """
    eps = check_epsilon(epsilon_per_km, "build_lp_ca")
    g = int(check_positive(grid, "grid", "build_lp_ca", integer=True))
    scale = check_positive(exponent_scale, "exponent_scale", "build_lp_ca")
    eta = check_eta(eta, instance.n_outputs, "build_lp_ca")
    check_positive(time_limit_s, "time_limit_s", "build_lp_ca")
    initial_pairs = int(check_positive(initial_pairs, "initial_pairs", "build_lp_ca", integer=True, low=-1))
    per_entry = int(check_positive(per_entry, "per_entry", "build_lp_ca", integer=True, low=-1))
    if solver not in SOLVERS:
        msg = f"The 'solver' parameter of build_lp_ca must be one of {SOLVERS}. Got {solver!r} instead."
        raise ValueError(msg)
    t0 = time.perf_counter()
    reps, row_of, cost = _cells_and_costs(instance, g)
    d_reps = instance.distances_km(reps, reps)
    pi, pj, b, info = mdp_pairs(d_reps, eps * scale, eta=eta)
    cells = {
        "grid": g,
        "exponent_scale": scale,
        "n_cells": int(reps.size),
        "representatives": reps,
        "cell_of_record": row_of,
        "eta": eta,
        "n_pairs": info["n_pairs"],
    }
    if row_generation:
        remaining = time_limit_s - (time.perf_counter() - t0)
        z_lp, status, details = _by_row_generation(
            instance, reps, cost, pi, pj, b, eta, remaining, initial_pairs, per_entry, cells
        )
    else:
        z_lp, status, details = _by_one_lp(cost, pi, pj, b, eta, time_limit_s, solver, cells)
    if z_lp is None:
        return finish("lp-ca", eps, instance, None, unsolved_status(status, time.perf_counter() - t0), t0, details)
    tr = time.perf_counter()
    z, details["repair"] = repair_mdp(z_lp, d_reps, eps * scale)
    if row_generation:
        details["repair_s"] = time.perf_counter() - tr
    return finish("lp-ca", eps, instance, z[row_of], "solved", t0, details)


def _cells_and_costs(instance: Instance, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group the records by grid cell: representatives, each record's LP row, and each row's cost.

    A row's cost is the sum of its members' ``prior[x] * cost_m[x, y]`` (the exact loss of the mechanism).
    """
    cell, reps = grid_cells(instance.lon, instance.lat, g)
    # Row of the LP for every record: the rank of its cell among the non-empty cells.
    row_of = np.searchsorted(cell[reps], cell)
    weighted = instance.prior[:, None] * instance.cost_m
    cost = np.zeros((reps.size, instance.n_outputs))
    np.add.at(cost, row_of, weighted)
    return reps, row_of, cost


def _by_row_generation(
    instance: Instance,
    reps: np.ndarray,
    cost: np.ndarray,
    pi: np.ndarray,
    pj: np.ndarray,
    b: np.ndarray,
    eta: float,
    time_limit_s: float,
    initial_pairs: int,
    per_entry: int,
    cells: dict,
) -> tuple[np.ndarray | None, str, dict]:
    """Solve the cells' LP by row generation (:func:`_solve_by_rows`).

    Returns ``(z, HiGHS status, details)``: ``z`` is ``None`` unless solved; ``details`` are ``cells`` and the
    LP's facts.
    """
    z_lp, status, ok, rg = _solve_by_rows(instance, reps, cost, pi, pj, b, eta, time_limit_s, initial_pairs, per_entry)
    details: dict = {
        **cells,
        "lp_status": status,
        "lp_time_s": float(sum(e["time_s"] for e in rg["rounds"])),
        "lp_rows": rg["rounds"][-1]["rows"],
        "lp_rows_full": int(reps.size + pi.size * instance.n_outputs),
        "solver": "simplex (row generation)",
        "row_generation": rg,
        "guarantee": _GUARANTEE,
    }
    if not ok or z_lp is None:
        return None, status, details
    details["objective_m"] = float((cost * z_lp).sum())
    return z_lp, status, details


def _by_one_lp(
    cost: np.ndarray,
    pi: np.ndarray,
    pj: np.ndarray,
    b: np.ndarray,
    eta: float,
    time_limit_s: float,
    solver: str,
    cells: dict,
) -> tuple[np.ndarray | None, str, dict]:
    """Solve the cells' LP with every pair row at once (:func:`panda.lp.solve_mdp_lp`).

    Returns ``(z, HiGHS status, details)``: ``z`` is ``None`` unless solved; ``details`` are ``cells`` and the
    LP's facts.
    """
    res = solve_mdp_lp(cost, pi, pj, b, eta=eta, time_limit_s=time_limit_s, solver=solver)
    details = {
        **cells,
        "n_pairs_kept": res.n_pairs_kept,
        "lp_status": res.lp.status,
        "lp_time_s": res.lp.time_s,
        "solver": solver,
        "objective_m": res.objective,
        "guarantee": _GUARANTEE,
    }
    if not res.success or res.z is None:
        return None, res.lp.status, details
    return res.z, res.lp.status, details


def _solve_by_rows(
    instance: Instance,
    reps: np.ndarray,
    cost: np.ndarray,
    pi: np.ndarray,
    pj: np.ndarray,
    b: np.ndarray,
    eta: float,
    time_limit_s: float,
    initial_pairs: int,
    per_entry: int,
) -> tuple[np.ndarray | None, str, bool, dict]:
    """Solve the LP on cells by row generation: ``(z or None, HiGHS status, optimal?, {"rounds", ...})``.

    The same LP as :func:`panda.lp.solve_mdp_lp` (``z[c, y]`` row-stochastic, ``eta <= z <= 1``, and
    ``z[i, y] <= exp(b) z[j, y]`` for every given pair, those implied by the floor already left out by
    :func:`panda.mechanisms.lp_full.mdp_pairs`), its rows generated.
    """
    n, m = cost.shape
    keep = pi != pj
    pi, pj, b = pi[keep], pj[keep], np.minimum(b[keep], MAX_EXPONENT)
    n_p = pi.size
    # Pool row (pair p, output y): z[i, y] - e^b z[j, y] <= 0, columns in (cell, output) order.
    py = np.tile(np.arange(m), n_p)
    pp = np.repeat(np.arange(n_p), m)
    c1, c2 = pi[pp] * m + py, pj[pp] * m + py
    v1, v2 = np.ones(pp.size), -np.exp(b[pp])
    # First round: for every entry z[j, y], the pair rows of the cells i most nearly between j and y.
    d_out = instance.distances_km(reps, instance.outputs)  # (cells, M)
    d_cells = instance.distances_km(reps, reps)
    excess = d_out[pi[pp], py] + d_cells[pi[pp], pj[pp]] - d_out[pj[pp], py]
    active = rank_in_groups(excess, c2) < initial_pairs
    sums = sp.csr_matrix((np.ones(n * m), np.arange(n * m), np.arange(0, n * m + 1, m)), shape=(n, n * m))
    h, status, ok, rounds = solve_two_term_lp(
        cost.ravel(),
        sums,
        np.ones(n),
        np.full(n * m, eta),
        np.ones(n * m),
        (c1, v1, c2, v2),
        c1,
        active,
        time_limit_s=time_limit_s,
        per_entry=per_entry,
        drop_after=0,  # dropped slack rows come back here: more rounds, and no time saved
    )
    info = {"initial_pairs": initial_pairs, "per_entry": per_entry, "tolerance": ROW_GENERATION_TOL, "rounds": rounds}
    if not ok:
        return None, status, False, info
    z = np.clip(np.asarray(h.getSolution().col_value).reshape(n, m), 0.0, None)
    return z / z.sum(axis=1, keepdims=True), status, True, info
