"""A :class:`panda.plan.PlanResult` as plain data (a JSON document and numeric arrays) and back.

For stores that never unpickle (the dashboard's result store keeps JSON and ``.npz`` arrays only): the document is
:meth:`PlanResult.summary`, the arrays each mechanism's per-place numbers. :func:`plan_from_record` reads what may
have been written by anyone: every field is checked for its type, every array for its shape, and a record that is
not a plan raises ``ValueError`` (a sentence), never a ``KeyError`` or a ``TypeError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from panda.plan import Evaluation, MechanismPlan, PlanResult
from panda.repeated import RepeatedReports
from panda.risk import RiskReport

__all__ = ["plan_record", "plan_from_record"]


def plan_record(result: PlanResult) -> tuple[dict, dict[str, np.ndarray]]:
    """Return the plan as ``(document, arrays)``: :meth:`PlanResult.summary`, ``m{i}_<name>`` per mechanism ``i``."""
    arrays: dict[str, np.ndarray] = {}
    for i, m in enumerate(result.mechanisms):
        if m.place_loss_m is not None:
            arrays[f"m{i}_place_loss_m"] = np.asarray(m.place_loss_m, dtype=np.float64)
        if m.risk is not None:
            arrays[f"m{i}_place_error_m"] = np.asarray(m.risk.place_error_m, dtype=np.float64)
            arrays[f"m{i}_guesses"] = np.asarray(m.risk.guesses, dtype=np.int64)
    return result.summary(), arrays


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _floats(values: Any) -> tuple[float, ...]:
    if not isinstance(values, list):
        raise TypeError(f"{values!r} is not a list")
    return tuple(_float(v) for v in values)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _array(arrays: Mapping[str, np.ndarray], name: str, n: int | None, kind: str) -> np.ndarray:
    arr = np.asarray(arrays[name])
    if arr.ndim != 1 or (n is not None and arr.size != n) or arr.dtype.kind not in kind:
        raise TypeError(f"the array {name} has shape {arr.shape} and type {arr.dtype}")
    return arr.astype(np.int64 if kind == "iu" else np.float64)


def _risk(doc: Any, arrays: Mapping[str, np.ndarray], i: int, n_places: int | None) -> RiskReport | None:
    if doc is None:
        return None
    return RiskReport(
        radii_m=_floats(doc["radii_m"]),
        chance_within=_floats(doc["chance_within"]),
        place_error_m=_array(arrays, f"m{i}_place_error_m", n_places, "f"),
        mean_error_m=_float(doc["mean_error_m"]),
        worst_share=_float(doc["worst_share"]),
        weights=_text(doc["weights"]),
        worst_share_error_m=_float(doc["worst_share_error_m"]),
        worst_share_threshold_m=_float(doc["worst_share_threshold_m"]),
        guesses=_array(arrays, f"m{i}_guesses", None, "iu"),
    )


def _day(doc: Any) -> RepeatedReports | None:
    if doc is None:
        return None
    eps = doc["epsilon_per_km"]
    return RepeatedReports(
        ks=tuple(int(_float(k)) for k in doc["ks"]),
        error_m=_floats(doc["error_m"]),
        stderr_m=_floats(doc["stderr_m"]),
        exact=tuple(bool(v) for v in doc["exact"]),
        defence_error_m=_floats(doc["defence_error_m"]),
        single_report_error_m=_float(doc["single_report_error_m"]),
        prior_only_error_m=_float(doc["prior_only_error_m"]),
        n_sequences=int(_float(doc["n_sequences"])),
        epsilon_per_km=None if eps is None else _float(eps),
        elapsed_s=_float(doc["elapsed_s"]),
    )


def _evaluation(doc: Any) -> Evaluation:
    return Evaluation(
        epsilon_per_km=_float(doc["epsilon_per_km"]),
        verdict=_text(doc["verdict"]),
        loss_m=_float(doc["loss_m"]),
        lower_bound_m=_float(doc["lower_bound_m"]),
        status=_text(doc["status"]),
        time_s=_float(doc["time_s"]),
        gap_target=_float(doc["gap_target"]),
        solves=int(_float(doc["solves"])),
    )


def _mechanism(doc: Any, arrays: Mapping[str, np.ndarray], i: int, n_places: int | None) -> MechanismPlan:
    meets = doc["meets_attacker_floor"]
    numbers = (
        "epsilon_per_km",
        "epsilon_day_per_km",
        "epsilon_low_per_km",
        "lower_bound_at_low_m",
        "loss_m",
        "adversary_error_m",
        "time_s",
        "audit_violation_rate",
    )
    passed = doc["audit_passed"]
    return MechanismPlan(
        method=_text(doc["method"]),
        outcome=_text(doc["outcome"]),
        **{k: _float(doc[k]) for k in numbers},
        meets_attacker_floor=None if meets is None else bool(meets),
        audit_passed=None if passed is None else bool(passed),
        monotone=bool(doc["monotone"]),
        monotone_reason=_text(doc["monotone_reason"]),
        search=_text(doc["search"]),
        risk=_risk(doc["risk"], arrays, i, n_places),
        day=_day(doc["day"]),
        evaluations=tuple(_evaluation(e) for e in doc["evaluations"]),
        note=_text(doc["note"]),
        place_loss_m=_array(arrays, f"m{i}_place_loss_m", n_places, "f") if f"m{i}_place_loss_m" in arrays else None,
    )


def plan_from_record(doc: Any, arrays: Mapping[str, np.ndarray], *, n_places: int | None = None) -> PlanResult:
    """Read the plan :func:`plan_record` wrote; ``n_places``: the K of every per-place array (``None``: any).

    Raises
    ------
    ValueError
        When the record is not a plan: a field missing or of the wrong type, an array of the wrong shape.
    """
    try:
        floor = doc["attacker_floor_m"]
        mechanisms = tuple(_mechanism(m, arrays, i, n_places) for i, m in enumerate(doc["mechanisms"]))
        result = PlanResult(
            target_loss_m=_float(doc["target_loss_m"]),
            loss=_text(doc["loss"]),
            reports_per_day=int(_float(doc["reports_per_day"])),
            attacker_floor_m=None if floor is None else _float(floor),
            grid_per_km=_floats(doc["grid_per_km"]),
            warm=bool(doc["warm"]),
            mechanisms=mechanisms,
            time_s=_float(doc["time_s"]),
            reachable_m=_float(doc["reachable_m"]),
        )
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, OverflowError) as exc:
        raise ValueError(f"The record is not a plan: {exc}.") from None
    if not all(math.isfinite(v) for v in result.grid_per_km):
        raise ValueError("The record is not a plan: its grid holds a value that is not finite.")
    return result
