"""Argument checks shared across the library, worded as scikit-learn words them (the parameter, the function,
what it must be, what it got)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_epsilon"]


def check_epsilon(epsilon_per_km: float, where: str) -> float:
    """Validate a privacy budget in 1/km."""
    if isinstance(epsilon_per_km, bool) or not isinstance(epsilon_per_km, (int, float, np.floating, np.integer)):
        msg = f"The 'epsilon_per_km' parameter of {where} must be a float > 0. Got {epsilon_per_km!r} instead."
        raise TypeError(msg)
    eps = float(epsilon_per_km)
    if not (np.isfinite(eps) and eps > 0):
        msg = f"The 'epsilon_per_km' parameter of {where} must be a float > 0. Got {epsilon_per_km!r} instead."
        raise ValueError(msg)
    return eps
