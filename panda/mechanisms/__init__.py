"""Perturbation mechanisms behind one interface: ``build_<name>(instance, epsilon_per_km, **options)``.

Every builder returns a :class:`MechanismResult` whose ``matrix`` is the ``(K, M)`` row-stochastic
``Pr[y | x]`` over the instance's records and outputs (``None`` with an ``"unsolved: ..."`` status
when an LP did not finish in time). :data:`BASELINES` maps the short names used in tables and
the CLI to the builders.
"""

from __future__ import annotations

from collections.abc import Callable

from panda.mechanisms._common import repair_mdp
from panda.mechanisms.base import MechanismResult, check_epsilon, expected_loss_m
from panda.mechanisms.em import bayesian_remap, build_em, build_em_br, em_matrix
from panda.mechanisms.laplace import build_laplace
from panda.mechanisms.lp_bd import build_lp_bd
from panda.mechanisms.lp_ca import build_lp_ca
from panda.mechanisms.lp_em import build_lp_em
from panda.mechanisms.lp_full import build_lp, greedy_spanner, mdp_pairs

__all__ = [
    "BASELINES",
    "MechanismResult",
    "bayesian_remap",
    "build_em",
    "build_em_br",
    "build_laplace",
    "build_lp",
    "build_lp_bd",
    "build_lp_ca",
    "build_lp_em",
    "check_epsilon",
    "em_matrix",
    "expected_loss_m",
    "greedy_spanner",
    "mdp_pairs",
    "repair_mdp",
]

#: The baselines of the paper's 4.3 (plus planar Laplace), by short name.
BASELINES: dict[str, Callable[..., MechanismResult]] = {
    "em": build_em,
    "em-br": build_em_br,
    "laplace": build_laplace,
    "lp": build_lp,
    "lp-ca": build_lp_ca,
    "lp-bd": build_lp_bd,
    "lp-em": build_lp_em,
}
