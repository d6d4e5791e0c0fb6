"""Helpers shared by the baseline mechanisms (not public API)."""

from __future__ import annotations

import time

import highspy
import numpy as np

from panda.instance import Instance
from panda.lp import build_highs as highs_model  # noqa: F401 (shared HiGHS builder)
from panda.mechanisms.base import MechanismResult, expected_loss_m
from panda.network import EARTH_RADIUS_KM


def output_distances_km(instance: Instance) -> np.ndarray:
    """``(K, M)`` privacy distances from every record to every output, km (never builds K x K for haversine)."""
    return instance.distances_km(None, instance.outputs)


def finish(
    name: str,
    epsilon: float,
    instance: Instance,
    matrix: np.ndarray | None,
    status: str,
    t0: float,
    details: dict,
) -> MechanismResult:
    """Wrap a matrix (or its absence) into a :class:`MechanismResult`, timing from ``t0``."""
    elapsed = time.perf_counter() - t0
    loss = expected_loss_m(instance, matrix) if matrix is not None else float("nan")
    return MechanismResult(
        name=name,
        epsilon_per_km=epsilon,
        matrix=matrix,
        status=status,
        build_time_s=elapsed,
        loss_m=loss,
        details=details,
    )


def unsolved_status(lp_status: str, elapsed_s: float) -> str:
    """Return the status line of an LP mechanism whose solve did not reach optimality."""
    if "time limit" in lp_status.lower():
        return f"unsolved: time limit after {elapsed_s:.1f} s"
    if lp_status.startswith("Too large"):
        return f"unsolved: {lp_status}"
    return f"failed: HiGHS reports {lp_status!r}"


def check_positive(value: object, name: str, where: str, *, integer: bool = False, low: float = 0.0) -> float:
    """Validate a number ``> low`` (an int when ``integer``) and return it."""
    kind = "an int" if integer else "a float"
    ok_type = (
        isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.integer, np.floating))
    )
    if isinstance(value, bool) or not ok_type:
        msg = f"The '{name}' parameter of {where} must be {kind} > {low:g}. Got {value!r} instead."
        raise TypeError(msg)
    number = float(value)  # type: ignore[arg-type]
    if not (np.isfinite(number) and number > low):
        msg = f"The '{name}' parameter of {where} must be {kind} > {low:g}. Got {value!r} instead."
        raise ValueError(msg)
    return number


def local_plane_km(lon: np.ndarray, lat: np.ndarray, lon0: float, lat0: float) -> tuple[np.ndarray, np.ndarray]:
    """Equirectangular projection around ``(lon0, lat0)``: east and north offsets in km."""
    x = np.radians(np.asarray(lon, dtype=float) - lon0) * EARTH_RADIUS_KM * np.cos(np.radians(lat0))
    y = np.radians(np.asarray(lat, dtype=float) - lat0) * EARTH_RADIUS_KM
    return x, y


def highs_run(h: highspy.Highs, time_limit_s: float) -> tuple[str, bool]:
    """Run a HiGHS model within ``time_limit_s`` more seconds; return (model status text, optimal?).

    HiGHS's ``time_limit`` counts the object's whole run time, over every earlier ``run()`` (a
    Benders master re-solved with new cuts): the limit is set to that time plus ``time_limit_s``.
    (Setting ``time_limit_s`` alone made LP+BD stop at 152 s of a 300 s budget.)
    """
    h.setOptionValue("time_limit", float(h.getRunTime() + max(time_limit_s, 1e-3)))
    h.run()
    status = h.getModelStatus()
    return h.modelStatusToString(status), status == highspy.HighsModelStatus.kOptimal


def repair_mdp(
    matrix: np.ndarray, d_km: np.ndarray, epsilon_per_km: float, *, max_passes: int = 10
) -> tuple[np.ndarray, dict]:
    """Remove an LP solver's tolerance-sized mDP violations from a nearly eps-mDP matrix.

    HiGHS accepts constraint violations up to its absolute feasibility tolerance (1e-7); on entries
    near the floor (1e-6) that is a relative error of several percent. The repair:

    1. *Closure*: ``Z'[x, y] = min_x' exp(eps d(x, x')) Z[x', y]``, the largest matrix below ``Z``
       that satisfies every mDP inequality (exactly, because ``eps d`` is a metric). Rows now sum to
       ``1 - m_x`` with deficits ``m_x`` of the violations' size.
    2. *Fill*: give each row its deficit back on entries with headroom,
       ``H[x, y] = min_{x' != x} exp(eps d(x, x')) Z'[x', y] - Z'[x, y]``, in proportion to ``H``.
       Raising an entry never tightens another row's constraints (it only appears on their right
       side), so all rows can be filled at once and the result stays exactly eps-mDP.
    3. A row without enough headroom (rare) is renormalised instead, and the two steps repeat.

    The utility changes by about the solver tolerance; ``info`` says by how much.

    Returns
    -------
    matrix, info
        The repaired matrix and ``{"max_log_excess_before", "max_deficit", "passes",
        "rows_renormalised"}``.
    """
    from panda.lp import repair_to_exponents

    exponent = float(epsilon_per_km) * np.asarray(d_km, dtype=float)
    return repair_to_exponents(matrix, exponent, max_passes=max_passes, closed=True)
