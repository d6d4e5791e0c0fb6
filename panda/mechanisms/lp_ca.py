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

from panda.instance import Instance
from panda.lp import SOLVERS, solve_mdp_lp
from panda.mechanisms._common import check_positive, finish, repair_mdp, unsolved_status
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.mechanisms.lp_full import check_eta, mdp_pairs
from panda.network import haversine_km

__all__ = ["build_lp_ca", "grid_cells"]


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
    """
    eps = check_epsilon(epsilon_per_km, "build_lp_ca")
    g = int(check_positive(grid, "grid", "build_lp_ca", integer=True))
    scale = check_positive(exponent_scale, "exponent_scale", "build_lp_ca")
    eta = check_eta(eta, instance.n_outputs, "build_lp_ca")
    check_positive(time_limit_s, "time_limit_s", "build_lp_ca")
    if solver not in SOLVERS:
        msg = f"The 'solver' parameter of build_lp_ca must be one of {SOLVERS}. Got {solver!r} instead."
        raise ValueError(msg)
    t0 = time.perf_counter()
    cell, reps = grid_cells(instance.lon, instance.lat, g)
    # Row of the LP for every record: the rank of its cell among the non-empty cells.
    row_of = np.searchsorted(cell[reps], cell)
    weighted = instance.prior[:, None] * instance.cost_m
    cost = np.zeros((reps.size, instance.n_outputs))
    np.add.at(cost, row_of, weighted)
    d_reps = instance.distances_km(reps, reps)
    pi, pj, b, info = mdp_pairs(d_reps, eps * scale, eta=eta)
    res = solve_mdp_lp(cost, pi, pj, b, eta=eta, time_limit_s=time_limit_s, solver=solver)
    details = {
        "grid": g,
        "exponent_scale": scale,
        "n_cells": int(reps.size),
        "representatives": reps,
        "cell_of_record": row_of,
        "eta": eta,
        "n_pairs": info["n_pairs"],
        "n_pairs_kept": res.n_pairs_kept,
        "lp_status": res.lp.status,
        "lp_time_s": res.lp.time_s,
        "solver": solver,
        "objective_m": res.objective,
        "guarantee": "eps-mDP between representatives only; records are audited separately",
    }
    if not res.success or res.z is None:
        return finish(
            "lp-ca", eps, instance, None, unsolved_status(res.lp.status, time.perf_counter() - t0), t0, details
        )
    z, details["repair"] = repair_mdp(res.z, d_reps, eps * scale)
    return finish("lp-ca", eps, instance, z[row_of], "solved", t0, details)
