"""Frozen, validated configuration of PAnDA and its named presets.

Two readings of the paper are offered, and the default is the mathematically correct one:

* ``preset("paper")``: the defaults stated in the paper (section 4.2): alpha = 0.95,
  lambda = 0.5/km, gamma = d_max / 50, the far value beyond gamma is h(gamma) (eq. 15),
  every anchor pair is constrained in the AnPO LP (eq. 31), delta = 1e-7, eps = 5/km.
* ``preset("artifact")``: what the published experiments' code did instead (read off the authors'
  repository paopao128/CCS-2025-PAnDA, commit a3dbf85): rescaled decay rates, a tiny floor beyond
  gamma, gamma = d_max / div(K), LP constraints only between anchors closer than 0.8 km, and an
  unreachable success target replaced by a finite margin. Its arithmetic bugs (an eps_bar loop
  that read only the last element of each set, swapped latitude and longitude) are *not*
  reproduced: Phase-I costs are always exact.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["PandaConfig", "preset", "PRESETS", "DECAYS", "FAR_RULES", "SELECTION_FORMS", "artifact_gamma_divisor"]

DECAYS = ("exponential", "power", "logistic")
FAR_RULES = ("h_gamma", "floor", "artifact")
SELECTION_FORMS = ("paper", "artifact")
MARGIN_FALLBACKS = ("infinite", "second_largest")
PRESETS = ("paper", "artifact", "recommended")

#: gamma = d_max / div(K) in the published experiments (exponential | power and logistic).
_ARTIFACT_DIV = {
    500: (80, 80),
    1000: (100, 110),
    2000: (140, 140),
    3000: (160, 160),
    4000: (190, 180),
    5000: (220, 220),
}


def artifact_gamma_divisor(n_records: int, decay: str) -> float:
    """Return the published experiments' divisor div(K) (gamma = d_max / div), for the nearest tabulated K."""
    k = min(_ARTIFACT_DIV, key=lambda key: (abs(key - n_records), key))
    exp_div, other_div = _ARTIFACT_DIV[k]
    return float(exp_div if decay == "exponential" else other_div)


#: Found by experiments/recommend_sweep.py (results in experiments/results/): among the settings
#: swept, the lowest mean utility loss whose exactly audited violation probability (panda.audit_panda,
#: user pairs and sampled record pairs) stayed within delta = 0.1 on Neubrandenburg and
#: Liechtenstein (K = 200, N = 15, 30 outputs, eps = 5/km). A tiny gamma with the paper's h(gamma)
#: rule makes the selection nearly location-independent: Phase I leaks little, and each user uploads
#: most of the domain (so the LP is close to the full LP). The margin targets 1 - delta directly
#: (the Bayes adjustment of eq. 30 makes every target unreachable when selection is this flat).
RECOMMENDED: dict[str, Any] = {
    "delta": 0.1,
    "alpha": 0.95,
    "lambda_per_km": 2.0,
    "far_rule": "h_gamma",
    "gamma_km": 0.05,
    "bayes_adjustment": False,
    "neighbourhood_size": 5,
}


def _bad(name: str, rule: str, value: object) -> ValueError:
    return ValueError(f"The '{name}' parameter of PandaConfig must be {rule}. Got {value!r} instead.")


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np

            if isinstance(value, (np.integer, np.floating)):
                return float(value)
        except ImportError:  # pragma: no cover
            pass
        msg = f"The '{name}' parameter of PandaConfig must be a number. Got {value!r} ({type(value).__name__}) instead."
        raise TypeError(msg)
    return float(value)


@dataclass(frozen=True)
class PandaConfig:
    """All settings of one PAnDA run. Units are in the field names.

    Attributes
    ----------
    epsilon_per_km
        Total privacy budget eps (1/km), > 0.
    delta
        Allowed failure probability of the PmDP guarantee, in [0, 1).
    alpha
        Selection scale alpha in (0, 1) (Table 1): the selection probability at distance 0.
    lambda_per_km
        Decay rate lambda (1/km; for the power law, the exponent), > 0.
    decay
        ``"exponential"``, ``"power"`` or ``"logistic"`` (PAnDA-e, -p, -l).
    selection_form
        ``"paper"``: Table 1 as printed. ``"artifact"``: the published code's rescaled forms
        (exponential ``alpha exp(-0.4 lambda d)``, power ``alpha / (1 + 0.75 d^lambda)``, logistic
        ``2 alpha / (1 + exp(0.8 lambda d))``).
    gamma_km
        Threshold distance gamma (km). ``None``: ``d_max / gamma_divisor`` (or the artifact's
        ``d_max / div(K)`` when ``gamma_divisor`` is ``None``).
    gamma_divisor
        Divisor of d_max when ``gamma_km`` is ``None``; ``None`` uses the artifact's table div(K).
    far_rule
        Selection probability beyond gamma: ``"h_gamma"`` (the paper's eq. 15), ``"floor"``
        (the constant ``far_floor``), ``"artifact"`` (the published code's floor formula).
    far_floor
        The constant used by ``far_rule="floor"``, in (0, alpha).
    neighbourhood_size
        Gamma: the number of nearest records the server uses per anchor for the margin estimate.
    bayes_adjustment
        Apply eq. (30)/(93) (the success target per anchor pair is raised by the probability that the
        true records lie in the neighbourhoods). ``False`` uses ``1 - delta`` directly.
    margin_fallback
        When ``1 - delta`` is unreachable: ``"infinite"`` (correct: no finite margin exists; the pair
        is flagged and its rows are forced identical) or ``"second_largest"`` (the published code's
        choice: the second-largest candidate margin; flagged as well).
    constraint_radius_km
        Constrain only anchor pairs closer than this (the artifact's 0.8 km); ``None``: every pair,
        as the paper's eq. (31) says.
    lp_floor
        eta, a floor on every perturbation probability of the AnPO LP; it makes far pairs' constraints
        implied, so they are dropped exactly (0 disables the reduction).
    lp_time_limit_s, lp_solver
        HiGHS settings for the AnPO and relaxed LPs (dual simplex by default: it is faster than IPM
        on these LPs; bench/bench_anpo.py compares them).
    solve_relaxed
        Also solve the Relaxed AnPO (exponent eps*d) for the lower bound and approximation ratio.
    relaxed_time_limit_s
        Time limit of that LP (it is a real all-pairs LP, often harder than the AnPO LP itself);
        on timeout the bound is reported as not computed.
    """

    epsilon_per_km: float = 5.0
    delta: float = 1e-7
    alpha: float = 0.95
    lambda_per_km: float = 0.5
    decay: str = "exponential"
    selection_form: str = "paper"
    gamma_km: float | None = None
    gamma_divisor: float | None = 50.0
    far_rule: str = "h_gamma"
    far_floor: float = 1e-4
    neighbourhood_size: int = 10
    bayes_adjustment: bool = True
    margin_fallback: str = "infinite"
    constraint_radius_km: float | None = None
    lp_floor: float = 1e-6
    lp_time_limit_s: float = 300.0
    lp_solver: str = "simplex"
    solve_relaxed: bool = True
    relaxed_time_limit_s: float = 60.0

    def __post_init__(self) -> None:
        eps = _number(self.epsilon_per_km, "epsilon_per_km")
        if not (math.isfinite(eps) and eps > 0):
            raise _bad("epsilon_per_km", "a float > 0 (1/km)", self.epsilon_per_km)
        delta = _number(self.delta, "delta")
        if not (0.0 <= delta < 1.0):
            raise _bad("delta", "a float in [0, 1)", self.delta)
        alpha = _number(self.alpha, "alpha")
        if not (0.0 < alpha < 1.0):
            raise _bad("alpha", "a float in (0, 1) (alpha = 1 makes the Phase-I cost infinite: Prop. 5)", self.alpha)
        lam = _number(self.lambda_per_km, "lambda_per_km")
        if not (math.isfinite(lam) and lam > 0):
            raise _bad("lambda_per_km", "a float > 0", self.lambda_per_km)
        if self.decay not in DECAYS:
            raise _bad("decay", f"one of {DECAYS}", self.decay)
        if self.selection_form not in SELECTION_FORMS:
            raise _bad("selection_form", f"one of {SELECTION_FORMS}", self.selection_form)
        if self.gamma_km is not None:
            g = _number(self.gamma_km, "gamma_km")
            if not (math.isfinite(g) and g > 0):
                raise _bad("gamma_km", "a float > 0 (km) or None", self.gamma_km)
        if self.gamma_divisor is not None:
            gd = _number(self.gamma_divisor, "gamma_divisor")
            if not (math.isfinite(gd) and gd >= 1):
                raise _bad("gamma_divisor", "a float >= 1 or None", self.gamma_divisor)
        if self.far_rule not in FAR_RULES:
            raise _bad("far_rule", f"one of {FAR_RULES}", self.far_rule)
        floor = _number(self.far_floor, "far_floor")
        if not (0.0 < floor < alpha):
            raise _bad("far_floor", f"a float in (0, alpha={alpha})", self.far_floor)
        if isinstance(self.neighbourhood_size, bool) or not isinstance(self.neighbourhood_size, int):
            raise TypeError(
                "The 'neighbourhood_size' parameter of PandaConfig must be an int >= 1. "
                f"Got {self.neighbourhood_size!r} instead."
            )
        if self.neighbourhood_size < 1:
            raise _bad("neighbourhood_size", "an int >= 1", self.neighbourhood_size)
        if self.margin_fallback not in MARGIN_FALLBACKS:
            raise _bad("margin_fallback", f"one of {MARGIN_FALLBACKS}", self.margin_fallback)
        if self.constraint_radius_km is not None:
            r = _number(self.constraint_radius_km, "constraint_radius_km")
            if not (r > 0):
                raise _bad("constraint_radius_km", "a float > 0 (km) or None (all pairs)", self.constraint_radius_km)
        eta = _number(self.lp_floor, "lp_floor")
        if not (0.0 <= eta < 1e-2):
            raise _bad("lp_floor", "a float in [0, 0.01)", self.lp_floor)
        t = _number(self.lp_time_limit_s, "lp_time_limit_s")
        if not (t > 0):
            raise _bad("lp_time_limit_s", "a float > 0 (seconds)", self.lp_time_limit_s)
        tr = _number(self.relaxed_time_limit_s, "relaxed_time_limit_s")
        if not (tr > 0):
            raise _bad("relaxed_time_limit_s", "a float > 0 (seconds)", self.relaxed_time_limit_s)
        if self.lp_solver not in ("ipm", "simplex", "choose", "pdlp"):
            raise _bad("lp_solver", "one of ('ipm', 'simplex', 'choose', 'pdlp')", self.lp_solver)

    def replace(self, **changes: object) -> PandaConfig:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_dict(self) -> dict:
        """Plain-data form (JSON-ready)."""
        return dataclasses.asdict(self)


def preset(name: str, **overrides: object) -> PandaConfig:
    """Return a named configuration, optionally with some fields overridden.

    Parameters
    ----------
    name
        ``"paper"`` (the paper's stated defaults, exact), ``"artifact"`` (the published
        experiments' choices; see the module docstring) or ``"recommended"`` (settings found by a
        sweep whose exactly audited violations stayed within delta: see :data:`RECOMMENDED`).
    **overrides
        Any :class:`PandaConfig` field, e.g. ``preset("artifact", constraint_radius_km=None)``.
    """
    if name == "paper":
        base = PandaConfig()
    elif name == "artifact":
        base = PandaConfig(
            selection_form="artifact",
            gamma_divisor=None,
            far_rule="artifact",
            constraint_radius_km=0.8,
            margin_fallback="second_largest",
        )
    elif name == "recommended":
        base = PandaConfig(**RECOMMENDED)
    else:
        msg = f"The 'name' parameter of preset must be one of {PRESETS}. Got {name!r} instead."
        raise ValueError(msg)
    unknown = set(overrides) - {f.name for f in dataclasses.fields(PandaConfig)}
    if unknown:
        msg = f"Unknown PandaConfig field(s) {sorted(unknown)} given to preset({name!r})."
        raise TypeError(msg)
    return base.replace(**overrides) if overrides else base
